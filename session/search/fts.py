"""The search index of a file store (JSONL or SQLite): one SQLite database of its own,
`INDEX/search.sqlite3` (by default in the store's folder: docs/search.md), with the
texts in an FTS5 table. A file of its own, not tables in the store's database: the
store's schema is versioned and its one writer is the agents', whose commits must
never wait on an indexer, and a JSONL store has no database at all.

    meta      the index's format and the store it indexes
    sessions  one row per session: its facts, its stamp, where its reading stopped
    turns     one row per turn: model, state, tokens, reported cost
    docs      one row per indexed text (or piece of one): its turn, step, kind, call; its
              id in the order of its turn's start (`_next_id`: equal scores newest first)
    texts     FTS5 (unicode61, no diacritics folded), rowid = docs.id

One indexer at a time writes it (an flock on `search.sqlite3.lock`, see `lock`);
searches read it meanwhile (WAL; a search's query is session.search.fts_search's). A file SQLite finds damaged, of another format or of
another store is deleted and made again: the index is only ever a copy of the logs.

A full disk: a write that fails for want of space (or on a read-only or failing disk)
is rolled back and raised as `IndexUnwritable`. Opening the file in WAL mode needs room
for its `-shm` (SQLITE_IOERR_SHMSIZE on a full tmpfs), so where that fails, the file is
opened read-only and immutable (no `-shm`, no lock; what the last checkpoint holds) to
answer searches, and every write is `IndexUnwritable`; the next `lock` (the next pass)
tries the file writable again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from session.backends.sqlite_connect import is_damage
from session.errors import SearchIndexError
from session.files import FILE_MODE, private_dir
from session.search.base import (
    FORMAT,
    Changes,
    Feed,
    Filters,
    Hit,
    IndexDamaged,
    IndexUnwritable,
    SessionRow,
    StatsRow,
)
from session.search.fts_search import ID_SLOTS, best_hits, least_id, narrowing
from session.search.query import Query
from session.search.sql import (
    RELINK_ROUNDS,
    SESSION_COLUMNS,
    TURN_COLUMNS,
    doc_values,
    open_turns_query,
    relink_sql,
    session_of,
    session_values,
    stats_query,
    stats_rows,
    turn_values,
)

SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE sessions (id TEXT PRIMARY KEY, created INTEGER, cwd TEXT, agent TEXT, title TEXT,
    stamp TEXT, at_seq INTEGER, at_offset INTEGER, at_time INTEGER, at_turn INTEGER, cost REAL,
    currency TEXT, damaged TEXT, header TEXT, checked INTEGER, fork_of TEXT, fork_turn INTEGER) WITHOUT ROWID;
CREATE INDEX sessions_forks ON sessions (fork_of) WHERE fork_of IS NOT NULL;
CREATE TABLE turns (session_id TEXT NOT NULL, turn INTEGER NOT NULL, started INTEGER, ended INTEGER,
    model TEXT, mode TEXT, state TEXT, reason TEXT, input INTEGER, output INTEGER, cache_read INTEGER,
    cache_write INTEGER, reasoning INTEGER, steps INTEGER, tools INTEGER, tool_errors INTEGER,
    cost REAL, currency TEXT, kind TEXT, copied INTEGER, origin TEXT, PRIMARY KEY (session_id, turn)) WITHOUT ROWID;
CREATE INDEX turns_started ON turns (started);
CREATE INDEX turns_origin ON turns (origin) WHERE origin IS NOT NULL;
CREATE TABLE docs (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, turn INTEGER NOT NULL,
    step INTEGER, kind TEXT, ref TEXT);
CREATE INDEX docs_turn ON docs (session_id, turn);
CREATE VIRTUAL TABLE texts USING fts5(body, tokenize = 'unicode61 remove_diacritics 0');
INSERT INTO meta VALUES ('format', '{FORMAT}');
"""
_TABLES = frozenset({"meta", "sessions", "turns", "docs", "texts"})


def _next_id(db: sqlite3.Connection, started: int) -> int:
    """A new text's id, in the order of its turn's start, so that the texts' own order
    (FTS5's rowid, no join) puts the newest first among equal scores: the next free id
    of the turn's millisecond, else (65,536 texts of one millisecond) the next of all."""
    base = least_id(started)
    (last,) = db.execute("SELECT max(id) FROM docs WHERE id >= ? AND id < ?", (base, base + ID_SLOTS)).fetchone()
    if last is None:
        return base
    if last + 1 < base + ID_SLOTS:
        return int(last) + 1
    (top,) = db.execute("SELECT max(id) FROM docs").fetchone()
    return int(top) + 1


@contextlib.contextmanager
def damage_caught() -> Iterator[None]:
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise IndexDamaged(str(exc)) from exc
        raise


# SQLite's primary codes of a write the disk refused: SQLITE_READONLY, SQLITE_IOERR,
# SQLITE_FULL, SQLITE_CANTOPEN (a -wal or -shm it cannot make).
_UNWRITABLE = frozenset({8, 10, 13, 14})


@contextlib.contextmanager
def space_caught(path: Path) -> Iterator[None]:
    """A write the disk refused as IndexUnwritable, saying why: SQLite's words, and the
    disk's state when it is full (a failed `-shm` is only "disk I/O error")."""
    try:
        yield
    except (sqlite3.OperationalError, OSError) as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(exc, sqlite3.OperationalError) and (code is None or code & 0xFF not in _UNWRITABLE):
            raise
        if isinstance(exc, OSError) and exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO):
            raise
        why = str(exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)
        with contextlib.suppress(OSError):
            if os.statvfs(path.parent).f_bavail == 0 and "full" not in why and "space" not in why:
                why += f": {os.strerror(errno.ENOSPC)}"
        raise IndexUnwritable(why) from exc


class FtsIndex:
    """The index file at `path`, of the store `identity` names (its backend and
    location: an index copied from another store is not trusted)."""

    def __init__(self, path: Path, identity: str) -> None:
        self.path = path
        self.where = str(path)
        self.identity = identity
        self._db: sqlite3.Connection | None = None
        self._lock: int | None = None
        self.rebuilt: str | None = None  # why the file was made again, if it was
        self.unwritable: str | None = None  # why the file is open read-only (a full disk)

    # --- the file ------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                try:
                    self._db = self._open()
                except IndexDamaged as exc:
                    self.rebuild(f"it was damaged ({exc})")
                    self._db = self._open()
            except IndexUnwritable as exc:
                self._db = self._open_read_only(str(exc))
        return self._db

    def _open_read_only(self, why: str) -> sqlite3.Connection:
        """The file as it is, to read, where it cannot be opened to write (see the
        module): SearchIndexError if there is nothing of this store's to read."""
        cannot = SearchIndexError(f"cannot open the search index {self.path}: {why}; give another place "
                                  "with --index FILE")
        if not self.path.is_file():
            raise cannot
        db = sqlite3.connect(f"{self.path.as_uri()}?mode=ro&immutable=1", uri=True, check_same_thread=False)
        try:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.Error:
            db.close()
            raise cannot from None
        if meta.get("format") != FORMAT or meta.get("store") != self.identity:
            db.close()
            raise cannot
        self.unwritable = why
        return db

    def _open(self) -> sqlite3.Connection:
        try:
            private_dir(self.path.parent)
            if not self.path.exists():
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, FILE_MODE))
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.OperationalError) as exc:
            raise SearchIndexError(f"cannot open the search index {self.path}: {exc}; give another "
                                   "place with --index FILE") from None
        try:
            with damage_caught(), space_caught(self.path):
                db.execute("PRAGMA busy_timeout = 10000")
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")  # a copy: a power cut costs a rebuild
                tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if not tables:
                    db.executescript(SCHEMA)
                    db.execute("INSERT INTO meta VALUES ('store', ?)", (self.identity,))
                    return db
                meta = dict(db.execute("SELECT key, value FROM meta").fetchall()) if "meta" in tables else {}
        except BaseException:
            db.close()
            raise
        if not _TABLES <= tables or meta.get("format") != FORMAT or meta.get("store") != self.identity:
            db.close()
            why = ("it is of another format" if meta.get("format") != FORMAT else
                   "it indexes another store" if meta.get("store") not in (None, self.identity) else
                   "its tables are not all there")
            self.rebuild(why)
            return self._open()
        return db

    def rebuild(self, why: str) -> None:
        """Delete the file (its WAL, its index) so that the next use makes it again."""
        if self._db is not None:
            self._db.close()
            self._db = None
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}{suffix}")
        self.rebuilt = why

    def lock(self, wait: float) -> bool:
        """Be the one indexer, waiting at most `wait` seconds for another to finish.
        An index open read-only (a full disk) is opened again, to write if it can."""
        if self.unwritable is not None and self._db is not None:
            self._db.close()
            self._db, self.unwritable = None, None
        if self._lock is not None:
            return True
        try:
            private_dir(self.path.parent)
            fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            raise SearchIndexError(f"cannot open the search index {self.path}: {exc}; give another "
                                   "place with --index FILE") from None
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    return False
                time.sleep(0.05)
                continue
            self._lock = fd
            return True

    def unlock(self) -> None:
        fd, self._lock = self._lock, None
        if fd is not None:
            os.close(fd)  # the flock goes with it

    # --- writing -------------------------------------------------------------------

    def sessions(self) -> dict[str, SessionRow]:
        with damage_caught():
            rows = self._conn().execute(f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions").fetchall()
        return {row[0]: session_of(row) for row in rows}

    def stamps(self) -> dict[str, str]:
        with damage_caught():
            rows = self._conn().execute("SELECT id, stamp FROM sessions").fetchall()
        return dict(rows)

    def unreadable(self) -> dict[str, tuple[str, str]]:
        with damage_caught():
            rows = self._conn().execute("SELECT id, stamp, damaged FROM sessions WHERE damaged IS NOT NULL").fetchall()
        return {sid: (stamp, why) for sid, stamp, why in rows}

    def changes(self, conninfo: str | None) -> Changes | None:
        return None  # a file of its own: the pass compares the stamps

    def fingerprint(self) -> str | None:
        with damage_caught():
            row = self._conn().execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
        return None if row is None else str(row[0])

    def keep_fingerprint(self, fingerprint: str | None) -> None:
        """Best effort: a pass that had nothing to write does not fail for want of
        room to keep this (a full disk: the next pass compares the stamps again)."""
        if fingerprint == self.fingerprint():
            return
        with contextlib.suppress(IndexUnwritable), self._writing() as db:
            db.execute("DELETE FROM meta WHERE key = 'fingerprint'")
            if fingerprint is not None:
                db.execute("INSERT INTO meta VALUES ('fingerprint', ?)", (fingerprint,))

    def session(self, session_id: str) -> SessionRow | None:
        with damage_caught():
            row = self._conn().execute(f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE id = ?",
                                       (session_id,)).fetchone()
        return None if row is None else session_of(row)

    def _forget(self, db: sqlite3.Connection, session_id: str, from_turn: int) -> None:
        db.execute("DELETE FROM texts WHERE rowid IN (SELECT id FROM docs WHERE session_id = ? AND turn >= ?)",
                   (session_id, from_turn))
        db.execute("DELETE FROM docs WHERE session_id = ? AND turn >= ?", (session_id, from_turn))
        db.execute("DELETE FROM turns WHERE session_id = ? AND turn >= ?", (session_id, from_turn))

    @contextlib.contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        db = self._conn()
        if self.unwritable is not None:
            raise IndexUnwritable(self.unwritable)
        with damage_caught(), space_caught(self.path):
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # a damaged file may refuse even that
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def replace(self, session_id: str, from_turn: int, feed: Feed) -> None:
        turn_sql = f"INSERT INTO turns ({', '.join(TURN_COLUMNS)}) VALUES ({', '.join('?' * len(TURN_COLUMNS))})"
        with self._writing() as db:
            self._forget(db, session_id, from_turn)
            for turn, docs in feed.turns():
                db.execute(turn_sql, turn_values(session_id, turn))
                for doc, piece, _ in doc_values(docs):
                    doc_id = _next_id(db, turn.started)
                    db.execute("INSERT INTO docs (id, session_id, turn, step, kind, ref) VALUES (?, ?, ?, ?, ?, ?)",
                               (doc_id, session_id, doc.turn, doc.step, doc.kind, doc.ref))
                    db.execute("INSERT INTO texts (rowid, body) VALUES (?, ?)", (doc_id, piece))
            self._keep(db, feed.row())

    def _keep(self, db: sqlite3.Connection, row: SessionRow) -> None:
        db.execute(f"INSERT OR REPLACE INTO sessions ({', '.join(SESSION_COLUMNS)}) "
                   f"VALUES ({', '.join('?' * len(SESSION_COLUMNS))})", session_values(row))

    def damaged(self, row: SessionRow) -> None:
        with self._writing() as db:
            self._forget(db, row.id, 0)
            self._keep(db, row)

    def drop(self, session_ids: Sequence[str]) -> None:
        if not session_ids:
            return
        with self._writing() as db:
            for sid in session_ids:
                self._forget(db, sid, 0)
                db.execute("DELETE FROM sessions WHERE id = ?", (sid,))

    # --- reading -------------------------------------------------------------------

    def relink(self) -> None:
        with self._writing() as db:
            sql = relink_sql()
            for _ in range(RELINK_ROUNDS):
                if db.execute(sql).rowcount == 0:
                    break

    def search(self, query: Query, filters: Filters, limit: int) -> list[Hit]:
        db = self._conn()
        narrow = narrowing(db, filters)
        with damage_caught():
            return best_hits(db, query, filters, limit, narrow)

    def open_turns(self, filters: Filters, by: str) -> list[tuple[Any, str]]:
        sql, args = open_turns_query(filters, by, "?")
        with damage_caught():
            return [(row[0], row[1]) for row in self._conn().execute(sql, args)]

    def stats(self, filters: Filters, by: str) -> list[StatsRow]:
        sql, args = stats_query(filters, by, "?")
        with damage_caught():
            return stats_rows(self._conn().execute(sql, args).fetchall())

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self.unlock()

