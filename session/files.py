"""File-system primitives for the file-backed stores: private folders and files, fsync
of directories, atomic publication, the per-session owner lock, and who holds it.

The lock is an `flock` on a lock file: the kernel drops it when its process dies
(`kill -9` included), so a crashed owner never leaves a session locked, and two opens
in one process conflict just like two processes do.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, NamedTuple

from session.errors import SessionExistsError, SessionLockedError, StoreIOError

DIR_MODE = 0o700
FILE_MODE = 0o600


# The folders the file backends keep under a store (checked at start-up if they exist).
STORE_SUBDIRS = ("sessions", "locks", "torn", "tails", "titles")


def private_dir(path: Path) -> Path:
    """`path` as a folder: created 0700 (missing parents too) if it does not exist. An
    existing folder keeps its mode: its owner chose it (a read-only store, a shared
    setgid folder), and a chmod here would change it behind their back."""
    if _created(path):
        # Ours, just made: exactly 0700, whatever the umask took off.
        os.chmod(path, DIR_MODE)
    return path


def _created(path: Path) -> bool:
    """mkdir `path` (and its missing parents, each 0700); False if it was there."""
    try:
        path.mkdir(mode=DIR_MODE)
    except FileExistsError:
        if path.is_dir():
            return False
        raise
    except FileNotFoundError:
        if path.parent == path:
            raise
        private_dir(path.parent)
        return _created(path)
    return True


def check_store_writable(root: Path) -> None:
    """Raise StoreIOError (one line naming the folder and the reason) unless the agent
    can write the store at `root`: the folder and its existing subfolders writable, or,
    for a store still to be made, its nearest existing parent. Asked with access(2), so
    it changes nothing (no chmod, no probe file); a store that fails here would
    otherwise fail at the first session, or be chmodded into shape."""
    existing = root
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if existing != root:
        problem = _unwritable(existing)
        if problem is not None:
            code, why = problem
            raise StoreIOError(f"cannot create the store {root}: {existing} {why}", errno=code)
        return
    for folder in (root, *(root / name for name in STORE_SUBDIRS)):
        if folder != root and not os.path.lexists(folder):
            continue
        problem = _unwritable(folder)
        if problem is not None:
            code, why = problem
            raise StoreIOError(f"store {folder} {why}", errno=code)


def _unwritable(folder: Path) -> tuple[int, str] | None:
    """Why the agent cannot add files to `folder` (errno, words), or None if it can."""
    if not folder.is_dir():
        return errno.ENOTDIR, "is not a folder"
    effective = os.access in os.supports_effective_ids
    if os.access(folder, os.W_OK | os.X_OK, effective_ids=effective):
        return None
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    code = errno.EROFS if read_only else errno.EACCES
    return code, f"is not writable: {os.strerror(code)}"


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


def publish(path: Path, content: bytes | Iterable[bytes], *, session_id: str,
            replace: bool = False) -> None:
    """Atomically and durably create `path` holding `content` (bytes, or pieces of it
    written as they come: a fork copies a log of any size): a file written and fsynced
    first, then linked into place (refusing to replace an existing file), the directory
    fsynced. A reader never sees a partial first write, and a crash leaves no `path`.
    With `replace`, an existing `path` is replaced (renamed over: a reader sees the old
    content or the new, whole).

    The file is written without a name where the system allows (Linux's O_TMPFILE), so
    that a process killed while it writes (a fork of a large log) leaves nothing behind:
    the kernel frees a file no name points to. Elsewhere, and for `replace` (a rename
    needs a name), it is a named temp file (`.NAME.PID.tmp`, which no reader takes for
    a session), removed on every way out but a kill."""
    _publish(path, content, session_id=session_id, replace=replace, hold=False)


def publish_held(path: Path, content: bytes, *, session_id: str) -> int:
    """`publish` a new file, and return a descriptor of it holding an exclusive flock,
    taken before the file had its name: while it is held, whoever takes the lock
    (`held_by_nobody`) knows its writer is still at work. The caller closes it."""
    fd = _publish(path, content, session_id=session_id, replace=False, hold=True)
    assert fd is not None
    return fd


def held_by_nobody(path: Path) -> bool:
    """Whether no process holds `publish_held`'s lock on the file at `path` (its writer
    has finished or died); False if it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _publish(path: Path, content: bytes | Iterable[bytes], *, session_id: str, replace: bool,
             hold: bool) -> int | None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    kept: int | None = None
    try:
        fd = None if replace else _unnamed(path.parent)
        named = fd is None
        if fd is None:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            if hold:
                fcntl.flock(fd, fcntl.LOCK_EX)  # a file of ours, not yet named: nobody else has it
            for piece in (content,) if isinstance(content, bytes) else content:
                write_all(fd, piece)
            os.fsync(fd)
            try:
                if replace:
                    os.replace(tmp, path)
                elif named:
                    os.link(tmp, path)
                else:
                    _link_unnamed(fd, path)
            except FileExistsError:
                raise SessionExistsError(
                    f"session {session_id} already exists", session_id=session_id
                ) from None
            fsync_dir(path.parent)
            kept, fd = (fd, None) if hold else (None, fd)
        finally:
            if fd is not None:
                os.close(fd)
        return kept
    except OSError as exc:
        raise StoreIOError(
            f"session {session_id}: could not {'write' if replace else 'create'} {path.name}: "
            f"{exc.strerror or exc}",
            session_id=session_id,
            errno=exc.errno,
        ) from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _unnamed(folder: Path) -> int | None:
    """A new file in `folder` that has no name yet (O_TMPFILE), to be linked into place
    through /proc/self/fd; None where the system or the file system has no such file."""
    flag = getattr(os, "O_TMPFILE", None)
    if flag is None or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        return os.open(folder, flag | os.O_WRONLY, FILE_MODE)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return None  # a kernel or file system without it
        raise


def _link_unnamed(fd: int, path: Path) -> None:
    """Give the O_TMPFILE file `fd` the name `path` (linkat, following /proc's link to
    the file: a directory fd makes os.link call linkat, where a plain link() would
    link /proc's symlink itself and fail EXDEV)."""
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link(f"/proc/self/fd/{fd}", path.name, dst_dir_fd=folder, follow_symlinks=True)
    finally:
        os.close(folder)


class OwnerLock:
    """An exclusive, non-blocking flock on `path`, with our pid written in for the
    error message another process will show."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, path: Path, session_id: str) -> OwnerLock:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        except OSError as exc:
            raise StoreIOError(f"cannot open the lock file {path}: {exc.strerror or exc}",
                               session_id=session_id, errno=exc.errno) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = read_pid(path)
            who = f"process {holder}" if holder and holder != os.getpid() else "another owner"
            raise SessionLockedError(
                f"session {session_id} is open in {who}; close it there first",
                session_id=session_id,
                pid=holder,
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        except OSError as exc:
            # The pid is only for another owner's error message: the flock is the lock,
            # and a full disk must still let a session be loaded or deleted.
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                os.close(fd)
                raise StoreIOError(f"cannot write the lock file {path}: {exc.strerror or exc}",
                                   session_id=session_id, errno=exc.errno) from exc
        return cls(fd, path)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor drops the flock

    def discard(self) -> None:
        """Remove the lock file, then release: for a session that was never made (its
        creation failed), so nothing of it stays in the store."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            self.release()


def lock_file(locks_dir: Path, session_id: str) -> Path:
    """The owner lock file of a session (the id is validated by the caller)."""
    return locks_dir / f"{session_id}.lock"


def read_pid(path: Path) -> int | None:
    """The pid an owner wrote into its lock file, if it reads as one."""
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class Owner(NamedTuple):
    """Who holds a session's owner lock: `live` (with the holder's pid), `none`, or
    `unknown` where the system does not say."""

    state: Literal["live", "none", "unknown"]
    pid: int | None = None


class LockTable:
    """Who holds the owner locks, read from `/proc/locks` (Linux lists every flock with
    its holder's pid) once, at the first question. Never by trying a lock: that could
    make an agent starting at that moment fail to take its own session."""

    def __init__(self) -> None:
        self._holders: dict[int, list[tuple[int, int, int]]] | None = None

    def owner(self, lock: Path) -> Owner:
        try:
            st = os.stat(lock)
        except OSError:
            return Owner("none")
        if self._holders is None:
            self._holders = _flock_holders()
        if not self._holders and not os.path.exists("/proc/locks"):
            return Owner("unknown")
        file_pid = read_pid(lock)
        for major, minor, pid in self._holders.get(st.st_ino, ()):
            same_dev = (major, minor) == (os.major(st.st_dev), os.minor(st.st_dev))
            if same_dev or (file_pid is not None and pid == file_pid):
                return Owner("live", pid)
        return Owner("none")


def _flock_holders() -> dict[int, list[tuple[int, int, int]]]:
    """inode -> [(major, minor, pid)] of the flock locks /proc/locks lists."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    out: dict[int, list[tuple[int, int, int]]] = {}
    for line in text.splitlines():
        # "3: FLOCK  ADVISORY  WRITE 4211 fe:00:2162783 0 EOF"; waiters have "->" first.
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK":
            continue
        try:
            major, minor, inode = parts[5].split(":")
            entry = (int(major, 16), int(minor, 16), int(parts[4]))
            out.setdefault(int(inode), []).append(entry)
        except ValueError:
            continue
    return out
