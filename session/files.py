"""File-system primitives for the file-backed stores: private folders and files, fsync
of directories, atomic publication, and the per-session owner lock.

The lock is an `flock` on a lock file: the kernel drops it when its process dies
(`kill -9` included), so a crashed owner never leaves a session locked, and two opens
in one process conflict just like two processes do.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from session.errors import SessionExistsError, SessionLockedError, StoreIOError

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) as 0700 if missing; tighten it if it exists."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o777 != DIR_MODE:
        path.chmod(DIR_MODE)
    return path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """os.write until all of `data` is written (a write may be short)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def publish(path: Path, content: bytes, *, session_id: str) -> None:
    """Atomically and durably create `path` holding `content`: temp file, fsync, link
    into place (refusing to replace an existing file), fsync the directory. A reader
    never sees a partial first write."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            write_all(fd, content)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise SessionExistsError(
                f"session {session_id} already exists", session_id=session_id
            ) from None
        fsync_dir(path.parent)
    except OSError as exc:
        raise StoreIOError(
            f"session {session_id}: could not create {path.name}: {exc.strerror or exc}",
            session_id=session_id,
            errno=exc.errno,
        ) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


class OwnerLock:
    """An exclusive, non-blocking flock on `path`, with our pid written in for the
    error message another process will show."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, path: Path, session_id: str) -> OwnerLock:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = _read_pid(path)
            who = f"process {holder}" if holder and holder != os.getpid() else "another owner"
            raise SessionLockedError(
                f"session {session_id} is open in {who}; close it there first",
                session_id=session_id,
                pid=holder,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor drops the flock


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text()
    except OSError:
        return None
    return int(text) if text.strip().isdigit() else None
