"""The Quick start's main job, run as a person runs it: the real stdio agent, a kill -9
mid-command, a restart and a load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_demo_end_to_end(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "acp_bridge", "demo", "--store", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "agent: Hello! I keep a durable log of everything we do." in text
    assert '? permission asked: Write NOTES.md -> you choose "Allow once"' in text
    assert "(exit status -9); no answer was sent." in text
    assert "tests-1 failed: The run_command call was interrupted" in text
    assert "'interruptedTurn': 3, 'syntheticResults': 1, 'closers': 3" in text
    assert "answer: stopReason=end_turn {'turn': 4, 'reason': {'kind': 'completed'}}" in text
    assert "Done: the agent exited with 0." in text
    assert (tmp_path / "project" / "NOTES.md").exists()


def test_version_and_serve_on_empty_stdin(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "acp_bridge", "--version"],
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0 and out.stdout.startswith("acp-bridge ")
    env = {**os.environ, "ACP_BRIDGE_HOME": str(tmp_path / "home")}
    serve = subprocess.run([sys.executable, "-m", "acp_bridge"], input="", env=env,
                           capture_output=True, text=True, timeout=30, check=False)
    assert serve.returncode == 0 and serve.stdout == ""  # stdout is for protocol only
    assert serve.stderr.startswith("acp-bridge ") and str(tmp_path / "home") in serve.stderr
