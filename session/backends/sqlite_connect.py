"""Connecting to a SQLite store, and what its failures mean to the reading and owning
sides both: a connection (a read-only one that opens even a store whose folder it may
not write), a damaged database as SessionCorruptError, and the one schema version this
build reads. The row stream and the read-only `SqliteReader` are in
session.backends.sqlite_read; the owned side in session.backends.sqlite.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from session.errors import SessionCorruptError, SessionVersionError

SCHEMA_VERSION = 1
# SQLite's primary result codes for a damaged database file (the low byte of an
# extended code): SQLITE_CORRUPT ("database disk image is malformed") and SQLITE_NOTADB
# ("file is not a database"). Other failures (locked, I/O, full) are not damage.
DAMAGE_CODES = frozenset({11, 26})
SQLITE_CANTOPEN = 14
# The `-shm` could not be grown: on a full disk (a tmpfs), SQLite's write of a byte per
# page of a new `-shm` fails with ENOSPC.
SQLITE_IOERR_SHMSIZE = 10 | 19 << 8


def connect(path: Path, *, read_only: bool) -> sqlite3.Connection:
    """A connection in autocommit mode; `read_only` (`mode=ro`) never creates the file.

    A WAL database is read through its `-shm` index, which a reader must be able to
    create: on a read-only mount, or in a folder it may not write, or on a full disk
    (the new `-shm` cannot be given its pages), a store with no `-wal`/`-shm` beside it
    cannot be opened that way. Such a store has no writer and nothing outside the
    database file, so it is opened `immutable` (read as a plain file). A store with a
    non-empty `-wal` is never opened so: that would skip what the WAL holds."""
    # `check_same_thread=False`: a stream's connection is opened in one worker thread and
    # read in whichever is free for the next block (host.replay), one at a time (issue 34:
    # concurrent loads failed "SQLite objects created in a thread can only be used in that
    # same thread", and kept their locks).
    if not read_only:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA busy_timeout = 10000")
        return db
    uri = path.resolve().as_uri() + "?mode=ro"
    db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA busy_timeout = 10000")
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the WAL index
    except sqlite3.OperationalError as exc:
        db.close()
        if (exc.sqlite_errorcode & 0xFF != SQLITE_CANTOPEN and exc.sqlite_errorcode != SQLITE_IOERR_SHMSIZE) \
                or _wal_size(path):
            raise
        db = sqlite3.connect(uri + "&immutable=1", uri=True, isolation_level=None, check_same_thread=False)
    except BaseException:
        db.close()
        raise
    return db


def _wal_size(path: Path) -> int:
    return file_size(Path(f"{path}-wal"))


def file_size(path: Path) -> int:
    """The size of `path`, 0 if there is none (a WAL or a tail file not made yet)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether SQLite failed because the database file is damaged."""
    return exc.sqlite_errorcode & 0xFF in DAMAGE_CODES


def damage_error(path: Path, exc: sqlite3.Error, session_id: str | None) -> SessionCorruptError:
    """A damaged database as the damaged log of `session_id`, or of the whole store
    (the sessions table itself cannot be read), worded as JSONL damage is."""
    what = f"session {session_id}" if session_id is not None else f"the store {path.parent}"
    return SessionCorruptError(
        f"{what} is damaged: SQLite cannot read {path} ({exc})",
        session_id=session_id,
        reason=str(exc),
    )


@contextlib.contextmanager
def damage_as_corrupt(path: Path, session_id: str | None = None) -> Iterator[None]:
    """Raise a damaged database (see `is_damage`) as SessionCorruptError, as a damaged
    JSONL log is: the session (or the store) cannot be read, nothing else is wrong."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        if is_damage(exc):
            raise damage_error(path, exc, session_id) from exc
        raise


def schema_version_error(path: Path, version: int) -> SessionVersionError:
    return SessionVersionError(
        f"store {path} has schema version {version}; this build reads only "
        f"version {SCHEMA_VERSION} (pre-release: no migration)",
        version=version,
        supported=SCHEMA_VERSION,
    )
