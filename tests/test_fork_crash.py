"""A kill -9 during a fork leaves the original whole and the fork whole or absent: the
real `acp-bridge sessions fork` process, SIGKILLed while it reads the original, and
again as soon as its copy has begun (JSONL: it has a file open in the sessions folder
that is not a log; SQLite: the WAL grows; PostgreSQL: the server runs its copy), on
JSONL, SQLite and PostgreSQL. And on JSONL, a fork killed at any point leaves no file
behind (issue 34, point 11): the copy is written without a name until it is whole."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from session import SessionStore, open_backend
from session.backends.base import read_stored
from tests.support.logs import Script

pytestmark = pytest.mark.integration

# Turns of 36 events: enough that a copy takes tens of milliseconds (14 MB of JSONL for
# 1,000), few enough that the SQL stores' reads stay short.
TURNS = {"jsonl": 1000, "sqlite": 500, "postgres": 300}


def big_session(store: SessionStore, turns: int) -> str:
    log = store.create(cwd="/w")
    script = Script()
    for turn in range(turns):
        script.text_turn(f"prompt {turn}", " ".join(["word"] * 30))
    log.extend(script.items)
    log.close()
    return log.id


def events_of(store: SessionStore, sid: str) -> list[Any]:
    return [(e["type"], e["seq"], e["time"], e["data"]) for e in read_stored(store.backend.read_stream(sid)).events]


@contextlib.contextmanager
def copy_began(kind: str, where: Path | str) -> Iterator[Callable[[int], bool]]:
    """Whether the fork's copy (process id given) has begun writing, as each backend
    shows it."""
    if kind == "jsonl":
        sessions = str(Path(where).resolve() / "sessions") + "/"
        yield lambda pid: any(target.startswith(sessions) and not target.endswith(".jsonl")
                              for target in open_files(pid))
        return
    if kind == "sqlite":
        wal = Path(where) / "sessions.sqlite3-wal"
        start = wal.stat().st_size if wal.exists() else 0
        yield lambda pid: wal.exists() and wal.stat().st_size > start
        return
    import psycopg

    with psycopg.connect(str(where), autocommit=True) as watch:
        def running(pid: int) -> bool:
            row = watch.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                                "AND query LIKE 'INSERT INTO acp_bridge.events%SELECT%'").fetchone()
            return bool(row and row[0])

        yield running


def open_files(pid: int) -> list[str]:
    """What process `pid`'s file descriptors point to (Linux /proc; a file written
    without a name shows as `FOLDER/#INODE (deleted)`)."""
    targets = []
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return targets


def fork_process(kind: str, where: Path | str, sid: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    return subprocess.Popen([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(where), "--backend", kind,
                             "fork", sid], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


@pytest.mark.long
@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres"])
def test_a_kill_during_a_fork_leaves_the_original_whole_and_the_fork_whole_or_absent(
        kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    where: Path | str = request.getfixturevalue("pg_dsn") if kind == "postgres" else tmp_path / "store"
    store = SessionStore(open_backend(kind, where))
    try:
        sid = big_session(store, TURNS[kind])
        original = events_of(store, sid)
        start = time.monotonic()
        whole = fork_process(kind, where, sid)
        assert whole.wait(60) == 0
        took = time.monotonic() - start
        kills: list[str] = []
        for fraction in (0.4, 0.8):  # while it starts, reads the original, copies
            proc = fork_process(kind, where, sid)
            time.sleep(took * fraction)  # what is tested: a kill at that point of the fork
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            kills.append("timed")
        mid_copy = 0
        for attempt in range(8):  # as soon as its copy has begun, until a kill lands inside it
            if mid_copy and attempt >= 2:
                break
            before = {s["id"] for s in store.list()}
            with copy_began(kind, where) as began:
                proc = fork_process(kind, where, sid)
                deadline = time.monotonic() + 30
                while not began(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.0005)
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
            mid_copy += {s["id"] for s in store.list()} == before
            kills.append("copying")
        forks = [s["id"] for s in store.list() if s["id"] != sid]
        assert events_of(store, sid) == original  # the original, whole and untouched
        for fork in forks:  # each fork whole: it loads without repair and holds every event
            opened = store.load(fork)
            assert not opened.report.repaired and opened.log.header.get("forkedFrom") == {"sessionId": sid,
                                                                                          "turn": TURNS[kind]}
            opened.log.close()
            assert events_of(store, fork) == original
        assert 1 <= len(forks) <= 1 + len(kills)
        assert mid_copy >= 1, "no kill landed while the copy was being written"
    finally:
        store.close()


def test_a_killed_jsonl_fork_leaves_no_file_behind(tmp_path: Path) -> None:
    """kill -9 of `sessions fork` in a loop, at points spread over its run and as soon as
    its copy is being written: the store holds its sessions' files and nothing else
    (before, each kill in the copy left a `.ID.jsonl.PID.tmp` of up to the log's size)."""
    where = tmp_path / "store"
    store = SessionStore(open_backend("jsonl", where))
    try:
        sid = big_session(store, 400)
    finally:
        store.close()
    start = time.monotonic()
    assert fork_process("jsonl", where, sid).wait(60) == 0
    took = time.monotonic() - start
    mid_copy = 0
    for attempt in range(16):
        proc = fork_process("jsonl", where, sid)
        if attempt % 2:
            time.sleep(took * attempt / 16)  # anywhere in its run
        else:
            with copy_began("jsonl", where) as began:  # in the copy
                deadline = time.monotonic() + 30
                while not began(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.0005)
                mid_copy += proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert mid_copy >= 4, "too few kills landed in the copy"
    store = SessionStore(open_backend("jsonl", where))
    try:
        ids = {s["id"] for s in store.list()}
    finally:
        store.close()
    assert sid in ids and len(ids) >= 2
    left = sorted(str(p.relative_to(where)) for p in where.rglob("*") if p.is_file())
    ours = {f"sessions/{i}.jsonl" for i in ids} | {f"titles/{i}.json" for i in ids} | {f"locks/{sid}.lock"}
    assert set(left) <= ours and {f"sessions/{i}.jsonl" for i in ids} <= set(left), "\n".join(left)
