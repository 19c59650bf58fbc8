"""Our requests to the peer and the matching of their answers, for one connection.

A request of ours gets the next of the connection's ids (`acp-bridge:N` by default,
which no client id is mistaken for), is queued at once through the connection's `send`,
and waits for the answer with that id. The connection's reader hands every answer it
reads here (`answered`), and an answer that could not be taken (unparseable, nested too
deep) as the failure of its request (`failed`); a request whose wait is cancelled while
it is still open tells the peer with `$/cancel_request`. Only the matching lives here:
the reading is acp_bridge.rpc.connection's, the writing acp_bridge.rpc.outgoing's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import anyio

from acp_bridge.rpc.protocol import ClientError, RpcError, is_id, request_key, request_message

__all__ = ["Correlator"]

# The connection's logger: these lines are its reader's, as incoming's and outgoing's are.
log = logging.getLogger("acp_bridge.rpc.connection")


class Correlator:
    """The requests of ours waiting for the peer's answers. `send` queues a message for
    the peer, `notify` a notification (both the connection's outgoing queue's); `ids`
    gives the ids of our requests."""

    def __init__(self, send: Callable[[Any], None], notify: Callable[[str, Any], None], ids: Iterator[Any]) -> None:
        self._send = send
        self._notify = notify
        self._ids = ids
        self._pending: dict[tuple[str, Any], tuple[anyio.Event, list[Any]]] = {}
        # Our requests whose answer is acted on in the reader as it is read, before the
        # messages after it (`ask(..., on_answer=)`): key -> the hook, told if it is a result.
        self._on_answer: dict[tuple[str, Any], Callable[[bool], None]] = {}

    async def request(self, method: str, params: Any) -> Any:
        """Ask the client; returns its result or raises ClientError. If the wait is
        cancelled while the request is still open, the client is told with
        `$/cancel_request`; not once its answer has been read (the two often come in
        one read: a session/cancel and the `cancelled` answer ACP asks for after it)."""
        return await self.ask(method, params)

    def ask(self, method: str, params: Any, *,
            on_answer: Callable[[bool], None] | None = None) -> Coroutine[Any, Any, Any]:
        """`request`, queued before this returns (so what the caller sends next goes
        after it, whoever waits for the answer, and when): await what it returns for
        the answer. `on_answer(is_result)` runs in the reader as the answer is read,
        before the messages read after it (the awaiting task runs later)."""
        request_id = next(self._ids)
        key, done, slot = self._pend(request_id)
        if on_answer is not None:
            self._on_answer[key] = on_answer
        self._send(request_message(request_id, method, params))
        return self._answer(method, request_id, key, done, slot)

    def sent_before(self, method: str, request_id: Any) -> Coroutine[Any, Any, Any]:
        """The answer to our request `request_id`, sent to the peer by someone else
        before this connection read anything (the wrapper's start-up handshake,
        acp_bridge.wrap.handshake), to await as `ask`'s: its answer is matched from
        now on. `ids` must not give that id again."""
        return self._answer(method, request_id, *self._pend(request_id))

    def _pend(self, request_id: Any) -> tuple[tuple[str, Any], anyio.Event, list[tuple[str, Any]]]:
        """Our request `request_id` waits for its answer: its key, the event its answer
        sets and the slot it is put in."""
        key = request_key(request_id)
        done, slot = anyio.Event(), list[tuple[str, Any]]()
        self._pending[key] = (done, slot)
        return key, done, slot

    async def _answer(self, method: str, request_id: Any, key: tuple[str, Any], done: anyio.Event,
                      slot: list[tuple[str, Any]]) -> Any:
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            if not done.is_set():
                self._notify("$/cancel_request", {"requestId": request_id})
            raise
        finally:
            self._pending.pop(key, None)
            self._on_answer.pop(key, None)
        kind, value = slot[0]
        if kind == "error":
            raise ClientError(method, value)
        if kind == "failed":
            raise value()
        return value

    def fail_requests(self, error: Callable[[], Exception]) -> None:
        """Every request of ours still waiting for its answer raises `error()` (the
        peer has gone: a client's agent exited), without a `$/cancel_request`; one
        whose answer has been read still returns it."""
        for done, slot in self._pending.values():
            if not done.is_set():
                slot.append(("failed", error))
                done.set()

    def failed(self, request_id: Any, error: RpcError) -> bool:
        """The peer's answer to our request `request_id` could not be taken (`error`
        says why): the request fails with that error, as an error answer would. False
        if no request of ours waits for that id."""
        key = request_key(request_id) if is_id(request_id) else None
        entry = self._pending.get(key) if key is not None else None
        if entry is None or entry[0].is_set():
            return False
        log.warning("the answer to our request %r could not be taken: %s", request_id, error.message)
        self.answered({"id": request_id, "error": error.to_json()})
        return True

    def answered(self, message: dict[str, Any]) -> None:
        """The peer's answer `message` (a response), read: the request of ours it
        answers gets it, and its `on_answer` hook runs now."""
        key = request_key(message["id"]) if is_id(message["id"]) else None
        entry = self._pending.get(key) if key is not None else None
        if entry is None:
            log.debug("ignoring a response to unknown id %r", message["id"])
            return
        done, slot = entry
        if done.is_set():
            return  # answered twice: the first answer stands
        slot.append(("error", message["error"]) if "error" in message else ("result", message.get("result")))
        done.set()
        hook = self._on_answer.pop(key, None) if self._on_answer and key is not None else None
        if hook is not None:
            hook("error" not in message)
