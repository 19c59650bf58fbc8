"""The tail file of a SQLite session: its streamed events since the last durability
point, as JSONL lines, outside the database.

    tails/<id>.jsonl        the events written since the last durable commit

Why not rows: a streamed event must reach the OS before its update reaches the client,
and a SQLite commit writes whole pages into the WAL (about 6 KB of disk per streamed
word with a model that streams slowly), which a full disk then cannot give back: the
DELETE that would undo them needs WAL space too. A line appended to a file costs its
own bytes, and undoing it is `ftruncate`, which never needs space. The database so
only ever holds durable points: each durable commit moves the tail's events into the
`events` table in the same transaction as the batch that made it durable, then empties
the tail (a crash in between leaves lines whose seq the database already has: readers
skip them). A failed commit rolls back whole, as SQLite does.

Readers read the database's rows, then the tail's lines (session.backends.sqlite_read).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import orjson

from session.backends.event_rows import Row, pieces
from session.events import Event
from session.files import FILE_MODE, private_dir, write_all
from session.scan import Damage, parse_events

TAILS_DIR = "tails"
READ_BLOCK = 256 << 10

# The line format event_line writes: the data bytes are sliced out as written, so the
# row gets exactly what the client's updates were derived from.
_LINE = re.compile(rb'\{"type":"([a-z_/]+)","seq":(\d+),"time":(-?\d+),"data":')


def tail_path(root: Path, session_id: str) -> Path:
    """Where a session's tail file is (the id is validated by the caller)."""
    return root / TAILS_DIR / f"{session_id}.jsonl"


class TailFile:
    """The owner's side of a tail file: appends, cuts back, removal. Opened on first
    use, so a session that never streams between durable points has no file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def append(self, data: bytes) -> None:
        if self._fd < 0:
            private_dir(self.path.parent)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
        write_all(self._fd, data)

    def cut(self, size: int) -> None:
        """Truncate to `size` bytes (freeing the space at once; never needs space)."""
        if self._fd >= 0:
            os.ftruncate(self._fd, size)
        elif size == 0:
            with contextlib.suppress(FileNotFoundError):
                os.truncate(self.path, 0)
        else:
            os.truncate(self.path, size)

    def close(self, *, remove: bool) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if remove:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def tail_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(byte offset, line) of each line of a tail file, the last one possibly without
    its newline; nothing for a file that does not exist."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, a generator holds it
    except FileNotFoundError:
        return
    with f:
        offset = 0
        rest = b""
        while chunk := f.read(READ_BLOCK):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield offset, line + b"\n"
                offset += len(line) + 1
        if rest:
            yield offset, rest


def tail_lines_from(path: Path, offset: int) -> list[bytes]:
    """The tail's lines from byte `offset` on (the last one as it is, newline or not)."""
    return [line for start, line in tail_lines(path) if start >= offset]


def tail_records(path: Path, from_seq: int) -> Iterator[tuple[int, Event | Damage]]:
    """(byte offset, record) of the tail's lines from the first one that does not stand
    before `from_seq` (the lines before it are already rows: a crash between a durable
    commit and the cut of the tail). A line without its newline is damage (torn)."""
    started = False
    for offset, line in tail_lines(path):
        if not line.endswith(b"\n"):
            yield offset, Damage("the last line of the tail file has no newline")
            return
        record = parse_events([line[:-1]])[0]
        if not started and type(record) is dict and record["seq"] < from_seq:
            continue
        started = True
        yield offset, record


def tail_after(path: Path, from_seq: int, piece_bytes: int) -> Iterator[bytes]:
    """The tail's lines, as stored, from the first that does not stand before
    `from_seq`, joined in pieces of about `piece_bytes`."""

    def lines() -> Iterator[bytes]:
        started = False
        for _, line in tail_lines(path):
            if not started:
                seq = _seq_of(line)
                if seq is not None and seq < from_seq:
                    continue
                started = True
            yield line

    return pieces(lines(), piece_bytes)


def _seq_of(line: bytes) -> int | None:
    match = _LINE.match(line)
    if match is not None:
        return int(match.group(2))
    try:
        seq = orjson.loads(line).get("seq")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return seq if type(seq) is int else None


def tail_rows(path: Path, from_seq: int, to_seq: int) -> tuple[list[Row], int]:
    """The tail's events of seq `from_seq` .. `to_seq` - 1 as rows (their data bytes as
    written), and the byte offset just after the last of them. They were checked by the
    load that read them."""
    rows: list[Row] = []
    end = 0
    for offset, line in tail_lines(path):
        match = _LINE.match(line)
        if match is not None and line.endswith(b"}\n"):
            seq = int(match.group(2))
            row: Row = (seq, match.group(1).decode(), int(match.group(3)), line[match.end():-2])
        else:  # a line of another shape (edited by hand): parsed whole
            try:
                value = orjson.loads(line)
                row = (value["seq"], value["type"], value["time"], orjson.dumps(value["data"]))
                seq = row[0]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                break
        if seq < from_seq:
            continue
        if seq >= to_seq:
            break
        rows.append(row)
        end = offset + len(line)
    return rows, end
