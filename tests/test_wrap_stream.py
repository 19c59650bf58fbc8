"""The wrapper's fast path for a stream (issue 32): a run of a child's `session/update`s
read together (`ChildSide.on_updates`: `TurnRecorder.streamed`,
`SessionLog.append_chunks`, `Outgoing.notify_updates`) records and sends exactly what
`on_update` one message at a time does (the general path): the same events, at the same
clock readings, and the same bytes for the editor, in the same order, whatever the
child sends and however its messages are cut into runs. The recorded agents' own
chunks (tests/wrapped_agents/) among them; tests/test_wrap_stream_log.py checks a real
wrapper's log and traffic against the ones the code before the fast path made."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_bridge.rpc.outgoing import Outgoing
from acp_bridge.wrap import upstream
from acp_bridge.wrap.children import SessionMap
from acp_bridge.wrap.record import TurnRecorder
from acp_bridge.wrap.sessions import WrappedSession
from acp_bridge.wrap.state import Placed, Prompting, State
from acp_bridge.wrap.turns import WrappedTurns
from acp_bridge.wrap.upstream import ChildSide
from session import SessionLog, SessionStore
from session.backends.memory import MemoryBackend
from session.errors import EventDataError, InvariantError, SessionClosedError, StoreIOError
from session.items import (
    assistant_chunk,
    assistant_message,
    step_end,
    step_start,
    turn_start,
    user_message,
)
from tests.support.acp_updates import PROMPT, call, done, text, thought

CHILD, OTHER = "child-1", "child-2"
RECORDINGS = sorted((Path(__file__).parent / "wrapped_agents").glob("*.jsonl"))


class Editor:
    """What `ChildSide` sends the editor, as the bytes a real queue makes of it."""

    def __init__(self) -> None:
        self.out = Outgoing(_NoWriter())

    def notify(self, method: str, params: Any) -> None:
        self.out.notify(method, params)

    def notify_update(self, sid: str, update: Any) -> None:
        self.out.notify_update(sid, update)

    def notify_updates(self, sid: str, updates: list[Any]) -> None:
        self.out.notify_updates(sid, updates)

    def sent(self) -> bytes:
        return b"".join(self.out._queue)


class _NoWriter:
    async def write(self, data: bytes) -> None:  # never called: nothing runs the writer task
        raise AssertionError


class Wrapped:
    """A wrapped session in its running turn's first step, as the engine has it, over a
    memory store with a counting clock (each reading is the next number)."""

    def __init__(self, *, sessions: int = 1) -> None:
        ticks = itertools.count(1_000)
        self.backend = MemoryBackend()
        store = SessionStore(self.backend, clock=lambda: next(ticks))
        self.editor = Editor()
        self.map = SessionMap()
        self.side = ChildSide(self.map, lambda: self.editor, _shown)  # type: ignore[arg-type, return-value]
        self.logs: list[SessionLog] = []
        for n, child in enumerate([CHILD, OTHER][:sessions]):
            log = store.create(cwd="/w", keep_history=False, keep_chunks=False)  # as the host makes it
            turns = _session(log, child)
            ws = turns.session
            recorder = ws.recorder = TurnRecorder(1, agent="wrap:test")
            log.extend(recorder.prompt(PROMPT))
            if n == 0:
                log.extend(recorder.update(text("first")))  # the step is open
            self.map.bind(turns, child)
            self.logs.append(log)

    def sent(self) -> bytes:
        """What the editor was sent, each session's id as `S<n>` (ids are random)."""
        out = self.editor.sent()
        for n, log in enumerate(self.logs):
            out = out.replace(log.id.encode(), b"S%d" % n)
        return out

    def events(self) -> list[list[dict[str, Any]]]:
        return [list(map(dict, log.events)) for log in self.logs]

    def stored(self) -> list[list[bytes]]:
        """Each log's records as its backend stored them (the logs closed first)."""
        for log in self.logs:
            log.close()
        return [self.backend.stored[log.id].records for log in self.logs]

    def end(self) -> None:
        for turns in self.map.theirs.values():
            ws = turns.session
            assert ws.recorder is not None
            ws.log.extend(ws.recorder.answer({"stopReason": "end_turn"}))


def _session(log: SessionLog, child_sid: str) -> WrappedTurns:
    """A wrapped session in a turn of its child's, whose agent is never reached here
    (`ChildSide` reads its log, recorder and state)."""
    state = State("test", Placed(child_sid, 1), turn=Prompting("asked"))
    return WrappedTurns(WrappedSession(log, "/w", state), agents=None)  # type: ignore[arg-type]


def _shown(ws: WrappedSession, update: Any) -> Any:
    """Like the engine's (`commands.shown`): changes what it may change; a message or
    thought chunk never."""
    if isinstance(update, dict) and update.get("sessionUpdate") in ("agent_message_chunk", "agent_thought_chunk"):
        return update
    return {"shown": update}


def one_at_a_time(messages: list[Any], sessions: int = 1) -> Wrapped:
    wrapped = Wrapped(sessions=sessions)
    for params in messages:
        wrapped.side.on_update(params)
    wrapped.end()
    return wrapped


def in_runs(messages: list[Any], cuts: list[int], sessions: int = 1) -> Wrapped:
    wrapped = Wrapped(sessions=sessions)
    bounds = sorted({0, len(messages), *(c % (len(messages) + 1) for c in cuts)})
    for start, stop in itertools.pairwise(bounds):
        wrapped.side.on_updates(messages[start:stop])
    wrapped.end()
    return wrapped


def same(messages: list[Any], cuts: list[int], sessions: int = 1) -> None:
    general, fast = one_at_a_time(messages, sessions), in_runs(messages, cuts, sessions)
    assert fast.events() == general.events()
    assert fast.sent() == general.sent()
    assert fast.stored() == general.stored()


def params(update: Any, sid: Any = CHILD) -> dict[str, Any]:
    return {"sessionId": sid, "update": update}


CHUNKS = [
    text("plain"), thought("a thought"), text(""), text("é 😀 \n \"quoted\" \\ \u0001"),
    {"sessionUpdate": "agent_message_chunk", "messageId": "msg_1", "content": {"type": "text", "text": "opencode"}},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ""},
     "_meta": {"usage": {"inputTokens": 120, "outputTokens": 9, "totalTokens": 129}, "durationMs": 5}},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x", "annotations": {"p": 1}}},
    {"content": {"text": "keys in another order", "type": "text"}, "sessionUpdate": "agent_message_chunk"},
]
OTHERS = [
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": "00", "mimeType": "image/png"}},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": 5}},
    {"sessionUpdate": "agent_message_chunk", "content": "not a block"},
    {"sessionUpdate": "agent_thought_chunk"},
    call("c1"), done("c1"), {"sessionUpdate": "usage_update", "used": 10, "size": 100},
    {"sessionUpdate": "available_commands_update", "availableCommands": [{"name": "x", "description": "y"}]},
    {"sessionUpdate": "current_mode_update", "currentModeId": "code"},
    {"sessionUpdate": 7}, "not an update", None,
]
MESSAGES = st.one_of(
    st.sampled_from(CHUNKS).map(params),
    st.sampled_from(OTHERS).map(params),
    st.sampled_from(CHUNKS + OTHERS).map(lambda u: params(u, OTHER)),
    st.sampled_from([params(text("ghost"), "unknown"), params(text("no id"), 5), "not params", None]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGES, max_size=40), st.lists(st.integers(0, 40), max_size=8))
def test_any_stream_cut_into_any_runs_records_and_sends_what_one_at_a_time_does(
        messages: list[Any], cuts: list[int]) -> None:
    same(messages, cuts, sessions=2)


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda p: p.stem)
def test_the_recorded_agents_updates_in_any_runs(recording: Path) -> None:
    """Every `session/update` a real agent sent in its recording, its session's as
    ours, in the order it came: the same log and bytes whole, one by one and cut."""
    entries = [orjson.loads(line) for line in recording.read_bytes().splitlines() if line.strip()]
    updates = [params(e["msg"]["params"]["update"]) for e in entries
               if e["from"] == "agent" and e["msg"].get("method") == "session/update"]
    stream = updates * 3
    for cuts in ([], [1], [2, 5, 9], list(range(0, len(stream), 4))):
        same(stream, cuts)


# --- SessionLog.append_chunks against `extend`, case by case ------------------------------


def _log(clock: Callable[[], int] | None = None, *, keep_chunks: bool = True) -> SessionLog:
    ticks = itertools.count(50)
    log = SessionStore(MemoryBackend(), clock=clock or (lambda: next(ticks))).create(
        cwd="/w", keep_history=False, keep_chunks=keep_chunks)
    log.extend([turn_start(1, trigger={"kind": "prompt"}, model="m"), user_message(1, PROMPT), step_start(1, 1)])
    return log


def _records(log: SessionLog) -> list[bytes]:
    """The log's events as its backend stored them."""
    log.close()
    backend: MemoryBackend = log._backend._backend  # type: ignore[attr-defined]
    return backend.stored[log.id].records


CASES: list[tuple[str, list[tuple[int, Any, Any, Any]], int]] = [
    ("plain", [(1, "text", "a", None), (1, "reasoning", "b", None)], 2),
    ("sent", [(1, "text", "a", {"messageId": "m", "_meta": {"x": [1, 2.5, None, "é"]}})], 1),
    ("escapes", [(1, "text", "\u0000\u001f\"\\/\u2028😀", None)], 1),
    ("empty sent left out", [(1, "text", "a", {})], 1),
    ("another step stops", [(1, "text", "a", None), (2, "text", "b", None)], 1),
    ("not a chunk kind", [(1, "image", "a", None)], 0),
    ("not text", [(1, "text", b"a", None)], 0),
    ("not JSON", [(1, "text", "a", {"x": object()})], 0),
    ("a surrogate", [(1, "text", "\ud800", None)], 0),
]


@pytest.mark.parametrize("keep_chunks", [True, False])
@pytest.mark.parametrize(("name", "chunks", "taken"), CASES, ids=[c[0] for c in CASES])
def test_append_chunks_takes_what_extend_takes_and_makes_the_same_events(
        name: str, chunks: list[tuple[int, Any, Any, Any]], taken: int, keep_chunks: bool) -> None:
    fast, general = _log(keep_chunks=keep_chunks), _log(keep_chunks=keep_chunks)
    assert fast.append_chunks(1, chunks) == taken
    for step, kind, text_, sent in chunks:
        try:
            general.extend([assistant_chunk(1, step, kind, text_, sent)])
        except (InvariantError, EventDataError):
            break
    # The first one the fast path leaves is the caller's to `extend`: refused the same way.
    if taken < len(chunks):
        step, kind, text_, sent = chunks[taken]
        with pytest.raises((InvariantError, EventDataError)):
            fast.extend([assistant_chunk(1, step, kind, text_, sent)])
    assert list(fast.events) == list(general.events)
    assert _records(fast) == _records(general)


def test_append_chunks_leaves_a_closed_log_a_failed_write_and_another_turn_to_extend() -> None:
    log = _log()
    assert log.append_chunks(2, [(1, "text", "a", None)]) == 0  # not the open turn
    log.close()
    assert log.append_chunks(1, [(1, "text", "a", None)]) == 0
    with pytest.raises(SessionClosedError):
        log.extend([assistant_chunk(1, 1, "text", "a")])


def test_a_clock_without_a_time_is_left_to_extend_to_refuse() -> None:
    broken = [False]
    log = _log(clock=lambda: -5 if broken[0] else 1)
    broken[0] = True
    assert log.append_chunks(1, [(1, "text", "a", None)]) == 0
    with pytest.raises(InvariantError):
        log.extend([assistant_chunk(1, 1, "text", "a")])


def test_notify_updates_is_notify_update_of_each() -> None:
    updates: list[Any] = [text("a"), {"x": [1, None]}, "odd", None]
    one, many = Outgoing(_NoWriter()), Outgoing(_NoWriter())
    for update in updates:
        one.notify_update("s1", update)
    many.notify_updates("s1", updates)
    many.notify_updates("s1", [])
    assert b"".join(many._queue) == b"".join(one._queue)
    assert many.queued_bytes == one.queued_bytes


# --- a log that keeps no chunks in memory (the host's) -------------------------------------


def test_a_log_without_chunks_keeps_the_rest_and_stores_everything() -> None:
    log = _log(keep_chunks=False)
    assert log.append_chunks(1, [(1, "text", "a", None)]) == 1
    log.extend([assistant_chunk(1, 1, "reasoning", "b"), assistant_message(1, 1, [{"type": "text", "text": "a"}])])
    kept = [e["type"] for e in log.events]
    assert kept == ["turn/start", "user/message", "step/start", "assistant/message"]
    assert [e["seq"] for e in log.events] == [0, 1, 2, 5] and log.tracker.next_seq == 6
    assert [orjson.loads(r)["type"] for r in _records(log)] == [
        "turn/start", "user/message", "step/start", "assistant/chunk", "assistant/chunk", "assistant/message"]


def test_a_failed_write_rolls_a_log_without_chunks_back_to_its_durable_point(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its events have gaps where the chunks were: what follows the durable point goes,
    found by seq."""
    log = _log(keep_chunks=False)
    log.append_chunks(1, [(1, "text", "a", None), (1, "text", "b", None)])
    log.extend([assistant_message(1, 1, [{"type": "text", "text": "ab"}]), step_end(1, 1)])  # durable
    log.extend([step_start(1, 2)])
    log.append_chunks(1, [(2, "text", "c", None), (2, "text", "d", None)])
    log.extend([assistant_message(1, 2, [{"type": "text", "text": "cd"}])])
    assert [e["seq"] for e in log.events] == [0, 1, 2, 5, 6, 7, 10]

    def fail(batch: Any, *, sync: bool) -> None:
        raise StoreIOError("the disk is full")

    monkeypatch.setattr(log._backend, "write", fail)
    with pytest.raises(StoreIOError):
        log.sync()
    assert [e["seq"] for e in log.events] == [0, 1, 2, 5, 6]
    assert log.tracker.next_seq == log.durable_seq == 7


@pytest.mark.parametrize("keep", [True, False])
def test_a_load_keeps_its_last_turn_less_its_chunks_or_not_and_closes_it_as_stored(keep: bool) -> None:
    """Loaded without `keep_chunks`, a log keeps the rest of its last turn; the repair
    closers of a turn cut short take the time of its last stored event all the same (a
    chunk, not kept)."""
    store = SessionStore(MemoryBackend(), clock=itertools.count(10).__next__)
    log = store.create(cwd="/w")
    log.extend([turn_start(1, trigger={"kind": "prompt"}, model="m"), user_message(1, PROMPT), step_start(1, 1)])
    log.append_chunks(1, [(1, "text", "a", None), (1, "reasoning", "b", None)])
    log.close()  # the turn left open, as a crash leaves it
    load = store.loading(log.id, keep_chunks=keep)
    stored = [event for block in load for event in block]
    assert load.loaded is not None
    events = list(load.loaded.log.events)
    load.loaded.log.close()
    closers = [e for e in stored if e["seq"] >= 5]
    assert closers and {e["time"] for e in closers} == {stored[4]["time"]}  # the last chunk's
    assert events == (stored if keep else [e for e in stored if e["type"] != "assistant/chunk"])


def test_a_loaded_session_holds_the_childs_updates_until_the_next_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the answer of a load (`WrappedSession.held`), the child's updates are
    recorded as they come and kept from the editor, on both paths, up to a bound; the
    editor's next request on the session (`ChildSide.release`) sends them, shown as
    live, in order, and what comes after goes on at once (docs/wrap.md, "Load")."""
    monkeypatch.setattr(upstream, "HELD_UPDATES", 3)
    log = SessionStore(MemoryBackend()).create(cwd="/w")
    turns = WrappedTurns(WrappedSession(log, "/w", State("test", Placed(CHILD, 1))), agents=None)  # type: ignore[arg-type]
    editor, children = Editor(), SessionMap()
    side = ChildSide(children, lambda: editor, _shown)  # type: ignore[arg-type, return-value]
    children.bind(turns, CHILD)
    ws = turns.session
    ws.held = []
    mode = {"sessionUpdate": "current_mode_update", "currentModeId": "code"}
    updates = [text("a"), mode, text("b"), text("past the bound")]
    side.on_updates([params(u) for u in updates[:2]])
    for update in updates[2:]:
        side.on_update(params(update))
    assert editor.sent() == b""
    assert [e["data"]["update"] for e in log.events if e["type"] == "wrapped/update"] == updates  # all recorded
    assert ws.mode == "code"
    side.release(ws)
    side.on_update(params(text("after")))
    sent = [orjson.loads(line)["params"]["update"] for line in editor.sent().splitlines()]
    assert sent == [_shown(ws, u) for u in [*updates[:3], text("after")]]
    assert ws.held is None
