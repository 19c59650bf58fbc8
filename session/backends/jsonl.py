"""The JSONL backend (the default): one append-only file per session.

Layout under the store folder (0700, files 0600):

    sessions/<id>.jsonl     header on line 0, one event per line
    locks/<id>.lock         the owner lock (flock), holding the owner's pid
    torn/<id>.<ms>.jsonl    torn tails cut by repair, kept for inspection

Appends go through one O_APPEND descriptor. The backend remembers the size of the file
at its last fsync: if a write or an fsync fails, it truncates back to that size, so the
file never holds a half-written or unsynced suffix the coordinator does not know about.
"""

from __future__ import annotations

import bisect
import contextlib
import io
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

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
    with_size,
)
from session.errors import SessionCorruptError, SessionNotFoundError, StoreIOError
from session.events import USER_MESSAGE, Event, Header
from session.files import FILE_MODE, OwnerLock, fsync_dir, private_dir, publish, write_all
from session.scan import Damage, TailSplitter, TornTail, parse_events, parse_header

# Logs are read this much at a time: large enough to amortize, small enough to bound memory.
READ_BLOCK = 256 << 10

# How much of a log `list` reads to find the title: the header and the first prompt.
_LIST_PEEK_BYTES = 64 * 1024


class JsonlBackend:
    name = "jsonl"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = private_dir(Path(root))
        self.sessions_dir = private_dir(self.root / "sessions")
        self.locks_dir = private_dir(self.root / "locks")
        self.torn_dir = self.root / "torn"

    def path_of(self, session_id: str) -> Path:
        return self.sessions_dir / f"{validate_session_id(session_id)}.jsonl"

    def create(self, header: Header) -> JsonlSession:
        sid = header["id"]
        path = self.path_of(sid)
        lock = OwnerLock.acquire(self._lock_path(sid), sid)
        try:
            publish(path, orjson.dumps(header) + b"\n", session_id=sid)
            return JsonlSession(self, sid, path, lock, next_seq=0)
        except BaseException:
            lock.release()
            raise

    def open(self, session_id: str) -> tuple[BackendSession, StoredLog]:
        return read_whole(self.open_stream(session_id))

    def open_stream(self, session_id: str) -> JsonlStream:
        path = self.path_of(session_id)
        if not path.exists():
            raise SessionNotFoundError(f"session {session_id} not found", session_id=session_id)
        lock = OwnerLock.acquire(self._lock_path(session_id), session_id)
        try:
            return JsonlStream(session_id, _opener(session_id, path), owner=(self, path, lock))
        except BaseException:
            lock.release()
            raise

    def read_stream(self, session_id: str) -> JsonlStream:
        path = self.path_of(session_id)
        return JsonlStream(session_id, _opener(session_id, path), owner=None)

    def list_sessions(self) -> list[SessionSummary]:
        out: list[SessionSummary] = []
        for path in self.sessions_dir.glob("*.jsonl"):
            summary = _summary(path)
            if summary is not None:
                out.append(summary)
        return out

    def delete(self, session_id: str) -> None:
        path = self.path_of(session_id)
        if not path.exists():
            raise SessionNotFoundError(f"session {session_id} not found", session_id=session_id)
        lock = OwnerLock.acquire(self._lock_path(session_id), session_id)
        try:
            path.unlink(missing_ok=True)
            fsync_dir(self.sessions_dir)
            lock.path.unlink(missing_ok=True)
        finally:
            lock.release()

    def close(self) -> None:
        pass

    def _lock_path(self, session_id: str) -> Path:
        return self.locks_dir / f"{validate_session_id(session_id)}.lock"


class JsonlSession:
    def __init__(
        self, backend: JsonlBackend, session_id: str, path: Path, lock: OwnerLock, next_seq: int
    ) -> None:
        self.session_id = session_id
        self._backend = backend
        self._path = path
        self._lock = lock
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self.durable_size = os.fstat(self._fd).st_size
        self._durable_seq = next_seq  # next seq at the last durable point
        self._next_seq = next_seq

    def write(self, batch: Sequence[Encoded], *, sync: bool) -> None:
        check_batch_seqs(self.session_id, batch, self._next_seq)
        try:
            if batch:
                write_all(self._fd, b"".join(map(event_line, batch)))
            self._next_seq += len(batch)
            if sync:
                os.fdatasync(self._fd)
                self.durable_size = os.fstat(self._fd).st_size
                self._durable_seq = self._next_seq
        except OSError as exc:
            self._roll_back()
            raise StoreIOError(
                f"session {self.session_id}: could not {'sync' if sync else 'write'} the log: "
                f"{exc.strerror or exc}; rolled back to seq {self._durable_seq}",
                session_id=self.session_id,
                errno=exc.errno,
                durableSeq=self._durable_seq,
            ) from exc

    def _roll_back(self) -> None:
        # After a failed fsync the page cache can no longer be trusted to hold what we
        # wrote, so everything after the last durable size goes and is rewritten.
        self._next_seq = self._durable_seq
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self.durable_size)

    def repair(self, torn: TornTail | None, closers: Sequence[Encoded]) -> str | None:
        kept: str | None = None
        try:
            if torn is not None:
                cut = torn.where["offset"]
                kept = self._keep_aside(cut)
                os.ftruncate(self._fd, cut)
                self.durable_size = cut
            if closers:
                self.write(closers, sync=True)
            else:
                os.fsync(self._fd)
        except OSError as exc:
            raise StoreIOError(
                f"session {self.session_id}: could not repair the log: {exc.strerror or exc}",
                session_id=self.session_id,
                errno=exc.errno,
            ) from exc
        return kept

    def _keep_aside(self, cut: int) -> str:
        # Saved (durably) before the truncate: a crash in between repairs again.
        with open(self._path, "rb") as f:
            f.seek(cut)
            tail = f.read()
        torn_dir = private_dir(self._backend.torn_dir)
        aside = torn_dir / f"{self.session_id}.{time.time_ns()}.jsonl"
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            write_all(fd, tail)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(torn_dir)
        return str(aside)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._lock.release()


def _opener(session_id: str, path: Path) -> Callable[[], BinaryIO]:
    def open_log() -> BinaryIO:
        try:
            return open(path, "rb")
        except FileNotFoundError:  # deleted (while we waited for the lock)
            raise SessionNotFoundError(
                f"session {session_id} not found", session_id=session_id
            ) from None

    return open_log


class JsonlStream:
    """A JSONL log read in blocks of about READ_BLOCK bytes, one list of parsed
    records per block: memory stays bounded by the block, not the log."""

    def __init__(
        self,
        session_id: str,
        opener: Callable[[], BinaryIO],
        owner: tuple[JsonlBackend, Path, OwnerLock] | None,
    ) -> None:
        self._opener = opener  # locate() may run after close(), for an error message
        self._f = f = opener()
        self._owner = owner
        try:
            first = f.readline()
            if not first.endswith(b"\n"):
                # Publication is atomic, so a header without its newline is damage.
                parse_header(session_id, first, "byte offset 0 (line 1)")
                raise SessionCorruptError(
                    f"session {session_id}: the header line has no newline",
                    session_id=session_id,
                    offset=0,
                    reason="header",
                )
            self.header = parse_header(session_id, first[:-1], "byte offset 0 (line 1)")
        except BaseException:
            f.close()
            raise
        self._starts: list[tuple[int, int]] = [(0, len(first))]  # (record index, offset)
        self._end = len(first)  # bytes read so far

    def blocks(self) -> Iterator[list[Event | Damage]]:
        read, index, offset = self._f.read, 0, self._end
        pending: list[bytes] = []  # a record split over reads
        while True:
            chunk = read(READ_BLOCK)
            if not chunk:
                break
            self._end += len(chunk)
            cut = chunk.rfind(b"\n")
            if cut < 0:
                pending.append(chunk)
                continue
            if pending:
                pending.append(chunk[: cut + 1])
                data = b"".join(pending)
                pending = []
            else:
                data = chunk[: cut + 1]
            if cut + 1 < len(chunk):
                pending.append(chunk[cut + 1 :])
            lines = data.split(b"\n")
            lines.pop()  # b"" after the final newline
            self._starts.append((index, offset))
            yield parse_events(lines)
            index += len(lines)
            offset += len(data)
        if pending:  # the file does not end with a newline: a torn write
            self._starts.append((index, offset))
            yield [Damage("no newline at the end (a torn write)")]

    def locate(self, index: int) -> dict[str, int]:
        # Only block starts are remembered; an error's exact offset is found by reading.
        first, offset = self._starts[bisect.bisect_right(self._starts, (index, 1 << 62)) - 1]
        if index > first:
            with self._opener() as f:  # blocks() may be reading on from self._f
                f.seek(offset)
                for _ in range(index - first):
                    offset += len(f.readline())
        return {"offset": offset, "line": index + 2}

    def size_from(self, index: int) -> int:
        return self._end - self.locate(index)["offset"]

    def close(self) -> None:
        self._f.close()

    def session(self, next_seq: int, torn: TornTail | None) -> JsonlSession:
        if self._owner is None:
            raise RuntimeError("a read-only stream has no session")
        backend, path, lock = self._owner
        handle = JsonlSession(backend, self.header["id"], path, lock, next_seq)
        handle.durable_size = self._end if torn is None else torn.where["offset"]
        return handle

    def release(self) -> None:
        if self._owner is not None:
            self._owner[2].release()


def read_log(session_id: str, content: bytes) -> StoredLog:
    """Split a JSONL log into header, good events and torn tail (see scan.split_tail)."""
    stream = JsonlStream(session_id, lambda: io.BytesIO(content), owner=None)
    splitter = TailSplitter(session_id, stream.locate)
    events: list[Event] = []
    for block in stream.blocks():
        events.extend(splitter.feed(block))
    return StoredLog(stream.header, events, with_size(splitter.finish(), stream), stream.locate)


def _summary(path: Path) -> SessionSummary | None:
    """id, cwd, title, updatedAt of a log from its first lines and its mtime."""
    try:
        with open(path, "rb") as f:
            head = f.read(_LIST_PEEK_BYTES)
            mtime = os.fstat(f.fileno()).st_mtime_ns // 1_000_000
    except OSError:
        return None
    lines = head.split(b"\n")
    try:
        header = orjson.loads(lines[0])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(header, dict) or header.get("id") != path.stem:
        return None
    title = header.get("title")
    if title is None:
        for line in lines[1:4]:  # turn/start, then the prompt
            with contextlib.suppress(orjson.JSONDecodeError):
                event = orjson.loads(line)
                if isinstance(event, dict) and event.get("type") == USER_MESSAGE:
                    title = title_from_content(event.get("data", {}).get("content"))
                    break
    summary: SessionSummary = {
        "id": header["id"],
        "cwd": str(header.get("cwd", "")),
        "title": title,
        "updatedAt": mtime,
    }
    if header.get("additionalDirectories"):
        summary["additionalDirectories"] = list(header["additionalDirectories"])
    return summary
