"""Opening a stored session: one pass over its log, a block of events at a time.

`session/load` must replay every event of a log that can be far larger than memory
(issue 8: a 500 MB log under 200 MB of RSS), so nothing here holds the log. In a
worker thread, each block is read, parsed and checked (`SessionStore.loading`), fed to
what the engine's live session keeps (a `LoadSink`: our agent's model transcript,
bounded by the model's context window, and the "always allow" rules) and encoded as
`session/update` lines; the event loop
writes them and waits for the client to read (`Connection.drain`) before the next block
is read. What the log keeps in memory afterwards is its last turn (see `SessionLoad`).

A log found damaged half-way is refused after the blocks before the damage were
replayed: the client sees an error answer after some updates. Checking a log fully
before replaying it would read it twice; damage in the committed part of a log is rare
(it takes a broken disk or a hand edit), a slow load of every long session is not.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol

import anyio
import orjson

from acp_bridge.host.advertised import NEITHER, ClientSupport
from acp_bridge.host.engine import S, Send
from acp_bridge.host.listing import iso_time
from acp_bridge.host.tuning import Tuning
from acp_bridge.host.updates import UpdateContext, updates_for
from acp_bridge.rpc.protocol import UPDATE_HEAD, UPDATE_TAIL
from session import SessionLog, SessionStore
from session.events import (
    ASSISTANT_CHUNK,
    CONFIG_SET,
    TITLE_CONFIG,
    USER_MESSAGE,
    WRAPPED_UPDATE,
    Event,
    Header,
)
from session.repair import RepairReport
from session.scan import TailSplitter
from session.titles import title_from_content
from session.typed import AnyEvent, typed_all

if TYPE_CHECKING:
    from acp_bridge.host.host import Host
    from acp_bridge.prices import CostMeter



class ReplayEncoder:
    """The `session/update` notification lines of a replay, a block of events at a
    time, byte for byte what `Connection.notify_update(sid, u)` writes for each `u` of
    `updates_for(event, ctx)`. Text chunks, most of any log, are encoded directly:
    a replay is this loop once per stored event (tests/test_streamed_load.py pins the
    equivalence). After the last block, `title` names the session again."""

    def __init__(self, session_id: str, context_window: int | None,
                 window_of: Callable[[str], int | None] | None = None, *, wrapped: bool = False,
                 cost: CostMeter | None = None, shown: Callable[[Any], Any] | None = None,
                 support: ClientSupport = NEITHER) -> None:
        # `window_of`: the window of the model a turn ran on (its `turn/start.model`),
        # for `usage_update.size`; without it, every turn's is `context_window`.
        # `wrapped`: a wrapped agent's session (UpdateContext.wrapped); `cost`: a fresh
        # meter, with a price file (UpdateContext.cost); `shown`: what the client is
        # shown of a wrapped agent's update, as the live stream showed it (the wrapper's
        # own commands added to the agent's: acp_bridge.wrap.commands), else as stored;
        # `support`: what the client advertised of compaction (UpdateContext.support).
        self.context = UpdateContext(replay=True, context_window=context_window, window_of=window_of,
                                     wrapped=wrapped, cost=cost, support=support)
        self.wrapped = wrapped
        self.shown = shown
        self.prefix = UPDATE_HEAD + orjson.dumps(session_id) + b',"update":'
        self._prompt_title: str | None = None  # the first prompt's, as the live stream named it
        self._agent_title: str | None = None  # the last a wrapped agent's session_info_update gave
        self._set_title: str | None = None  # the last `/title` set (config/set session/title)
        self._last_time: int | None = None

    def encode(self, block: list[Event], others: list[Event] | None = None) -> bytes:
        """The lines for `block`; its events other than chunks are also appended to
        `others` (the load feeds those to the transcript without a second pass)."""
        prefix, context, dumps, wrapped = self.prefix, self.context, orjson.dumps, self.wrapped
        chunk_head = prefix + b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":'
        parts: list[bytes] = []
        append = parts.append
        # Each event twice, as stored (for `updates_for` and the sink) and typed (for
        # the branches here), without a call per event: this loop runs once per event.
        for event, ev in zip(block, typed_all(block), strict=True):
            if ev["type"] == ASSISTANT_CHUNK:
                data = ev["data"]
                chunk = data["chunk"]
                if chunk["type"] == "text":
                    if not wrapped:
                        append(b'%s%s},"messageId":"t%ds%d"}}}\n' % (
                            chunk_head, dumps(chunk["text"]), data["turn"], data["step"]))
                        continue
                    if "sent" not in data:  # a wrapped agent's plain chunk, as it came
                        append(b'%s%s}}}}\n' % (chunk_head, dumps(chunk["text"])))
                        continue
            elif others is not None:
                others.append(event)
            if ev["type"] in _NAMING:
                self._named_by(ev)
            for update in updates_for(event, context):
                if self.shown is not None and ev["type"] == WRAPPED_UPDATE:
                    update = self.shown(update)
                append(prefix)
                append(dumps(update))
                append(UPDATE_TAIL)
        if block:
            self._last_time = block[-1]["time"]
        return b"".join(parts)

    def _named_by(self, event: AnyEvent) -> None:
        if event["type"] == USER_MESSAGE:
            if self._prompt_title is None:
                self._prompt_title = title_from_content(event["data"]["content"])
        elif event["type"] == CONFIG_SET:
            if event["data"]["configId"] == TITLE_CONFIG:
                self._set_title = event["data"]["value"]
        elif event["type"] == WRAPPED_UPDATE:
            update = event["data"]["update"]
            if update.get("sessionUpdate") == "session_info_update" and isinstance(update.get("title"), str):
                self._agent_title = update["title"]

    def title(self, header: Header) -> bytes:
        """The line that names the session once its replay is over: a client that titles a
        thread from `session_info_update` (as the live stream named it at the first
        prompt) gets its title back on load, with the time of its last event. The title
        is the last one `/title` set, else the header's, else the last one a wrapped
        agent gave, else the first prompt's; nothing when there is none."""
        title = self._set_title or header.get("title") or self._agent_title or self._prompt_title
        if not title:
            return b""
        update: dict[str, Any] = {"sessionUpdate": "session_info_update", "title": title}
        if self._last_time is not None:
            update["updatedAt"] = iso_time(self._last_time)
        return self.prefix + orjson.dumps(update) + UPDATE_TAIL


# The events that name a session (`ReplayEncoder.title`).
_NAMING = frozenset({USER_MESSAGE, WRAPPED_UPDATE, CONFIG_SET})


class LoadSink(Protocol):
    """What a live session keeps of its whole log (the model transcript, the "always
    allow" rules), fed every event but the text chunks as a load reads them."""

    def feed(self, event: Event) -> None: ...


@dataclass
class Opened:
    log: SessionLog
    report: RepairReport
    sink: LoadSink | None


async def open_stored(
    store: SessionStore, session_id: str, *, sink: LoadSink | None,
    replay: tuple[ReplayEncoder, Send] | None, tuning: Tuning,
) -> Opened:
    """Load (and repair) a stored session for this process; with `replay`, every
    block of its events (the repair closers included) is encoded in the worker thread
    and sent. Raises the SessionError family; ownership is released if the load does
    not complete. The live log keeps its last turn in memory, less its chunks (as
    `Host.create_log`'s)."""
    load = store.loading(session_id, keep_chunks=False)
    blocks = iter(load)
    assert isinstance(blocks, Generator)
    encode = replay[0].encode if replay is not None else None

    def step() -> bytes | None:
        # The sink is only touched here until the load is over, one step at a time, so
        # the worker thread may feed it.
        block = next(blocks, None)
        if block is None:
            return None
        others: list[Event] = []  # chunks (most events) concern no sink
        if encode is not None:
            payload = encode(block, others if sink is not None else None)
        else:
            payload = b""
            if sink is not None:
                others = [event for event in block if event["type"] != ASSISTANT_CHUNK]
        if sink is not None:
            for event in others:
                sink.feed(event)
        return payload

    done = False
    tuning.load_started()
    try:
        while (payload := await anyio.to_thread.run_sync(step)) is not None:
            if replay is not None:
                await replay[1](payload)
        done = True
        if replay is not None and load.loaded is not None and (named := replay[0].title(load.loaded.log.header)):
            await replay[1](named)
    finally:
        tuning.load_ended()
        if not done:  # closing the generator releases the session
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(blocks.close)
    assert load.loaded is not None
    return Opened(load.loaded.log, load.loaded.report, sink)


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
        if named := encoder.title(log.header):
            await send(named)
    finally:
        await anyio.to_thread.run_sync(stream.close)


class StoredOpener(Generic[S]):
    """`Engine.open_session` for an engine whose sessions are in the host's store: a
    live session replayed from what its log has written, or a stored one loaded
    (repaired, replayed through the engine's `encoder`, fed to its `sink`) and made live
    by `adopt`. One copy for every engine with a store."""

    def __init__(self, host: Host[S], *, encoder: Callable[[str], ReplayEncoder],
                 sink: Callable[[], LoadSink | None], adopt: Callable[[Opened], S]) -> None:
        self._host = host
        self._encoder = encoder
        self._sink = sink
        self._adopt = adopt

    async def __call__(self, session_id: str, params: Mapping[str, Any], send: Send | None,
                       live: S | None) -> tuple[S, RepairReport]:
        store = self._host.store()
        if live is not None:  # already ours: nothing to repair
            if send is not None:
                assert live.log is not None
                await replay_stored(store, live.log, self._encoder(session_id), send)
            return live, RepairReport()
        replay = (self._encoder(session_id), send) if send is not None else None
        opened = await open_stored(store, session_id, sink=self._sink(), replay=replay, tuning=self._host.tuning)
        session = self._adopt(opened)
        self._host.add(session_id, session)
        return session, opened.report
