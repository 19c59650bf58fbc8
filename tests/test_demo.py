"""The Quick start's main job, run as a person runs it: the real stdio agent, a kill -9
mid-command, a restart and a load."""

from __future__ import annotations

import os
import shlex
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
    # It ends with the command that shows its session (issue 36, point 3), and it works.
    last = text.splitlines()[-1]
    assert last.startswith("Read it again: acp-bridge sessions show "), last
    argv = shlex.split(last.removeprefix("Read it again: acp-bridge "))
    shown = subprocess.run([sys.executable, "-m", "acp_bridge", *argv], capture_output=True, text=True,
                           timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "write down what you are" in shown.stdout and "Turn 4" in shown.stdout


def test_version_and_serve_on_empty_stdin(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "acp_bridge", "--version"],
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0 and out.stdout.startswith("acp-bridge ")
    env = {**os.environ, "ACP_BRIDGE_HOME": str(tmp_path / "home")}
    serve = subprocess.run([sys.executable, "-m", "acp_bridge"], input="", env=env,
                           capture_output=True, text=True, timeout=30, check=False)
    assert serve.returncode == 0 and serve.stdout == ""  # stdout is for protocol only
    assert serve.stderr.startswith("acp-bridge ") and str(tmp_path / "home") in serve.stderr
