"""Opening a stored session: one pass over its log, a block of events at a time.

`session/load` must replay every event of a log that can be far larger than memory
(issue 8: a 500 MB log under 200 MB of RSS), so nothing here holds the log. Each block
is read, parsed and checked in a worker thread (`SessionStore.loading`), then, on the
event loop, fed to what a live session needs (the model transcript, bounded by the
model's context window, and the tools allowed always) and replayed to the client,
waiting for the client to read what was sent before the next block is read. What the
log keeps in memory afterwards is its last turn (see `SessionLoad`).

A log found damaged half-way is refused after the blocks before the damage were
replayed: the client sees an error answer after some updates. Checking a log fully
before replaying it would read it twice; damage in the committed part of a log is rare
(it takes a broken disk or a hand edit), a slow load of every long session is not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass

import anyio

from acp_bridge.permissions import RememberedAlways
from session import SessionLog, SessionStore
from session.backend import StoredStream
from session.events import Event
from session.repair import RepairReport
from session.scan import Damage, TailSplitter
from session.transcript import Transcript

Replay = Callable[[list[Event]], Awaitable[None]]


@dataclass
class Opened:
    log: SessionLog
    report: RepairReport
    transcript: Transcript
    always_allowed: set[str]


async def open_stored(
    store: SessionStore, session_id: str, *, budget: int, replay: Replay | None
) -> Opened:
    """Load (and repair) a stored session for this process, passing each block of its
    events to `replay` (the repair closers included) if given. Raises the
    SessionError family; ownership is released if the load does not complete."""
    load = store.loading(session_id)
    transcript = Transcript(budget=budget)
    always = RememberedAlways()
    blocks = iter(load)
    assert isinstance(blocks, Generator)
    done = False
    try:
        while (block := await anyio.to_thread.run_sync(next, blocks, None)) is not None:
            transcript.feed_all(block)
            always.feed_all(block)
            if replay is not None:
                await replay(block)
        done = True
    finally:
        if not done:  # closing the generator releases the session
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(blocks.close)
    assert load.loaded is not None
    return Opened(load.loaded.log, load.loaded.report, transcript, always.tools)


async def replay_stored(store: SessionStore, log: SessionLog, replay: Replay) -> None:
    """Replay a session this process already owns, from what its log has written (it
    is flushed first), without holding it in memory."""
    await anyio.to_thread.run_sync(log.flush)
    stream = await anyio.to_thread.run_sync(store.backend.read_stream, log.id)
    try:
        splitter = TailSplitter(log.id, stream.locate)
        blocks = stream.blocks()
        while (block := await anyio.to_thread.run_sync(_next_good, blocks, splitter)) is not None:
            await replay(block)
    finally:
        await anyio.to_thread.run_sync(_close, stream)


def _next_good(blocks: Iterator[list[Event | Damage]], splitter: TailSplitter) -> list[Event] | None:
    for block in blocks:
        good = splitter.feed(block)
        if good:
            return good
    return None


def _close(stream: StoredStream) -> None:
    stream.close()
