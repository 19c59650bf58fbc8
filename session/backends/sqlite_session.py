"""The owned side of a SQLite session: `SqliteSession` (appends, the tail, repair) and
`OwnedSqliteStream` (its rows read by the owner, which hands out the session).

A durable batch is one transaction with the tail's events before it; a streamed one
goes to the tail file (session.backends.sqlite_tail). The backend (session.backends.
sqlite) makes these; they see it only as a `Store`: its folder, its database, its
transactions.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from session.backends.base import Encoded, check_batch_seqs, event_lines
from session.backends.event_rows import Row
from session.backends.sqlite_read import SqliteStream
from session.backends.sqlite_space import is_full
from session.backends.sqlite_tail import TailFile, tail_lines_from, tail_path, tail_rows
from session.errors import StoreIOError
from session.events import Header
from session.files import OwnerLock
from session.scan import TornTail
from session.titles import first_prompt_title, last_set_title


class Store(Protocol):
    """What a session needs of its backend (session.backends.sqlite.SqliteBackend)."""

    root: Path
    path: Path

    def transaction(self, *, full: bool) -> AbstractContextManager[sqlite3.Connection]: ...

    def after_commit(self) -> None: ...

    def after_full(self) -> None: ...


class SqliteSession:
    """An owned session: streamed batches go to its tail file (session.backends.
    sqlite_tail), durable ones into the database with the tail's events, in one
    transaction; a failure cuts the tail back, which never needs space."""

    def __init__(
        self,
        backend: Store,
        session_id: str,
        lock: OwnerLock,
        next_seq: int,
        has_title: bool,
        *,
        kept: tuple[list[Row], int] = ([], 0),
        torn_from: int | None = None,
    ) -> None:
        self.session_id = session_id
        self._backend = backend
        self._lock: OwnerLock | None = lock
        self._next_seq = next_seq
        self._durable_seq = next_seq
        self._has_title = has_title
        self._tail = TailFile(tail_path(backend.root, session_id))
        # The tail's events a previous owner left that the load found good (a log that
        # ends with streamed events after its last turn/end): durable for the live log,
        # rows at the next durable commit. `_tail_kept` is their size in the tail.
        self._kept_rows, self._tail_kept = kept
        self._torn_from = torn_from  # for repair: where the tail's torn lines start
        self._streamed: list[Encoded] = []  # in the tail since the last durable point
        self._stale = False  # the tail may hold lines past `_tail_kept` (a failed cut)

    def write(self, batch: Sequence[Encoded], *, sync: bool) -> None:
        check_batch_seqs(self.session_id, batch, self._next_seq)
        try:
            if self._stale:  # a failed write could not be cut off: cut it before appending
                self._tail.cut(self._tail_kept)
                self._stale = False
            if sync:
                self._commit(batch)
            elif batch:
                self._tail.append(event_lines(batch))
                self._streamed.extend(batch)
        except (sqlite3.Error, OSError) as exc:
            self._roll_back()
            if sync and is_full(exc):
                self._backend.after_full()
            raise io_error(self.session_id, "sync the log" if sync else "write the log", exc,
                            durable_seq=self._durable_seq) from exc
        self._next_seq += len(batch)
        if sync:
            self._durable_seq = self._next_seq

    def _commit(self, batch: Sequence[Encoded]) -> None:
        """The tail's events and `batch` as rows, durably, then the tail emptied."""
        with self._backend.transaction(full=True) as db:
            if self._kept_rows:
                self._insert_rows(db, self._kept_rows)
            self._insert(db, [*self._streamed, *batch])
        self._kept_rows, self._tail_kept, self._streamed = [], 0, []
        self._backend.after_commit()
        try:
            self._tail.cut(0)
        except OSError:  # its lines are rows now (readers skip them); cut it later
            self._stale = True

    def _roll_back(self) -> None:
        """Back to the last durable point: the tail's lines since are cut (a truncate,
        which needs no space); the transaction that failed left nothing in the database."""
        self._next_seq, self._streamed = self._durable_seq, []
        try:
            self._tail.cut(self._tail_kept)
        except OSError:
            self._stale = True

    def _insert(self, db: sqlite3.Connection, batch: Sequence[Encoded]) -> None:
        db.executemany(
            "INSERT INTO events (session_id, seq, type, time, data) VALUES (?, ?, ?, ?, ?)",
            [
                (self.session_id, e.event["seq"], e.event["type"], e.event["time"], e.data_json)
                for e in batch
            ],
        )
        # The sessions row is written for the title only, not at every batch: a second
        # table in each commit doubles the WAL pages a durable turn syncs. `updatedAt`
        # is read from the last event instead (UPDATED_AT). A `/title` replaces the
        # title; the first prompt's only fills in a missing one (session_title's rule).
        named = last_set_title(item.event for item in batch)
        if named is not None:
            db.execute("UPDATE sessions SET title = ? WHERE id = ?", (named, self.session_id))
            self._has_title = True
        elif not self._has_title:
            title = next(filter(None, (first_prompt_title(item.event) for item in batch)), None)
            if title is not None:
                db.execute(
                    "UPDATE sessions SET title = coalesce(title, ?) WHERE id = ?",
                    (title, self.session_id),
                )
                self._has_title = True

    def _insert_rows(self, db: sqlite3.Connection, rows: Sequence[Row]) -> None:
        db.executemany(
            "INSERT INTO events (session_id, seq, type, time, data) VALUES (?, ?, ?, ?, ?)",
            [(self.session_id, *row) for row in rows],
        )

    def repair(self, torn: TornTail | None, closers: Sequence[Encoded]) -> str | None:
        sid = self.session_id
        kept = None
        try:
            with self._backend.transaction(full=True) as db:
                if torn is not None:
                    cut = torn.where["seq"]
                    stamp = time.time_ns() // 1_000_000
                    db.execute(
                        "INSERT INTO torn_events SELECT session_id, seq, type, time, data, ? "
                        "FROM events WHERE session_id = ? AND seq >= ?",
                        (stamp, sid, cut),
                    )
                    db.execute("DELETE FROM events WHERE session_id = ? AND seq >= ?", (sid, cut))
                    if self._torn_from is not None:  # the tail's lines from the damage on
                        start = max(cut, self._kept_rows[-1][0] + 1 if self._kept_rows else cut)
                        db.executemany(
                            "INSERT INTO torn_events VALUES (?, ?, NULL, NULL, ?, ?)",
                            [(sid, start + n, line, stamp) for n, line in
                             enumerate(tail_lines_from(self._tail.path, self._torn_from))],
                        )
                    kept = f"{self._backend.path}#torn_events"
                if self._kept_rows:
                    self._insert_rows(db, self._kept_rows)
                self._insert(db, closers)
        except sqlite3.Error as exc:
            raise io_error(sid, "repair the log", exc) from exc
        self._kept_rows, self._tail_kept = [], 0
        try:
            self._tail.cut(0)
        except OSError:
            self._stale = True
        self._next_seq = self._durable_seq = (torn.index if torn else self._next_seq) + len(closers)
        return kept

    def close(self) -> None:
        if self._lock is not None:
            # An empty tail goes; one still holding events (nothing made them durable)
            # stays for the next load, as a crash would leave it.
            with contextlib.suppress(OSError):
                if self._stale:
                    self._tail.cut(self._tail_kept)
                    self._stale = False
            self._tail.close(remove=self._tail.size() == 0)
            self._lock.release()
            self._lock = None


class OwnedSqliteStream(SqliteStream):
    """A session's rows read by its owner (`SqliteBackend.open_stream` took the lock)."""

    def __init__(self, backend: Store, header: Header, *, has_title: bool) -> None:
        super().__init__(backend.path, header, read_only=False)
        self.lock: OwnerLock | None = None
        self._backend = backend
        self._has_title = has_title

    def session(self, next_seq: int, torn: TornTail | None) -> SqliteSession:
        if self.lock is None:
            raise RuntimeError("the stream was released")
        lock, self.lock = self.lock, None
        good = torn.index if torn is not None else next_seq
        kept = tail_rows(self.tail, self.rows_next, good) if good > self.rows_next else ([], 0)
        torn_from = None  # where the tail's torn lines start, if it has any
        if torn is not None:
            torn_from = torn.where.get("tailOffset", self._tail_starts[0] if self._tail_starts else None)
        return SqliteSession(
            self._backend, self.header["id"], lock, next_seq=next_seq, has_title=self._has_title,
            kept=kept, torn_from=torn_from,
        )

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None




def io_error(sid: str, what: str, exc: BaseException, *, durable_seq: int | None = None) -> StoreIOError:
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    errno = {"errno": exc.errno} if isinstance(exc, OSError) and exc.errno else {}
    if durable_seq is None:
        return StoreIOError(f"session {sid}: could not {what}: {why}", session_id=sid, **errno)
    return StoreIOError(f"session {sid}: could not {what}: {why}; rolled back to seq {durable_seq}",
                        session_id=sid, durableSeq=durable_seq, **errno)
