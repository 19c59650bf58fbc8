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
    check_batch_seqs,
    event_line,
    read_whole,
    title_from_content,
    validate_session_id,
)
from session.backends.event_rows import Row

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
from session.backends.sqlite_space import (
    PAGE,
    Reserve,
    checkpoint,
    give_back,
    is_full,
    orphan_ids,
    purge_events,
)
from session.backends.sqlite_tail import TailFile, tail_lines_from, tail_path, tail_rows
from session.errors import (
    SessionExistsError,
    SessionNotFoundError,
    StoreIOError,
    StoreUnavailableError,
)
from session.events import USER_MESSAGE, Header
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
                # Before the first table: a new store gives freed pages back to the disk
                # (session.backends.sqlite_space); an existing one keeps its setting
                # (and is not written to: the pragma writes even when nothing changes).
                if self.db.execute("PRAGMA page_count").fetchone()[0] == 0:
                    self.db.execute("PRAGMA auto_vacuum = INCREMENTAL")
                self.db.execute("PRAGMA journal_mode = WAL")
                self.db.execute("PRAGMA synchronous = NORMAL")
                # Freed pages are not written again (Debian builds SQLite with secure
                # delete on): a delete then costs a few WAL pages, not the session's size.
                self.db.execute("PRAGMA secure_delete = FAST")
                self._check_schema()
        except sqlite3.Error as exc:  # not damage (that is SessionCorruptError): the disk
            self.db.close()
            raise StoreUnavailableError(f"the session store {self.root} cannot be opened: {exc}") from exc
        except BaseException:
            self.db.close()
            raise
        self.reserve = Reserve(self.root / f"{DB_NAME}-reserve")
        self.reserve.restore()
        # The WAL is checkpointed before it outgrows half the reserve, and cut back to
        # the reserve's size when it restarts: on a full disk, what a checkpoint must
        # still copy into the database file fits in the reserve (sqlite_space).
        self.db.execute(f"PRAGMA wal_autocheckpoint = {max(self.reserve.size // 2 // PAGE, 4)}")
        self.db.execute(f"PRAGMA journal_size_limit = {self.reserve.size}")
        with self._mutex:
            for orphan in orphan_ids(self.db):  # a delete on a full disk left its events
                purge_events(self.db, orphan)

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
                    self.db.execute("COMMIT")
                except BaseException:
                    self._abandon()
                    raise
            finally:
                if full:
                    with contextlib.suppress(sqlite3.Error):  # the failure, not this, is news
                        self.db.execute("PRAGMA synchronous = NORMAL")

    def _abandon(self) -> None:
        """Roll back a transaction that failed. SQLite may have rolled it back itself
        (a full disk or an I/O error during the commit): a ROLLBACK then fails with "no
        transaction is active", which would hide the real cause, so it is asked first."""
        if self.db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")

    def create(self, header: Header) -> SqliteSession:
        sid = validate_session_id(header["id"])
        lock = OwnerLock.acquire(self._lock_path(sid), sid)
        try:
            with self.transaction(full=True) as db:
                # Rows a delete on a full disk could not purge yet must not meet this id.
                db.execute("DELETE FROM events WHERE session_id = ?", (sid,))
                db.execute(
                    "INSERT INTO sessions (id, header, cwd, title, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        sid,
                        orjson.dumps(header),
                        header["cwd"],
                        header.get("title"),
                        header["createdAt"],
                        header["createdAt"],
                    ),
                )
        except sqlite3.IntegrityError:
            lock.release()
            raise SessionExistsError(f"session {sid} already exists", session_id=sid) from None
        except sqlite3.Error as exc:
            lock.discard()  # the session was never made: no lock file of it stays
            raise _io_error(sid, "create the session", exc) from exc
        return SqliteSession(self, sid, lock, next_seq=0, has_title=header.get("title") is not None)

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
            try:
                with self.transaction(full=True) as db:
                    db.execute("DELETE FROM events WHERE session_id = ?", (sid,))
                    db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
            except sqlite3.Error as exc:
                if not is_full(exc):
                    raise _io_error(sid, "delete the session", exc) from exc
                self._delete_on_full_disk(sid)
            TailFile(tail_path(self.root, sid)).close(remove=True)
            lock.path.unlink(missing_ok=True)
        finally:
            lock.release()
        with self._mutex:
            give_back(self.db)
        self.reserve.restore()

    def _delete_on_full_disk(self, sid: str) -> None:
        """With the reserve's room: the session's row first (it is gone for every
        reader), then its events a few rows a transaction (what a failure leaves is
        purged when the store is next opened)."""
        self.reserve.release()
        try:
            with self.transaction(full=True) as db:
                db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
        except sqlite3.Error as exc:
            raise _io_error(sid, "delete the session", exc) from exc
        with self._mutex:
            purge_events(self.db, sid)

    def after_full(self) -> None:
        """A write failed for want of space: give the WAL's frames of the failed
        transaction back to the disk (the session's tail needs the disk, not the WAL)."""
        with self._mutex:
            checkpoint(self.db, "TRUNCATE")

    def reader(self) -> SqliteReader:
        return SqliteReader(self.root)

    def close(self) -> None:
        with self._mutex:
            self.db.close()

    def _lock_path(self, sid: str) -> Path:
        return lock_file(self.locks_dir, sid)


class SqliteSession:
    """An owned session: streamed batches go to its tail file (session.backends.
    sqlite_tail), durable ones into the database with the tail's events, in one
    transaction; a failure cuts the tail back, which never needs space."""

    def __init__(
        self,
        backend: SqliteBackend,
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
                self._tail.append(b"".join(map(event_line, batch)))
                self._streamed.extend(batch)
        except (sqlite3.Error, OSError) as exc:
            self._roll_back()
            if sync and is_full(exc):
                self._backend.after_full()
            raise _io_error(self.session_id, "sync the log" if sync else "write the log", exc,
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
        title = None
        if not self._has_title:
            for item in batch:
                if item.event["type"] == USER_MESSAGE:
                    title = title_from_content(item.event["data"].get("content"))
                    break
        # The sessions row is written once more, for the title, and not at every batch:
        # a second table in each commit doubles the WAL pages a durable turn syncs.
        # `updatedAt` is read from the last event instead (UPDATED_AT).
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
            raise _io_error(sid, "repair the log", exc) from exc
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

    def __init__(self, backend: SqliteBackend, header: Header, *, has_title: bool) -> None:
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




def _io_error(sid: str, what: str, exc: BaseException, *, durable_seq: int | None = None) -> StoreIOError:
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    errno = {"errno": exc.errno} if isinstance(exc, OSError) and exc.errno else {}
    if durable_seq is None:
        return StoreIOError(f"session {sid}: could not {what}: {why}", session_id=sid, **errno)
    return StoreIOError(f"session {sid}: could not {what}: {why}; rolled back to seq {durable_seq}",
                        session_id=sid, durableSeq=durable_seq, **errno)
