"""Torn tails and committed-region damage, on real stores (DESIGN.md sections 2 and 3).

The JSONL sweep cuts a real log at every byte offset of its last records (and at the
edges and middle of every other line) and checks exactly what the contract promises:
the complete lines survive, the partial line is cut and kept aside, an open final turn
is closed by `interrupted_turn_closers`, and the repair is durable (a second load finds
nothing to repair). Damage that a later `turn/end` follows refuses the load, naming
where, and leaves the stored log untouched.
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from session import (
    Event,
    LoadedSession,
    SessionCorruptError,
    SessionLockedError,
    SessionStore,
    SessionVersionError,
    check_invariants,
    derive_messages,
)
from session.backends.jsonl import JsonlBackend
from session.backends.memory import MemoryBackend
from session.backends.sqlite import DB_NAME, SqliteBackend
from session.transcript import unanswered_calls
from tests.support.logs import Script, closers_of, write

# How many final records of the log are cut at every byte offset; the rest of the file
# is cut at the edges and in the middle of each line. Every cut costs a few fsyncs (a
# whole-file sweep took ~25 s), so the cuts are also spread over worker threads.
SWEEP_RECORDS = 4
SWEEP_WORKERS = 8

VARIANTS = ("closed", "open")


def make_clock(start: int = 1_700_000_000_000) -> Callable[[], int]:
    """A clock that ticks 1 ms per call, so every event has its own time."""
    counter = itertools.count(start)
    return lambda: next(counter)


def script_for(variant: str) -> Script:
    """Three complete turns, then either a fourth complete turn or an open one that
    stops inside a step, after a tool call started (c1) and one that did not (c2)."""
    script = Script().text_turn("hi", "hello back").tool_turn(("a1",)).text_turn("more", "ok")
    if variant == "closed":
        return script.text_turn("last", "bye now")
    script.start_turn("go on").start_step().chunk("let me look")
    return script.message("looking", calls=("c1", "c2")).call("c1")


@dataclass
class Built:
    root: Path
    sid: str
    events: list[Event]


def build(make_backend: Callable[[Path], Any], root: Path, variant: str) -> Built:
    backend = make_backend(root)
    store = SessionStore(backend, clock=make_clock())
    log = store.create(cwd="/w")
    written = write(log, script_for(variant))
    sid = log.id
    log.close()
    backend.close()
    return Built(root, sid, written)


def last_turn(events: list[Event]) -> int:
    return max((e["data"]["turn"] for e in events if e["type"] == "turn/start"), default=0)


def assert_valid_closed_log(events: list[Event]) -> None:
    check_invariants(events, closed=True)
    assert unanswered_calls(derive_messages(events)) == []


def assert_cut_and_final(store: SessionStore, sid: str, loaded: LoadedSession,
                         expected: list[Event], cut: bytes, records: int) -> None:
    """`loaded` holds `expected` after cutting `cut` (`records` records) into a file
    kept aside; the repair is final (a second load changes nothing and reads the same)
    and leaves a valid closed log."""
    assert comparable(list(loaded.log.events)) == comparable(expected)
    assert loaded.report.torn_records == records
    assert loaded.report.torn_bytes == len(cut)
    assert loaded.report.kept_aside is not None
    assert Path(loaded.report.kept_aside).read_bytes() == cut
    assert_repair_is_final(store, sid, loaded)


def assert_repair_is_final(store: SessionStore, sid: str, loaded: LoadedSession) -> None:
    """Close `loaded`; a second load changes nothing, reads the same events, and those
    are a valid closed log."""
    events = list(loaded.log.events)
    loaded.log.close()
    again = store.load(sid)
    assert again.report.repaired is False
    assert list(again.log.events) == events
    again.log.close()
    assert_valid_closed_log(events)


def comparable(events: list[Event]) -> list[tuple[str, int, int, dict[str, Any]]]:
    return [(e["type"], e["seq"], e["time"], e["data"]) for e in events]


# --------------------------------------------------------------------------------------
# JSONL: the byte sweep


@dataclass
class JsonlLog:
    root: Path
    sid: str
    path: Path
    content: bytes
    header_end: int  # offset of line 2 (the first event)
    ends: list[int]  # offset just after each event line's newline, in seq order
    events: list[Event]  # parsed from the file


def jsonl_log(tmp_path: Path, variant: str) -> JsonlLog:
    built = build(JsonlBackend, tmp_path / "store", variant)
    path = JsonlBackend(built.root).path_of(built.sid)
    content = path.read_bytes()
    header_end = content.index(b"\n") + 1
    ends: list[int] = []
    events: list[Event] = []
    offset = header_end
    for line in content[header_end:].split(b"\n")[:-1]:
        offset += len(line) + 1
        ends.append(offset)
        events.append(orjson.loads(line))
    assert offset == len(content), "the log ends with a newline"
    assert events == built.events, "the file holds exactly what was appended"
    return JsonlLog(built.root, built.sid, path, content, header_end, ends, events)


def sweep_offsets(log: JsonlLog) -> list[int]:
    """Every byte offset of the last SWEEP_RECORDS records; for earlier lines, their
    start, start + 1, middle and last byte before the newline."""
    starts = [log.header_end, *log.ends[:-1]]
    full_from = starts[-SWEEP_RECORDS]
    offsets = set(range(full_from, len(log.content) + 1))
    for start, end in zip(starts, log.ends, strict=True):
        offsets.update({start, start + 1, (start + end) // 2, end - 1, end})
    return sorted(offsets)


def expected_after_cut(log: JsonlLog, k: int) -> tuple[list[Event], list[Event], int, int]:
    """(surviving events, closers, byte offset where the partial line starts, partial
    length) for the log cut to k bytes, as DESIGN.md sections 2 and 3 say."""
    complete = sum(1 for end in log.ends if end <= k)
    boundary = log.ends[complete - 1] if complete else log.header_end
    prefix = log.events[:complete]
    return prefix, closers_of(prefix), boundary, k - boundary


def check_cut(store: SessionStore, path: Path, log: JsonlLog, k: int) -> None:
    """Cut the stored log to k bytes, load it, and check the repair to the letter."""
    path.write_bytes(log.content[:k])
    prefix, closers, boundary, partial = expected_after_cut(log, k)
    where = f"cut at byte {k} of {len(log.content)}"

    loaded = store.load(log.sid)
    events = list(loaded.log.events)
    report = loaded.report
    loaded.log.close()

    assert comparable(events) == comparable(prefix + closers), where
    if closers:
        assert [c["seq"] for c in closers] == list(
            range(len(prefix), len(prefix) + len(closers))
        ), where
        assert {c["time"] for c in closers} == {prefix[-1]["time"]}, where
        assert events[-1]["data"]["reason"] == {"kind": "interrupted", "cause": "crash"}, where
    assert report.torn_bytes == partial, where
    assert report.torn_records == (1 if partial else 0), where
    assert report.closers == len(closers), where
    assert report.repaired == bool(partial or closers), where
    assert report.interrupted_turn == (closers[-1]["data"]["turn"] if closers else None), where
    if partial:
        assert report.kept_aside is not None, where
        assert Path(report.kept_aside).read_bytes() == log.content[boundary:k], where
        Path(report.kept_aside).unlink()
    else:
        assert report.kept_aside is None, where

    # The repair is durable: the file holds the surviving lines and then the closers.
    on_disk = path.read_bytes()
    assert on_disk.startswith(log.content[:boundary]), where
    assert on_disk.count(b"\n") == 1 + len(prefix) + len(closers), where
    again = store.load(log.sid)
    assert again.report.repaired is False, where
    assert again.report.kept_aside is None, where
    assert list(again.log.events) == events, where
    again.log.close()
    assert path.read_bytes() == on_disk, where

    assert_valid_closed_log(events)


@pytest.mark.parametrize("variant", VARIANTS)
def test_jsonl_cut_at_every_offset(tmp_path: Path, variant: str) -> None:
    log = jsonl_log(tmp_path, variant)
    offsets = sweep_offsets(log)
    assert len(offsets) > 300
    assert offsets[-1] == len(log.content)

    # Each repair costs a few fsyncs: spread the offsets over a few stores (threads, as
    # fsync releases the GIL), each holding its own copy of the session.
    def sweep(worker: int) -> int:
        backend = JsonlBackend(tmp_path / f"worker{worker}")
        store = SessionStore(backend)
        path = backend.path_of(log.sid)
        mine = offsets[worker::SWEEP_WORKERS]
        for k in mine:
            check_cut(store, path, log, k)
        return len(mine)

    with ThreadPoolExecutor(SWEEP_WORKERS) as pool:
        done = sum(pool.map(sweep, range(SWEEP_WORKERS)))
    assert done == len(offsets)


@pytest.mark.parametrize("variant", VARIANTS)
def test_jsonl_next_turn_after_repair(tmp_path: Path, variant: str) -> None:
    log = jsonl_log(tmp_path, variant)
    store = SessionStore(JsonlBackend(log.root))
    last_start = log.ends[-2]
    # Mid last record, just before its newline, at a boundary inside the last turn,
    # right after the previous turn's end, and the whole file.
    turn_starts = [i for i, e in enumerate(log.events) if e["type"] == "turn/start"]
    after_prev_end = log.ends[turn_starts[-1] - 1]
    for k in (
        last_start + 7,
        len(log.content) - 1,
        log.ends[-3],
        after_prev_end,
        len(log.content),
    ):
        log.path.write_bytes(log.content[:k])
        loaded = store.load(log.sid)
        repaired = list(loaded.log.events)
        turn = last_turn(repaired) + 1
        more = write(loaded.log, Script(first_turn=turn).text_turn("again", "sure thing"))
        loaded.log.close()
        assert more[0]["data"] == {"turn": turn, "trigger": {"kind": "prompt"}, "mode": "ask"}
        assert more[0]["seq"] == len(repaired)

        again = store.load(log.sid)
        assert again.report.repaired is False, k
        assert list(again.log.events) == repaired + more, k
        again.log.close()
        assert_valid_closed_log(repaired + more)


# --------------------------------------------------------------------------------------
# JSONL: damage in the committed region, and in the tail


def line_span(log: JsonlLog, seq: int) -> tuple[int, int]:
    """(start offset, end offset after the newline) of event `seq`'s line."""
    start = log.header_end if seq == 0 else log.ends[seq - 1]
    return start, log.ends[seq]


def committed_seq(log: JsonlLog) -> int:
    """An event of the second turn: later turns end, so it was committed."""
    return next(
        i for i, e in enumerate(log.events) if e["type"] == "tool/call" and e["data"]["turn"] == 2
    )


def assert_refused(
    store: SessionStore, log: JsonlLog, offset: int, line: int
) -> SessionCorruptError:
    before = log.path.read_bytes()
    with pytest.raises(SessionCorruptError) as info:
        store.load(log.sid)
    err = info.value
    assert log.sid in str(err)
    assert f"offset {offset}" in str(err)
    assert err.session_id == log.sid
    assert err.details["offset"] == offset
    assert err.details["line"] == line
    assert log.path.read_bytes() == before, "a refused load does not touch the log"
    assert not (log.root / "torn").exists() or not any((log.root / "torn").iterdir())
    # The lock was released: trying again fails the same way, not with "locked".
    with pytest.raises(SessionCorruptError) as second:
        store.load(log.sid)
    assert second.value.details == err.details
    # Even from another backend instance (another open file description).
    with pytest.raises(SessionCorruptError):
        SessionStore(JsonlBackend(log.root)).load(log.sid)
    return err


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(
    "damage",
    ["broken", "structural-byte", "empty-line", "type-garbled", "seq-duplicate"],
)
def test_jsonl_committed_damage_refuses(tmp_path: Path, variant: str, damage: str) -> None:
    log = jsonl_log(tmp_path, variant)
    seq = committed_seq(log)
    start, end = line_span(log, seq)
    line = log.content[start : end - 1]
    if damage == "broken":
        new = b'{"broken'
    elif damage == "structural-byte":
        assert line.endswith(b"}")
        new = line[:-1] + b"]"
    elif damage == "empty-line":
        new = b""
    elif damage == "type-garbled":
        new = line.replace(b'"tool/call"', b'"tool/cull"')
    else:  # the previous line twice: a seq out of order
        prev_start, _ = line_span(log, seq - 1)
        new = log.content[prev_start : start - 1]
    assert new != line
    log.path.write_bytes(log.content[:start] + new + b"\n" + log.content[end:])
    err = assert_refused(SessionStore(JsonlBackend(log.root)), log, start, seq + 2)
    assert "turn/end" in str(err)


@pytest.mark.parametrize("variant", VARIANTS)
def test_jsonl_seq_gap_before_last_turn_end_refuses(tmp_path: Path, variant: str) -> None:
    log = jsonl_log(tmp_path, variant)
    seq = committed_seq(log)
    start, end = line_span(log, seq)
    # Drop the line: the next event (seq + 1) now sits where seq was expected.
    log.path.write_bytes(log.content[:start] + log.content[end:])
    err = assert_refused(SessionStore(JsonlBackend(log.root)), log, start, seq + 2)
    assert f"seq {seq + 1} where {seq} was expected" in str(err)


def test_jsonl_damage_of_the_last_turn_end_line_is_a_torn_tail(tmp_path: Path) -> None:
    # The last turn/end itself unparsable: nothing after it proves it was committed.
    log = jsonl_log(tmp_path, "closed")
    start, _ = line_span(log, len(log.events) - 1)
    log.path.write_bytes(log.content[:start] + b'{"broken\n')
    loaded = SessionStore(JsonlBackend(log.root)).load(log.sid)
    prefix = log.events[:-1]
    closers = closers_of(prefix)
    assert [c["type"] for c in closers] == ["turn/end"]
    assert comparable(list(loaded.log.events)) == comparable(prefix + closers)
    assert loaded.report.torn_records == 1
    assert loaded.report.torn_bytes == len(b'{"broken\n')
    assert loaded.report.kept_aside is not None
    assert Path(loaded.report.kept_aside).read_bytes() == b'{"broken\n'
    loaded.log.close()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("garbage", [b'{"broken\n', b"\x00\x00\x00\n", b"\n", b"not json at all"])
def test_jsonl_garbage_after_last_turn_end_is_cut(
    tmp_path: Path, variant: str, garbage: bytes
) -> None:
    log = jsonl_log(tmp_path, variant)
    log.path.write_bytes(log.content + garbage)
    store = SessionStore(JsonlBackend(log.root))
    loaded = store.load(log.sid)
    closers = closers_of(log.events)
    assert_cut_and_final(store, log.sid, loaded, log.events + closers, garbage, 1)


def test_jsonl_seq_gap_after_last_turn_end_is_cut(tmp_path: Path) -> None:
    # The open turn loses its step/start line: from the gap on, the tail is torn, and
    # what is left of the turn (turn/start, user/message) is closed as interrupted.
    log = jsonl_log(tmp_path, "open")
    turn_start = max(i for i, e in enumerate(log.events) if e["type"] == "turn/start")
    gap = turn_start + 2
    assert log.events[gap]["type"] == "step/start"
    start, end = line_span(log, gap)
    damaged = log.content[:start] + log.content[end:]
    log.path.write_bytes(damaged)
    store = SessionStore(JsonlBackend(log.root))
    loaded = store.load(log.sid)
    prefix = log.events[:gap]
    closers = closers_of(prefix)
    assert [c["type"] for c in closers] == ["turn/end"]
    assert_cut_and_final(store, log.sid, loaded, prefix + closers, damaged[start:], len(log.events) - gap - 1)


def test_jsonl_garbage_line_then_more_lines_after_last_turn_end_is_cut(tmp_path: Path) -> None:
    log = jsonl_log(tmp_path, "open")
    turn_start = max(i for i, e in enumerate(log.events) if e["type"] == "turn/start")
    bad = turn_start + 3  # the chunk of the open step; valid lines follow it
    start, end = line_span(log, bad)
    log.path.write_bytes(log.content[:start] + b'{"broken\n' + log.content[end:])
    store = SessionStore(JsonlBackend(log.root))
    loaded = store.load(log.sid)
    prefix = log.events[:bad]
    closers = closers_of(prefix)
    assert [c["type"] for c in closers] == ["step/end", "turn/end"]
    assert_cut_and_final(store, log.sid, loaded, prefix + closers, b'{"broken\n' + log.content[end:],
                         len(log.events) - bad)


# Lines that parse as events but break the invariants (a flipped digit, a garbled key):
# the load is refused as corrupt, naming the event, before anything is written. The
# closers of an invalid log mean nothing, and a refused load must leave the log as is.
# (variant, event type, its first or last occurrence, bytes, replacement)
INVALID_EVENTS = [
    # In the committed region (later turns end)...
    ("closed", "tool/call", "first", b'"turn":2', b'"turn":3'),
    ("open", "tool/call", "first", b'"turn":2', b'"turn":3'),
    ("closed", "assistant/message", "first", b'"content":[', b'"content":[7,'),
    # ... and in the open final turn.
    ("open", "turn/start", "last", b'"turn":4', b'"turn":9'),
    ("open", "turn/start", "last", b'"turn":4', b'"tutn":4'),
    ("open", "assistant/message", "last", b'"step":1', b'"stem":1'),
    ("open", "assistant/message", "last", b'"content":[', b'"content":[7,'),
]


@pytest.mark.parametrize(("variant", "etype", "which", "old", "new"), INVALID_EVENTS)
def test_jsonl_invalid_event_refuses_without_writing(
    tmp_path: Path, variant: str, etype: str, which: str, old: bytes, new: bytes
) -> None:
    log = jsonl_log(tmp_path, variant)
    seqs = [i for i, e in enumerate(log.events) if e["type"] == etype]
    seq = seqs[0] if which == "first" else seqs[-1]
    start, end = line_span(log, seq)
    line = log.content[start:end]
    assert old in line
    damaged = log.content[:start] + line.replace(old, new, 1) + log.content[end:]
    log.path.write_bytes(damaged)
    store = SessionStore(JsonlBackend(log.root))
    for _ in range(2):  # and again: the lock was released, nothing was repaired
        with pytest.raises(SessionCorruptError) as info:
            store.load(log.sid)
        assert log.sid in str(info.value)
        assert info.value.details["seq"] == seq
        assert log.path.read_bytes() == damaged, "a refused load wrote to the log"
        assert not (log.root / "torn").exists() or not any((log.root / "torn").iterdir())


# --------------------------------------------------------------------------------------
# JSONL: the header


def test_jsonl_truncated_header_refuses_at_every_offset(tmp_path: Path) -> None:
    log = jsonl_log(tmp_path, "closed")
    store = SessionStore(JsonlBackend(log.root))
    newline = log.header_end - 1
    for k in range(newline + 1):  # the empty file up to the whole header without "\n"
        content = log.content[:k]
        log.path.write_bytes(content)
        with pytest.raises(SessionCorruptError) as info:
            store.load(log.sid)
        assert log.sid in str(info.value), k
        assert info.value.session_id == log.sid
        assert info.value.details.get("reason") == "header", k
        assert log.path.read_bytes() == content, k
    # A whole header line but garbage where it should be, events following.
    log.path.write_bytes(b'{"type": "sess\n' + log.content[log.header_end :])
    with pytest.raises(SessionCorruptError) as info:
        store.load(log.sid)
    assert log.sid in str(info.value)
    # And a header naming another session.
    header = orjson.loads(log.content[:newline])
    header["id"] = "00000000-0000-4000-8000-000000000000"
    log.path.write_bytes(orjson.dumps(header) + log.content[newline:])
    with pytest.raises(SessionCorruptError) as info:
        store.load(log.sid)
    assert log.sid in str(info.value)


@pytest.mark.parametrize("version", [1, -1, "0", None, False])
def test_jsonl_header_version_refuses(tmp_path: Path, version: object) -> None:
    log = jsonl_log(tmp_path, "closed")
    newline = log.header_end - 1
    header = orjson.loads(log.content[:newline])
    header["version"] = version
    content = orjson.dumps(header) + log.content[newline:]
    log.path.write_bytes(content)
    store = SessionStore(JsonlBackend(log.root))
    with pytest.raises(SessionVersionError) as info:
        store.load(log.sid)
    assert log.sid in str(info.value)
    assert f"version {version!r}" in str(info.value)
    assert info.value.details["version"] == version
    assert log.path.read_bytes() == content
    with pytest.raises(SessionVersionError):  # not SessionLockedError
        store.load(log.sid)


# --------------------------------------------------------------------------------------
# SQLite


@contextlib.contextmanager
def raw_db(root: Path) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(root / DB_NAME)
    try:
        yield db
        db.commit()
    finally:
        db.close()


def rows(root: Path, sid: str, table: str = "events") -> list[tuple[Any, ...]]:
    with raw_db(root) as db:
        return db.execute(
            f"SELECT seq, type, time, data FROM {table} WHERE session_id = ? ORDER BY seq", (sid,)
        ).fetchall()


def sqlite_built(tmp_path: Path, variant: str) -> Built:
    return build(SqliteBackend, tmp_path / "store", variant)


def load_sqlite(built: Built) -> tuple[list[Event], Any, str | None]:
    backend = SqliteBackend(built.root)
    try:
        loaded = SessionStore(backend).load(built.sid)
        events = list(loaded.log.events)
        report = loaded.report
        loaded.log.close()
    finally:
        backend.close()
    return events, report, report.kept_aside


def assert_sqlite_reloads_clean(built: Built, events: list[Event]) -> None:
    backend = SqliteBackend(built.root)
    try:
        again = SessionStore(backend).load(built.sid)
        assert again.report.repaired is False
        assert list(again.log.events) == events
        again.log.close()
    finally:
        backend.close()
    assert_valid_closed_log(events)


@pytest.mark.parametrize(
    ("variant", "expected_closers"),
    [
        # The last row is the tool/call of the open turn: its call becomes not started.
        ("open", ["tool/result", "tool/result", "step/end", "turn/end"]),
        # The last row is the final turn/end itself.
        ("closed", ["turn/end"]),
    ],
)
def test_sqlite_damaged_last_row_is_cut(
    tmp_path: Path, variant: str, expected_closers: list[str]
) -> None:
    built = sqlite_built(tmp_path, variant)
    last = len(built.events) - 1
    with raw_db(built.root) as db:
        db.execute(
            "UPDATE events SET data = '{\"tr' WHERE session_id = ? AND seq = "
            "(SELECT max(seq) FROM events WHERE session_id = ?)",
            (built.sid, built.sid),
        )
    events, report, kept = load_sqlite(built)
    prefix = built.events[:last]
    closers = closers_of(prefix)
    assert [c["type"] for c in closers] == expected_closers
    assert comparable(events) == comparable(prefix + closers)
    if variant == "open":
        # c1's tool/call was the damaged row: now neither call is known to have started.
        texts = [c["data"]["content"][0]["text"] for c in closers[:2]]
        assert all("before it started" in t for t in texts)
    assert report.torn_records == 1
    assert report.torn_bytes > 0
    assert report.closers == len(closers)
    assert kept is not None and "torn_events" in kept
    torn = rows(built.root, built.sid, "torn_events")
    assert [(r[0], r[1], r[3]) for r in torn] == [(last, built.events[last]["type"], '{"tr')]
    assert [r[0] for r in rows(built.root, built.sid)] == list(range(len(events)))
    assert_sqlite_reloads_clean(built, events)


@pytest.mark.parametrize("variant", VARIANTS)
def test_sqlite_damaged_committed_row_refuses(tmp_path: Path, variant: str) -> None:
    built = sqlite_built(tmp_path, variant)
    seq = next(
        i for i, e in enumerate(built.events) if e["type"] == "tool/call" and e["data"]["turn"] == 2
    )
    with raw_db(built.root) as db:
        db.execute(
            "UPDATE events SET data = '{\"tr' WHERE session_id = ? AND seq = ?", (built.sid, seq)
        )
    before = rows(built.root, built.sid)
    for _ in range(2):  # the second attempt fails the same way: the lock was released
        backend = SqliteBackend(built.root)
        try:
            with pytest.raises(SessionCorruptError) as info:
                SessionStore(backend).load(built.sid)
        finally:
            backend.close()
        assert built.sid in str(info.value)
        assert f"seq {seq}" in str(info.value)
        assert info.value.details["seq"] == seq
        assert rows(built.root, built.sid) == before
        assert rows(built.root, built.sid, "torn_events") == []


@pytest.mark.parametrize("variant", VARIANTS)
def test_sqlite_seq_gap_before_last_turn_end_refuses(tmp_path: Path, variant: str) -> None:
    built = sqlite_built(tmp_path, variant)
    seq = 5  # inside the first turn
    with raw_db(built.root) as db:
        db.execute("DELETE FROM events WHERE session_id = ? AND seq = ?", (built.sid, seq))
    before = rows(built.root, built.sid)
    backend = SqliteBackend(built.root)
    try:
        with pytest.raises(SessionCorruptError) as info:
            SessionStore(backend).load(built.sid)
        assert built.sid in str(info.value)
        assert f"seq {seq + 1} where {seq} was expected" in str(info.value)
        assert info.value.details["seq"] == seq + 1
        with pytest.raises(SessionCorruptError):  # not SessionLockedError
            SessionStore(backend).load(built.sid)
    finally:
        backend.close()
    assert rows(built.root, built.sid) == before


def test_sqlite_seq_gap_after_last_turn_end_is_cut(tmp_path: Path) -> None:
    built = sqlite_built(tmp_path, "open")
    turn_start = max(i for i, e in enumerate(built.events) if e["type"] == "turn/start")
    gap = turn_start + 2  # the open turn's step/start
    with raw_db(built.root) as db:
        db.execute("DELETE FROM events WHERE session_id = ? AND seq = ?", (built.sid, gap))
    events, report, kept = load_sqlite(built)
    prefix = built.events[:gap]
    closers = closers_of(prefix)
    assert [c["type"] for c in closers] == ["turn/end"]
    assert comparable(events) == comparable(prefix + closers)
    assert report.torn_records == len(built.events) - gap - 1
    assert kept is not None
    torn = rows(built.root, built.sid, "torn_events")
    assert [r[0] for r in torn] == list(range(gap + 1, len(built.events)))
    assert_sqlite_reloads_clean(built, events)


def test_sqlite_invalid_event_refuses_without_writing(tmp_path: Path) -> None:
    # The open turn's turn/start names turn 9: corrupt, and no closers get inserted.
    built = sqlite_built(tmp_path, "open")
    seq = max(i for i, e in enumerate(built.events) if e["type"] == "turn/start")
    data = dict(built.events[seq]["data"], turn=9)
    with raw_db(built.root) as db:
        db.execute(
            "UPDATE events SET data = ? WHERE session_id = ? AND seq = ?",
            (orjson.dumps(data), built.sid, seq),
        )
    before = rows(built.root, built.sid)
    backend = SqliteBackend(built.root)
    try:
        for _ in range(2):
            with pytest.raises(SessionCorruptError) as info:
                SessionStore(backend).load(built.sid)
            assert built.sid in str(info.value)
            assert info.value.details["seq"] == seq
            assert rows(built.root, built.sid) == before, "a refused load wrote to the log"
    finally:
        backend.close()


def test_sqlite_unknown_schema_version_refuses(tmp_path: Path) -> None:
    built = sqlite_built(tmp_path, "closed")
    with raw_db(built.root) as db:
        db.execute("PRAGMA user_version = 7")
    with pytest.raises(SessionVersionError) as info:
        SqliteBackend(built.root)
    assert "7" in str(info.value)
    assert info.value.details["version"] == 7
    with raw_db(built.root) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 7


def test_sqlite_header_version_refuses(tmp_path: Path) -> None:
    built = sqlite_built(tmp_path, "closed")
    with raw_db(built.root) as db:
        (raw,) = db.execute("SELECT header FROM sessions WHERE id = ?", (built.sid,)).fetchone()
        header = orjson.loads(raw)
        header["version"] = 1
        db.execute("UPDATE sessions SET header = ? WHERE id = ?", (orjson.dumps(header), built.sid))
    backend = SqliteBackend(built.root)
    try:
        for _ in range(2):  # not SessionLockedError the second time
            with pytest.raises(SessionVersionError) as info:
                SessionStore(backend).load(built.sid)
            assert built.sid in str(info.value)
            assert "version 1" in str(info.value)
            assert info.value.details["version"] == 1
    finally:
        backend.close()


# --------------------------------------------------------------------------------------
# Memory


def memory_built(variant: str) -> tuple[MemoryBackend, SessionStore, str, list[Event]]:
    backend = MemoryBackend()
    store = SessionStore(backend, clock=make_clock())
    log = store.create(cwd="/w")
    written = write(log, script_for(variant))
    log.close()
    return backend, store, log.id, written


@pytest.mark.parametrize("variant", VARIANTS)
def test_memory_committed_damage_refuses(variant: str) -> None:
    backend, store, sid, events = memory_built(variant)
    seq = next(
        i for i, e in enumerate(events) if e["type"] == "tool/call" and e["data"]["turn"] == 2
    )
    backend.stored[sid].records[seq] = b'{"broken'
    before = list(backend.stored[sid].records)
    for _ in range(2):
        with pytest.raises(SessionCorruptError) as info:
            store.load(sid)
        assert sid in str(info.value)
        assert info.value.details["seq"] == seq
        assert backend.stored[sid].records == before
    assert sid not in backend.torn


@pytest.mark.parametrize("variant", VARIANTS)
def test_memory_damaged_last_record_is_cut(variant: str) -> None:
    backend, store, sid, events = memory_built(variant)
    backend.stored[sid].records[-1] = b'{"broken'
    loaded = store.load(sid)
    prefix = events[:-1]
    closers = closers_of(prefix)
    assert closers
    got = list(loaded.log.events)
    assert comparable(got) == comparable(prefix + closers)
    assert loaded.report.torn_records == 1
    assert loaded.report.torn_bytes == len(b'{"broken\n')
    assert loaded.report.kept_aside is not None
    assert backend.torn[sid] == [b'{"broken']
    assert_repair_is_final(store, sid, loaded)


def test_memory_seq_gap_before_last_turn_end_refuses() -> None:
    backend, store, sid, _ = memory_built("closed")
    del backend.stored[sid].records[5]
    with pytest.raises(SessionCorruptError) as info:
        store.load(sid)
    assert info.value.details["seq"] == 5
    with pytest.raises(SessionCorruptError):
        store.load(sid)


def test_locked_session_is_not_repaired(tmp_path: Path) -> None:
    # A torn log that someone owns is neither read for repair nor cut.
    log = jsonl_log(tmp_path, "closed")
    store = SessionStore(JsonlBackend(log.root))
    owner = store.load(log.sid)
    with log.path.open("ab") as f:
        f.write(b'{"broken')
    content = log.path.read_bytes()
    with pytest.raises(SessionLockedError):
        SessionStore(JsonlBackend(log.root)).load(log.sid)
    assert log.path.read_bytes() == content
    owner.log.close()
