"""Failing disks: a write or an fsync that fails leaves the stored log at its last
durable state (never a seq gap or half a record), the error says what happened and the
seq it rolled back to, and what came after that point is dropped, in memory and on
disk: the next write has only its own events to write, and nothing dropped shows up
later."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from session import SessionLog, SessionStore, StoreIOError, check_invariants
from session.backends import jsonl as jsonl_module
from session.backends.jsonl import JsonlBackend
from session.backends.sqlite import SqliteBackend
from session.backends.sqlite_session import SqliteSession
from session.backends.sqlite_tail import TailFile, tail_path
from session.log import FLUSH_EVENTS
from tests.support.logs import Script, clean_events, write


def eio(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.EIO, "Input/output error")


def opened(backend: Any) -> tuple[SessionStore, SessionLog]:
    """A store on the backend and a new session in it."""
    store = SessionStore(backend)
    return store, store.create(cwd="/w")


def closes_as_written(store: SessionStore, log: SessionLog) -> list[Any]:
    """Close the log: what it holds is what the store loads again; its events."""
    expected = list(log.events)
    log.close()
    assert reloaded(store, log.id) == expected
    return expected


def reloaded(store: SessionStore, sid: str) -> list[Any]:
    events = clean_events(store, sid)
    check_invariants(events, closed=True)
    return events


def test_jsonl_fsync_failure_rolls_back_and_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = JsonlBackend(tmp_path)
    store, log = opened(backend)
    write(log, Script().text_turn())
    path = backend.path_of(log.id)
    durable = path.read_bytes()
    kept = list(log.events)

    write(log, Script(first_turn=2).start_turn().start_step().chunk("a").chunk("b"))
    monkeypatch.setattr(os, "fdatasync", eio)
    with pytest.raises(StoreIOError) as err:
        log.append("step/end", {"turn": 2, "step": 1})
    durable_seq = len(Script().text_turn().items)
    assert "Input/output error" in str(err.value) and log.id in str(err.value)
    assert f"rolled back to seq {durable_seq}" in str(err.value)
    assert err.value.data()["durableSeq"] == durable_seq
    assert path.read_bytes() == durable  # back at the last durable state
    # ... and so is the log: turn 2 is gone, not kept for a retry.
    assert (log.pending, log.tracker.next_seq, log.tracker.in_turn) == (0, durable_seq, False)
    assert list(log.events) == kept

    monkeypatch.undo()
    log.sync()
    assert path.read_bytes() == durable  # nothing dropped is written later
    write(log, Script(first_turn=2).text_turn("again", "fine"))
    expected = closes_as_written(store, log)
    assert not any(e["data"].get("chunk", {}).get("text") in ("a", "b") for e in expected)


def test_jsonl_short_write_is_truncated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = JsonlBackend(tmp_path)
    store, log = opened(backend)
    path = backend.path_of(log.id)
    header_only = path.read_bytes()

    def half_then_enospc(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jsonl_module, "write_all", half_then_enospc)
    with pytest.raises(StoreIOError, match="No space left on device; rolled back to seq 0"):
        write(log, Script().text_turn())  # fails at step/end
    assert path.read_bytes() == header_only  # the half record is gone
    assert (log.pending, log.tracker.next_seq, list(log.events)) == (0, 0, [])
    monkeypatch.undo()
    write(log, Script().text_turn("second try", "works"))  # the next turn writes at once
    expected = closes_as_written(store, log)
    assert expected[1]["data"]["content"][0]["text"] == "second try"


def test_a_failed_hand_off_is_raised_to_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sender hands buffered events to the OS before it writes their updates; a
    # failure there is not the sender's to handle: the log rolls back and the turn
    # that wrote the events hears of it at its next append.
    backend = JsonlBackend(tmp_path)
    _, log = opened(backend)
    write(log, Script().text_turn())
    log.sync()
    turn = Script(first_turn=2).start_turn()
    write(log, turn)
    log.sync()  # the prompt is durable (as before an external model)
    write(log, turn.start_step().chunk("seen ").items[2:])
    durable = backend.path_of(log.id).read_bytes()
    monkeypatch.setattr(jsonl_module, "write_all", eio)
    assert log.hand_off(wait=False) is True  # no raise: the sender goes on
    assert backend.path_of(log.id).read_bytes() == durable
    assert log.tracker.in_turn and not log.tracker.step_open  # back before step/start
    with pytest.raises(StoreIOError, match="Input/output error"):
        log.append("step/start", {"turn": 2, "step": 1})
    monkeypatch.undo()
    log.append("step/start", {"turn": 2, "step": 1})  # raised once, then writes again
    log.close()


def test_sqlite_failure_drops_the_streamed_tail_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Streamed events go to the session's tail file, not into the database: a failed
    # durable commit leaves the database as it was (SQLite rolls the transaction back)
    # and the tail is cut, so nothing of the failed step is stored anywhere.
    backend = SqliteBackend(tmp_path)
    store, log = opened(backend)
    write(log, Script().text_turn())
    script = Script(first_turn=2).start_turn().start_step()
    for n in range(FLUSH_EVENTS + 5):
        script.chunk(f"{n} ")
    write(log, script)  # flushed once without sync: in the tail file, not durable
    assert log.buffered < log.pending
    tail = tail_path(tmp_path, log.id)
    assert tail.stat().st_size > 0

    real_insert = SqliteSession._insert

    def failing_insert(self: SqliteSession, db: sqlite3.Connection, batch: Any) -> None:
        real_insert(self, db, batch)
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(SqliteSession, "_insert", failing_insert)
    durable_seq = len(Script().text_turn().items)
    with pytest.raises(StoreIOError, match=f"disk I/O error; rolled back to seq {durable_seq}"):
        log.append("step/end", {"turn": 2, "step": 1})
    monkeypatch.undo()
    with sqlite3.connect(backend.path) as db:
        (rows,) = db.execute("SELECT count(*) FROM events").fetchone()
    assert rows == durable_seq == log.tracker.next_seq and log.pending == 0
    assert tail.stat().st_size == 0
    write(log, Script(first_turn=2).text_turn("again", "fine"))
    expected = list(log.events)
    log.close()
    assert not tail.exists()  # an empty tail goes with its owner
    assert reloaded(store, log.id) == expected


def test_sqlite_a_tail_that_could_not_be_cut_is_cut_before_the_next_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # If even the truncate fails, the tail keeps lines past the durable point; they are
    # cut before anything else is appended, so the rewrite never follows them.
    backend = SqliteBackend(tmp_path)
    store, log = opened(backend)
    write(log, Script().start_turn())
    log.sync()  # the prompt is durable (as before an external model)
    tail = tail_path(tmp_path, log.id)
    real_append, real_cut = TailFile.append, TailFile.cut

    def append_then_fail(self: TailFile, data: bytes) -> None:
        real_append(self, data)
        eio()

    monkeypatch.setattr(TailFile, "append", append_then_fail)
    monkeypatch.setattr(TailFile, "cut", eio)
    lost = Script()
    lost.turn = 1
    write(log, lost.start_step().chunk("lost "))
    with pytest.raises(StoreIOError, match="Input/output error; rolled back to seq 2"):
        log.flush()
    assert b"lost" in tail.read_bytes()  # the failed cut left it there
    monkeypatch.setattr(TailFile, "append", real_append)
    monkeypatch.setattr(TailFile, "cut", real_cut)
    kept = Script()
    kept.turn = 1
    write(log, kept.start_step().chunk("kept "))
    log.flush()
    assert b"lost" not in tail.read_bytes() and b"kept" in tail.read_bytes()
    write(log, kept.chunk("done").end_step().end_turn().items[2:])
    expected = list(log.events)
    log.close()
    events = reloaded(store, log.id)
    assert events == expected and "lost" not in str(events)


def _full() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = 13  # SQLITE_FULL, as SQLite sets it
    return exc


@pytest.mark.parametrize("purged", [True, False], ids=["purged-at-once", "purged-at-next-open"])
def test_sqlite_delete_on_a_full_disk_uses_the_reserve_and_purges_what_it_could_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, purged: bool
) -> None:
    # The one-transaction delete fails for space: the reserve is released, the session's
    # row goes first (it is gone for every reader), then its events a few rows a
    # transaction; the reserve is allocated again after. Events a failure leaves behind
    # are purged when the store is next opened.
    from session.backends import sqlite as sqlite_module

    backend = SqliteBackend(tmp_path)
    store = SessionStore(backend)
    doomed, kept = store.create(cwd="/w"), store.create(cwd="/w")
    for log in (doomed, kept):
        for turn in range(1, 40):
            write(log, Script(first_turn=turn).text_turn())
        log.close()
    assert backend.reserve.held
    real = SqliteBackend.transaction
    calls = {"n": 0}

    def first_fails(self: SqliteBackend, *, full: bool) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise _full()
        return real(self, full=full)

    monkeypatch.setattr(SqliteBackend, "transaction", first_fails)
    released: list[bool] = []
    real_release = backend.reserve.release
    def release() -> bool:
        released.append(real_release())
        return released[-1]

    monkeypatch.setattr(backend.reserve, "release", release)
    if not purged:
        monkeypatch.setattr(sqlite_module, "purge_events", lambda db, sid: False)  # the disk stayed full
    store.delete(doomed.id)
    monkeypatch.undo()
    assert released == [True] and backend.reserve.held  # released for the delete, then back
    assert [s["id"] for s in store.list()] == [kept.id]
    with sqlite3.connect(backend.path) as db:
        left = db.execute("SELECT count(*) FROM events WHERE session_id = ?", (doomed.id,)).fetchone()[0]
    # Purged a few rows a transaction, or (the purge "failed") left with no session to
    # show them.
    assert (left == 0) if purged else (left > 0)
    backend.close()
    reopened = SqliteBackend(tmp_path)  # purged when the store is next opened
    with sqlite3.connect(reopened.path) as db:
        counts = dict(db.execute("SELECT session_id, count(*) FROM events GROUP BY session_id").fetchall())
    assert counts == {kept.id: len(Script().text_turn().items) * 39}
    reopened.close()


def test_a_load_that_fails_lets_go_of_the_session_even_if_closing_its_stream_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 34, point 1: a failed SQLite load raised again from its stream's close (a
    # connection used from another thread), and kept the owner lock for good.
    from session.backends.memory import MemoryBackend, MemoryStream

    store = SessionStore(MemoryBackend())
    log = store.create(cwd="/w")
    write(log, Script().text_turn())
    log.close()

    def broken_blocks(self: MemoryStream) -> Any:
        raise sqlite3.ProgrammingError("the read failed")
        yield  # a generator

    def broken_close(self: MemoryStream) -> None:
        raise sqlite3.ProgrammingError("so did the close")

    with monkeypatch.context() as patched:
        patched.setattr(MemoryStream, "blocks", broken_blocks)
        patched.setattr(MemoryStream, "close", broken_close)
        with pytest.raises(sqlite3.ProgrammingError):
            store.load(log.id)
    loaded = store.load(log.id)  # not refused as locked: the failed load let it go
    assert loaded.log.id == log.id
    loaded.log.close()
