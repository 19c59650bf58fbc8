"""`sessions list` reads each log in one streamed pass (`Source.summary`), keeping the
last turn only: what it reports must equal what a whole read (`Source.read`, as
`show` uses) reports, for every state a stored session can be in, on both backends."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.cli.sessions.source import Source
from acp_bridge.cli.sessions.view import View, check_stored
from session import Owner, SessionCorruptError, SessionStore, open_backend
from tests.support import tamper
from tests.support.logs import Script, write


def closed(store: SessionStore) -> str:
    log = store.create(cwd="/w")
    write(log, Script().text_turn("first prompt").tool_turn().text_turn("three"))
    log.close()
    return log.id


def open_last_turn(store: SessionStore) -> str:
    log = store.create(cwd="/w")
    script = Script().text_turn("one").tool_turn()
    script.start_turn("three").start_step().chunk("par").message("partial", calls=("x",)).call("x")
    write(log, script)
    log.close()
    return log.id


def torn_tail(store: SessionStore) -> str:
    sid = open_last_turn(store)
    tamper.replace_event(store.backend, sid, tamper.stored_seqs(store.backend, sid) - 1, b'{"type":')
    return sid


def no_turns(store: SessionStore) -> str:
    log = store.create(cwd="/w", title="named")
    log.close()
    return log.id


STATES: dict[str, Callable[[SessionStore], str]] = {
    "closed": closed, "open last turn": open_last_turn, "torn tail": torn_tail, "no turns": no_turns,
}


def source_of(kind: str, root: Path) -> Source:
    return Source(kind, root)


def report(view: View) -> dict[str, Any]:
    last = view.last
    return {"turns": view.turn_count, "status": view.status(), "usage": view.usage,
            "last": None if last is None else (last.number, last.reason, last.end_on_disk,
                                               len(last.steps), last.prompt),
            "closers": [(c["type"], c["seq"]) for c in view.closers]}


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
@pytest.mark.parametrize("state", list(STATES))
def test_summary_reports_what_a_whole_read_reports(tmp_path: Path, kind: str, state: str) -> None:
    store = SessionStore(open_backend(kind, tmp_path))
    sid = STATES[state](store)
    store.close()
    source = source_of(kind, tmp_path)
    try:
        whole = source.read(sid)
        check_stored(whole)
        summary = source.summary(sid)
        owner = Owner("none")
        assert report(View(summary, owner)) == report(View(whole, owner))
        assert summary.title == whole.title and summary.header == whole.header
        assert (summary.torn is None) == (whole.torn is None)
        if whole.torn is not None:
            assert summary.torn == whole.torn
        # Only the last turn is held.
        assert len(summary.events) <= len(whole.events)
        if state == "closed":
            assert summary.events[0]["data"]["turn"] == 3 and summary.earlier_turns == 2
    finally:
        source.close()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_summary_refuses_a_damaged_log_as_the_whole_read_does(tmp_path: Path, kind: str) -> None:
    store = SessionStore(open_backend(kind, tmp_path))
    sid = closed(store)
    # A committed chunk naming another step: the invariants refuse it, not the scan.
    tamper.replace_event(store.backend, sid, 3, b'{"type":"assistant/chunk","seq":3,"time":1,'
                         b'"data":{"turn":1,"step":7,"chunk":{"type":"text","text":"x"}}}')
    store.close()
    source = source_of(kind, tmp_path)
    try:
        with pytest.raises(SessionCorruptError) as whole:
            check_stored(source.read(sid))
        with pytest.raises(SessionCorruptError) as summary:
            source.summary(sid)
        assert str(summary.value) == str(whole.value)
        assert "breaks the log invariants at seq 3" in str(summary.value)
    finally:
        source.close()
