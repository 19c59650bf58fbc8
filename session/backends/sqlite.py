"""The SQLite backend: every session of a store in one WAL database.

    sessions.sqlite3          tables sessions, events (session_id, seq), torn_events
    sessions.sqlite3-reserve  space kept for a full disk (session.backends.sqlite_space)
    tails/<id>.jsonl          a session's streamed events since its last durable point
                              (session.backends.sqlite_tail)
    locks/<id>.lock           the owner lock, as for JSONL (SQLite locks the whole file,
                              not one session, so ownership is ours to keep)

The database holds durable points only: a durable batch is one transaction (with the
tail's events before it) committed with `synchronous=FULL`, which syncs the WAL and so
every frame before it; streamed batches go to the tail file, where they survive a
killed process (not a power cut) and a failure undoes them with a truncate. The
repair is one transaction. The schema version lives in `user_version`; other versions
are refused. The owned session is in session.backends.sqlite_session; reading (the row
stream, the read-only `SqliteReader`) in session.backends.sqlite_read; connecting, damage
and the schema version in session.backends.sqlite_connect.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson

from session.backends.base import (
    BackendSession,
    Encoded,
    SessionSummary,
    StoredLog,
    changed_while_forked,
    changed_while_imported,
    read_whole,
)
from session.backends.session_ids import validate_session_id

# The store's schema version and file name, re-exported: tools and tests address them here.
from session.backends.sqlite_connect import SCHEMA_VERSION as SCHEMA_VERSION
from session.backends.sqlite_connect import damage_as_corrupt, schema_version_error
from session.backends.sqlite_read import DB_NAME as DB_NAME
from session.backends.sqlite_read import UPDATED_AT, SqliteReader, SqliteStream
from session.backends.sqlite_session import OwnedSqliteStream, SqliteSession, io_error
from session.backends.sqlite_space import (
    PAGE,
    Reserve,
    checkpoint,
    give_back,
    is_full,
    orphan_ids,
    purge_events,
)
from session.backends.sqlite_tail import TailFile, tail_path, tail_rows
from session.errors import (
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from session.events import Header
from session.files import FILE_MODE, OwnerLock, lock_file, private_dir
from session.scan import parse_header

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
        self.reserve = Reserve(self.root / f"{DB_NAME}-reserve")
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
                _insert_session(db, header, None)
        except sqlite3.IntegrityError:
            lock.release()
            raise SessionExistsError(f"session {sid} already exists", session_id=sid) from None
        except sqlite3.Error as exc:
            lock.discard()  # the session was never made: no lock file of it stays
            raise io_error(sid, "create the session", exc) from exc
        return SqliteSession(self, sid, lock, next_seq=0, has_title=header.get("title") is not None)

    def copy(self, source_id: str, header: Header, upto: int, closers: Sequence[Encoded], *,
             title: str | None) -> None:
        # One transaction: the durable rows copied inside the database (their data as
        # stored), then the events the source's tail file holds past them (a session
        # whose owner died mid-turn streamed them there, not into the database).
        sid = validate_session_id(header["id"])
        self._header(validate_session_id(source_id))  # not found: raised here
        try:
            with self.transaction(full=True) as db:
                _insert_session(db, header, title)
                copied = db.execute(
                    "INSERT INTO events (session_id, seq, type, time, data) SELECT ?, seq, type, time, data "
                    "FROM events WHERE session_id = ? AND seq < ?", (sid, source_id, upto)).rowcount
                if copied < upto:
                    rows, _ = tail_rows(tail_path(self.root, source_id), copied, upto)
                    db.executemany(
                        "INSERT INTO events (session_id, seq, type, time, data) VALUES (?, ?, ?, ?, ?)",
                        [(sid, *row) for row in rows])
                    copied += len(rows)
                if copied != upto:
                    raise changed_while_forked(source_id, copied, upto)
                _insert_events(db, sid, closers)
        except sqlite3.IntegrityError:
            raise SessionExistsError(f"session {sid} already exists", session_id=sid) from None
        except sqlite3.Error as exc:
            raise io_error(sid, "fork the session", exc) from exc

    def publish(self, header: Header, records: Sequence[Encoded], *, title: str | None,
                after: int | None = None) -> None:
        # One transaction, as a fork's copy: the session whole or not at all. An append
        # takes the owner lock, and finds the session holding exactly `after` events
        # (its tail file none past the database's rows: nobody continued it unsynced).
        sid = validate_session_id(header["id"])
        if after is None:
            try:
                with self.transaction(full=True) as db:
                    db.execute("DELETE FROM events WHERE session_id = ?", (sid,))  # a purge left behind
                    _insert_session(db, header, title)
                    _insert_events(db, sid, records)
            except sqlite3.IntegrityError:
                raise SessionExistsError(f"session {sid} already exists", session_id=sid) from None
            except sqlite3.Error as exc:
                raise io_error(sid, "import the session", exc) from exc
            return
        lock = self._own(sid)
        try:
            with self.transaction(full=True) as db:
                found = db.execute("SELECT count(*) FROM events WHERE session_id = ?", (sid,)).fetchone()[0]
                found += len(tail_rows(tail_path(self.root, sid), found, found + 1)[0])
                if found != after:
                    raise changed_while_imported(sid, found, after)
                _insert_events(db, sid, records)
        except sqlite3.Error as exc:
            raise io_error(sid, "import the session", exc) from exc
        finally:
            lock.release()

    def open(self, session_id: str) -> tuple[BackendSession, StoredLog]:
        return read_whole(self.open_stream(session_id))

    def open_stream(self, session_id: str) -> OwnedSqliteStream:
        sid = validate_session_id(session_id)
        lock = self._own(sid)
        try:
            header, has_title = self._header(sid)  # again: deleted while we took the lock?
        except BaseException:
            lock.release()
            raise
        stream = OwnedSqliteStream(self, header, has_title=has_title)
        stream.lock = lock
        return stream

    def _own(self, sid: str) -> OwnerLock:
        """The live owner's lock of the stored session `sid` (open and delete take it)."""
        if self._row(sid) is None:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        return OwnerLock.acquire(self._lock_path(sid), sid)

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
        lock = self._own(sid)
        try:
            try:
                with self.transaction(full=True) as db:
                    db.execute("DELETE FROM events WHERE session_id = ?", (sid,))
                    db.execute("DELETE FROM sessions WHERE id = ?", (sid,))
            except sqlite3.Error as exc:
                if not is_full(exc):
                    raise io_error(sid, "delete the session", exc) from exc
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
            raise io_error(sid, "delete the session", exc) from exc
        with self._mutex:
            purge_events(self.db, sid)

    def after_commit(self) -> None:
        """A session's durable point was written: the disk had room, so may the reserve
        have, if it is missing. Not at every transaction: a delete on a full disk,
        which released it, must keep the room for its purge."""
        self.reserve.keep()

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



def _insert_session(db: sqlite3.Connection, header: Header, title: str | None) -> None:
    db.execute("INSERT INTO sessions (id, header, cwd, title, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
               (header["id"], orjson.dumps(header), header["cwd"],
                title if title is not None else header.get("title"),
                header["createdAt"], header["createdAt"]))


def _insert_events(db: sqlite3.Connection, sid: str, batch: Sequence[Encoded]) -> None:
    db.executemany("INSERT INTO events (session_id, seq, type, time, data) VALUES (?, ?, ?, ?, ?)",
                   [(sid, e.event["seq"], e.event["type"], e.event["time"], e.data_json) for e in batch])
