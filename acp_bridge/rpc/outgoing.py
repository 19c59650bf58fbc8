"""The sending side of a connection: one FIFO queue of encoded messages, one writer task.

Every outgoing message (answers, notifications, our own requests) is encoded at once and
queued; one writer task writes what is queued, in order. What is queued first is written
first: that is the ordering barrier the prompt answers rely on (the last update of a turn
leaves before its answer). Queueing never waits; whatever is queued when the writer runs
goes out in one write. `drain` lets a producer of many messages (a replay) wait for the
writer, so the queue, and its memory, stay bounded while the client reads.

Before each write the writer calls the owner's `before_write` hook (the agent hands its
live logs' buffered events to the OS there: an event is on its way to disk before any
update derived from it reaches the client), so many messages cost one log write.

A message sent with `send` or `notify` (answers, requests, notifications other than
`session/update`) while nothing is queued and the writer task is idle is written at
once, by the sender, after the same hook: the bytes and their order are those the
writer would write, a loop iteration and a task switch sooner. What the descriptor
does not take at once (a full pipe), or a hook that must be waited for, leaves it to
the writer task as before. Streamed updates (`notify_update`) are queued, and written
by a callback the loop runs once the current task step is over (`_flush`, the same
hook and bytes as the writer's), without waking the writer task (an anyio event, a
task step and a loop iteration per burst: issue 23, bench/README.md); within a stream,
no sooner than `FLUSH_WINDOW_S` after the last such write, so the updates of that
millisecond cost one log hand-off and one write together. `send_raw` (a replay)
always goes through the writer task.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import orjson

from acp_bridge.rpc.protocol import UPDATE_HEAD, UPDATE_TAIL
from acp_bridge.rpc.transport import Writer

log = logging.getLogger("acp_bridge.rpc.connection")

DRAIN_HIGH_WATER: Final = 4 << 20  # bytes queued for stdout that `drain` lets through
PREFIX_CACHE_SIZE: Final = 256  # sessions whose notification prefix is kept
# Streamed updates are written at most once per window (the first of a burst at once):
# each write to the client costs a log hand-off first (one JSONL write, or one SQLite
# commit), and an agent that writes every chunk on its own (the SDK's) would otherwise
# cost one of each per chunk or two. An answer, or any other message, is written at
# once, the updates queued before it first.
FLUSH_WINDOW_S: Final = 0.001

# Called before each write with nothing; returns None when the write may go ahead, or
# an awaitable to wait for first (a log being written by a worker thread). A plain
# callable on the fast path: it runs once per write to stdout.
BeforeWrite = Callable[[], Awaitable[None] | None]


class Outgoing:
    """The queue of messages for the client and the task (`run`) that writes them."""

    def __init__(self, writer: Writer, before_write: BeforeWrite | None = None) -> None:
        self._writer = writer
        self._before_write = before_write
        # Outgoing messages, encoded, in order. Unbounded (sending never waits), `drain`
        # lets a producer of many wait for the writer.
        self._queue: deque[bytes] = deque()
        self._queued = 0  # bytes queued and not yet written (being written included)
        self._writer_idle: anyio.Event | None = None  # set to wake the idle writer
        self._drained: anyio.Event | None = None  # set after each write while drain waits
        self._closed = False  # no more messages: the writer finishes the queue and ends
        self._broken = False  # the client stopped reading: messages are dropped
        self._prefixes: dict[str, bytes] = {}  # session id -> notification prefix
        # A writer that can write without waiting (FdWriter) lets `send` write at once.
        self._write_now: Callable[[bytes], int] | None = getattr(writer, "write_now", None)
        # The writer task's loop (asyncio), where `_flush` is scheduled; None: updates
        # wake the writer task instead.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_pending = False  # `_flush` is scheduled
        self._flushed_at = float("-inf")  # loop time of the last `_flush`

    def send(self, message: Any) -> None:
        """Queue a message; the writer task writes queued messages in order (or, when
        nothing is queued and the writer is idle, it is written here: see above)."""
        # The concatenation is a right-sized copy: orjson's own bytes keep a 4 KiB
        # buffer however short they are, which adds up in a long queue.
        data = orjson.dumps(message) + b"\n"
        if self._writer_idle is not None and self._write_now is not None:
            if self._queue:  # updates waiting for `_flush`: written first, with it
                if self._closed or self._broken:
                    return
                self._queue.append(data)
                self._queued += len(data)
                self._flush()
                return
            data = self._direct(data)
            if not data:
                return
        self._enqueue(data)

    def _direct(self, data: bytes) -> bytes:
        """Write `data` now, as the writer would (the hook first); what is left for the
        writer task (b"" if nothing)."""
        if self._closed or self._broken:
            return data  # `_enqueue` drops it, as it would
        before = self._before_write
        if before is not None:
            waiting = before()
            if waiting is not None:  # a log is being written by a thread: the writer waits for it
                close = getattr(waiting, "close", None)
                if close is not None:
                    close()  # not started: the writer calls the hook again
                return data
        assert self._write_now is not None
        try:
            written = self._write_now(data)
        except OSError:
            return data  # the writer meets it again, and handles it as it does
        return data[written:]

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def notify_update(self, session_id: str, update: Any) -> None:
        """Queue the `session/update` notification of `update` for `session_id`: the
        same bytes as `notify("session/update", {"sessionId": ..., "update": ...})`,
        built with one encoding of the update and a per-session prefix."""
        prefix = self._prefixes.get(session_id) or self._prefix(session_id)
        self._queue_updates(b"".join((prefix, orjson.dumps(update), UPDATE_TAIL)))

    def notify_updates(self, session_id: str, updates: list[Any]) -> None:
        """`notify_update` of each of `updates`, in order: the same bytes, joined at
        once (a stream's run of chunks read together)."""
        if updates:
            prefix, dumps = self._prefixes.get(session_id) or self._prefix(session_id), orjson.dumps
            self._queue_updates(b"".join((prefix, (UPDATE_TAIL + prefix).join([dumps(u) for u in updates]),
                                          UPDATE_TAIL)))

    def _prefix(self, session_id: str) -> bytes:
        """The bytes of a notification of `session_id` before its update, kept."""
        if len(self._prefixes) >= PREFIX_CACHE_SIZE:
            self._prefixes.clear()
        prefix = self._prefixes[session_id] = UPDATE_HEAD + orjson.dumps(session_id) + b',"update":'
        return prefix

    def _queue_updates(self, data: bytes) -> None:
        """Queue streamed updates' bytes, written by `_flush` (module docstring)."""
        loop = self._loop
        if loop is None or self._writer_idle is None or self._closed or self._broken:
            self._enqueue(data)  # the writer task is at work (or woken, or the end is near)
            return
        self._queue.append(data)
        self._queued += len(data)
        if not self._flush_pending:
            self._flush_pending = True
            due = self._flushed_at + FLUSH_WINDOW_S
            if due > loop.time():  # a stream: its updates go out together, at most once a window
                loop.call_at(due, self._flush)
            else:
                loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Write what is queued now, as the writer would (the hook first), while the
        writer task is idle; what the descriptor does not take, or a hook that must be
        waited for, wakes the writer for the rest. Called by the loop after the update
        that scheduled it (and whatever the same task step queued after it), or by
        `send` to write its message behind them."""
        self._flush_pending = False
        queue = self._queue
        if self._writer_idle is None or not queue:
            return  # the writer task was woken meanwhile: the queue is its own
        if self._broken:
            queue.clear()
            self._queued = 0
            return
        data = queue.popleft() if len(queue) == 1 else b"".join(queue)
        queue.clear()
        left = self._direct(data)
        self._queued -= len(data) - len(left)
        if self._loop is not None:
            self._flushed_at = self._loop.time()
        if left:
            queue.appendleft(left)
            self._wake_writer()
        if len(left) < len(data):
            self._wake_drain()

    def send_raw(self, data: bytes) -> None:
        """Queue messages already encoded: complete JSON-RPC lines, newline included
        (a replay encodes a block of notifications in a worker thread). Written in
        order with everything else, as `send` would."""
        if data:
            self._enqueue(data)

    def _enqueue(self, data: bytes) -> None:
        if self._closed or self._broken:
            log.debug("dropping an outgoing message: %s", "the client stopped reading"
                      if self._broken else "the connection is closed")
            return
        self._queue.append(data)
        self._queued += len(data)
        idle = self._writer_idle  # `_wake_writer`, inlined: this runs for every chunk streamed
        if idle is not None:
            self._writer_idle = None
            idle.set()

    @property
    def queued_bytes(self) -> int:
        """Bytes of messages queued for the client and not yet written."""
        return self._queued

    async def drain(self, high_water: int = DRAIN_HIGH_WATER) -> None:
        """Wait until less than `high_water` bytes are queued for the client (at once
        if that is already so). A producer of many messages (the replay of a long log)
        calls it now and then to keep the queue, and so its memory, bounded while the
        client reads. Returns at once if the client stopped reading."""
        while self._queued >= high_water and not self._broken and not self._closed:
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()

    async def run(self) -> None:
        """The writer task: write what is queued until `close`, or until the client
        stops reading (then what is queued is dropped)."""
        queue = self._queue
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio: updates wake this task
            self._loop = None
        try:
            while True:
                if not queue:
                    if self._closed:
                        return
                    idle = self._writer_idle = anyio.Event()
                    await idle.wait()
                    continue
                # Whatever is queued goes out in one write.
                data = queue.popleft() if len(queue) == 1 else b"".join(queue)
                queue.clear()
                # Taken before the hook runs: what it hands to the OS covers every
                # event behind the messages in `data` (their events were logged
                # before they were queued); messages queued meanwhile wait their turn.
                try:
                    if self._before_write is not None:
                        waiting = self._before_write()
                        if waiting is not None:
                            await waiting
                    await self._writer.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    log.info("the client stopped reading stdout")
                    self._broken = True
                    return
                finally:
                    self._queued -= len(data)
                self._wake_drain()
        finally:
            if self._broken:  # what is still queued will never be written
                queue.clear()
                self._queued = 0
            self._wake_drain()

    def close(self) -> None:
        """No more messages: the writer writes what is queued, then ends."""
        self._closed = True
        self._wake_writer()

    def _wake_writer(self) -> None:
        idle = self._writer_idle
        if idle is not None:
            self._writer_idle = None
            idle.set()

    def _wake_drain(self) -> None:
        drained = self._drained
        if drained is not None:
            self._drained = None
            drained.set()
