"""Disk space for a SQLite store on a full disk: the reserve file, and giving freed
pages back to the file system.

A SQLite write needs space for its WAL frames, a DELETE included: on a disk filled to
the last byte a store could not even delete a session to make room. So the store keeps
a reserve file beside the database (`sessions.sqlite3-reserve`, allocated for real):
a delete that fails for want of space releases it, deletes (the session's row first,
then its events in small transactions with a checkpoint between, so that each reuses
the WAL's frames), gives the freed pages back, and allocates the reserve again, now or
once there is space.

Stores made by this version are `auto_vacuum = INCREMENTAL`: after a delete, the freed
pages are cut off the database file (`incremental_vacuum`, then a checkpoint that
truncates the WAL), so a delete frees disk space as the JSONL backend's unlink does.
Older stores keep freed pages for their own reuse (`VACUUM` gives them back).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from pathlib import Path

from session.files import FILE_MODE

# SQLite's primary result code for a full disk.
SQLITE_FULL = 13
PAGE = 4096  # SQLite's default page size, which the store keeps
RESERVE_MIN = 64 << 10
RESERVE_MAX = 1 << 20
# Rows deleted per transaction when a delete has to make do with the reserve's room.
PURGE_ROWS = 64
VACUUM_PAGES = 16


def is_full(exc: BaseException) -> bool:
    """Whether a write failed for want of space (SQLite's own code, or the OS's)."""
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", 0) & 0xFF == SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def reserve_size(root: Path) -> int:
    """A sixteenth of the file system, between 64 KiB and 1 MiB: room for a few hundred
    WAL frames, and little of a small disk."""
    try:
        st = os.statvfs(root)
    except OSError:
        return RESERVE_MIN
    return max(RESERVE_MIN, min(RESERVE_MAX, st.f_blocks * st.f_frsize // 16))


class Reserve:
    """A file of `size` bytes with its blocks allocated: space a full disk still has
    for the store, given back on request."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = reserve_size(path.parent)
        self._known_held = False  # as last seen here: spares a stat at every commit

    @property
    def held(self) -> bool:
        try:
            return os.stat(self.path).st_size >= self.size
        except OSError:
            return False

    def restore(self) -> bool:
        """Allocate the reserve if it is not; False if the disk has no room for it yet."""
        self._known_held = self._restore()
        return self._known_held

    def keep(self) -> None:
        """After a commit: allocate the reserve again if it was missing (the store was
        made on a disk without room for it, or a delete's restore found none), as soon
        as space returns. Costs nothing while it is held."""
        if not self._known_held:
            self.restore()

    def _restore(self) -> bool:
        if self.held:
            return True
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
        except OSError:
            return False
        try:
            _allocate(fd, self.size)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # all or nothing: a part would only hide the want
            return False
        finally:
            os.close(fd)
        return True

    def release(self) -> bool:
        """Give the reserve's space back to the file system; False if there was none."""
        if not self.held:
            return False
        try:
            os.truncate(self.path, 0)
        except OSError:
            return False
        self._known_held = False
        return True


def _allocate(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        # No fallocate here (ZFS, some network file systems): written blocks, not zeros,
        # which a compressing file system would keep in no space at all.
        written = 0
        while written < size:
            written += os.pwrite(fd, os.urandom(min(64 << 10, size - written)), written)


def give_back(db: sqlite3.Connection) -> None:
    """Cut the database's free pages off its file and the WAL down to nothing, as far as
    that goes now (best effort: readers may hold the WAL, the disk may be full). Runs in
    autocommit mode, each step its own small transaction."""
    with contextlib.suppress(sqlite3.Error):
        if db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
            try:
                db.execute("PRAGMA incremental_vacuum").fetchall()
            except sqlite3.Error as exc:
                if not is_full(exc):
                    raise
                # No room for the WAL frames of moving every page at once: a few pages
                # a transaction, each checkpointed so that the next reuses its frames.
                steps = db.execute("PRAGMA freelist_count").fetchone()[0] // VACUUM_PAGES + 1
                for _ in range(steps):
                    db.execute(f"PRAGMA incremental_vacuum({VACUUM_PAGES})").fetchall()
                    checkpoint(db, "PASSIVE")
    checkpoint(db, "TRUNCATE")


def checkpoint(db: sqlite3.Connection, mode: str) -> None:
    """A checkpoint that does not wait for readers (they hold the frames they read)."""
    with contextlib.suppress(sqlite3.Error):
        db.execute("PRAGMA busy_timeout = 0")
        try:
            db.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()
        finally:
            db.execute("PRAGMA busy_timeout = 10000")


def orphan_ids(db: sqlite3.Connection) -> list[str]:
    """The sessions whose events stay without their row (a delete on a full disk that
    could not purge them all): one index seek per stored session, not a scan."""
    with contextlib.suppress(sqlite3.Error):
        ids = {row[0] for row in db.execute("SELECT id FROM sessions")}
        out: list[str] = []
        after = ""
        while row := db.execute(
            "SELECT session_id FROM events WHERE session_id > ? ORDER BY session_id LIMIT 1",
            (after,),
        ).fetchone():
            after = row[0]
            if after not in ids:
                out.append(after)
        return out
    return []


def purge_events(db: sqlite3.Connection, session_id: str) -> bool:
    """Delete a session's events (its row is gone) a few rows a transaction, each one
    checkpointed so that the next reuses the WAL's frames instead of growing it: a full
    disk can do this with the reserve's room. False if a transaction failed (the rest
    stays, for the next try)."""
    try:
        while db.execute(
            "DELETE FROM events WHERE session_id = ? AND seq IN "
            "(SELECT seq FROM events WHERE session_id = ? ORDER BY seq LIMIT ?)",
            (session_id, session_id, PURGE_ROWS),
        ).rowcount:
            checkpoint(db, "PASSIVE")
    except sqlite3.Error:
        return False
    return True
