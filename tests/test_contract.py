"""The backend contract: one suite, run against memory, JSONL, SQLite (conftest's
`store` fixture is parametrized over all three) and PostgreSQL (added here: a fresh
database on the run's real server for each test)."""

from __future__ import annotations

import datetime
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from session import (
    DURABLE_TYPES,
    Backend,
    Event,
    EventDataError,
    InvalidSessionIdError,
    InvariantError,
    Owner,
    SequenceError,
    SessionClosedError,
    SessionCorruptError,
    SessionExistsError,
    SessionLockedError,
    SessionNotFoundError,
    SessionStore,
    SessionVersionError,
    StoreReader,
    check_invariants,
    derive_messages,
    open_backend,
    open_reader,
)
from session.backends.base import Encoded, StoredLog, read_stored
from session.backends.memory import MemoryBackend
from session.log import FLUSH_EVENTS, encode
from session.transcript import unanswered_calls
from tests.conftest import BACKEND_KINDS
from tests.support import tamper
from tests.support.logs import Script, clean_events, closers_of, write


@pytest.fixture(params=(*BACKEND_KINDS, "postgres"))
def backend_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend(backend_kind: str, store_dir: Path, request: pytest.FixtureRequest) -> Iterator[Backend]:
    where = request.getfixturevalue("pg_dsn") if backend_kind == "postgres" else store_dir
    b = open_backend(backend_kind, where)
    yield b
    b.close()


def strip_time(events: list[Event] | Any) -> list[tuple[str, int, dict[str, Any]]]:
    return [(e["type"], e["seq"], e["data"]) for e in events]


# --- round trip ------------------------------------------------------------------


def test_round_trip(store: SessionStore) -> None:
    log = store.create(cwd="/work/p", additional_directories=["/work/lib"])
    script = Script().text_turn("hello world").tool_turn().text_turn("again")
    written = write(log, script)
    log.close()

    loaded = store.load(log.id)
    assert loaded.log.events == written
    assert loaded.log.header == log.header
    assert loaded.log.header["version"] == 0
    assert loaded.log.header["additionalDirectories"] == ["/work/lib"]
    assert not loaded.report.repaired
    assert loaded.report.to_meta()["repaired"] is False
    check_invariants(loaded.log.events, closed=True)
    loaded.log.close()


def test_round_trip_keeps_unicode_and_odd_text(store: SessionStore) -> None:
    odd = 'line1\nline2\r\n\t"quoted" \\ back \u2028 \x00 nul 🧪 ' + "x" * 100_000
    log = store.create(cwd="/w")
    written = write(log, Script().text_turn(odd, odd))
    log.close()
    assert clean_events(store, log.id) == written


def test_empty_session_loads(store: SessionStore) -> None:
    log = store.create(cwd="/w", title="named")
    log.close()
    loaded = store.load(log.id)
    assert list(loaded.log.events) == []
    assert loaded.log.header["title"] == "named"
    assert not loaded.report.repaired
    loaded.log.close()


# --- repair of an open turn ------------------------------------------------------


def crash_with(store: SessionStore, script: Script) -> tuple[str, list[Event]]:
    """Write `script` and drop the handle without closing its turn (as a crash would,
    minus the lost buffer: close() flushes)."""
    log = store.create(cwd="/w")
    written = write(log, script)
    log.close()
    return log.id, written


def test_repair_open_turn_without_step(store: SessionStore) -> None:
    sid, written = crash_with(store, Script().text_turn().start_turn("second"))
    loaded = store.load(sid)
    closers = loaded.log.events[len(written) :]
    assert [(e["type"], e["data"]) for e in closers] == [
        ("turn/end", {"turn": 2, "reason": {"kind": "interrupted", "cause": "crash"}})
    ]
    assert closers[0]["seq"] == written[-1]["seq"] + 1
    assert closers[0]["time"] == written[-1]["time"]
    assert loaded.report.interrupted_turn == 2
    assert loaded.report.closers == 1 and loaded.report.synthetic_results == 0
    loaded.log.close()


def test_repair_open_step(store: SessionStore) -> None:
    sid, written = crash_with(store, Script().start_turn().start_step().chunk("partial "))
    loaded = store.load(sid)
    assert [e["type"] for e in loaded.log.events[len(written) :]] == ["step/end", "turn/end"]
    assert loaded.log.events[-2]["data"] == {"turn": 1, "step": 1}
    check_invariants(loaded.log.events, closed=True)
    loaded.log.close()


def test_repair_unanswered_calls_started_and_not(store: SessionStore) -> None:
    script = Script().start_turn().start_step().message("two tools", calls=("c1", "c2", "c3"))
    script.call("c1").result("c1").call("c2")  # c2 started, c3 never started
    sid, written = crash_with(store, script)
    loaded = store.load(sid)
    closers = loaded.log.events[len(written) :]
    assert [e["type"] for e in closers] == ["tool/result", "tool/result", "step/end", "turn/end"]
    c2, c3 = closers[0]["data"], closers[1]["data"]
    assert (c2["callId"], c3["callId"]) == ("c2", "c3")
    for data in (c2, c3):
        assert data["isError"] is True
        assert data["error"] == {"name": "InterruptedError", "code": "interrupted"}
        assert data["step"] == 1 and data["turn"] == 1
    assert "may have run" in c2["content"][0]["text"]
    assert "did not run" in c3["content"][0]["text"]
    assert loaded.report.synthetic_results == 2
    assert unanswered_calls(derive_messages(loaded.log.events)) == []
    check_invariants(loaded.log.events, closed=True)
    loaded.log.close()


def test_repair_leaves_calls_of_a_closed_step_alone(store: SessionStore) -> None:
    script = Script().start_turn().start_step().message("first", calls=("a1",))
    script.call("a1").result("a1").end_step()
    script.start_step().message("second", calls=("b1",)).call("b1")
    sid, written = crash_with(store, script)
    loaded = store.load(sid)
    closers = loaded.log.events[len(written) :]
    results = [e["data"]["callId"] for e in closers if e["type"] == "tool/result"]
    assert results == ["b1"]
    assert closers[0]["data"]["step"] == 2
    assert [e["data"]["callId"] for e in loaded.log.events if e["type"] == "tool/result"] == [
        "a1",
        "b1",
    ]
    loaded.log.close()


def test_repair_matches_the_pure_closers(store: SessionStore) -> None:
    script = Script().tool_turn().start_turn().start_step().message("x", calls=("z",))
    sid, written = crash_with(store, script)
    expected = closers_of(written)
    loaded = store.load(sid)
    assert loaded.log.events[len(written) :] == expected
    loaded.log.close()


def test_repair_is_durable_and_done_once(store: SessionStore) -> None:
    sid, _ = crash_with(store, Script().start_turn().start_step().chunk("a"))
    first = store.load(sid)
    repaired = list(first.log.events)
    first.log.close()
    assert clean_events(store, sid) == repaired


# --- continuation after repair ---------------------------------------------------


def test_continuation_after_repair(store: SessionStore) -> None:
    sid, _ = crash_with(store, Script().text_turn().start_turn().start_step())
    loaded = store.load(sid)
    log = loaded.log
    last = log.events[-1]
    assert last["type"] == "turn/end" and last["data"]["turn"] == 2
    more = write(log, Script(first_turn=3).text_turn("next"))
    assert more[0]["data"]["turn"] == 3
    assert more[0]["seq"] == last["seq"] + 1
    log.close()
    events = clean_events(store, sid)
    check_invariants(events, closed=True)
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[-len(more) :] == more


def test_shutdown_closers_through_the_log(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    write(log, Script().start_turn().start_step().message("m", calls=("k",)).call("k"))
    closers = log.close_interrupted()
    assert closers[-1]["data"]["reason"] == {"kind": "interrupted", "cause": "shutdown"}
    assert log.close_interrupted() == []
    assert log.pending == 0
    log.close()
    events = clean_events(store, log.id)
    assert events[-1]["data"]["reason"]["cause"] == "shutdown"


# --- rejections ------------------------------------------------------------------


def test_version_rejected(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    write(log, Script().text_turn())
    log.close()
    tamper.set_header_version(store.backend, log.id, 1)
    with pytest.raises(SessionVersionError) as err:
        store.load(log.id)
    assert log.id in str(err.value) and "version 1" in str(err.value)
    assert err.value.data()["version"] == 1
    tamper.set_header_version(store.backend, log.id, 0)
    clean_events(store, log.id)  # the failed load released the session


def test_seq_gap_in_committed_region_rejected(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    write(log, Script().text_turn().text_turn())
    log.close()
    tamper.delete_event(store.backend, log.id, 3)
    before = tamper.stored_seqs(store.backend, log.id)
    with pytest.raises(SessionCorruptError) as err:
        store.load(log.id)
    assert log.id in str(err.value)
    assert "where 3 was expected" in str(err.value)
    assert tamper.stored_seqs(store.backend, log.id) == before  # nothing cut


def test_seq_mismatch_in_committed_region_rejected(store: SessionStore) -> None:
    if store.backend.name in ("sqlite", "postgres"):
        pytest.skip("seq is the primary key in SQL stores: a mismatch is a gap (tested above)")
    log = store.create(cwd="/w")
    written = write(log, Script().text_turn().text_turn())
    log.close()
    bad = dict(written[2], seq=7)
    tamper.replace_event(store.backend, log.id, 2, _raw(bad))
    with pytest.raises(SessionCorruptError, match="seq 7 where 2 was expected"):
        store.load(log.id)


def test_seq_gap_in_tail_is_cut(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    written = write(log, Script().text_turn().start_turn().start_step().chunk("a").chunk("b"))
    log.close()
    tamper.delete_event(store.backend, log.id, len(written) - 2)
    loaded = store.load(log.id)
    assert loaded.report.torn_records == 1
    assert loaded.log.events[: len(written) - 2] == written[:-2]
    check_invariants(loaded.log.events, closed=True)
    loaded.log.close()


def test_backend_refuses_out_of_order_batch(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    log.close()
    handle, _ = store.backend.open(log.id)
    try:
        event: Event = {"type": "turn/start", "seq": 5, "time": 1,
                        "data": {"turn": 1, "trigger": {"kind": "prompt"}}}
        with pytest.raises(SequenceError, match="seq 5 where 0 was expected"):
            handle.write([encode(event)], sync=True)
        good = Encoded(dict(event, seq=0), b'{"turn":1,"trigger":{"kind":"prompt"}}')  # type: ignore[arg-type]
        handle.write([good], sync=True)
        with pytest.raises(SequenceError):
            handle.write([good], sync=True)  # the same seq twice
    finally:
        handle.close()


@pytest.mark.parametrize(
    "bad",
    [
        {1, 2},
        b"bytes",
        object(),
        datetime.datetime(2026, 1, 1),
        {1: "non-string key"},
        2**70,
    ],
    ids=["set", "bytes", "object", "datetime", "int-key", "huge-int"],
)
def test_non_json_data_refused(store: SessionStore, bad: object) -> None:
    log = store.create(cwd="/w")
    write(log, Script().start_turn())
    before = list(log.events)
    with pytest.raises(EventDataError) as err:
        log.append("step/start", {"turn": 1, "step": 1, "extra": bad})
    assert "step/start" in str(err.value)
    assert err.value.data()["eventType"] == "step/start"
    assert list(log.events) == before
    log.append("step/start", {"turn": 1, "step": 1})  # the seq was not consumed
    assert log.events[-1]["seq"] == before[-1]["seq"] + 1
    log.close()


def test_invariant_breaking_append_refused(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    with pytest.raises(InvariantError, match="outside any turn"):
        log.append("step/start", {"turn": 1, "step": 1})
    write(log, Script().start_turn())
    with pytest.raises(InvariantError):
        log.extend([("step/start", {"turn": 1, "step": 1}), ("step/start", {"turn": 1, "step": 2})])
    assert log.tracker.step_open is False  # the refused batch left no trace
    assert [e["type"] for e in log.events] == ["turn/start", "user/message"]
    log.close()
    loaded = store.load(log.id)
    assert [e["type"] for e in loaded.log.events] == ["turn/start", "user/message", "turn/end"]
    loaded.log.close()


def test_a_refused_batch_leaves_the_compactions_as_they_were(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    write(log, Script().text_turn().start_turn().start_step().compaction("k"))
    before = dict(log.tracker.compactions)
    done = Script(first_turn=2)
    done.step = 1
    done.compaction("k", "completed")
    with pytest.raises(InvariantError):  # the compaction ended, then a step that is not the next
        log.extend([*done.items, ("step/start", {"turn": 2, "step": 5})])
    assert log.tracker.compactions == before and log.tracker.unended() == ["k"]
    with pytest.raises(InvariantError, match="compactions that have not ended"):
        log.append("step/end", {"turn": 2, "step": 1})
    log.close()
    # A load ends it as crash repair ends any (and it was durable: a durability point).
    loaded = store.load(log.id)
    assert [(e["type"], e["data"].get("status")) for e in loaded.log.events[-3:]] == [
        ("context/compaction", "failed"), ("step/end", None), ("turn/end", None)]
    loaded.log.close()


# --- sessions: ids, ownership, listing, deletion -----------------------------------


def test_unknown_and_invalid_ids(store: SessionStore) -> None:
    with pytest.raises(SessionNotFoundError) as err:
        store.load("00000000-0000-4000-8000-000000000000")
    assert "00000000-0000-4000-8000-000000000000" in str(err.value)
    for bad in ["../x", "a/b", "", "x" * 500, "00000000-0000-4000-8000-00000000000A"]:
        with pytest.raises(InvalidSessionIdError):
            store.load(bad)
    with pytest.raises(InvalidSessionIdError):
        store.create(cwd="/w", session_id="../../escape")


def test_duplicate_create_refused(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    log.close()
    with pytest.raises(SessionExistsError):
        store.create(cwd="/w", session_id=log.id)


def test_one_live_owner(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    with pytest.raises(SessionLockedError, match=log.id):
        store.load(log.id)
    with pytest.raises(SessionLockedError):
        store.delete(log.id)
    log.close()
    store.load(log.id).log.close()


def test_closed_log_refuses_appends(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    log.close()
    log.close()  # idempotent
    with pytest.raises(SessionClosedError):
        log.append("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}})


def test_list_sessions(store: SessionStore) -> None:
    ids = []
    for n, cwd in enumerate(["/a", "/b", "/a"]):
        log = store.create(cwd=cwd, additional_directories=["/extra"] if n == 1 else ())
        write(log, Script().text_turn(f"prompt   number\n{n} " + "long " * 30))
        log.close()
        ids.append(log.id)
    empty = store.create(cwd="/a")
    empty.close()
    listed = store.list()
    assert {s["id"] for s in listed} == {*ids, empty.id}
    by_id = {s["id"]: s for s in listed}
    title = by_id[ids[0]]["title"]
    assert title is not None and title.startswith("prompt number 0 long")
    assert len(title) <= 80
    assert by_id[empty.id]["title"] is None
    assert by_id[ids[1]].get("additionalDirectories") == ["/extra"]
    assert all(isinstance(s["updatedAt"], int) for s in listed)
    assert [s["updatedAt"] for s in listed] == sorted((s["updatedAt"] for s in listed), reverse=True)
    assert {s["id"] for s in store.list(cwd="/a")} == {ids[0], ids[2], empty.id}


@pytest.mark.parametrize("prompt", ["resource first", "long text"])
def test_list_titles_a_first_prompt_of_any_size(store: SessionStore, prompt: str) -> None:
    """A prompt that embeds a file is one record of hundreds of KB: the title is still
    its first text, on every backend (the JSONL summary once read only 64 KB)."""
    big = "".join(f"line {n} of the attached file\n" for n in range(4000))  # ~120 KB
    if prompt == "resource first":
        content: list[dict[str, Any]] = [
            {"type": "resource", "resource": {"uri": "file:///w/big.txt", "text": big}},
            {"type": "text", "text": "explain   this\nfile"},
        ]
        title = "explain this file"
    else:
        content = [{"type": "text", "text": "  summarize " + big}]
        title = " ".join(("summarize " + big).split())[:79] + "…"
    assert len(orjson.dumps(content)) > 100_000
    log = store.create(cwd="/w")
    log.extend([("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}}),
                ("user/message", {"turn": 1, "content": content})])
    log.sync()
    log.close()
    (listed,) = store.list()
    assert listed["title"] == title


def listed_titles(store: SessionStore) -> dict[str, str | None]:
    return {s["id"]: s["title"] for s in store.list()}


def reader_titles(reader: StoreReader, sid: str) -> tuple[str | None, str | None]:
    """The title a read-only reader gives: its stream's and its peek's."""
    stream = reader.stream(sid)
    stream.close()
    return stream.title, reader.peek(sid).title


def test_list_gives_the_last_title_set(store: SessionStore, backend_kind: str, store_dir: Path,
                                       request: pytest.FixtureRequest) -> None:
    """Issue 25: a session two `/title`s named lists with the last (not its first
    prompt), in `list` and the read-only reader, live, after its close and in a store
    opened again; a session without one keeps its first prompt's title."""
    log = store.create(cwd="/w")
    write(log, Script().text_turn("first question").title_turn("Budget"))
    assert listed_titles(store)[log.id] == "Budget"  # while the owner holds it
    write(log, Script(first_turn=3).text_turn("more").title_turn("Budget review"))
    log.close()
    plain = store.create(cwd="/w")
    write(plain, Script().text_turn("untitled one"))
    plain.close()
    named = store.create(cwd="/w", title="given")  # a header's title gives way to a set one
    write(named, Script().text_turn("q").title_turn("set later"))
    named.close()
    expected = {log.id: "Budget review", plain.id: "untitled one", named.id: "set later"}
    assert listed_titles(store) == expected
    reader = store.backend.reader()
    try:
        assert reader_titles(reader, log.id) == ("Budget review", "Budget review")
        assert reader_titles(reader, named.id) == ("set later", "set later")
        assert reader_titles(reader, plain.id)[1] == "untitled one"
    finally:
        reader.close()
    loaded = store.load(log.id)  # a load changes nothing of it
    loaded.log.close()
    assert listed_titles(store) == expected
    if backend_kind == "memory":
        return  # nothing to open again
    where = request.getfixturevalue("pg_dsn") if backend_kind == "postgres" else store_dir
    store.close()
    again = open_backend(backend_kind, where)
    try:
        assert listed_titles(SessionStore(again)) == expected
    finally:
        again.close()
    fresh = open_reader(backend_kind, where)
    try:
        assert reader_titles(fresh, log.id) == ("Budget review", "Budget review")
    finally:
        fresh.close()


def test_a_fork_keeps_the_title_it_holds(store: SessionStore) -> None:
    """A fork that holds the `/title` turn lists with its title, one made before it with
    the first prompt's; a `/title` in the fork names the fork, not the original."""
    log = store.create(cwd="/w")
    write(log, Script().text_turn("first question").title_turn("Named").text_turn("third"))
    log.close()
    before = store.fork(store.plan_fork(log.id, at_turn=1), cwd="/w")["id"]
    at = store.fork(store.plan_fork(log.id, at_turn=2), cwd="/w")["id"]
    whole = store.fork(store.plan_fork(log.id), cwd="/w")["id"]
    titles = listed_titles(store)
    assert [titles[sid] for sid in (log.id, before, at, whole)] == [
        "Named", "first question", "Named", "Named"]
    loaded = store.load(whole)
    write(loaded.log, Script(first_turn=4).title_turn("The fork"))
    loaded.log.close()
    titles = listed_titles(store)
    assert (titles[whole], titles[log.id]) == ("The fork", "Named")


def test_delete(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    write(log, Script().text_turn())
    log.close()
    store.delete(log.id)
    with pytest.raises(SessionNotFoundError):
        store.load(log.id)
    with pytest.raises(SessionNotFoundError):
        store.delete(log.id)
    assert all(s["id"] != log.id for s in store.list())
    again = store.create(cwd="/w", session_id=log.id)  # the id is free again
    again.close()


# --- durability points -----------------------------------------------------------


def test_durability_points(store: SessionStore) -> None:
    assert DURABLE_TYPES == {"tool/call", "tool/permission", "context/compaction", "step/end", "turn/end"}
    log = store.create(cwd="/w")
    write(log, Script().start_turn().start_step().chunk("a").chunk("b"))
    assert log.pending == 5  # streamed events may wait in the buffer
    write(log, Script().start_turn().start_step().message("m", calls=("c", "d")).items[-1:])
    assert log.pending == 6
    log.append("tool/call", Script().start_turn().start_step().call("c").items[-1][1])
    assert log.pending == 0  # durable before the tool runs
    log.append("tool/result", {"turn": 1, "step": 1, "callId": "c", "content": [], "isError": False})
    assert log.pending == 1
    log.sync()
    assert log.pending == 0
    log.append("tool/call", Script().start_turn().start_step().call("d", pending=True).items[-1][1])
    assert log.pending == 0  # durable before the permission is asked
    log.append("tool/permission", Script().start_turn().start_step().grant("d").items[-1][1])
    assert log.pending == 0  # durable before the tool it lets run runs
    log.append("tool/result", {"turn": 1, "step": 1, "callId": "d", "content": [], "isError": False})
    assert log.pending == 1
    log.append("context/compaction", {"turn": 1, "step": 1, "compactionId": "k", "replaces": {
        "fromTurn": 1, "toTurn": 0}, "summary": [], "status": "completed"})
    assert log.pending == 0  # what the model is shown from now on: never taken back by a failed write
    log.close()


def test_long_streams_are_flushed_in_batches(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    script = Script().start_turn().start_step()
    for n in range(FLUSH_EVENTS + 10):
        script.chunk(f"w{n} ")
    write(log, script)
    assert log.buffered < FLUSH_EVENTS  # handed to the backend, not all held in memory
    assert log.pending == len(script.items)  # but not yet durable
    log.close()
    loaded = store.load(log.id)
    assert len(loaded.log.events) == len(script.items) + 2  # + step/end, turn/end closers
    loaded.log.close()


def _raw(event: dict[str, Any]) -> bytes:
    return orjson.dumps(event)


# --- the read-only open (StoreReader) ----------------------------------------------------


def stored_state(backend: Backend) -> object:
    """Everything a backend stores, to compare before and after a read. SQLite's `-shm`
    side file is left out: it is shared memory that every WAL reader may touch."""
    if isinstance(backend, MemoryBackend):
        return orjson.dumps(
            {sid: [s.header, s.records, s.updated_at, s.title] for sid, s in backend.stored.items()},
            default=lambda b: b.decode("latin-1"),
        ), orjson.dumps({k: [r.decode("latin-1") for r in v] for k, v in backend.torn.items()})
    if backend.name == "postgres":
        return tamper.pg_tables(backend)
    root = Path(backend.root)  # type: ignore[attr-defined]
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None, p.stat().st_mode)
        for p in sorted(root.rglob("*"))
        if not p.name.endswith("-shm")
    }


def read_all(reader: StoreReader, sid: str) -> StoredLog:
    return read_stored(reader.stream(sid))


def test_reader_reads_without_touching_the_store(store: SessionStore) -> None:
    closed = store.create(cwd="/w", title="kept")
    closed_events = write(closed, Script().text_turn("one").tool_turn())
    closed.close()
    torn = store.create(cwd="/w")
    write(torn, Script().text_turn("a").start_turn("b").start_step().chunk("x").chunk("y"))
    torn.close()
    tamper.replace_event(store.backend, torn.id, tamper.stored_seqs(store.backend, torn.id) - 1,
                         b'{"type":')
    before = stored_state(store.backend)
    reader = store.backend.reader()
    try:
        assert sorted(reader.ids()) == sorted([closed.id, torn.id])
        whole = read_all(reader, closed.id)
        assert strip_time(whole.events) == strip_time(closed_events) and whole.torn is None
        assert whole.header["title"] == "kept"
        stream = reader.stream(closed.id)
        stream.close()
        assert stream.title == "kept" and isinstance(stream.updated, int) and stream.where
        assert reader.peek(closed.id).header == whole.header
        lines = reader.raw(closed.id).splitlines()
        assert orjson.loads(lines[0]) == whole.header
        assert [orjson.loads(line) for line in lines[1:]] == whole.events
        assert read_all(reader, torn.id).torn is not None
        assert reader.owner(closed.id).state in ("none", "unknown")
    finally:
        reader.close()
    assert stored_state(store.backend) == before
    loaded = store.load(torn.id)  # nothing was repaired by reading
    assert loaded.report.torn_records == 1
    loaded.log.close()


def test_reader_reads_a_session_a_live_owner_holds(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    written = write(log, Script().text_turn("one").start_turn("two").start_step().chunk("so far"))
    log.flush()
    reader = store.backend.reader()
    try:
        stored = read_all(reader, log.id)
        assert strip_time(stored.events) == strip_time(written)  # the open turn, unrepaired
        owner = reader.owner(log.id)
        if os.path.exists("/proc/locks") or store.backend.name == "memory":
            assert owner == Owner("live", os.getpid())
        else:
            assert owner.state == "unknown"
    finally:
        reader.close()
        log.close()
    again = store.backend.reader()  # a reader reads the lock table once, at its first question
    try:
        assert again.owner(log.id).state in ("none", "unknown")
    finally:
        again.close()


def test_reader_reports_damage(store: SessionStore) -> None:
    log = store.create(cwd="/w")
    write(log, Script().text_turn().text_turn())
    log.close()
    reader = store.backend.reader()
    try:
        last = tamper.stored_seqs(store.backend, log.id) - 1
        tamper.replace_event(store.backend, log.id, last, b"not json")
        torn = read_all(reader, log.id).torn  # after the last turn/end: a torn tail
        assert torn is not None and torn.index == last and torn.records == 1 and torn.where
        tamper.replace_event(store.backend, log.id, 2, b"not json")
        with pytest.raises(SessionCorruptError, match="is damaged at"):
            read_all(reader, log.id)  # a later turn/end: the damage is committed
        tamper.set_header_version(store.backend, log.id, 7)
        with pytest.raises(SessionVersionError):
            reader.stream(log.id)
        assert reader.peek(log.id).header is not None  # what the header still says
        with pytest.raises(SessionNotFoundError):
            reader.stream(str(uuid.uuid4()))
        with pytest.raises(InvalidSessionIdError):
            reader.stream("../escape")
    finally:
        reader.close()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_reader_creates_no_store(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "absent"
    reader = open_reader(kind, root)
    try:
        sid = str(uuid.uuid4())
        assert reader.ids() == []
        with pytest.raises(SessionNotFoundError):
            reader.stream(sid)
        with pytest.raises(SessionNotFoundError):
            reader.raw(sid)
        assert reader.peek(sid) == (None, None, None)
        assert reader.owner(sid) == Owner("none")
    finally:
        reader.close()
    assert not root.exists()
