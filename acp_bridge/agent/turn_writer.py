"""How the events of a turn are written (DESIGN.md section 3): each goes through the
session log first and is then handed to the runner's `on_event` (the ACP layer turns
events into `session/update`s), so what a client sees is what the log holds. The
durability points commit on the event loop when that is cheaper than a worker thread
(INLINE_SYNC_EVENTS), a model that never waits is paced so the writer can send what is
queued (STREAM_YIELD_S), and the transcript is kept in step with the log (with marks to
roll it back with the log when a write fails: acp_bridge.agent.turn_close).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio

from acp_bridge.agent.turn_close import TranscriptMarks
from acp_bridge.host.tuning import Tuning
from session import DURABLE_TYPES, Event, SessionLog
from session.items import Item
from session.transcript import Transcript

EventSink = Callable[[Event], Awaitable[None]]
STREAM_YIELD_S = 0.002
# A durable commit of at most this many pending events runs on the event loop when no
# other turn is running in the process: the fdatasync of a few small records (~0.3 ms
# here) costs less than the worker-thread round trip it would otherwise need, and there
# is nobody else's stream to hold up. Bigger commits (the end of a long streamed step:
# tens of ms) and commits while other turns run go to a worker thread.
INLINE_SYNC_EVENTS = 64

_T = TypeVar("_T")


class TurnWriter:
    """The writer of one session's log for its turns (acp_bridge.agent.runner)."""

    def __init__(self, log: SessionLog, transcript: Transcript, on_event: EventSink | None,
                 tuning: Tuning) -> None:
        self.log = log
        self.tuning = tuning  # counts the turns running in the process (TurnRunner.prompt)
        self.transcript = transcript
        self.on_event = on_event
        self.marks = TranscriptMarks()  # a failed write rolls the transcript back with the log
        self._yielded_at = 0.0

    async def sync(self) -> None:
        """Make the pending events durable."""
        if self.log.pending:
            await self.durably(0, self.log.sync)

    async def durably(self, adding: int, fn: Callable[..., _T], *args: Any) -> _T:
        """Run `fn` (a durable commit of the pending events plus `adding` more) on the
        event loop if it is small and no other turn runs (INLINE_SYNC_EVENTS), else in
        a worker thread so the other sessions' streams go on meanwhile."""
        if self.tuning.running_turns <= 1 and self.log.pending + adding <= INLINE_SYNC_EVENTS:
            return fn(*args)
        if self.log.buffered:
            # Handed to the OS here, on the loop (their updates may be queued): the thread
            # then writes only events nothing was sent for, so the sender never waits
            # for its fsync (the host's `before_write`).
            self.log.flush()
        return await anyio.to_thread.run_sync(fn, *args)

    async def append(self, item: Item) -> Event:
        return (await self.extend((item,)))[0]

    async def extend(self, items: Sequence[Item]) -> list[Event]:
        if any(etype in DURABLE_TYPES for etype, _ in items):
            events = await self.durably(len(items), self.log.extend, items)
        else:
            events = self.log.extend(items)
        for event in events:
            self.marks.feed(self.transcript, event)
            await self.emit(event)
        await self.pace()
        return events

    async def streamed(self, item: Item) -> None:
        """`append` for the events a model streams (`assistant/chunk`: not a durability
        point, nothing the transcript keeps), on the shortest path: one per chunk."""
        event = self.log.extend((item,))[0]
        if self.on_event is not None:
            await self.on_event(event)
        await self.pace()

    async def pace(self) -> None:
        # A model that never waits (echo, a script) would otherwise keep the writer from
        # running until the step ends: let it send what is queued every few ms.
        now = time.monotonic()  # the event loop's clock (anyio.current_time), read directly
        if now - self._yielded_at > STREAM_YIELD_S:
            self._yielded_at = now
            await anyio.lowlevel.checkpoint()

    async def emit(self, event: Event) -> None:
        if self.on_event is not None:
            await self.on_event(event)
