"""The SQLite store's tail file (session.backends.sqlite_tail): streamed events live
there until a durable commit moves them into the database, so a kill leaves them in
the tail, a reader sees database rows then tail lines as one log, a crash between a
commit and the cut of the tail leaves lines that readers skip, and a torn last line is
cut by repair and kept in `torn_events`."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from session import SessionStore, check_invariants, open_backend, open_reader
from session.backends.base import read_stored
from session.backends.sqlite import SqliteBackend
from session.backends.sqlite_read import SqliteStream
from session.backends.sqlite_tail import tail_path
from tests.support.logs import Script, write

KILLED = """
import os, sys
from session import SessionStore, open_backend
from tests.support.logs import Script, write
store = SessionStore(open_backend("sqlite", sys.argv[1]))
log = store.create(cwd="/w")
print(log.id, flush=True)
write(log, Script().text_turn())
turn = Script(first_turn=2).start_turn()
write(log, turn)
log.sync()  # the prompt is durable, as before an external model
write(log, turn.start_step().chunk("streamed ").chunk("then killed ").items[2:])
log.flush()  # in the tail file: what the client may have been shown
os._exit(9)
"""


def killed_mid_stream(root: Path) -> str:
    done = subprocess.run([sys.executable, "-c", KILLED, str(root)], capture_output=True, text=True,
                          cwd=Path(__file__).parent.parent, check=False)
    assert done.returncode == 9, done.stderr
    return done.stdout.strip()


def rows(root: Path, sid: str) -> list[tuple[int, str]]:
    with sqlite3.connect(root / "sessions.sqlite3") as db:
        return [(int(s), str(t)) for s, t in db.execute(
            "SELECT seq, type FROM events WHERE session_id = ? ORDER BY seq", (sid,))]


@pytest.mark.integration
def test_a_kill_leaves_the_streamed_events_in_the_tail_and_the_load_keeps_them(tmp_path: Path) -> None:
    sid = killed_mid_stream(tmp_path)
    durable = len(Script().text_turn().items) + 2
    assert len(rows(tmp_path, sid)) == durable  # the database holds durable points only
    assert b"then killed" in tail_path(tmp_path, sid).read_bytes()
    # A reader sees the rows, then the tail's lines, as one log (unrepaired).
    reader = open_reader("sqlite", tmp_path)
    seen = read_stored(reader.stream(sid))
    reader.close()
    assert [e["seq"] for e in seen.events] == list(range(durable + 3)) and seen.torn is None
    assert b"then killed" in open_reader("sqlite", tmp_path).raw(sid)
    # The load closes the turn: the tail's events and the closers become rows at once.
    store = SessionStore(open_backend("sqlite", tmp_path))
    loaded = store.load(sid)
    events = list(loaded.log.events)
    loaded.log.close()
    store.close()
    check_invariants(events, closed=True)
    assert loaded.report.interrupted_turn == 2
    assert [t for _, t in rows(tmp_path, sid)] == [e["type"] for e in events]
    assert not tail_path(tmp_path, sid).exists()


@pytest.mark.integration
def test_a_torn_last_line_of_the_tail_is_cut_and_kept_aside(tmp_path: Path) -> None:
    sid = killed_mid_stream(tmp_path)
    tail = tail_path(tmp_path, sid)
    whole = tail.read_bytes()
    tail.write_bytes(whole[:-7])  # the kill came in the middle of a write
    store = SessionStore(open_backend("sqlite", tmp_path))
    loaded = store.load(sid)
    events = list(loaded.log.events)
    loaded.log.close()
    check_invariants(events, closed=True)
    assert loaded.report.torn_records == 1 and loaded.report.torn_bytes == len(whole.splitlines(True)[-1]) - 7
    assert "then killed" not in str(events) and "streamed " in str(events)
    with sqlite3.connect(tmp_path / "sessions.sqlite3") as db:
        (kept,) = db.execute("SELECT data FROM torn_events WHERE session_id = ?", (sid,)).fetchone()
    assert bytes(kept) == whole.splitlines(True)[-1][:-7]
    store.close()


def test_tail_lines_the_database_already_holds_are_skipped(tmp_path: Path) -> None:
    # A crash between a durable commit and the cut of the tail: the lines stay, but
    # their seqs are rows already; neither a reader nor a load takes them twice.
    store = SessionStore(open_backend("sqlite", tmp_path))
    log = store.create(cwd="/w")
    turn = Script().start_turn().start_step().chunk("once ")
    write(log, turn)
    log.flush()
    stale = tail_path(tmp_path, log.id).read_bytes()
    write(log, turn.chunk("done").end_step().end_turn().items[4:])
    expected = list(log.events)
    log.close()
    tail_path(tmp_path, log.id).write_bytes(stale)
    reader = open_reader("sqlite", tmp_path)
    assert read_stored(reader.stream(log.id)).events == expected
    assert reader.raw(log.id).count(b"once ") == 1
    reader.close()
    loaded = store.load(log.id)
    assert list(loaded.log.events) == expected and not loaded.report.repaired
    loaded.log.close()


def test_a_reader_whose_snapshot_missed_a_commit_reads_the_rows_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The owner may move the tail into the database and cut it between a reader's
    # snapshot of the rows and its read of the tail: the reader sees a tail that starts
    # later than its rows end, and reads the missing rows from a newer snapshot.
    monkeypatch.setattr(SqliteStream, "BLOCK", 2)
    backend = SqliteBackend(tmp_path)
    log = SessionStore(backend).create(cwd="/w")
    turn = Script().start_turn().start_step()
    write(log, turn)
    log.sync()
    write(log, turn.chunk("a ").chunk("b ").items[3:])
    log.flush()
    reader = open_reader("sqlite", tmp_path)
    stream = reader.stream(log.id)
    blocks = stream.blocks()
    first = next(blocks)  # the snapshot is taken: rows 0..2
    write(log, turn.chunk("c ").end_step().items[5:])  # durable: a, b, c are rows, the tail cut
    write(log, turn.start_step().chunk("d ").items[7:])
    log.flush()  # the tail now starts at seq 8
    events = first + [e for block in blocks for e in block]
    stream.close()
    reader.close()
    assert [e["seq"] for e in events] == list(range(9))  # type: ignore[index]
    log.close()
    backend.close()


BETWEEN_TURNS = """
import os, sys
from session import SessionStore, open_backend
from tests.support.logs import Script, write
log = SessionStore(open_backend("sqlite", sys.argv[1])).create(cwd="/w")
print(log.id, flush=True)
write(log, Script().text_turn())
log.append("wrapped/update", {"update": {"sessionUpdate": "available_commands_update",
                                         "availableCommands": []}})
log.flush()
os._exit(9)
"""


@pytest.mark.integration
def test_a_log_ending_with_streamed_events_between_turns_keeps_them(tmp_path: Path) -> None:
    # A wrapped agent's update after a turn/end is streamed, never synced: after a kill
    # it is in the tail, the log is closed (nothing to repair), and the next durable
    # commit makes it a row, before the events that follow it.
    done = subprocess.run([sys.executable, "-c", BETWEEN_TURNS, str(tmp_path)], capture_output=True,
                          text=True, cwd=Path(__file__).parent.parent, check=False)
    assert done.returncode == 9, done.stderr
    sid = done.stdout.strip()
    store = SessionStore(open_backend("sqlite", tmp_path))
    loaded = store.load(sid)
    assert not loaded.report.repaired
    assert loaded.log.tracker.next_seq == len(Script().text_turn().items) + 1
    write(loaded.log, Script(first_turn=2).text_turn())
    expected = list(loaded.log.events)
    loaded.log.close()
    types = [t for _, t in rows(tmp_path, sid)]
    assert types[len(Script().text_turn().items)] == "wrapped/update" and types[-1] == "turn/end"
    again = store.load(sid)
    assert list(again.log.events) == expected and not tail_path(tmp_path, sid).exists()
    again.log.close()
    store.close()
