"""Smoke test of bench/import_speed.py: a tiny history, so the benchmark cannot rot (the
figures are in bench/README.md, "Import")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.long]

ROOT = Path(__file__).resolve().parent.parent


def test_import_speed_bench_runs(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "import_speed.py"), "--mb", "1", "--turns", "20",
                           "--json"], capture_output=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    result = orjson.loads(proc.stdout)
    assert result["backend"] == "jsonl" and result["mb"] >= 1 and result["sessions"] >= 1
    assert result["mb_per_s"] > 0 and 5 < result["peak_rss_mb"] < 150
