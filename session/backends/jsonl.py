"""The JSONL backend (the default): one append-only file per session.

Layout under the store folder (0700, files 0600):

    sessions/<id>.jsonl     header on line 0, one event per line
    locks/<id>.lock         the owner lock (flock), holding the owner's pid
    torn/<id>.<ms>.jsonl    torn tails cut by repair, kept for inspection
    titles/<id>.json        the title `/title` last set (session.backends.jsonl_title)

Reading (the record stream, `list` summaries, the read-only `JsonlReader`) is in
session.backends.jsonl_read. Appends go through one O_APPEND descriptor. The backend remembers the size of the file
at its last fsync: if a write or an fsync fails, it truncates back to that size, so the
file never holds a half-written or unsynced suffix the live log does not know about.
"""

from __future__ import annotations

import contextlib
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
    changed_while_forked,
    changed_while_imported,
    check_batch_seqs,
    event_line,
    event_lines,
    read_whole,
)
from session.backends.jsonl_read import READ_BLOCK, JsonlReader, JsonlStream, log_opener, summary_of
from session.backends.jsonl_title import TITLES, TitleKeeper, forget, keep_for_fork, kept_ids, sweep
from session.backends.session_ids import validate_session_id
from session.errors import SessionExistsError, SessionNotFoundError, StoreIOError
from session.events import Header
from session.files import (
    FILE_MODE,
    OwnerLock,
    fsync_dir,
    lock_file,
    private_dir,
    publish,
    write_all,
)
from session.scan import TornTail


class JsonlBackend:
    name = "jsonl"

    def __init__(self, root: str | os.PathLike[str], *, sync: Callable[[int], None] | None = None) -> None:
        # `sync` makes a log's appends durable (its descriptor): the durability points'
        # one fsync. A test hands in its own to see each one (tests/support/power_cut.py).
        self.sync = sync or _fdatasync
        self.root = private_dir(Path(root))
        self.sessions_dir = private_dir(self.root / "sessions")
        self.locks_dir = private_dir(self.root / "locks")
        self.torn_dir = self.root / "torn"
        self.titles_dir = self.root / TITLES

    def path_of(self, session_id: str) -> Path:
        return self.sessions_dir / f"{validate_session_id(session_id)}.jsonl"

    def create(self, header: Header) -> JsonlSession:
        sid = header["id"]
        path = self.path_of(sid)
        lock = OwnerLock.acquire(self._lock_path(sid), sid)
        try:
            publish(path, orjson.dumps(header) + b"\n", session_id=sid)
        except SessionExistsError:
            lock.release()
            raise
        except BaseException:
            lock.discard()  # the session was never made: no lock file of it stays
            raise
        try:
            return JsonlSession(self, sid, path, lock, next_seq=0,
                                titles=TitleKeeper(self.titles_dir, sid, None))
        except BaseException:
            lock.release()
            raise

    def open(self, session_id: str) -> tuple[BackendSession, StoredLog]:
        return read_whole(self.open_stream(session_id))

    def open_stream(self, session_id: str) -> OwnedJsonlStream:
        path, lock = self._own(session_id)
        try:
            return OwnedJsonlStream(session_id, log_opener(session_id, path), (self, path, lock))
        except BaseException:
            lock.release()
            raise

    def _own(self, session_id: str) -> tuple[Path, OwnerLock]:
        """The log of the stored session `session_id` and its live owner's lock (open
        and delete take it)."""
        path = self.path_of(session_id)
        if not path.exists():
            raise SessionNotFoundError(f"session {session_id} not found", session_id=session_id)
        return path, OwnerLock.acquire(self._lock_path(session_id), session_id)

    def read_stream(self, session_id: str) -> JsonlStream:
        path = self.path_of(session_id)
        return JsonlStream(session_id, log_opener(session_id, path))

    def copy(self, source_id: str, header: Header, upto: int, closers: Sequence[Encoded], *,
             title: str | None) -> None:
        # The source's lines are copied as stored (bytes, not re-encoded), a block at a
        # time, into a file that is published whole (written without a name until then:
        # session.files.publish), so that a crash or a kill leaves no fork and no file.
        # The source is opened first: a delete that comes after this (a request at the
        # same time as the fork) leaves the open file readable, so the fork holds what
        # its plan read; one that came before is "not found", never a failed write.
        sid = header["id"]
        with contextlib.ExitStack() as stack:
            try:
                source = stack.enter_context(open(self.path_of(source_id), "rb"))
            except FileNotFoundError:
                raise SessionNotFoundError(f"session {source_id} not found", session_id=source_id) from None
            # What forks killed before their log was out left (jsonl_title.sweep): one scan
            # of each folder, beside a copy that reads a whole log.
            sweep(self.titles_dir, self.sessions_dir,
                  kept_ids(self.titles_dir) - {n[:-6] for n in os.listdir(self.sessions_dir) if n.endswith(".jsonl")})

            def content() -> Iterator[bytes]:
                yield orjson.dumps(header) + b"\n"
                yield from _lines(source, source_id, upto)
                for item in closers:
                    yield event_line(item)

            # A title the fork's header and first prompt would not give (a `/title` it
            # holds) is kept first: a crash before the log is published leaves a title
            # file that names no session, never a fork that lost its title; the file is
            # locked until then, and such a file is swept by the next fork or list.
            held = keep_for_fork(self.titles_dir, sid, title) if title is not None and title != header.get("title") \
                else None
            try:
                publish(self.path_of(sid), content(), session_id=sid)
            except BaseException:
                if held is not None:
                    forget(self.titles_dir, sid)
                raise
            finally:
                if held is not None:
                    os.close(held)

    def publish(self, header: Header, records: Sequence[Encoded], *, title: str | None,
                after: int | None = None) -> None:
        # A new log is published as a fork's is (temp file, linked into place); an
        # append is the stored log's bytes and the new lines in a temp file renamed over
        # it, under the owner lock: a reader, and a crash, see the old log or the new.
        # The title is the header's or the first prompt's, which the list reads itself.
        sid = header["id"]
        path = self.path_of(sid)
        if after is None:
            publish(path, [orjson.dumps(header) + b"\n", event_lines(records)], session_id=sid)
            _updated(path, records, header["createdAt"])
            return
        path, lock = self._own(sid)
        try:
            stored = path.read_bytes()
            found = stored.count(b"\n") - 1
            if found != after or not stored.endswith(b"\n"):
                raise changed_while_imported(sid, found, after)
            publish(path, [stored, event_lines(records)], session_id=sid, replace=True)
            _updated(path, records, header["createdAt"])
        except OSError as exc:
            raise StoreIOError(f"session {sid}: could not read {path.name}: {exc.strerror or exc}",
                               session_id=sid, errno=exc.errno) from exc
        finally:
            lock.release()

    def list_sessions(self) -> list[SessionSummary]:
        out: list[SessionSummary] = []
        titled = kept_ids(self.titles_dir)
        logs = set()
        for path in self.sessions_dir.glob("*.jsonl"):
            logs.add(path.stem)
            summary = summary_of(path, self.titles_dir if path.stem in titled else None)
            if summary is not None:
                out.append(summary)
        if titled - logs:  # a fork's title file, left by a kill before its log was out?
            sweep(self.titles_dir, self.sessions_dir, titled - logs)
        return out

    def delete(self, session_id: str) -> None:
        path, lock = self._own(session_id)
        try:
            path.unlink(missing_ok=True)
            fsync_dir(self.sessions_dir)
            forget(self.titles_dir, session_id)
            lock.path.unlink(missing_ok=True)
        finally:
            lock.release()

    def reader(self) -> JsonlReader:
        return JsonlReader(self.root)

    def close(self) -> None:
        pass

    def _lock_path(self, session_id: str) -> Path:
        return lock_file(self.locks_dir, validate_session_id(session_id))


def _updated(path: Path, records: Sequence[Encoded], created: int) -> None:
    """A published log's mtime, which the list reads as its `updatedAt`: the time of its
    last event (an import's are the native times, older than the file), as the SQL
    stores read it. Best effort: a log whose mtime stays is still whole."""
    when = max([created, *(item.event["time"] for item in records[-1:])])
    with contextlib.suppress(OSError):
        os.utime(path, ns=(time.time_ns(), when * 1_000_000))


def _fdatasync(fd: int) -> None:
    # `os.fdatasync` looked up at each call, not bound once: the bench's slow-disk shim
    # and the fault tests replace it in the module.
    os.fdatasync(fd)


def _lines(f: BinaryIO, source_id: str, upto: int) -> Iterator[bytes]:
    """The first `upto` event lines of the log open as `f` (after its header), as stored."""
    f.readline()
    left = upto
    while left:
        block = f.read(READ_BLOCK)
        if block and not block.endswith(b"\n"):
            block += f.readline()  # whole lines only: the count stays exact
        found = block.count(b"\n")
        if found >= left:
            end = -1
            for _ in range(left):
                end = block.index(b"\n", end + 1)
            yield block[: end + 1]
            return
        if not block.endswith(b"\n"):  # the end of the file: fewer lines than the plan read
            raise changed_while_forked(source_id, upto - left + found, upto)
        yield block
        left -= found


class JsonlSession:
    def __init__(
        self, backend: JsonlBackend, session_id: str, path: Path, lock: OwnerLock, next_seq: int,
        *, titles: TitleKeeper,
    ) -> None:
        self.session_id = session_id
        self._titles = titles
        self._backend = backend
        self._path = path
        self._lock = lock
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self.durable_size = os.fstat(self._fd).st_size
        self._durable_seq = next_seq  # next seq at the last durable point
        self._next_seq = next_seq
        self._stale = False  # the file may hold bytes past durable_size (a failed cut)

    def write(self, batch: Sequence[Encoded], *, sync: bool) -> None:
        check_batch_seqs(self.session_id, batch, self._next_seq)
        try:
            if self._stale:  # a failed write could not be cut off: cut it before appending
                os.ftruncate(self._fd, self.durable_size)
                self._stale = False
            if batch:
                self._titles.before([item.event for item in batch], self.durable_size)
                write_all(self._fd, event_lines(batch))
            self._next_seq += len(batch)
            if sync:
                self._backend.sync(self._fd)
                self.durable_size = os.fstat(self._fd).st_size
                self._durable_seq = self._next_seq
                self._titles.synced()
        except StoreIOError as exc:  # the title file could not be made pending: not appended
            self._roll_back()
            raise StoreIOError(f"{exc.message}; rolled back to seq {self._durable_seq}",
                               session_id=self.session_id, durableSeq=self._durable_seq) from exc
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
        self._titles.rolled_back()
        self._stale = True
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self.durable_size)
            self._stale = False

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
                self._backend.sync(self._fd)
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
            if self._stale:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self.durable_size)
            os.close(self._fd)
            self._fd = -1
            self._lock.release()





class OwnedJsonlStream(JsonlStream):
    """A JSONL log read by its owner (`JsonlBackend.open_stream` took the lock)."""

    def __init__(
        self,
        session_id: str,
        opener: Callable[[], BinaryIO],
        owner: tuple[JsonlBackend, Path, OwnerLock],
    ) -> None:
        super().__init__(session_id, opener)
        self._owner = owner

    def session(self, next_seq: int, torn: TornTail | None) -> JsonlSession:
        backend, path, lock = self._owner
        sid = self.header["id"]
        good_end = self.end if torn is None else torn.where["offset"]
        try:
            titles = TitleKeeper.opened(backend.titles_dir, sid, path, good_end)
        except BaseException:
            lock.release()
            raise
        handle = JsonlSession(backend, sid, path, lock, next_seq, titles=titles)
        handle.durable_size = good_end
        return handle

    def release(self) -> None:
        self._owner[2].release()  # idempotent


