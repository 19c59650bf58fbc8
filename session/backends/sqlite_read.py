"""Reading a SQLite store: the event rows as a stream of records, and the read-only open
of a store (`SqliteReader`). Nothing here writes; the owned side (the schema, appends,
repair, the lock) is in session.backends.sqlite, and the connection, damage and the
schema version both use in session.backends.sqlite_connect.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from session.backends.base import At, FileReader, SessionPeek, Stamp, peek_of
from session.backends.event_rows import as_bytes, raw_pieces, row_events
from session.backends.session_ids import session_files, validate_session_id
from session.backends.sqlite_connect import (
    SCHEMA_VERSION,
    connect,
    damage_as_corrupt,
    file_size,
    schema_version_error,
)
from session.backends.sqlite_tail import TAILS_DIR, tail_after, tail_path, tail_records
from session.errors import SessionCorruptError, SessionNotFoundError
from session.events import Event, Header
from session.files import LockTable, Owner, lock_file
from session.scan import Damage, parse_header

# A session's `updatedAt`: the time of its last event (an index seek on the events key),
# or of its creation. `sessions.updated_at` holds the creation time; stores written
# before it stopped being updated at every write still have a later time there.
UPDATED_AT = (
    "max(updated_at, coalesce((SELECT time FROM events WHERE events.session_id = sessions.id "
    "ORDER BY seq DESC LIMIT 1), 0))"
)
DB_NAME = "sessions.sqlite3"
SETTLED_NS = 2_000_000_000  # a file untouched this long has a time no later write can share


class SqliteStream:
    """A session's event rows, read through a connection of its own (a WAL reader:
    one consistent snapshot, and the backend's writer is not held up meanwhile).
    `read_only` opens that connection with `mode=ro`: it can neither create nor write
    the database."""

    BLOCK = 4096
    BLOCK_BYTES = 256 << 10
    # Filled in by SqliteReader.stream (see session.backends.base.ReadStream).
    updated = 0
    title: str | None = None
    where = ""

    def __init__(self, path: Path, header: Header, *, read_only: bool, start: int = 0) -> None:
        self.header = header
        self.path = path
        self.tail = tail_path(path.parent, header["id"])
        self._read_only = read_only
        self._start = start  # the seq of the first row read (a read from `At`)
        self._db: sqlite3.Connection | None = None
        self.rows_next = start  # the seq after the last row read: where the tail goes on
        self._records = start  # the index of the next record (rows, then tail lines): its seq
        self._tail_first: int | None = None  # the index of the tail's first record read
        self._tail_starts: list[int] = []  # the byte offset of each tail record read

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            with damage_as_corrupt(self.path, self.header["id"]):
                db = connect(self.path, read_only=self._read_only)
                try:
                    db.execute("BEGIN")  # one snapshot for blocks, locate and size_from
                except BaseException:
                    db.close()
                    raise
            self._db = db
        return self._db

    def blocks(self) -> Iterator[list[Event | Damage]]:
        with damage_as_corrupt(self.path, self.header["id"]):
            yield from self._blocks()

    def _blocks(self) -> Iterator[list[Event | Damage]]:
        yield from self._row_blocks(self._start)
        block: list[Event | Damage] = []
        for offset, record in tail_records(self.tail, self.rows_next):
            if self._tail_first is None:
                if type(record) is dict and record["seq"] > self.rows_next:
                    # The owner made these durable after our snapshot was taken and cut
                    # the tail before we read it: they are rows now, in a newer snapshot.
                    self._new_snapshot()
                    yield from self._row_blocks(self.rows_next, below=record["seq"])
                self._tail_first = self._records
            self._tail_starts.append(offset)
            block.append(record)
            if len(block) >= self.BLOCK:
                self._records += len(block)
                yield block
                block = []
        if block:
            self._records += len(block)
            yield block

    def _row_blocks(self, start: int, below: int | None = None) -> Iterator[list[Event | Damage]]:
        bound = "" if below is None else f" AND seq < {int(below)}"
        cursor = self._conn().execute(
            "SELECT seq, type, time, data FROM events WHERE session_id = ? AND seq >= ?"
            f"{bound} ORDER BY seq",
            (self.header["id"], start),
        )
        # Blocks are bounded in rows and in bytes: one tool result may be megabytes.
        block: list[tuple[int, str, int, bytes | str]] = []
        size = 0
        while rows := cursor.fetchmany(min(64, self.BLOCK)):
            block.extend(rows)
            size += sum(len(r[3] or b"") for r in rows)
            if len(block) >= self.BLOCK or size >= self.BLOCK_BYTES:
                yield self._counted(block)
                block, size = [], 0
        if block:
            yield self._counted(block)

    def _counted(self, rows: list[tuple[int, str, int, bytes | str]]) -> list[Event | Damage]:
        self._records += len(rows)
        self.rows_next = int(rows[-1][0]) + 1
        return row_events(rows)

    def _new_snapshot(self) -> None:
        db = self._conn()
        db.execute("ROLLBACK")
        db.execute("BEGIN")

    def _in_tail(self, index: int) -> int | None:
        """Which of the tail's records read record `index` is, if it is one of them."""
        if self._tail_first is None or not 0 <= index - self._tail_first < len(self._tail_starts):
            return None
        return index - self._tail_first

    def locate(self, index: int) -> dict[str, int]:
        tail = self._in_tail(index)
        if tail is not None:  # a line of the tail file: its place is its expected seq
            return {"seq": index, "tailOffset": self._tail_starts[tail]}
        with damage_as_corrupt(self.path, self.header["id"]):
            row = self._conn().execute(
                "SELECT seq FROM events WHERE session_id = ? AND seq >= ? ORDER BY seq LIMIT 1 OFFSET ?",
                (self.header["id"], self._start, index - self._start),
            ).fetchone()
        return {"seq": row[0] if row is not None else index}

    def size_from(self, index: int) -> int:
        tail_size = file_size(self.tail)
        tail = self._in_tail(index)
        if tail is not None:
            return tail_size - self._tail_starts[tail]
        with damage_as_corrupt(self.path, self.header["id"]):
            row = self._conn().execute(
                "SELECT coalesce(sum(length(data)), 0) FROM (SELECT data FROM events "
                "WHERE session_id = ? AND seq >= ? ORDER BY seq LIMIT -1 OFFSET ?)",
                (self.header["id"], self._start, index - self._start),
            ).fetchone()
        tail_from = self._tail_starts[0] if self._tail_starts else tail_size
        return int(row[0]) + tail_size - tail_from

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class SqliteReader(FileReader):
    """A SQLite store opened read-only (see session.backends.base.StoreReader): the
    database is opened with `mode=ro` (SQLite may leave its empty `-wal`/`-shm` side
    files; the database itself is not written), a missing or never-initialized database
    is an empty store, and owners are read as for JSONL."""

    name = "sqlite"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.path = Path(root) / DB_NAME
        self.locks_dir = Path(root) / "locks"
        self._db: sqlite3.Connection | None = None
        self._empty = False
        self._locks = LockTable()

    def _conn(self) -> sqlite3.Connection | None:
        if self._db is not None or self._empty:
            return self._db
        if not self.path.is_file():
            self._empty = True
            return None
        with damage_as_corrupt(self.path):
            db = connect(self.path, read_only=True)
            try:
                version = db.execute("PRAGMA user_version").fetchone()[0]
                tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            except BaseException:
                db.close()
                raise
        if version == 0 and tables == 0:  # created, never initialized: no sessions
            db.close()
            self._empty = True
            return None
        if version != SCHEMA_VERSION:
            db.close()
            raise schema_version_error(self.path, version)
        self._db = db
        return db

    def _row(self, sid: str) -> tuple[bytes, str | None, int]:
        db = self._conn()
        with damage_as_corrupt(self.path, sid):
            row = None if db is None else db.execute(
                f"SELECT header, title, {UPDATED_AT} FROM sessions WHERE id = ?", (sid,)
            ).fetchone()
        if row is None:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        return row[0], row[1], int(row[2])

    def ids(self) -> list[str]:
        db = self._conn()
        if db is None:
            return []
        with damage_as_corrupt(self.path):
            return [row[0] for row in db.execute("SELECT id FROM sessions")]

    def stream(self, session_id: str, at: At | None = None) -> SqliteStream:
        sid = validate_session_id(session_id)
        header_blob, title, updated = self._row(sid)
        header = parse_header(sid, header_blob, "the sessions row")
        stream = SqliteStream(self.path, header, read_only=True, start=at.seq if at is not None else 0)
        stream.updated, stream.where = updated, str(self.path)
        stream.title = title or header.get("title")
        return stream

    def stamps(self) -> dict[str, Stamp]:
        """(last seq, `updatedAt`) of each session: an index seek each, no log read.
        One seek for the last seq, and the row by its key (not a second seek, as
        UPDATED_AT's subquery would make): half the pages, which a fresh reader's every
        first page pays for (10,000 sessions: bench/README.md, "At scale")."""
        db = self._conn()
        if db is None:
            return {}
        with damage_as_corrupt(self.path):
            rows = db.execute(
                "SELECT s.id, coalesce(e.seq, -1), max(s.updated_at, coalesce(e.time, 0)) FROM sessions s "
                "LEFT JOIN events e ON e.session_id = s.id AND e.seq = (SELECT seq FROM events "
                "WHERE session_id = s.id ORDER BY seq DESC LIMIT 1)").fetchall()
        return {row[0]: (int(row[1]), int(row[2])) for row in rows}

    def fingerprint(self) -> str | None:
        """The database file's and its WAL's identity, size and times (a commit writes
        one or the other). None while either changed in the last SETTLED_NS: a file's
        times move in clock ticks, so a write in the same tick as the one before could
        leave all of them as they were (git's "racily clean" entries, the same
        answer). The WAL's change time is left out: SQLite, run as root, gives the WAL
        its database's owner each time a connection opens it, which moves that time
        and nothing else. The tail files are not in it: nothing in them is in a stamp."""
        parts = []
        now = time.time_ns()
        for path in (self.path, Path(f"{self.path}-wal")):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                parts.append("-")
                continue
            except OSError:
                return None
            wal = path != self.path
            if wal and st.st_size == 0:  # an empty WAL holds nothing (each reader's last
                parts.append("-")  # close may remove it, the next open make it again)
                continue
            changed = st.st_mtime_ns if wal else max(st.st_mtime_ns, st.st_ctime_ns)
            if now - changed < SETTLED_NS:
                return None
            parts.append(f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}" + ("" if wal else f":{st.st_ctime_ns}"))
        return "sqlite " + " ".join(parts)

    def unstamped(self) -> set[str]:
        """The sessions whose tail file holds streamed events (an empty one does not)."""
        return {sid for sid, st in session_files(self.path.parent / TAILS_DIR) if st.st_size}

    def peek(self, session_id: str) -> SessionPeek:
        try:
            header_blob, title, updated = self._row(session_id)
        except (SessionNotFoundError, SessionCorruptError):  # best effort: nothing to say
            return SessionPeek(None, None, None)
        return peek_of(header_blob, updated, title)

    def raw(self, session_id: str) -> bytes:
        """The stored header, then one line per event row in seq order, with the stored
        data bytes verbatim (the JSONL backend's line format), from one snapshot."""
        return b"".join(self.raw_chunks(session_id))

    def raw_chunks(self, session_id: str) -> Iterator[bytes]:
        sid = validate_session_id(session_id)
        db = self._conn()
        if db is None:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        db.execute("BEGIN")  # one snapshot, until the last piece (or the generator's end)
        try:
            header_blob = self._row(sid)[0]
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return self._raw_rows(db, sid, header_blob)

    def _raw_rows(self, db: sqlite3.Connection, sid: str, header_blob: bytes) -> Iterator[bytes]:
        try:
            yield as_bytes(header_blob) + b"\n"
            with damage_as_corrupt(self.path, sid):
                cursor = db.execute(
                    "SELECT seq, type, time, data FROM events WHERE session_id = ? ORDER BY seq",
                    (sid,),
                )
                # pieces bounded in bytes, as in blocks()
                yield from raw_pieces(lambda: cursor.fetchmany(64), SqliteStream.BLOCK_BYTES)
                after = db.execute("SELECT coalesce(max(seq) + 1, 0) FROM events WHERE session_id = ?",
                                   (sid,)).fetchone()[0]
            # then the streamed events not yet durable, as their owner wrote them
            yield from tail_after(tail_path(self.path.parent, sid), int(after), SqliteStream.BLOCK_BYTES)
        finally:
            db.execute("ROLLBACK")

    def owner(self, session_id: str) -> Owner:
        return self._locks.owner(lock_file(self.locks_dir, validate_session_id(session_id)))

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
