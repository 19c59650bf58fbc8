"""The SQLite backend: every session of a store in one WAL database.

    sessions.sqlite3        tables sessions, events (session_id, seq), torn_events
    locks/<id>.lock         the owner lock, as for JSONL (SQLite locks the whole file,
                            not one session, so ownership is ours to keep)

A batch is one transaction, the repair is one transaction. Streamed batches commit
with `synchronous=NORMAL` (they survive a killed process, not a power cut); durability
points commit with `synchronous=FULL`, which syncs the WAL and so every frame before
it. The schema version lives in `user_version`; other versions are refused. Reading
(the row stream, the read-only `SqliteReader`) is in session.backends.sqlite_read.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson

from session.backends.base import (
    BackendSession,
    Encoded,
    SessionSummary,
    StoredLog,
    changed_while_forked,
    check_batch_seqs,
    first_prompt_title,
    read_whole,
    validate_session_id,
)

# The store's file name and schema version, re-exported: tools and tests address them here.
from session.backends.sqlite_read import DB_NAME as DB_NAME
from session.backends.sqlite_read import SCHEMA_VERSION as SCHEMA_VERSION
from session.backends.sqlite_read import (
    UPDATED_AT,
    SqliteReader,
    SqliteStream,
    damage_as_corrupt,
    schema_version_error,
)
from session.errors import SessionExistsError, SessionNotFoundError, StoreIOError
from session.events import Header
from session.files import FILE_MODE, OwnerLock, lock_file, private_dir
from session.scan import TornTail, parse_header

SCHEMA = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    header BLOB NOT NULL,
    cwd TEXT NOT NULL,
    title TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    time INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE torn_events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT,
    time INTEGER,
    data BLOB,
    cut_at INTEGER NOT NULL
);
"""


class SqliteBackend:
    name = "sqlite"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = private_dir(Path(root))
        self.locks_dir = private_dir(self.root / "locks")
        self.path = self.root / DB_NAME
        if not self.path.exists():
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, FILE_MODE))
        self._mutex = threading.Lock()  # one connection, possibly used from worker threads
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            with damage_as_corrupt(self.path):  # a damaged store, as the reader says it
                self.db.execute("PRAGMA busy_timeout = 10000")
                self.db.execute("PRAGMA journal_mode = WAL")
                self.db.execute("PRAGMA synchronous = NORMAL")
                self._check_schema()
        except BaseException:
            self.db.close()
            raise

    def _check_schema(self) -> None:
        # Read and create under one write lock: two processes opening a new store at
        # once must not both decide to create it.
        with self.transaction(full=True) as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if version == 0 and tables == 0:
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                return
        if version != SCHEMA_VERSION:
            raise schema_version_error(self.path, version)

    @contextlib.contextmanager
    def transaction(self, *, full: bool) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE .. COMMIT under the mutex; FULL sync for durability points."""
        with self._mutex:
            if full:
                self.db.execute("PRAGMA synchronous = FULL")
            try:
                self.db.execute("BEGIN IMMEDIATE")
                try:
                    yield self.db
                except BaseException:
                    self.db.execute("ROLLBACK")
                    raise
                self.db.execute("COMMIT")
            finally:
                if full:
                    self.db.execute("PRAGMA synchronous = NORMAL")

    def create(self, header: Header) -> SqliteSession:
        sid = validate_session_id(header["id"])
        lock = OwnerLock.acquire(self._lock_path(sid), sid)
        try:
            with self.transaction(full=True) as db:
                _insert_session(db, header, None)
        except sqlite3.IntegrityError:
            lock.release()
            raise SessionExistsError(f"session {sid} already exists", session_id=sid) from None
        except sqlite3.Error as exc:
            lock.release()
            raise _io_error(sid, "create the session", exc) from exc
        return SqliteSession(self, sid, lock, next_seq=0, has_title=header.get("title") is not None)

    def copy(self, source_id: str, header: Header, upto: int, closers: Sequence[Encoded], *,
             title: str | None) -> None:
        # One transaction, the rows copied inside the database (their data as stored).
        sid = validate_session_id(header["id"])
        self._header(validate_session_id(source_id))  # not found: raised here
        try:
            with self.transaction(full=True) as db:
                _insert_session(db, header, title)
                copied = db.execute(
                    "INSERT INTO events (session_id, seq, type, time, data) SELECT ?, seq, type, time, data "
                    "FROM events WHERE session_id = ? AND seq < ?", (sid, source_id, upto)).rowcount
                if copied != upto:
                    raise changed_while_forked(source_id, copied, upto)
                _insert_events(db, sid, closers)
        except sqlite3.IntegrityError:
            raise SessionExistsError(f"session {sid} already exists", session_id=sid) from None
        except sqlite3.Error as exc:
            raise _io_error(sid, "fork the session", exc) from exc

    def open(self, session_id: str) -> tuple[BackendSession, StoredLog]:
        return read_whole(self.open_stream(session_id))

    def open_stream(self, session_id: str) -> OwnedSqliteStream:
        sid = validate_session_id(session_id)
        if self._row(sid) is None:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        lock = OwnerLock.acquire(self._lock_path(sid), sid)
        try:
            header, has_title = self._header(sid)  # again: deleted while we took the lock?
        except BaseException:
            lock.release()
            raise
        stream = OwnedSqliteStream(self, header, has_title=has_title)
        stream.lock = lock
        return stream

    def read_stream(self, session_id: str) -> SqliteStream:
        header, _ = self._header(validate_session_id(session_id))
        return SqliteStream(self.path, header, read_only=False)

    def _header(self, sid: str) -> tuple[Header, bool]:
        """The stored header and whether the row has a title."""
        row = self._row(sid)
        if row is None:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        return parse_header(sid, row[0], "the sessions row"), row[1] is not None

    def _row(self, sid: str) -> tuple[bytes, str | None] | None:
        with self._mutex, damage_as_corrupt(self.path, sid):
            row = self.db.execute(
                "SELECT header, title FROM sessions WHERE id = ?", (sid,)
            ).fetchone()
        return None if row is None else (row[0], row[1])

    def list_sessions(self) -> list[SessionSummary]:
        with self._mutex, damage_as_corrupt(self.path):
            rows = self.db.execute(
                f"SELECT id, cwd, title, {UPDATED_AT}, header FROM sessions"
            ).fetchall()
        out: list[SessionSummary] = []
        for sid, cwd, title, updated_at, header in rows:
            summary: SessionSummary = {
                "id": sid,
                "cwd": cwd,
                "title": title,
                "updatedAt": updated_at,
            }
            extra = orjson.loads(header).get("additionalDirectories")
            if extra:
                summary["additionalDirectories"] = list(extra)
            out.append(summary)
        return out

    def delete(self, session_id: str) -> None:
        sid = validate_session_id(session_id)
        if self._row(sid) is None:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        lock = OwnerLock.acquire(self._lock_path(sid), sid)
        try:
            with self.transaction(full=True) as db:
                db.execute("DELETE FROM events WHERE session_id = ?", (sid,))
                db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
            lock.path.unlink(missing_ok=True)
        except sqlite3.Error as exc:
            raise _io_error(sid, "delete the session", exc) from exc
        finally:
            lock.release()

    def reader(self) -> SqliteReader:
        return SqliteReader(self.root)

    def close(self) -> None:
        with self._mutex:
            self.db.close()

    def _lock_path(self, sid: str) -> Path:
        return lock_file(self.locks_dir, sid)


class SqliteSession:
    def __init__(
        self,
        backend: SqliteBackend,
        session_id: str,
        lock: OwnerLock,
        next_seq: int,
        has_title: bool,
    ) -> None:
        self.session_id = session_id
        self._backend = backend
        self._lock: OwnerLock | None = lock
        self._next_seq = next_seq
        self._durable_seq = next_seq
        self._stale = False  # rows past the durable seq may remain after a failure
        self._has_title = has_title

    def write(self, batch: Sequence[Encoded], *, sync: bool) -> None:
        check_batch_seqs(self.session_id, batch, self._next_seq)
        sid = self.session_id
        try:
            with self._backend.transaction(full=sync) as db:
                if self._stale:
                    db.execute(
                        "DELETE FROM events WHERE session_id = ? AND seq >= ?",
                        (sid, self._next_seq),
                    )
                self._insert(db, batch)
            self._stale = False
        except sqlite3.Error as exc:
            # Back to the last durable point, as the live log is: rows committed since
            # (streamed batches) go now, so no event the client is told was rolled back
            # stays on disk; if even that fails, the next write (or close) deletes them.
            self._next_seq, self._stale = self._durable_seq, True
            self._drop_stale()
            raise _io_error(sid, "sync the log" if sync else "write the log", exc,
                            durable_seq=self._durable_seq) from exc
        self._next_seq += len(batch)
        if sync:
            self._durable_seq = self._next_seq

    def _drop_stale(self) -> None:
        """Delete the rows past the durable seq a failed write left (best effort)."""
        try:
            with self._backend.transaction(full=True) as db:
                db.execute("DELETE FROM events WHERE session_id = ? AND seq >= ?",
                           (self.session_id, self._durable_seq))
        except sqlite3.Error:
            return
        self._stale = False

    def _insert(self, db: sqlite3.Connection, batch: Sequence[Encoded]) -> None:
        _insert_events(db, self.session_id, batch)
        title = None
        if not self._has_title:
            title = next(filter(None, (first_prompt_title(item.event) for item in batch)), None)
        # The sessions row is written once more, for the title, and not at every batch:
        # a second table in each commit doubles the WAL pages a durable turn syncs.
        # `updatedAt` is read from the last event instead (UPDATED_AT).
        if title is not None:
            db.execute(
                "UPDATE sessions SET title = coalesce(title, ?) WHERE id = ?",
                (title, self.session_id),
            )
            self._has_title = True

    def repair(self, torn: TornTail | None, closers: Sequence[Encoded]) -> str | None:
        sid = self.session_id
        kept = None
        try:
            with self._backend.transaction(full=True) as db:
                if torn is not None:
                    cut = torn.where["seq"]
                    db.execute(
                        "INSERT INTO torn_events SELECT session_id, seq, type, time, data, ? "
                        "FROM events WHERE session_id = ? AND seq >= ?",
                        (time.time_ns() // 1_000_000, sid, cut),
                    )
                    db.execute("DELETE FROM events WHERE session_id = ? AND seq >= ?", (sid, cut))
                    kept = f"{self._backend.path}#torn_events"
                self._insert(db, closers)
        except sqlite3.Error as exc:
            raise _io_error(sid, "repair the log", exc) from exc
        self._next_seq = self._durable_seq = (torn.index if torn else self._next_seq) + len(closers)
        return kept

    def close(self) -> None:
        if self._lock is not None:
            if self._stale:
                self._drop_stale()
            self._lock.release()
            self._lock = None


class OwnedSqliteStream(SqliteStream):
    """A session's rows read by its owner (`SqliteBackend.open_stream` took the lock)."""

    def __init__(self, backend: SqliteBackend, header: Header, *, has_title: bool) -> None:
        super().__init__(backend.path, header, read_only=False)
        self.lock: OwnerLock | None = None
        self._backend = backend
        self._has_title = has_title

    def session(self, next_seq: int, torn: TornTail | None) -> SqliteSession:
        if self.lock is None:
            raise RuntimeError("the stream was released")
        lock, self.lock = self.lock, None
        return SqliteSession(
            self._backend, self.header["id"], lock, next_seq=next_seq, has_title=self._has_title
        )

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None




def _insert_session(db: sqlite3.Connection, header: Header, title: str | None) -> None:
    db.execute("INSERT INTO sessions (id, header, cwd, title, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
               (header["id"], orjson.dumps(header), header["cwd"], header.get("title", title),
                header["createdAt"], header["createdAt"]))


def _insert_events(db: sqlite3.Connection, sid: str, batch: Sequence[Encoded]) -> None:
    db.executemany("INSERT INTO events (session_id, seq, type, time, data) VALUES (?, ?, ?, ?, ?)",
                   [(sid, e.event["seq"], e.event["type"], e.event["time"], e.data_json) for e in batch])


def _io_error(sid: str, what: str, exc: BaseException, *, durable_seq: int | None = None) -> StoreIOError:
    if durable_seq is None:
        return StoreIOError(f"session {sid}: could not {what}: {exc}", session_id=sid)
    return StoreIOError(f"session {sid}: could not {what}: {exc}; rolled back to seq {durable_seq}",
                        session_id=sid, durableSeq=durable_seq)
