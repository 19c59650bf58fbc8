"""One JSON-RPC 2.0 connection: a reader, a task per request, one writer.

Incoming requests are routed by jsonrpcserver (method lookup, notifications, invalid
requests, error responses: acp_bridge.rpc.dispatch) and each runs in its own task, so
`session/cancel` is read while a prompt runs. Requests the agent makes of the client go
through our own correlator (ids `acp-bridge:N`, which no client id is mistaken for).
Every outgoing message goes through one queue to one writer task
(acp_bridge.rpc.outgoing): what is queued first is written first. A proxy (acp-bridge
wrap) hands the methods it does not serve itself to a `fallback`, answered without
jsonrpcserver, and may have notifications handled `inline`, in the reader, in order.

jsonrpcserver is imported in a worker thread after the `initialize` answer is written
(that request is answered here without it; DESIGN.md section 1: nothing heavy before
`initialize`): its package loads jsonschema (~85 ms and ~10 MB of RSS) and an HTTP
server we do not use.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import orjson

from acp_bridge.rpc.outgoing import BeforeWrite, Outgoing
from acp_bridge.rpc.protocol import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    ClientError,
    ErrorMapper,
    Handler,
    RpcError,
    envelope_error,
    error_response,
    internal_error,
    invalid_params,
    is_id,
    is_response,
    own_request_id,
    request_key,
    valid_envelope,
    without_null_params,
)
from acp_bridge.rpc.transport import FdLineReader, FdWriter, TooLong

if TYPE_CHECKING:
    from acp_bridge.rpc.dispatch import JsonRpcDispatcher, Method

log = logging.getLogger("acp_bridge.rpc.connection")

# A proxy's handler for the methods a connection does not serve itself: called with the
# method, the params as sent and whether an answer is expected; returns the result.
Fallback = Callable[[str, Any, bool], Awaitable[Any]]
# A notification handled in the reader, before the next line is read: what a proxy
# records and passes on in the order it came (a `session/update` stream, then the
# answer that ends it), which a task per message would not guarantee.
Inline = Callable[[Any], None]

# The id of the request a handler is serving: each request runs in its own task, so a
# handler (the prompt) can learn its id for `$/cancel_request` without a parameter.
current_request_id: contextvars.ContextVar[Any] = contextvars.ContextVar("current_request_id", default=None)
SHUTDOWN_GRACE: Final = 1.5  # seconds the running requests get to answer after stdin closes
IDLE_WORKERS: Final = 8  # request tasks kept waiting for the next request; more end


class _Slot:
    """Where an idle worker task waits for its next piece of work."""

    __slots__ = ("_event", "_work")

    def __init__(self) -> None:
        self._event: anyio.Event | None = None
        self._work: Awaitable[None] | None = None

    def hand(self, work: Awaitable[None]) -> None:
        self._work = work
        assert self._event is not None
        self._event.set()

    async def wait(self) -> Awaitable[None]:
        self._event = anyio.Event()
        await self._event.wait()
        work, self._work, self._event = self._work, None, None
        assert work is not None
        return work


class Connection:
    """Serve `methods` (name -> async handler taking the params as keywords) over a
    line reader and a writer until the reader ends."""

    def __init__(
        self,
        reader: FdLineReader,
        writer: FdWriter,
        methods: Mapping[str, Handler],
        *,
        on_eof: Callable[[], Awaitable[None]] | None = None,
        on_cancel_request: Callable[[Any], bool] | None = None,
        error_for: ErrorMapper = internal_error,
        before_write: BeforeWrite | None = None,
        fallback: Fallback | None = None,
        inline: Mapping[str, Inline] | None = None,
    ) -> None:
        self._reader = reader
        self._methods = dict(methods)
        # Without a fallback, unknown methods are jsonrpcserver's to answer (-32601).
        self._fallback = fallback
        self._inline = dict(inline or {})
        self._on_eof = on_eof
        self._on_cancel_request = on_cancel_request
        self._error_for = error_for  # exceptions -> error responses (the agent's own)
        # Called before each write to the client (the agent's log hand-off).
        self._out = Outgoing(writer, before_write)
        # Sending is the queue's own: bound here, not wrapped, as `notify_update` runs
        # for every chunk streamed.
        self.send = self._out.send
        self.notify = self._out.notify
        self.notify_update = self._out.notify_update
        self.send_raw = self._out.send_raw
        self.drain = self._out.drain
        self._ids = itertools.count(1)
        self._pending: dict[str, tuple[anyio.Event, list[Any], str]] = {}
        self._inflight: dict[Any, anyio.CancelScope] = {}  # request id -> its task's scope
        self._after: dict[Any, list[Any]] = {}  # request id -> messages to send after its answer
        self._active = 0  # requests (or batches) handed to a task and not finished
        self._workers: list[_Slot] = []  # idle worker tasks, waiting for a request
        self._idle = anyio.Event()
        self._rpc: JsonRpcDispatcher | None = None  # imported after initialize
        self._rpc_methods: dict[str, Method] | None = None

    @property
    def queued_bytes(self) -> int:
        """Bytes of messages queued for the client and not yet written."""
        return self._out.queued_bytes

    # --- our requests to the client ---------------------------------------------------

    async def request(self, method: str, params: Any) -> Any:
        """Ask the client; returns its result or raises ClientError. If the wait is
        cancelled while the request is still open, the client is told with
        `$/cancel_request`; not once its answer has been read (the two often come in
        one read: a session/cancel and the `cancelled` answer ACP asks for after it)."""
        request_id = own_request_id(next(self._ids))
        done, slot = anyio.Event(), list[tuple[str, Any]]()
        self._pending[request_id] = (done, slot, method)
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        try:
            await done.wait()
        except anyio.get_cancelled_exc_class():
            if not done.is_set():
                self.notify("$/cancel_request", {"requestId": request_id})
            raise
        finally:
            self._pending.pop(request_id, None)
        kind, value = slot[0]
        if kind == "error":
            raise ClientError(method, value)
        return value

    def send_after_answer(self, message: Any) -> None:
        """Queue `message` to go out right after the answer of the request this task
        is handling (at once outside of one): what a recorded agent sent after it
        answered (the fake agent's updates between turns)."""
        request_id = current_request_id.get()
        if request_id is None:
            self.send(message)
        else:
            self._after.setdefault(request_key(request_id), []).append(message)

    def _send_after(self, message: Any) -> None:
        if self._after and isinstance(message, dict) and is_id(message.get("id")):
            for later in self._after.pop(request_key(message["id"]), ()):
                self.send(later)

    def close_output(self) -> None:
        """No more messages: what is queued is written, anything sent later is dropped
        (a proxy closing the pipe to a peer it is about to stop)."""
        self._out.close()

    # --- reading ---------------------------------------------------------------------

    async def serve(self) -> None:
        async with anyio.create_task_group() as outer:
            outer.start_soon(self._out.run)
            async with anyio.create_task_group() as requests:
                async for line in self._reader.lines():
                    self._on_line(line, requests)
                log.info("stdin closed: stopping")
                if self._on_eof is not None:
                    await self._on_eof()
                if self._active:
                    with anyio.move_on_after(SHUTDOWN_GRACE):
                        await self._idle.wait()
                requests.cancel_scope.cancel()
            self._out.close()

    def _on_line(self, line: bytes | TooLong, tg: anyio.abc.TaskGroup) -> None:
        if isinstance(line, TooLong):
            self.send(error_response(None, RpcError(INVALID_REQUEST, "message too large", {
                "code": "too_large", "size": line.size, "limit": self._reader.max_line})))
            return
        if not line.strip():
            return
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self.send(error_response(None, RpcError(PARSE_ERROR, "Parse error", {"code": "parse_error", "detail": str(exc)})))
            return
        if isinstance(message, list):
            if not message:
                self.send(error_response(None, RpcError(INVALID_REQUEST, "Invalid Request: empty batch")))
                return
            self._spawn(tg, self._batch(message))
        elif is_response(message):
            self._response(message)
        elif self._inline and self._run_inline(message):
            return
        else:
            self._spawn(tg, self._single(message))

    def _run_inline(self, message: Any) -> bool:
        """Handle an inline notification here, in the reader (see `Inline`); False if
        `message` is not one."""
        if not isinstance(message, dict):
            return False
        handler = self._inline.get(str(message.get("method")))
        if handler is None or "id" in message or message.get("jsonrpc") != "2.0":
            return False
        try:
            handler(message.get("params"))
        except Exception:  # a notification has no answer to carry the failure
            log.exception("handling a %s notification failed", message.get("method"))
        return True

    def _spawn(self, tg: anyio.abc.TaskGroup, work: Awaitable[None]) -> None:
        """Run `work` (one request or batch) in a task of its own: handed to an idle
        worker task if there is one, else in a new worker. Starting an anyio task
        costs ~40 µs here, handing work to a waiting one a few µs; a worker serves
        one request at a time, so each still runs on its own (a prompt never holds
        up the `session/cancel` behind it)."""
        # Counted here, not when the work starts, so an EOF right behind a request
        # still waits for its answer.
        self._active += 1
        if self._idle.is_set():
            self._idle = anyio.Event()
        if self._workers:
            self._workers.pop().hand(work)
        else:
            tg.start_soon(self._worker, work)

    async def _worker(self, work: Awaitable[None]) -> None:
        slot: _Slot | None = None
        while True:
            try:
                await work
            finally:
                self._active -= 1
                if not self._active:
                    self._idle.set()
            if len(self._workers) >= IDLE_WORKERS:
                return
            slot = slot or _Slot()
            self._workers.append(slot)
            work = await slot.wait()

    def _response(self, message: dict[str, Any]) -> None:
        entry = self._pending.get(message["id"]) if isinstance(message.get("id"), str) else None
        if entry is None:
            log.debug("ignoring a response to unknown id %r", message.get("id"))
            return
        done, slot, _ = entry
        slot.append(("error", message["error"]) if "error" in message else ("result", message.get("result")))
        done.set()

    async def _batch(self, messages: list[Any]) -> None:
        answers: list[Any] = []

        async def one(message: Any) -> None:
            if is_response(message):
                self._response(message)
                return
            answer = await self._dispatch(message, batched=True)
            if answer is not None:
                answers.append(answer)

        async with anyio.create_task_group() as tg:
            for message in messages:
                tg.start_soon(one, message)
        if answers:
            self.send(answers)
        for message in messages:
            self._send_after(message)

    async def _single(self, message: Any) -> None:
        answer = await self._dispatch(message)
        if answer is not None:
            self.send(answer)
        self._send_after(message)

    async def _dispatch(self, message: Any, *, batched: bool = False) -> Any:
        """The response to one request (None for a notification)."""
        if not isinstance(message, dict):
            return error_response(None, RpcError(INVALID_REQUEST, "Invalid Request: not an object"))
        is_request = "id" in message
        if is_request:
            if not is_id(message["id"]):
                return error_response(None, RpcError(INVALID_REQUEST, "Invalid Request: id must be a string or an "
                                                     "integer", {"code": "invalid_id"}))
            # Every request whose id can be read is answered with it (a broken envelope,
            # params that are not an object); notifications are jsonrpcserver's to answer.
            refused = envelope_error(message)
            if refused is not None:
                return error_response(message["id"], refused)
        message = without_null_params(message)
        if not is_request and self._inline and self._run_inline(message):
            return None  # an inline notification inside a batch
        key = request_key(message.get("id")) if is_request else None
        scope = anyio.CancelScope()
        if is_request:
            self._inflight[key] = scope
        # Set for every message: a worker task serves one request after another.
        current_request_id.set(message.get("id") if is_request else None)
        try:
            with scope:
                if (self._rpc is None and not batched and message.get("method") == "initialize"
                        and message.get("jsonrpc") == "2.0" and is_request and is_id(message.get("id"))
                        and "initialize" in self._methods):
                    answer = await self._direct(message)
                    await self._load_rpc()
                    return answer
                if (self._fallback is not None and message.get("method") not in self._methods
                        and valid_envelope(message)):
                    return await self._fall_back(self._fallback, message, is_request)
                rpc, methods = await self._load_rpc()
                return await rpc.dispatch(methods, message)
            if scope.cancelled_caught and is_request:
                return error_response(message.get("id"), RpcError(REQUEST_CANCELLED, "Request cancelled",
                                                          {"code": "cancelled"}))
            return None
        finally:
            if is_request:
                self._inflight.pop(key, None)

    async def _fall_back(self, fallback: Fallback, message: dict[str, Any], is_request: bool) -> Any:
        """Answer a method we do not serve with the fallback's result or error, without
        jsonrpcserver (a proxy passes such methods on, and every answer is the peer's)."""
        try:
            result = await fallback(message["method"], message.get("params"), is_request)
        except Exception as exc:
            error = self._error_for(exc)
            if error.code == INTERNAL_ERROR and not isinstance(exc, RpcError):
                log.exception("passing on %s failed", message["method"])
            if not is_request:
                log.info("notification %s failed: %s", message["method"], error.message)
                return None
            return error_response(message["id"], error)
        return {"jsonrpc": "2.0", "id": message["id"], "result": result} if is_request else None

    async def _direct(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Answer a request without jsonrpcserver (only `initialize`, see the docstring).
        A success is queued at once (before the import that follows); an error is
        returned to be queued by the caller."""
        params = message.get("params", {})
        try:
            if not isinstance(params, dict):
                raise invalid_params("invalid params: params must be an object")
            result = await self._methods[message["method"]](**params)
        except Exception as exc:
            return error_response(message.get("id"), self._error_for(exc))
        # Queue the answer now, before the heavy import that follows it.
        self.send({"jsonrpc": "2.0", "id": message.get("id"), "result": result})
        return None

    async def _load_rpc(self) -> tuple[JsonRpcDispatcher, dict[str, Method]]:
        if self._rpc is None or self._rpc_methods is None:
            rpc = await anyio.to_thread.run_sync(_import_dispatcher)
            if self._rpc is None or self._rpc_methods is None:  # not loaded meanwhile
                self._rpc = rpc
                self._rpc_methods = {name: rpc.wrap(fn, self._error_for) for name, fn in self._methods.items()}
        return self._rpc, self._rpc_methods

    def cancel_incoming(self, request_id: Any) -> bool:
        """`$/cancel_request`: let the owner handle it (a prompt settles as cancelled),
        else cancel the request's task, which then answers -32800."""
        if self._on_cancel_request is not None and self._on_cancel_request(request_id):
            return True
        scope = self._inflight.get(request_key(request_id))
        if scope is None:
            return False
        scope.cancel()
        return True


def _import_dispatcher() -> JsonRpcDispatcher:
    """Import jsonrpcserver (and jsonschema behind it), in a worker thread: the one
    place it is imported, after `initialize` is answered. Python's import lock keeps
    two first requests from importing it twice."""
    from acp_bridge.rpc.dispatch import JsonRpcDispatcher

    return JsonRpcDispatcher()
