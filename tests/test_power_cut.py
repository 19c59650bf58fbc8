"""A power cut, simulated (issue 34; docs/persistence.md, "What is promised, by
failure" and "What a power cut is tested with"): turns are written through a live log,
and at every crash point (after each append, and inside each durable one, between its
write and its fsync) the store is rebuilt as a power cut may leave the disk: what the
last fsync made durable, with none, all, or a prefix torn at any byte of what was
written since (tests/support/power_cut.py). Each image is loaded by a new store:

- it loads (a torn or zeroed end is cut, never refused);
- nothing acknowledged is lost: every event up to the last durability point the log
  reported is there, as written;
- nothing unacknowledged is shown as done: what is there is a prefix of what was
  written, then only repair's closers, which end an unfinished turn `interrupted`.

The default run samples the cut points (each line's edges, and every 61st byte for
JSONL, each WAL frame's edges for SQLite); the `long` marker cuts JSONL at every byte
and SQLite at every 8th, `soak` SQLite at every byte."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from session import Event, SessionLog, SessionStore
from session.backends.jsonl import JsonlBackend
from session.backends.sqlite import DB_NAME, SqliteBackend
from session.backends.sqlite_tail import tail_path
from tests.support.logs import Script
from tests.support.power_cut import Disk, cut_points, images

SMOKE_EVERY = {"jsonl": 61, "sqlite": 4120}  # SQLite: a WAL frame (a 4 KiB page and its 24-byte header)


def script() -> Script:
    """Two turns: one streamed, one with tool calls (each a durability point)."""
    s = Script().text_turn("first question", "an answer of several words streamed one by one")
    return s.tool_turn(("c1", "c2")).text_turn("last question", "the last answer")


@dataclass(frozen=True)
class CrashPoint:
    """What was appended (the log's events), the next seq at the last durability point
    the log reported, and the disk images a power cut there may leave."""

    written: tuple[Event, ...]
    acked: int
    images: tuple[tuple[str, dict[str, bytes]], ...]  # (what, {file's path in the store: bytes})


def check_loaded(store: SessionStore, sid: str, point: CrashPoint, what: str) -> None:
    loaded = store.load(sid)
    try:
        events = list(loaded.log.events)
        kept = len(events) - loaded.report.closers
        assert events[:kept] == list(point.written[:kept]), f"{what}: events not written: {events[:kept]}"
        assert kept >= point.acked, f"{what}: {kept} events kept, {point.acked} acknowledged"
        for event in events[kept:]:
            if event["type"] == "turn/end":
                assert event["data"]["reason"] == {"kind": "interrupted", "cause": "crash"}, (what, event)
    finally:
        loaded.log.close()


def feed(log: SessionLog, s: Script) -> Iterator[None]:
    """Append the script's items one at a time, handing the streamed ones to the OS
    every third event as the host does before it writes an update; yields after each."""
    for n, (etype, data) in enumerate(s.items):
        log.append(etype, data)
        if n % 3 == 2:
            log.hand_off()
        yield


@dataclass
class LateDisk(Disk):
    """A disk on which each sync makes durable only what the previous one saw: a store
    that synced before it wrote. The check must catch it."""

    seen: dict[str, bytes] = field(default_factory=dict)  # what the last sync saw

    def sync(self, fd: int) -> None:
        durable = self.durable | self.seen
        super().sync(fd)
        self.seen, self.durable = self.durable, durable


def jsonl_points(root: Path, every: int, disk: Disk | None = None) -> tuple[str, list[CrashPoint]]:
    disk = disk or Disk()
    store = SessionStore(JsonlBackend(root, sync=disk.sync))
    log = store.create(cwd="/w")
    path = str(store.backend.path_of(log.id))  # type: ignore[attr-defined]
    name = str(Path(path).relative_to(root))
    durable = Path(path).read_bytes()  # published whole, fsync'd (session.files.publish)
    points: list[CrashPoint] = []
    for _ in feed(log, script()):
        now = Path(path).read_bytes()
        before, acked_before = durable, len(points) and points[-1].acked
        # Inside the append (written, its fsync not returned), then after it.
        points.append(CrashPoint(tuple(log.events), acked_before,
                                 tuple((w, {name: b}) for w, b in images(before, now, every=every))))
        durable = disk.durable.get(path, durable)
        if durable != before:
            points.append(CrashPoint(tuple(log.events), log.durable_seq,
                                     tuple((w, {name: b}) for w, b in images(durable, now, every=every))))
        else:
            points[-1] = CrashPoint(points[-1].written, log.durable_seq, points[-1].images)
    log.close()
    assert disk.syncs >= 6  # each tool/call, step/end and turn/end
    return log.id, points


def sqlite_points(root: Path, every: int) -> tuple[str, list[CrashPoint]]:
    """SQLite syncs inside itself: the database and its WAL are copied after each
    durable commit returns (what its fsync made durable), and the WAL frames a commit
    appended are torn as a cut inside that commit. The tail file (streamed events, never
    fsync'd) may hold any prefix of what it was given, and after a commit may still
    hold what the commit moved into rows (its cut not on disk)."""
    store = SessionStore(SqliteBackend(root))
    log = store.create(cwd="/w")
    db, wal = DB_NAME, f"{DB_NAME}-wal"
    tail = str(tail_path(Path("."), log.id))

    def read(name: str) -> bytes:
        p = root / name
        return p.read_bytes() if p.exists() else b""

    durable = {db: read(db), wal: read(wal)}
    points: list[CrashPoint] = []
    acked, tail_before = log.durable_seq, b""
    for _ in feed(log, script()):
        now = {db: read(db), wal: read(wal)}
        tail_now = read(tail)
        written = tuple(log.events)
        if log.durable_seq != acked:  # a durable commit: cut inside it, and after it with the tail not cut
            assert now[db] == durable[db] or durable[wal] == b"", "a checkpoint between commits"
            inside = [(f"commit {w}", {db: durable[db], wal: b, tail: tail_before})
                      for w, b in images(durable[wal], now[wal], every=every, lines=False)]
            points.append(CrashPoint(written, acked, tuple(inside)))
            acked, durable = log.durable_seq, now
            points.append(CrashPoint(written, acked, (("tail not cut", {**now, tail: tail_before}),)))
        shown = [(f"tail {w}", {**durable, tail: b}) for w, b in images(b"", tail_now, every=every)]
        points.append(CrashPoint(written, acked, tuple(shown)))
        tail_before = tail_now
    log.close()
    return log.id, points


def build(root: Path, image: dict[str, bytes]) -> None:
    """A store folder holding `image`'s files and nothing else (the store makes its
    locks and its reserve as it opens)."""
    if root.exists():
        shutil.rmtree(root)
    for name, data in image.items():
        if name.endswith("-wal") and not data:
            continue  # no WAL on disk
        (root / name).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        (root / name).write_bytes(data)


def no_sync(fd: int) -> None:
    """An image is checked, not kept: its repair need not wait for the disk."""


def run(kind: str, tmp_path: Path, images_in: Path, every: int, disk: Disk | None = None) -> int:
    live = tmp_path / "live"
    sid, points = jsonl_points(live, every, disk) if kind == "jsonl" else sqlite_points(live, every)
    loads = 0
    root = images_in / "image"
    # An image checked at an earlier point with the same acknowledged seq was checked
    # against fewer events written (a prefix of these): it holds here too.
    seen: set[tuple[int, tuple[tuple[str, bytes], ...]]] = set()
    for n, point in enumerate(points):
        for what, image in point.images:
            key = (point.acked, tuple(sorted(image.items())))
            if key in seen:
                continue
            seen.add(key)
            build(root, image)
            store = SessionStore(JsonlBackend(root, sync=no_sync) if kind == "jsonl" else SqliteBackend(root))
            try:
                check_loaded(store, sid, point, f"crash point {n}, {what}")
            finally:
                store.close()
            loads += 1
    shutil.rmtree(root)
    return loads


@pytest.fixture
def images_in(tmp_path: Path) -> Iterator[Path]:
    """Where the images are made: memory when the machine has it (the SQLite store's
    repair syncs for real), else beside the test's files."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        yield tmp_path
        return
    where = Path(tempfile.mkdtemp(prefix="power-cut-", dir=shm))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_power_cut_loses_nothing_acknowledged_and_shows_nothing_unacknowledged(
        tmp_path: Path, images_in: Path, kind: str) -> None:
    loads = run(kind, tmp_path, images_in, SMOKE_EVERY[kind])
    assert loads > 100


def test_the_check_catches_a_sync_that_came_before_its_write(tmp_path: Path, images_in: Path) -> None:
    with pytest.raises(AssertionError, match="acknowledged"):
        run("jsonl", tmp_path, images_in, SMOKE_EVERY["jsonl"], LateDisk())


@pytest.mark.long
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("kind", "every"), [("jsonl", 1), ("sqlite", 8)])
def test_a_power_cut_at_every_byte(tmp_path: Path, images_in: Path, kind: str, every: int) -> None:
    """JSONL cut at every byte; SQLite at every 8th (each WAL frame's edges too): its
    frames are checked by checksum, so a cut inside one is one case however placed."""
    run(kind, tmp_path, images_in, every)


@pytest.mark.soak
@pytest.mark.timeout(3600)
def test_a_sqlite_power_cut_at_every_byte(tmp_path: Path, images_in: Path) -> None:
    run("sqlite", tmp_path, images_in, 1)


@pytest.mark.parametrize(("old", "new", "every", "points"), [
    (b"ab\n", b"ab\ncd\n", 100, [3, 5, 6]),  # an append: from its first byte, each line's edges
    (b"ab\n", b"ab\ncdef", 2, [3, 4, 5, 6, 7]),
    (b"", b"x" * 10, 4, [0, 3, 4, 7, 8, 9, 10]),  # each stride's point and the byte before
    (b"", b"xy", 1, [0, 1, 2]),
    (b"abcd", b"abXd", 10, [2, 3, 4]),  # an overwrite: from the first byte that changed
    (b"same", b"same", 1, [4]),
    (b"ab\n", b"ab\ncd\nef", 100, [3, 5, 6, 7, 8]),  # a torn last line: its end and the byte before
    (b"", b"", 1, [0]),
])
def test_cut_points(old: bytes, new: bytes, every: int, points: list[int]) -> None:
    assert cut_points(old, new, every=every) == points


def test_cut_points_of_a_binary_file_take_no_line_edges() -> None:
    assert cut_points(b"", b"a\nb\nc\nd", every=4) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert cut_points(b"", b"a\nb\nc\nd", every=4, lines=False) == [0, 3, 4, 6, 7]


def test_images_of_an_append_and_of_a_truncate() -> None:
    assert list(images(b"a\n", b"a\nbc", every=1)) == [
        ("torn at 2", b"a\n"), ("torn at 3", b"a\nb"), ("torn at 4", b"a\nbc"),
        ("all written", b"a\nbc"), ("size without data", b"a\n\0\0")]
    # A truncate that reached the disk, or did not.
    assert [b for _, b in images(b"abcd", b"ab", every=1)] == [b"abcd", b"ab"]
