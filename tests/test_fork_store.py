"""Forking a stored session in the store (session.fork: `SessionStore.plan_fork`,
`SessionStore.fork`, each backend's `copy`), on every backend: what the fork holds, its
header, the original untouched, an interrupted or running last turn, a torn tail, and a
copy that finds less than its plan published nowhere (docs/persistence.md, "Forks")."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from session import SessionStore, StoreIOError, open_backend
from session.backends.base import read_stored
from session.errors import ForkTurnError, SessionNotFoundError
from session.events import Event
from session.items import config_set
from tests.support import tamper
from tests.support.logs import Script, closers_of, load_clean, write
from tests.test_contract import backend, backend_kind  # noqa: F401 (every backend, PostgreSQL too)


def stored(store: SessionStore, sid: str) -> list[Event]:
    """The events of `sid` as stored now, read without its lock (type, seq, time, data)."""
    return list(read_stored(store.backend.read_stream(sid)).events)


def test_a_fork_holds_every_turn_and_says_where_it_came_from(store: SessionStore) -> None:
    log = store.create(cwd="/w/a")
    write(log, Script().text_turn("first prompt").tool_turn().text_turn("third"))
    log.flush()  # still open, its owner lock held: a fork does not need it
    before = stored(store, log.id)
    plan = store.plan_fork(log.id)
    assert (plan.upto, plan.turn, plan.closers, plan.whole, plan.title) == (len(before), 3, [], True, "first prompt")
    header = store.fork(plan, cwd="/w/b", additional_directories=["/w/lib"])
    assert header["id"] != log.id and header["forkedFrom"] == {"sessionId": log.id, "turn": 3}
    assert (header["cwd"], header["additionalDirectories"], "wrapped" in header) == ("/w/b", ["/w/lib"], False)
    events, stored_header = load_clean(store, header["id"])
    assert events == before and stored_header == header  # the same events, times included
    assert stored(store, log.id) == before  # the original, untouched
    listed = {s["id"]: s for s in store.list()}
    assert listed[header["id"]]["title"] == "first prompt"
    assert listed[header["id"]]["additionalDirectories"] == ["/w/lib"]
    # The fork goes on as a session of its own; the original does too, apart.
    fork = store.load(header["id"]).log
    write(fork, Script(first_turn=4).text_turn("in the fork"))
    fork.close()
    write(log, Script(first_turn=4).text_turn("in the original", "other"))
    log.close()
    assert [e["data"].get("content") for e in stored(store, header["id"]) if e["type"] == "user/message"][-1] == \
        [{"type": "text", "text": "in the fork"}]
    assert stored(store, log.id)[: len(before)] == before and len(stored(store, log.id)) > len(before)


def test_a_fork_at_a_turn_ends_where_the_next_turn_starts(store: SessionStore) -> None:
    log = store.create(cwd="/w", title="named")
    script = Script().text_turn("one")
    etype, data = config_set("model", "echo", None)  # between turns 1 and 2
    script.add(etype, dict(data))
    write(log, script.text_turn("two").text_turn("three"))
    log.close()
    events = stored(store, log.id)
    second = next(e["seq"] for e in events if e["type"] == "turn/start" and e["data"]["turn"] == 2)
    at_one = store.plan_fork(log.id, at_turn=1)
    assert (at_one.upto, at_one.turn, at_one.whole) == (second, 1, False)
    header = store.fork(at_one, cwd="/w")
    assert header["forkedFrom"]["turn"] == 1 and header["title"] == "named"  # a given title is kept
    forked, _ = load_clean(store, header["id"])
    assert forked == events[:second] and forked[-1]["type"] == "config/set"
    none = store.fork(store.plan_fork(log.id, at_turn=0), cwd="/w")
    assert load_clean(store, none["id"])[0] == [] and none["forkedFrom"] == {"sessionId": log.id, "turn": 0}
    assert store.plan_fork(log.id, at_turn=3).whole
    with pytest.raises(ForkTurnError) as past:
        store.plan_fork(log.id, at_turn=4)
    assert past.value.details == {"turn": 4, "turns": 3}
    assert stored(store, log.id) == events


def test_an_interrupted_last_turn_is_closed_in_the_fork_not_in_the_original(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    write(log, Script().text_turn("done").start_turn("cut short").start_step().chunk("part")
          .message("reading", calls=("c1",)).call("c1"))
    log.close()  # nobody owns it: a crash left turn 2 open
    before = stored(store, log.id)
    plan = store.plan_fork(log.id)
    closers = closers_of(before)
    assert plan.turn == 2 and plan.closers == closers and plan.closers[-1]["data"]["reason"] == \
        {"kind": "interrupted", "cause": "crash"}
    assert plan.report.to_meta() | {"interruptedTurn": 2} == plan.report.to_meta()
    assert (plan.report.synthetic_results, plan.report.closers) == (1, len(closers))
    header = store.fork(plan, cwd="/w")
    assert load_clean(store, header["id"])[0] == before + closers
    assert stored(store, log.id) == before  # the original waits for its own load's repair
    repaired = store.load(log.id)
    assert [(e["type"], e["seq"], e["data"]) for e in repaired.log.events][len(before):] == \
        [(c["type"], c["seq"], c["data"]) for c in closers]
    repaired.log.close()


def test_a_running_turn_is_left_out_and_cannot_be_forked_at(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    write(log, Script().text_turn("one").start_turn("running").start_step().chunk("so far"))
    log.flush()  # its owner is live: the turn is running
    events = stored(store, log.id)
    start = next(e["seq"] for e in events if e["type"] == "turn/start" and e["data"]["turn"] == 2)
    plan = store.plan_fork(log.id)
    assert (plan.upto, plan.turn, plan.closers, plan.whole) == (start, 1, [], True)
    assert load_clean(store, store.fork(plan, cwd="/w")["id"])[0] == events[:start]
    with pytest.raises(ForkTurnError, match="still running"):
        store.plan_fork(log.id, at_turn=2)
    log.close()


def test_a_torn_tail_is_not_copied(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    write(log, Script().text_turn("one").text_turn("two"))
    log.close()
    events = stored(store, log.id)
    tamper.replace_event(store.backend, log.id, events[-1]["seq"], b'{"type":"turn/en')  # a torn write
    plan = store.plan_fork(log.id)  # turn 2 lost its end: open, nobody owns it
    kept = events[:-1]
    assert plan.upto == len(kept) and plan.closers == closers_of(kept)
    assert load_clean(store, store.fork(plan, cwd="/w")["id"])[0] == kept + plan.closers


def test_a_copy_that_finds_less_than_its_plan_makes_nothing(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    write(log, Script().text_turn("one"))
    log.close()
    plan = store.plan_fork(log.id)
    ids = {s["id"] for s in store.list()}
    with pytest.raises(StoreIOError, match="changed while it was forked"):
        store.fork(dataclasses.replace(plan, upto=plan.upto + 2), cwd="/w")
    assert {s["id"] for s in store.list()} == ids


def test_a_jsonl_fork_that_meets_a_delete_of_its_original_holds_what_it_planned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `session/fork` and a `session/delete` of its original at once (issue 34; the
    concurrency matrix found it): the delete lands while the fork publishes. It was a
    failed write (-32603 store_io, "could not create ...: No such file or directory");
    now the fork holds what its plan read, and a delete before the copy is not found."""
    from session.backends import jsonl

    store = SessionStore(open_backend("jsonl", tmp_path / "store"))
    log = store.create(cwd="/w")
    write(log, Script().text_turn("one"))
    log.close()
    before = stored(store, log.id)
    plan = store.plan_fork(log.id)
    real = jsonl.publish  # type: ignore[attr-defined]

    def publish_after_a_delete(*args: Any, **kw: Any) -> None:
        store.delete(log.id)
        real(*args, **kw)

    monkeypatch.setattr(jsonl, "publish", publish_after_a_delete)
    header = store.fork(plan, cwd="/w")
    monkeypatch.setattr(jsonl, "publish", real)
    assert load_clean(store, header["id"])[0] == before
    assert log.id not in {s["id"] for s in store.list()}
    with pytest.raises(SessionNotFoundError):
        store.fork(plan, cwd="/w")


def test_a_wrapped_original_keeps_its_agent_but_not_its_session(store: SessionStore) -> None:
    agent = {"command": ["agent", "--acp"], "sessionId": "theirs-1", "agentInfo": {"name": "a", "version": "1"}}
    log = store.create(cwd="/w", wrapped=agent)  # type: ignore[arg-type]
    write(log, Script().text_turn("one"))
    log.close()
    plain = store.fork(store.plan_fork(log.id), cwd="/w")
    # The wrapped agent's session is the original's: a fork never goes on in it.
    assert plain["wrapped"] == {"command": ["agent", "--acp"], "agentInfo": {"name": "a", "version": "1"}}
    given = store.fork(store.plan_fork(log.id), cwd="/w", wrapped={"command": ["b"], "sessionId": "theirs-2"})
    assert load_clean(store, given["id"])[1]["wrapped"] == {"command": ["b"], "sessionId": "theirs-2"}


_KILLED_OWNER = """
import os, signal, sys
from session import SessionStore, open_backend
from tests.support.logs import Script, write
store = SessionStore(open_backend(sys.argv[1], sys.argv[2]))
log = store.create(cwd="/w")
write(log, Script().text_turn("done").start_turn("cut short").start_step().chunk("part one")
      .chunk("part two"))
log.flush()  # streamed, not durable: SQLite keeps these in the session's tail file
print(log.id, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
@pytest.mark.integration
def test_a_fork_of_a_session_whose_owner_was_killed_mid_stream_holds_what_it_streamed(
        kind: str, tmp_path: Path) -> None:
    # SQLite's streamed events live in the tail file until a durable point, not in the
    # database: the copy takes them from there (a fork of the rows alone came up short).
    root = str(tmp_path / "store")
    done = subprocess.run([sys.executable, "-c", _KILLED_OWNER, kind, root], capture_output=True,
                          text=True, cwd=Path(__file__).parent.parent, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    sid = done.stdout.strip()
    store = SessionStore(open_backend(kind, root))
    try:
        before = stored(store, sid)
        assert [e["data"]["chunk"]["text"] for e in before if e["type"] == "assistant/chunk"][-2:] == \
            ["part one", "part two"]
        plan = store.plan_fork(sid)
        assert plan.turn == 2 and plan.closers == closers_of(before)
        assert load_clean(store, store.fork(plan, cwd="/w")["id"])[0] == before + plan.closers
    finally:
        store.close()
