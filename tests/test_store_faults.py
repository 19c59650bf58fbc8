"""Failing disks: a write or an fsync that fails leaves the stored log at its last
durable state (never a seq gap or half a record), the error says what happened, and a
retry writes everything that was pending."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from session import SessionStore, StoreIOError, check_invariants
from session.backends import jsonl as jsonl_module
from session.backends.jsonl import JsonlBackend
from session.backends.sqlite import SqliteBackend, SqliteSession
from session.log import FLUSH_EVENTS
from tests.support.logs import Script, write


def eio(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.EIO, "Input/output error")


def reloaded(store: SessionStore, sid: str) -> list[Any]:
    loaded = store.load(sid)
    assert not loaded.report.repaired, loaded.report
    events = list(loaded.log.events)
    loaded.log.close()
    check_invariants(events, closed=True)
    return events


def test_jsonl_fsync_failure_rolls_back_and_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = JsonlBackend(tmp_path)
    store = SessionStore(backend)
    log = store.create(cwd="/w")
    write(log, Script().text_turn())
    path = backend.path_of(log.id)
    durable = path.read_bytes()

    write(log, Script(first_turn=2).start_turn().start_step().chunk("a").chunk("b"))
    monkeypatch.setattr(os, "fdatasync", eio)
    with pytest.raises(StoreIOError) as err:
        log.append("step/end", {"turn": 2, "step": 1})
    assert "Input/output error" in str(err.value) and log.id in str(err.value)
    assert err.value.data()["durableSeq"] == len(Script().text_turn().items)
    assert path.read_bytes() == durable  # back at the last durable state
    assert log.pending == 6

    monkeypatch.undo()
    log.sync()  # the retry
    assert log.pending == 0
    log.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
    expected = list(log.events)
    log.close()
    assert reloaded(store, log.id) == expected


def test_jsonl_short_write_is_truncated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = JsonlBackend(tmp_path)
    store = SessionStore(backend)
    log = store.create(cwd="/w")
    path = backend.path_of(log.id)
    header_only = path.read_bytes()

    def half_then_enospc(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jsonl_module, "write_all", half_then_enospc)
    with pytest.raises(StoreIOError, match="No space left on device"):
        write(log, Script().text_turn())  # fails at step/end
    assert path.read_bytes() == header_only  # the half record is gone
    monkeypatch.undo()
    log.sync()
    write(log, Script().text_turn().items[-1:])  # turn/end
    expected = list(log.events)
    log.close()
    assert reloaded(store, log.id) == expected


def test_sqlite_failure_drops_unsynced_rows_and_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = SqliteBackend(tmp_path)
    store = SessionStore(backend)
    log = store.create(cwd="/w")
    write(log, Script().text_turn())
    script = Script(first_turn=2).start_turn().start_step()
    for n in range(FLUSH_EVENTS + 5):
        script.chunk(f"{n} ")
    write(log, script)  # flushed once without sync: rows committed, not durable
    assert log.buffered < log.pending

    real_insert = SqliteSession._insert

    def failing_insert(self: SqliteSession, db: sqlite3.Connection, batch: Any) -> None:
        real_insert(self, db, batch)
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(SqliteSession, "_insert", failing_insert)
    with pytest.raises(StoreIOError, match="disk I/O error"):
        log.append("step/end", {"turn": 2, "step": 1})
    monkeypatch.undo()
    log.sync()
    log.append("turn/end", {"turn": 2, "reason": {"kind": "completed"}})
    expected = list(log.events)
    log.close()
    assert reloaded(store, log.id) == expected


def test_sqlite_rows_left_by_a_failure_are_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failure after an unsynced flush leaves committed rows past the durable seq;
    # the rewrite must replace them, not collide with them.
    backend = SqliteBackend(tmp_path)
    store = SessionStore(backend)
    log = store.create(cwd="/w")
    script = Script().start_turn().start_step()
    for n in range(FLUSH_EVENTS):
        script.chunk(f"{n} ")
    write(log, script)
    with sqlite3.connect(backend.path) as db:
        (rows,) = db.execute("SELECT count(*) FROM events").fetchone()
    assert rows > 0

    calls = {"n": 0}
    real_insert = SqliteSession._insert

    def fail_once(self: SqliteSession, db: sqlite3.Connection, batch: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise sqlite3.OperationalError("database or disk is full")
        real_insert(self, db, batch)

    monkeypatch.setattr(SqliteSession, "_insert", fail_once)
    with pytest.raises(StoreIOError):
        log.append("step/end", {"turn": 1, "step": 1})
    log.sync()
    log.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    expected = list(log.events)
    log.close()
    assert reloaded(store, log.id) == expected
