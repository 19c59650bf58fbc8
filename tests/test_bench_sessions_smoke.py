"""Smoke test of bench/sessions_memory.py: a tiny session, so the benchmark cannot rot
(the 1M-event figures are in bench/README.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench.sessions_memory import COMMANDS, ROOT, TARGET_MB

pytestmark = pytest.mark.integration


@pytest.mark.long
def test_sessions_memory_bench_runs_every_command(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "sessions_memory.py"), "--events", "1500",
                           "--shapes", "turns,streaming",
                           "--tmp", str(tmp_path), "--json", str(out)], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    results = orjson.loads(out.read_bytes())
    runs = results["runs"]
    assert [(r["shape"], r["backend"], r["command"]) for r in runs] == [
        (shape, backend, command) for shape in ("turns", "streaming") for backend in ("jsonl", "sqlite")
        for command in COMMANDS]
    for run in runs:
        assert run["code"] == 0, run
        assert 5 < run["peak_mb"] < TARGET_MB, run  # measured (an interpreter is > 5 MB), and small
        assert run["out_bytes"] > 0
    for log in ("turns-jsonl", "turns-sqlite", "streaming-jsonl", "streaming-sqlite"):
        assert results["logs"][log]["events"] >= 1494
    assert "PASS" in proc.stdout.decode() and "FAIL" not in proc.stdout.decode()
    assert list(tmp_path.iterdir()) == [out]  # the scratch stores are gone
