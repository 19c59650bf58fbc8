"""Opening a stored session: one pass over its log, a block of events at a time.

`session/load` must replay every event of a log that can be far larger than memory
(issue 8: a 500 MB log under 200 MB of RSS), so nothing here holds the log. In a
worker thread, each block is read, parsed and checked (`SessionStore.loading`), fed to
what a live session needs (the model transcript, bounded by the model's context window,
and the tools allowed always) and encoded as `session/update` lines; the event loop
writes them and waits for the client to read (`Connection.drain`) before the next block
is read. What the log keeps in memory afterwards is its last turn (see `SessionLoad`).

A log found damaged half-way is refused after the blocks before the damage were
replayed: the client sees an error answer after some updates. Checking a log fully
before replaying it would read it twice; damage in the committed part of a log is rare
(it takes a broken disk or a hand edit), a slow load of every long session is not.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass

import anyio
import orjson

from acp_bridge.agent.permissions import RememberedAlways
from acp_bridge.agent.updates import UpdateContext, updates_for
from acp_bridge.rpc.protocol import UPDATE_HEAD, UPDATE_TAIL
from session import SessionLog, SessionStore
from session.events import ASSISTANT_CHUNK, Event
from session.repair import RepairReport
from session.scan import TailSplitter
from session.transcript import Transcript

Send = Callable[[bytes], Awaitable[None]]
"""Write already-encoded notification lines to the client (and wait for it to read)."""


class ReplayEncoder:
    """The `session/update` notification lines of a replay, a block of events at a
    time, byte for byte what `Connection.notify_update(sid, u)` writes for each `u` of
    `updates_for(event, ctx)`. Text chunks, most of any log, are encoded directly:
    a replay is this loop once per stored event (tests/test_streamed_load.py pins the
    equivalence)."""

    def __init__(self, session_id: str, context_window: int | None,
                 window_of: Callable[[str], int | None] | None = None) -> None:
        # `window_of`: the window of the model a turn ran on (its `turn/start.model`),
        # for `usage_update.size`; without it, every turn's is `context_window`.
        self.context = UpdateContext(replay=True, context_window=context_window, window_of=window_of)
        self.prefix = UPDATE_HEAD + orjson.dumps(session_id) + b',"update":'

    def encode(self, block: list[Event], others: list[Event] | None = None) -> bytes:
        """The lines for `block`; its events other than chunks are also appended to
        `others` (the load feeds those to the transcript without a second pass)."""
        prefix, context, dumps = self.prefix, self.context, orjson.dumps
        chunk_head = prefix + b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":'
        parts: list[bytes] = []
        append = parts.append
        for event in block:
            if event["type"] == ASSISTANT_CHUNK:
                data = event["data"]
                chunk = data["chunk"]
                if chunk["type"] == "text":
                    append(b'%s%s},"messageId":"t%ds%d"}}}\n' % (
                        chunk_head, dumps(chunk["text"]), data["turn"], data["step"]))
                    continue
            elif others is not None:
                others.append(event)
            for update in updates_for(event, context):
                append(prefix)
                append(dumps(update))
                append(UPDATE_TAIL)
        return b"".join(parts)


@dataclass
class Opened:
    log: SessionLog
    report: RepairReport
    transcript: Transcript
    always_allowed: set[str]


async def open_stored(
    store: SessionStore, session_id: str, *, budget: int,
    replay: tuple[ReplayEncoder, Send] | None,
) -> Opened:
    """Load (and repair) a stored session for this process; with `replay`, every
    block of its events (the repair closers included) is encoded in the worker thread
    and sent. Raises the SessionError family; ownership is released if the load does
    not complete."""
    load = store.loading(session_id)
    transcript = Transcript(budget=budget)
    always = RememberedAlways()
    blocks = iter(load)
    assert isinstance(blocks, Generator)
    encode = replay[0].encode if replay is not None else None

    def step() -> bytes | None:
        # The transcript and the tools allowed always are only touched here until the
        # load is over, one step at a time, so the worker thread may feed them.
        block = next(blocks, None)
        if block is None:
            return None
        others: list[Event] = []  # chunks (most events) concern neither transcript nor always
        if encode is not None:
            payload = encode(block, others)
        else:
            payload = b""
            others = [event for event in block if event["type"] != ASSISTANT_CHUNK]
        for event in others:
            transcript.feed(event)
            always.feed(event)
        return payload

    done = False
    _load_started()
    try:
        while (payload := await anyio.to_thread.run_sync(step)) is not None:
            if replay is not None:
                await replay[1](payload)
        done = True
    finally:
        _load_ended()
        if not done:  # closing the generator releases the session
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(blocks.close)
    assert load.loaded is not None
    return Opened(load.loaded.log, load.loaded.report, transcript, always.tools)


async def replay_stored(store: SessionStore, log: SessionLog, encoder: ReplayEncoder, send: Send) -> None:
    """Replay a session this process already owns, from what its log has written (it
    is flushed first), without holding it in memory."""
    await anyio.to_thread.run_sync(log.flush)
    stream = await anyio.to_thread.run_sync(store.backend.read_stream, log.id)
    try:
        splitter = TailSplitter(log.id, stream.locate)
        blocks = stream.blocks()

        def step() -> bytes | None:
            for block in blocks:
                good = splitter.feed(block)
                if good:
                    return encoder.encode(good)
            return None

        while (payload := await anyio.to_thread.run_sync(step)) is not None:
            await send(payload)
    finally:
        await anyio.to_thread.run_sync(stream.close)


# While loads run, the process is tuned for them (and put back after the last one):
# - A load allocates a few objects per event, which die young but in bulk: the cyclic
#   collector would run full collections over everything the agent holds (measured: up
#   to half of a block's parse time). Nothing a load makes is cyclic, so collection
#   waits until no load is running.
# - The worker thread parses while the event loop writes what it made; the loop waits
#   for the GIL up to the switch interval (5 ms) each time, long enough for the client
#   to drain the pipe and sit idle. Switching more often keeps the pipe fed (measured:
#   the long-session replay went from 0.58 to 0.77 of the bare loop's rate).
LOAD_SWITCH_INTERVAL = 0.0005  # seconds
_loads_running = 0
_saved: tuple[bool, float] = (True, 0.005)  # gc enabled, switch interval


def _load_started() -> None:
    global _loads_running, _saved
    if _loads_running == 0:
        _saved = (gc.isenabled(), sys.getswitchinterval())
        gc.disable()
        sys.setswitchinterval(min(_saved[1], LOAD_SWITCH_INTERVAL))
    _loads_running += 1


def _load_ended() -> None:
    global _loads_running
    if _loads_running:
        _loads_running -= 1
        if _loads_running == 0:
            enabled, interval = _saved
            sys.setswitchinterval(interval)
            if enabled:
                gc.enable()
