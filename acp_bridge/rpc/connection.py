"""One JSON-RPC 2.0 connection: a reader, a task per request, one writer.

The same connection serves both sides of ACP: the agent over our stdio, the wrapper's
link to its child, and a client of an agent child (acp_bridge.client). It reads from any
`LineReader` and writes to any `Writer` (acp_bridge.rpc.transport).

The reader parses each line and hands each request (or batch) to a task of its own, so
`session/cancel` is read while a prompt runs; how a message is answered (our handlers,
a proxy's `fallback`, `inline` notifications handled in the reader, in order,
`$/cancel_request`, jsonrpcserver for what none of them serves) is
acp_bridge.rpc.incoming's. Requests we make of the peer go through our own correlator
(ids `acp-bridge:N` by default, which no client id is mistaken for:
acp_bridge.rpc.correlator), the reader handing it every answer it reads. Every
outgoing message goes through one queue to one writer task (acp_bridge.rpc.outgoing):
what is queued first is written first.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final, Protocol, runtime_checkable

import anyio
import anyio.abc
import orjson

from acp_bridge.rpc.correlator import Correlator
from acp_bridge.rpc.incoming import Fallback, Incoming, Inline, current_request_id
from acp_bridge.rpc.outgoing import BeforeWrite, Outgoing
from acp_bridge.rpc.protocol import (
    INVALID_REQUEST,
    MAX_DEPTH,
    PARSE_ERROR,
    ErrorMapper,
    Handler,
    RpcError,
    internal_error,
    is_id,
    is_response,
    nested_deeper,
    own_request_id,
    request_key,
    response,
    salvaged_id,
)
from acp_bridge.rpc.transport import LineReader, TooLong, Writer

__all__ = ["Connection", "Fallback", "Inline", "InlineRun"]

log = logging.getLogger("acp_bridge.rpc.connection")

_UNREAD: Final = object()  # a line `_on_batch` left to `_on_line` to parse (and answer)


@runtime_checkable
class InlineRun(Protocol):
    """An `Inline` handler that also takes a run of its notifications at once: `run`
    gets the params of consecutive ones read together, in order, and handles each as
    the handler would (what it returns included: a run handler handles every one), in
    one call. A stream's `session/update`s come a few hundred to a read (the wrapper's
    child: acp_bridge.wrap.upstream)."""

    def __call__(self, params: Any) -> bool | None: ...

    def run(self, params: list[Any]) -> None: ...

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
    line reader and a writer until the reader ends. `ids` gives the ids of our
    requests (`acp-bridge:1`, `acp-bridge:2`, ... by default). `answered_first`: the
    peer's first message was answered before this connection was made (the wrapper's
    start-up handshake answers `initialize`: acp_bridge.wrap.handshake)."""

    def __init__(
        self,
        reader: LineReader,
        writer: Writer,
        methods: Mapping[str, Handler],
        *,
        on_eof: Callable[[], Awaitable[None]] | None = None,
        error_for: ErrorMapper = internal_error,
        before_write: BeforeWrite | None = None,
        fallback: Fallback | None = None,
        inline: Mapping[str, Inline] | None = None,
        ids: Iterator[Any] | None = None,
        answered_first: bool = False,
    ) -> None:
        self._reader = reader
        self._on_eof = on_eof
        # Called before each write to the client (the agent's log hand-off).
        self._out = Outgoing(writer, before_write)
        self._in = Incoming(methods, self._out.send, error_for=error_for, fallback=fallback, inline=inline,
                            answered_first=answered_first)
        # The inline handlers that take a run of their notifications at once.
        self._runs: dict[str, Callable[[list[Any]], None]] = {
            name: handler.run for name, handler in (inline or {}).items() if isinstance(handler, InlineRun)}
        # Sending is the queue's own: bound here, not wrapped, as `notify_update` runs
        # for every chunk streamed.
        self.send = self._out.send
        self.notify = self._out.notify
        self.notify_update = self._out.notify_update
        self.notify_updates = self._out.notify_updates
        self.send_raw = self._out.send_raw
        self.drain = self._out.drain
        # Our requests to the peer are the correlator's, bound here as sending is.
        self._ours = Correlator(self.send, self.notify,
                                ids if ids is not None else map(own_request_id, itertools.count(1)))
        self.request = self._ours.request
        self.ask = self._ours.ask
        self.sent_before = self._ours.sent_before
        self.fail_requests = self._ours.fail_requests
        self._after: dict[Any, list[Any]] = {}  # request id -> messages to send after its answer
        self._active = 0  # requests (or batches) handed to a task and not finished
        self._workers: list[_Slot] = []  # idle worker tasks, waiting for a request
        self._idle = anyio.Event()

    @property
    def queued_bytes(self) -> int:
        """Bytes of messages queued for the client and not yet written."""
        return self._out.queued_bytes

    # --- what goes out after an answer, and the end of output ------------------------

    def notify_update_after_answer(self, session_id: str, update: Any) -> None:
        """Queue the `session/update` of `update` for `session_id` to go out right after
        the answer of the request this task is handling (at once outside of one): a
        session's commands after the answer that opens it (the client knows the session
        id by then), what a recorded agent sent after it answered (the fake agent's
        updates between turns). The envelope is rpc's, as every other message's."""
        self._after_answer({"jsonrpc": "2.0", "method": "session/update",
                            "params": {"sessionId": session_id, "update": update}})

    def _after_answer(self, message: Any) -> None:
        request_id = current_request_id()
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
                # A reader that has them gives the lines of each read together
                # (`_Lines.batches`): one loop step a read, not an async one a line.
                batches = getattr(self._reader, "batches", None)
                if batches is not None:
                    async for batch in batches():
                        self._on_batch(batch, requests)
                else:
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

    def _on_batch(self, batch: list[bytes | TooLong], tg: anyio.abc.TaskGroup) -> None:
        """The lines of one read (each with its newline: `_Lines.batches`), in order, as
        `_on_line` takes each; but consecutive notifications of a method whose inline
        handler takes runs (`InlineRun`) go to its `run` together, once the line after
        them is read (or the batch ends), before that line is handled."""
        runs = self._runs
        loads, method, params = orjson.loads, None, list[Any]()
        for line in batch:
            if type(line) is not bytes:  # TooLong
                message: Any = _UNREAD
            else:
                try:
                    message = loads(line)
                except orjson.JSONDecodeError:
                    # `_on_line` answers it, from the line as it was (an error names
                    # where it stopped reading).
                    message, line = _UNREAD, line[:-1] if line[-1:] == b"\n" else line
                else:
                    if nested_deeper(line, message):  # refused where it is read (protocol.MAX_DEPTH)
                        if params:
                            self._run(method, params)
                            method, params = None, []
                        self._too_deep(message)
                        continue
                    # What `Incoming.run_inline` takes, for a method with a run handler.
                    if runs and type(message) is dict and "id" not in message and message.get("jsonrpc") == "2.0":
                        name = message.get("method")
                        if type(name) is str and name in runs:
                            if name != method and params:
                                self._run(method, params)
                                params = []
                            method = name
                            params.append(message.get("params"))
                            continue
            if params:
                self._run(method, params)
                method, params = None, []
            if message is _UNREAD:
                self._on_line(line, tg)
            else:
                self._on_message(message, tg)
        if params:
            self._run(method, params)

    def _run(self, method: Any, params: list[Any]) -> None:
        try:
            self._runs[method](params)
        except Exception:  # notifications have no answer to carry the failure
            log.exception("handling %d %s notification(s) failed", len(params), method)

    def _on_line(self, line: bytes | TooLong, tg: anyio.abc.TaskGroup) -> None:
        if isinstance(line, TooLong):
            self.send(response(None, error=RpcError(INVALID_REQUEST, "message too large", {
                "code": "too_large", "size": line.size, "limit": self._reader.max_line})))
            return
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            if not line.strip():  # a blank line: nothing
                return
            error = RpcError(PARSE_ERROR, "Parse error", {"code": "parse_error", "detail": str(exc)})
            ours = salvaged_id(line, ours=True)
            if ours is not None and self._ours.failed(ours, error):
                return  # the peer's answer to a request of ours that cannot be read: it failed
            # Answered with the request's id where it can still be read, so a client
            # waiting on that id is not left hanging (acp_bridge.rpc.protocol.salvaged_id).
            self.send(response(salvaged_id(line), error=error))
            return
        if nested_deeper(line, message):
            self._too_deep(message)
            return
        self._on_message(message, tg)

    def _too_deep(self, message: Any) -> None:
        """A message nested deeper than `MAX_DEPTH` (nothing of it could be passed on or
        recorded): a request is answered with its id, an answer to a request of ours
        fails that request, a notification is dropped."""
        error = RpcError(INVALID_REQUEST, f"message nested deeper than {MAX_DEPTH} levels",
                         {"code": "too_deep", "limit": MAX_DEPTH})
        if type(message) is not dict:  # a batch, a bare value: no one id to answer with
            self.send(response(None, error=error))
        elif is_response(message):
            if not self._ours.failed(message.get("id"), error):
                log.warning("an answer nested deeper than %d levels to no request of ours: dropped", MAX_DEPTH)
        elif "method" in message and "id" not in message:
            log.warning("a %s notification nested deeper than %d levels: dropped", message.get("method"), MAX_DEPTH)
        else:  # a request (answered with its id), or no message at all (with id null)
            request_id = message.get("id")
            self.send(response(request_id if "method" in message and is_id(request_id) else None, error=error))

    def _on_message(self, message: Any, tg: anyio.abc.TaskGroup) -> None:
        if type(message) is dict and "method" in message:  # a request or notification (most of a stream)
            if not self._in.run_inline(message):
                self._spawn(tg, self._single(message))
        elif isinstance(message, list):
            if not message:
                self.send(response(None, error=RpcError(INVALID_REQUEST, "Invalid Request: empty batch")))
                return
            self._spawn(tg, self._batch(message))
        elif is_response(message):
            self._ours.answered(message)
        elif self._in.run_inline(message):  # `$/cancel_request` among them
            return
        else:
            self._spawn(tg, self._single(message))

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

    async def _batch(self, messages: list[Any]) -> None:
        answers: list[Any] = []

        async def one(message: Any) -> None:
            if is_response(message):
                self._ours.answered(message)
                return
            answer = await self._in.answer(message, batched=True)
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
        answer = await self._in.answer(message)
        later = self._after.pop(request_key(message["id"]), None) if self._after and isinstance(message, dict) \
            and is_id(message.get("id")) else None
        if later is None:
            if answer is not None:
                self.send(answer)
            return
        # The answer and what follows it in one write: the client reads them together,
        # so what follows (the session's commands after `session/new`) comes before its
        # next request, in every run (a snapshot's traffic is compared in order).
        self.send_raw(b"".join(orjson.dumps(m) + b"\n" for m in [*([answer] if answer is not None else []), *later]))
