"""The kill -9 crash matrix (docs/persistence.md): the real stdio agent, SIGKILLed at
chosen and random points of scripted sessions, then loaded by a new agent process.

The engine is tests/support/crash_matrix/ (its docstring lists every check; its command
line for the long form is bench/crash_matrix.py); this module runs
a CI sample of it on both backends (16 kill points), the long form under `-m soak`
(200 points per backend), a check that the oracle is not vacuous (a tampered log is
caught), and a regression test for the SQLite store-creation race the matrix found.

Torn bytes at every offset and failed writes are covered at the disk level by
tests/test_torn_tail.py and tests/test_store_faults.py; nothing here repeats them.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from session import SessionStore, check_invariants
from session.backends.jsonl import JsonlBackend
from tests.support.crash_matrix import (
    CI_SAMPLE,
    KillPoint,
    Run,
    check_final,
    parse_raw,
    random_point,
    run_passing,
    sample_points,
)
from tests.support.logs import Script, write

# One random point per backend on top of the fixed sample; override to explore.
SEED = int(os.environ.get("CRASH_MATRIX_SEED", "20240611"))


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.integration
@pytest.mark.long
def test_crash_matrix_ci_sample(tmp_path: Path, backend: str) -> None:
    """8 kill points per backend: mid-stream, mid-tool-step, pending permission,
    running command, multi-step turn, past a buffer flush, right after an error
    answer, plus one seeded random point."""
    rng = random.Random(f"{SEED}-{backend}")
    points = [*CI_SAMPLE, random_point(rng)]
    report = run_passing(points, backend, tmp_path)
    counts = report.counts()
    # The sample really lands inside turns (not only between them), with calls cut.
    assert counts["mid_turn"] >= 4, counts
    assert counts["synthetic_results"] >= 2, counts
    by_label = {r.point.label(): r for r in report.runs}
    pending = by_label["tools:permission#1"]
    assert pending.interrupted_turn == 2 and pending.load_meta["repair"]["syntheticResults"] == 1
    command = by_label["command:command"]
    assert command.interrupted_turn == 2 and "cmd.pid" in command.side_effects_seen
    after_error = by_label["chat:answer#3"]
    assert after_error.interrupted_turn is None and sorted(after_error.answers) == [1, 2, 3]


@pytest.mark.soak
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_crash_matrix_long(tmp_path: Path, backend: str) -> None:
    points = sample_points(int(os.environ.get("CRASH_MATRIX_POINTS", "200")), SEED)
    run_passing(points, backend, tmp_path)


# --- the oracle catches what it should ----------------------------------------------------


def test_oracle_catches_a_changed_answered_turn_and_wrong_closers(tmp_path: Path) -> None:
    store = SessionStore(JsonlBackend(tmp_path / "store"))
    log = store.create(cwd=str(tmp_path))
    sid = log.id
    write(log, Script().text_turn("hi", "hello back").start_turn("go on").start_step().chunk("partial "))
    log.close()
    path = tmp_path / "store" / "sessions" / f"{sid}.jsonl"
    run_ = Run(0, KillPoint("chat", "updates", 9), tmp_path, sid=sid)
    run_.pre_raw = path.read_bytes()
    run_.pre_events, run_.pre_good, run_.torn = parse_raw(run_.pre_raw)
    run_.answers = {1: {"result": {}}}
    assert run_.interrupted_turn == 2
    loaded = store.load(sid)
    write(loaded.log, Script(first_turn=3).text_turn("next", "fine"))
    final_events = list(loaded.log.events)
    loaded.log.close()
    final_raw = path.read_bytes()

    check_final(run_, final_raw, final_events)
    assert run_.failures == []
    check_invariants(final_events, closed=True)

    tampered = final_raw.replace(b'"hello back"', b'"hello_back"', 1)
    assert tampered != final_raw
    check_final(run_, tampered, final_events)
    assert any("answered turn 1 is not byte-identical" in f for f in run_.failures), run_.failures

    run_.failures.clear()
    wrong = list(final_events)
    end = next(i for i, e in enumerate(wrong) if e["type"] == "turn/end" and e["data"]["turn"] == 2)
    wrong[end] = {**wrong[end], "data": {"turn": 2, "reason": {"kind": "interrupted", "cause": "shutdown"}}}
    check_final(run_, final_raw, wrong)
    assert any("interrupted turn was closed with" in f for f in run_.failures), run_.failures


def test_oracle_parses_a_torn_tail_independently() -> None:
    header = b'{"type":"session","version":0,"id":"x","createdAt":1,"cwd":"/w"}\n'
    line0 = b'{"type":"turn/start","seq":0,"time":1,"data":{"turn":1,"trigger":{"kind":"prompt"}}}\n'
    events, good, torn = parse_raw(header + line0 + b'{"type":"user/mes')
    assert (len(events), good, torn) == (1, header + line0, True)
    rows = [(0, "turn/start", 1, b'{"turn":1,"trigger":{"kind":"prompt"}}'), (2, "step/start", 1, b"{}")]
    events, good_rows, torn = parse_raw(rows)
    assert (len(events), good_rows, torn) == (1, rows[:1], True)


# --- found by the matrix ------------------------------------------------------------------


def test_sqlite_store_created_by_two_processes_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from session.backends import sqlite as sqlite_backend

    root = tmp_path / "store"
    root.mkdir(mode=0o700)
    # "Process 1": holds the write lock of the new, empty database while it creates the schema.
    other = sqlite3.connect(root / sqlite_backend.DB_NAME, isolation_level=None)
    other.execute("PRAGMA journal_mode = WAL")
    other.execute("BEGIN IMMEDIATE")
    reached_begin = threading.Event()
    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db: sqlite3.Connection = real_connect(*args, **kwargs)
        db.set_trace_callback(lambda sql: reached_begin.set() if sql.startswith("BEGIN IMMEDIATE") else None)
        return db

    monkeypatch.setattr(sqlite3, "connect", connect)  # the module the backend uses
    outcome: list[BaseException | Any] = []

    def open_second() -> None:  # "process 2": opens the same store meanwhile
        try:
            outcome.append(sqlite_backend.SqliteBackend(root))
        except BaseException as exc:
            outcome.append(exc)

    second = threading.Thread(target=open_second)
    second.start()
    assert reached_begin.wait(10), "process 2 never tried to create the schema"
    for statement in sqlite_backend.SCHEMA.split(";"):  # process 1 finishes first
        if statement.strip():
            other.execute(statement)
    other.execute(f"PRAGMA user_version = {sqlite_backend.SCHEMA_VERSION}")
    other.execute("COMMIT")
    other.close()
    second.join(20)
    (result,) = outcome
    if isinstance(result, BaseException):
        raise result
    result.close()
