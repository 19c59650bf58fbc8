"""Smoke test of bench/search_speed.py: a store of 60 sessions, so the benchmark cannot
rot (the 10,000-session figures are in bench/README.md, "Search speed")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench.search_speed import QUERIES, ROOT

pytestmark = pytest.mark.integration


@pytest.mark.long
def test_search_speed_bench_measures_every_query(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "search_speed.py"), "--sessions", "60",
                           "--backends", "jsonl", "--repeat", "1", "--requests", "3", "--tmp", str(tmp_path),
                           "--json", str(out)], capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    results = orjson.loads(out.read_bytes())["backends"]["jsonl"]
    for name, _ in QUERIES:
        served, command = results["served"][name], results["command"][name]
        assert len(served["all"]) == 3 and 0 < served["p50"] <= served["p99"] <= served["max"]
        assert len(command["all"]) == 1 and command["median"] > 0
    assert list(tmp_path.iterdir()) == [out]  # the scratch store is gone
