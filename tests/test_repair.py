"""Crash repair (`interrupted_turn_closers`) as a table of logs and the exact closers
each must get, plus a snapshot of a repaired JSONL file."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from syrupy.assertion import SnapshotAssertion

from session import SessionStore, check_invariants, derive_messages
from session.backends.jsonl import JsonlBackend
from session.closers import interrupted_text
from session.events import WrappedInfo
from session.transcript import unanswered_calls
from tests.support.logs import Item, Script, closers_of, events_of, write

CRASH = {"kind": "interrupted", "cause": "crash"}


def result(call_id: str, step: int, started: bool, turn: int = 1) -> Item:
    return (
        "tool/result",
        {"turn": turn, "step": step, "callId": call_id,
         "content": [{"type": "text", "text": interrupted_text("read_file", started)}],
         "isError": True, "error": {"name": "InterruptedError", "code": "interrupted"}},
    )


PLAN = {"sessionUpdate": "plan", "entries": [{"content": "read", "priority": "high",
                                              "status": "pending"}]}
WRAPPED: Item = ("wrapped/update", {"update": PLAN})


def wrapped_in(turn: int) -> Item:
    return ("wrapped/update", {"turn": turn, "update": PLAN})


CASES: list[tuple[str, Script, list[Item]]] = [
    ("empty log", Script(), []),
    ("closed log", Script().text_turn(), []),
    ("closed after a tool turn", Script().tool_turn(), []),
    ("turn started, no prompt yet", Script().add("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}}),
     [("turn/end", {"turn": 1, "reason": CRASH})]),
    ("open turn, no step", Script().text_turn().start_turn(),
     [("turn/end", {"turn": 2, "reason": CRASH})]),
    ("open step with chunks", Script().start_turn().start_step().chunk("a").chunk("b"),
     [("step/end", {"turn": 1, "step": 1}), ("turn/end", {"turn": 1, "reason": CRASH})]),
    ("step closed, next not started", Script().start_turn().start_step().message("m").end_step(),
     [("turn/end", {"turn": 1, "reason": CRASH})]),
    ("calls not started", Script().start_turn().start_step().message("m", calls=("a", "b")),
     [result("a", 1, False), result("b", 1, False),
      ("step/end", {"turn": 1, "step": 1}), ("turn/end", {"turn": 1, "reason": CRASH})]),
    ("one call running", Script().start_turn().start_step().message("m", calls=("a", "b"))
     .call("a").result("a").call("b"),
     [result("b", 1, True), ("step/end", {"turn": 1, "step": 1}),
      ("turn/end", {"turn": 1, "reason": CRASH})]),
    ("closed step's calls untouched", Script().start_turn().start_step()
     .message("m", calls=("a",)).call("a").result("a").end_step()
     .start_step().message("n", calls=("b",)),
     [result("b", 2, False), ("step/end", {"turn": 1, "step": 2}),
      ("turn/end", {"turn": 1, "reason": CRASH})]),
    ("wrapped updates between turns: closed", Script().text_turn().add(*WRAPPED),
     []),
    ("wrapped updates inside an open turn and step", Script().add(*WRAPPED).start_turn()
     .add(*wrapped_in(1)).start_step().chunk("a").message("m", calls=("a",)).add(*wrapped_in(1))
     .call("a").add(*wrapped_in(1)),
     [result("a", 1, True), ("step/end", {"turn": 1, "step": 1}),
      ("turn/end", {"turn": 1, "reason": CRASH})]),
    ("a wrapped update last, no step open", Script().text_turn().start_turn().add(*wrapped_in(2)),
     [("turn/end", {"turn": 2, "reason": CRASH})]),
    ("all calls answered, step open", Script().start_turn().start_step()
     .message("m", calls=("a",)).call("a").result("a"),
     [("step/end", {"turn": 1, "step": 1}), ("turn/end", {"turn": 1, "reason": CRASH})]),
    ("a compaction in progress: it fails, without the summary it was writing",
     Script().text_turn().text_turn().start_turn().start_step().compaction("t3s1-compaction"),
     [("context/compaction", {"turn": 3, "step": 1, "compactionId": "t3s1-compaction",
                              "replaces": {"fromTurn": 1, "toTurn": 2}, "summary": [], "status": "failed",
                              "error": "The agent stopped (crash) before the compaction finished."}),
      ("step/end", {"turn": 3, "step": 1}), ("turn/end", {"turn": 3, "reason": CRASH})]),
    ("a compaction completed, the step's model call cut off: nothing more to end",
     Script().text_turn().start_turn().start_step().compaction().compaction(status="completed").chunk("a"),
     [("step/end", {"turn": 2, "step": 1}), ("turn/end", {"turn": 2, "reason": CRASH})]),
]


@pytest.mark.parametrize(("name", "script", "expected"), CASES, ids=[c[0] for c in CASES])
def test_closers(name: str, script: Script, expected: list[Item]) -> None:
    events = events_of(script)
    closers = closers_of(events)
    assert [(c["type"], c["data"]) for c in closers] == expected
    if events:
        assert [c["seq"] for c in closers] == list(range(len(events), len(events) + len(closers)))
        assert all(c["time"] == events[-1]["time"] for c in closers)
    repaired = events + closers
    check_invariants(repaired, closed=True)
    assert unanswered_calls(derive_messages(repaired)) == []


def test_shutdown_cause_and_clock() -> None:
    events = events_of(Script().start_turn().start_step())
    closers = closers_of(events, cause="shutdown", time=99_999)
    assert closers[-1]["data"]["reason"] == {"kind": "interrupted", "cause": "shutdown"}
    assert {c["time"] for c in closers} == {99_999}


def test_pure_no_mutation() -> None:
    events = events_of(Script().start_turn().start_step().message("m", calls=("a",)))
    before = orjson.dumps(events)
    closers_of(events)
    assert orjson.dumps(events) == before


def test_repaired_jsonl_file_snapshot(tmp_path: Path, snapshot_json: SnapshotAssertion) -> None:
    clock = iter(range(1_700_000_000_000, 1_700_000_001_000)).__next__
    store = SessionStore(JsonlBackend(tmp_path), clock=clock)
    sid = "0f0f0f0f-0000-4000-8000-000000000001"
    log = store.create(cwd="/work/project", session_id=sid)
    script = Script().text_turn("hello", "hi there").start_turn("read two files").start_step()
    script.chunk("Reading", "reasoning").message("reading", calls=("c1", "c2")).call("c1")
    write(log, script)
    log.close()
    # A torn record at the end, as a kill -9 mid-write leaves it.
    path = JsonlBackend(tmp_path).path_of(sid)
    with open(path, "ab") as f:
        f.write(b'{"type":"tool/result","seq":1')
    loaded = store.load(sid)
    loaded.log.close()
    meta = loaded.report.to_meta()
    assert Path(meta.pop("keptAside")).read_bytes() == b'{"type":"tool/result","seq":1'
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert {"report": meta, "log": lines} == snapshot_json


def test_wrapped_session_crashed_mid_turn_loads_repaired(store: SessionStore) -> None:
    """A session recorded by `wrap` (its header says so), cut in a turn full of
    wrapped updates: the load keeps the header as stored and closes the turn."""
    wrapped: WrappedInfo = {"command": ["npx", "some-agent"], "sessionId": "child-1",
               "agentInfo": {"name": "some-agent", "version": "1.0"}}
    log = store.create(cwd="/w", wrapped=wrapped)
    script = Script().add(*WRAPPED).text_turn().add(*WRAPPED).start_turn("go")
    script.add(*wrapped_in(2)).start_step().chunk("a").message("m", calls=("a",)).call("a")
    script.add(*wrapped_in(2))
    written = write(log, script)
    log.close()
    loaded = store.load(log.id)
    try:
        assert loaded.log.header["wrapped"] == wrapped
        events = list(loaded.log.events)
        assert events[: len(written)] == written
        assert [(e["type"], e["data"]) for e in events[len(written):]] == [
            result("a", 1, True, turn=2), ("step/end", {"turn": 2, "step": 1}),
            ("turn/end", {"turn": 2, "reason": CRASH})]
        check_invariants(events, closed=True)
        assert loaded.report.interrupted_turn == 2
    finally:
        loaded.log.close()
