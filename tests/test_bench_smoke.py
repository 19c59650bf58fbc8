"""Smoke test of bench/persistence.py: tiny sizes, so the benchmark cannot rot."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import orjson
import pytest

from session import check_invariants

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "persistence.py"
WORKLOADS = ROOT / "bench" / "persistence_workloads.py"

APPEND_KEYS = {
    "events",
    "durable_points",
    "seconds",
    "best_seconds",
    "runs",
    "events_per_s",
    "durable_per_s",
    "durable_ms_p50",
    "durable_ms_p99",
}
LOAD_KEYS = {
    "events",
    "bytes",
    "seconds",
    "best_seconds",
    "runs",
    "events_per_s",
    "mb_per_s",
    "bare_seconds",
    "bare_best_seconds",
    "bare_runs",
    "bare_events_per_s",
    "bare_mb_per_s",
    "ratio",
}


def _bench_module() -> ModuleType:
    """The workloads of the script (bench/persistence_workloads.py), loaded from their
    file: the tests import nothing of bench's."""
    spec = importlib.util.spec_from_file_location("bench_persistence_workloads", WORKLOADS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _as_events(items: list[tuple[str, dict[str, object]]]) -> list[dict[str, object]]:
    return [{"type": t, "seq": i, "time": 1, "data": d} for i, (t, d) in enumerate(items)]


def test_workloads_follow_the_invariants() -> None:
    bench = _bench_module()
    turns = bench.realistic_items(1_000, 10)
    assert len(turns) % bench.EVENTS_PER_TURN == 0 and len(turns) >= 1_000
    check_invariants(_as_events(turns), closed=True)  # type: ignore[arg-type]
    check_invariants(_as_events(bench.streaming_items(300)), closed=True)  # type: ignore[arg-type]
    tracker = check_invariants(_as_events(bench.open_turn_items(turns)))  # type: ignore[arg-type]
    assert tracker.in_turn and tracker.step_open and len(tracker.unanswered()) == 2


@pytest.mark.integration
@pytest.mark.long
def test_bench_runs_with_tiny_sizes(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--events",
            "2000",
            "--repeat",
            "1",
            "--tmp",
            str(scratch),
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "APPEND" in proc.stdout and "LOAD" in proc.stdout and "ours/bare" in proc.stdout
    assert list(scratch.iterdir()) == []  # scratch stores are cleaned up

    results = orjson.loads(out.read_bytes())
    assert {"machine", "params", "append", "load"} <= set(results)
    assert results["machine"]["cpu_count"] == os.cpu_count()
    assert {"platform", "python", "fdatasync_ms"} <= set(results["machine"])
    for kind in ("jsonl", "sqlite"):
        turns = results["append"][kind]["turns"]
        assert APPEND_KEYS <= set(turns)
        assert turns["events"] >= 2000 and turns["durable_points"] == turns["events"] // 83 * 5
        assert results["append"][kind]["streaming"]["durable_points"] == 2
        for case in ("closed", "open"):
            load = results["load"][kind][case]
            assert LOAD_KEYS <= set(load)
            assert load["events_per_s"] > 0 and load["ratio"] > 0


@pytest.mark.integration
@pytest.mark.long
def test_json_on_stdout(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--events",
            "300",
            "--repeat",
            "1",
            "--backends",
            "jsonl",
            "--only",
            "load",
            "--tmp",
            str(tmp_path),
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    results = orjson.loads(proc.stdout)
    assert results["append"] == {} and set(results["load"]) == {"jsonl"}
    assert b"LOAD" in proc.stderr
