"""When a JSONL log last changed, as the log says it: the `time` of its last event (the
header's `createdAt` for a log without one), read from the file's tail.

A file's mtime is not that: a copied or restored store has every log's mtime at the
copy, and `sessions list` would list them all as updated then, in no order. The SQL
stores keep the last event's time already (their `updatedAt`); this gives a JSONL store
the same, at the cost of one small read at the end of each file.

Every event line starts `{"type":"...","seq":N,"time":T,` (session.log.encode writes
its members in that order), and no such run of bytes can stand inside a JSON string
(its quotes are escaped), so the last match in the tail is the last event's head. A last
line longer than the tail read is read further back, a block at a time. Pure but for
the reads.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import BinaryIO, Final

FIRST_READ: Final = 512  # stamps' first look: a log's last event, as a rule
TAIL: Final = 4096  # the first read: a log ends with a short event (turn/end) as a rule
_EVENT_HEAD: Final = re.compile(rb'\{"type":"[^"\\]*","seq":\d+,"time":(\d+)')
_CREATED: Final = re.compile(rb'"createdAt":(\d+)')


def last_time_in(f: BinaryIO, size: int) -> int | None:
    """The `time` of the last event whose head is in the file `f` of `size` bytes (the
    header's `createdAt` when there is none), None when neither is found."""
    end = size
    block = TAIL
    carried = b""
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        data = f.read(end - start) + carried[:64]  # an event head cut at the block's end
        heads = _EVENT_HEAD.findall(data)
        if heads:
            return int(heads[-1])
        if start == 0:
            created = _CREATED.search(data)
            return int(created[1]) if created else None
        carried, end, block = data, start, min(block * 4, 1 << 22)
    return None


def tail_time(path: Path | str, size: int, fallback: int) -> int:
    """`last_time` for a file whose size is known (a directory scan's stat): one
    `pread` of its last FIRST_READ bytes, which hold a log's last event as a rule (a
    `turn/end` is about 100 bytes), the whole tail walk only when they do not. The
    cheap path of `StoreReader.stamps`: one open, one read, one close per log."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return fallback
    try:
        start = max(0, size - FIRST_READ)
        data = os.pread(fd, size - start, start)
        heads = _EVENT_HEAD.findall(data)
        if heads:
            return int(heads[-1])
        with os.fdopen(os.dup(fd), "rb") as f:
            found = last_time_in(f, size)
    except OSError:
        return fallback
    finally:
        os.close(fd)
    return fallback if found is None else found


def last_time(path: Path | str, fallback: int) -> int:
    """`last_time_in` of the file at `path`; `fallback` when it cannot be read or says
    nothing (the caller's mtime)."""
    try:
        with open(path, "rb") as f:
            found = last_time_in(f, os.fstat(f.fileno()).st_size)
    except OSError:
        return fallback
    return fallback if found is None else found
