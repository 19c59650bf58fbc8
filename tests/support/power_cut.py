"""A power cut, simulated (issue 34; docs/persistence.md, "What a power cut is tested
with"): what a store wrote since its last fsync is kept apart from what the fsync made
durable, and at a crash point the disk is left with the durable bytes and none, all, or
a prefix torn at any byte of what came after (the model of ALICE and of SQLite's own
crash tests: writes reach the disk in order, the last one may be cut anywhere).

`Disk` sees every fsync of the JSONL backend (its `sync` seam) and keeps a copy of the
file as it was then; `images` makes the disk images of one crash point. Pure but for
`Disk.sync`, which syncs for real and reads the file back."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Disk:
    """The durable contents of each file a store fsyncs, as of its last fsync."""

    durable: dict[str, bytes] = field(default_factory=dict)
    syncs: int = 0

    def sync(self, fd: int) -> None:
        os.fdatasync(fd)
        self.syncs += 1
        path = os.readlink(f"/proc/self/fd/{fd}")
        with open(path, "rb") as f:
            self.durable[path] = f.read()


def cut_points(old: bytes, new: bytes, *, every: int, lines: bool = True) -> list[int]:
    """Where a crash may cut the writes that turned `old` into `new` (how many bytes of
    `new` reached the disk, from the first byte that changed): every `every`th byte and
    the byte before it (with `every` a WAL frame's size: whole frames, and the last one
    short of a byte), and (`lines`: a text file) each line's edges, one byte either side."""
    start = next((n for n, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    stride = range(start, len(new) + 1, every)
    points = set(stride) | {p - 1 for p in stride} | {start, len(new), len(new) - 1}
    for n in range(start, len(new) if lines else start):
        if new[n] == 0x0A:  # a line's end: the byte before, the newline, the byte after
            points |= {n, n + 1, n + 2}
    return sorted(p for p in points if start <= p <= len(new))


def images(old: bytes, new: bytes, *, every: int = 1, lines: bool = True) -> Iterator[tuple[str, bytes]]:
    """The file as a power cut may leave it when `old` was durable and `new` was
    written since: `new`'s first `k` bytes over `old` for each cut point (writes reach
    the disk in order), `new` itself (a shrink: a truncate that reached the disk), and
    the appended bytes as zeros (the size reached the disk, the data did not: what a
    file system without ordered data may show)."""
    for k in cut_points(old, new, every=every, lines=lines):
        yield f"torn at {k}", new[:k] + old[k:]
    yield "all written", new
    if len(new) > len(old) and new.startswith(old):
        yield "size without data", old + bytes(len(new) - len(old))
