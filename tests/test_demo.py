"""The Quick start's main job, run as a person runs it: a real child killed with -9."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_demo_survives_kill_9(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "demo", "--store", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "exit status -9" in text
    assert "'interruptedTurn': 2, 'syntheticResults': 1, 'closers': 3" in text
    assert "tool/result        turn 2  call-1 error=True" in text
    assert "{'kind': 'interrupted', 'cause': 'crash'}" in text
    assert "repaired on this load: False" in text
    assert (tmp_path / "store" / "sessions").is_dir()


def test_version_and_serve_on_empty_stdin(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "acp_bridge", "--version"],
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0 and out.stdout.startswith("acp-bridge ")
    env = {**os.environ, "ACP_BRIDGE_HOME": str(tmp_path / "home")}
    serve = subprocess.run([sys.executable, "-m", "acp_bridge"], input="", env=env,
                           capture_output=True, text=True, timeout=30, check=False)
    assert serve.returncode == 0 and serve.stdout == ""  # stdout is for protocol only
    assert serve.stderr.startswith("acp-bridge ") and str(tmp_path / "home") in serve.stderr
