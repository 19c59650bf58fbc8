"""Reading JSONL logs: the record stream every load and replay reads, the summaries
`list` reads, and the read-only open of a JSONL store (`JsonlReader`). Nothing here
writes; the owned side (appends, repair, the lock) is in session.backends.jsonl.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import orjson

from session.backends.base import At, FileReader, SessionPeek, SessionSummary, Stamp
from session.backends.jsonl_time import last_time, last_time_in
from session.backends.jsonl_title import TITLES, kept_title
from session.backends.session_ids import is_session_id, session_files, validate_session_id
from session.errors import SessionCorruptError, SessionNotFoundError
from session.events import USER_MESSAGE, Event
from session.files import LockTable, Owner, lock_file
from session.scan import Damage, parse_events, parse_header
from session.titles import first_prompt_title, titled

# Logs are read this much at a time: large enough to amortize, small enough to bound memory.
READ_BLOCK = 256 << 10

# `list` reads a log's header and its first prompt's line whole, however long: a prompt
# embedding a file is megabytes on one line, and a prefix of it would lose the title. A
# line is at most what the agent reads as one message.
LIST_LINE_LIMIT = 64 << 20
# What may come before the first prompt (a wrapped agent's updates after `session/new`,
# commands and modes, a few KiB each; a setting changed) is read up to this much, so a
# list costs a bounded read per log, never a whole one: past it the session is listed
# untitled (docs/persistence.md, "Titles").
LIST_SCAN_LIMIT = 1 << 20
# How a stored prompt's line starts (session.backends.base.event_line writes every line).
_PROMPT_HEAD = b'{"type":"%s",' % USER_MESSAGE.encode()


def log_opener(session_id: str, path: Path) -> Callable[[], BinaryIO]:
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

    # Filled in by JsonlReader.stream (see session.backends.base.ReadStream).
    updated = 0
    title: str | None = None
    where = ""

    def __init__(self, session_id: str, opener: Callable[[], BinaryIO], at: At | None = None) -> None:
        self._opener = opener  # locate() may run after close(), for an error message
        self._f = f = opener()
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
        self.end = len(first)  # bytes read so far
        self._first = 0  # the index of the first record `blocks` reads
        if at is not None and at.offset is not None and at.offset > len(first):
            f.seek(at.offset)  # past the end: `blocks` reads nothing
            self._starts.append((at.seq, at.offset))
            self._first, self.end = at.seq, at.offset

    def blocks(self) -> Iterator[list[Event | Damage]]:
        read, index, offset = self._f.read, self._first, self.end
        pending: list[bytes] = []  # a record split over reads
        while True:
            chunk = read(READ_BLOCK)
            if not chunk:
                break
            self.end += len(chunk)
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
        return self.end - self.locate(index)["offset"]

    def close(self) -> None:
        self._f.close()


def summary_of(path: Path, titles: Path | None = None) -> SessionSummary | None:
    """id, cwd, title, updatedAt of a log from its first lines and its last event's
    time (jsonl_time; the mtime if it has none); `titles`:
    the store's title folder, when the session has a title file there (jsonl_title)."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            mtime = last_time_in(f, st.st_size) or st.st_mtime_ns // 1_000_000
            f.seek(0)
            header = _json_line(f.readline(LIST_LINE_LIMIT))
            if not isinstance(header, dict) or header.get("id") != path.stem:
                return None
            title = titled(kept_title(titles, path.stem, path) if titles is not None else None,
                           header, None)
            if title is None:
                title = _first_prompt_title(f)
    except OSError:
        return None
    summary: SessionSummary = {
        "id": header["id"],
        "cwd": str(header.get("cwd", "")),
        "title": title,
        "updatedAt": mtime,
    }
    if header.get("additionalDirectories"):
        summary["additionalDirectories"] = list(header["additionalDirectories"])
    return summary


def _first_prompt_title(f: BinaryIO) -> str | None:
    """The title of the log's first prompt (first_prompt_title), from the lines after
    the header: those before the prompt up to LIST_SCAN_LIMIT bytes in all, the
    prompt's own line whole. None past that, at damage, or at the end."""
    left = LIST_SCAN_LIMIT
    while left > 0:
        line = f.readline(left)
        if not line.endswith(b"\n"):
            if not line.startswith(_PROMPT_HEAD):
                return None  # the end, a torn line, or more before the prompt than we read
            line += f.readline(LIST_LINE_LIMIT)  # the prompt itself, however long
        event = _json_line(line)
        if not isinstance(event, dict):
            return None  # damage: load says what it is
        if event.get("type") == USER_MESSAGE:
            return first_prompt_title(event)
        left -= len(line)
    return None


def _json_line(line: bytes) -> object:
    """A line parsed as JSON; None if it is not JSON (damage is for load to report)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


class JsonlReader(FileReader):
    """A JSONL store opened read-only (see session.backends.base.StoreReader): nothing
    is created, locked or repaired; a missing store folder is an empty store."""

    name = "jsonl"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.sessions_dir = self.root / "sessions"
        self.locks_dir = self.root / "locks"
        self.titles_dir = self.root / TITLES
        self._locks = LockTable()

    def path_of(self, session_id: str) -> Path:
        return self.sessions_dir / f"{validate_session_id(session_id)}.jsonl"

    def ids(self) -> list[str]:
        try:
            names = os.listdir(self.sessions_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [name[:-6] for name in names if name.endswith(".jsonl") and is_session_id(name[:-6])]

    def stream(self, session_id: str, at: At | None = None) -> JsonlStream:
        path = self.path_of(session_id)
        stream = JsonlStream(session_id, log_opener(session_id, path), at)
        try:
            stream.updated = last_time(path, os.stat(path).st_mtime_ns // 1_000_000)
        except BaseException:
            stream.close()
            raise
        stream.title = titled(kept_title(self.titles_dir, stream.header["id"], path), stream.header, None)
        stream.where = str(path)
        return stream

    def stamps(self) -> dict[str, Stamp]:
        """(size, mtime in ns, inode) of each log: one stat each, nothing read. The mtime
        is not `updatedAt` (a copy sets it) but never before it: `updated_at` and
        `newest_first` (acp_bridge.cli.sessions.rows) read the time from the tail
        (jsonl_time.tail_time) where it matters."""
        return {sid: (st.st_size, st.st_mtime_ns, st.st_ino) for sid, st in session_files(self.sessions_dir)}

    def fingerprint(self) -> str | None:
        return None  # a log's append changes its file's times, not its folder's: stamps it is

    def unstamped(self) -> set[str]:
        return set()  # every write changes the stamp

    def peek(self, session_id: str) -> SessionPeek:
        try:
            with open(self.path_of(session_id), "rb") as f:
                st = os.fstat(f.fileno())
                mtime = last_time_in(f, st.st_size) or st.st_mtime_ns // 1_000_000
                f.seek(0)
                first = f.readline(1 << 16)
                header = orjson.loads(first)
                title = None
                if isinstance(header, dict):  # what `list` gives
                    title = titled(kept_title(self.titles_dir, session_id, self.path_of(session_id)),
                                   header, None) or _first_prompt_title(f)
        except (OSError, orjson.JSONDecodeError):
            return SessionPeek(None, None, None)
        if not isinstance(header, dict):
            return SessionPeek(None, mtime, None)
        return SessionPeek(header, mtime, title if isinstance(title, str) else None)

    def raw(self, session_id: str) -> bytes:
        return b"".join(self.raw_chunks(session_id))

    def raw_chunks(self, session_id: str) -> Iterator[bytes]:
        f = log_opener(session_id, self.path_of(session_id))()  # raises here if missing
        return _chunks_of(f)

    def owner(self, session_id: str) -> Owner:
        return self._locks.owner(lock_file(self.locks_dir, validate_session_id(session_id)))

    def close(self) -> None:
        pass


def _chunks_of(f: BinaryIO) -> Iterator[bytes]:
    with f:
        while chunk := f.read(READ_BLOCK):
            yield chunk
