"""Driving `acp-bridge wrap` in front of tests/support/unruly_agent.py (an agent that
ignores cancels, stops answering, or starts behind a launcher): its command lines, its
processes, what it read, and what the wrapper logged. For tests/test_wrap_cancel_grace.py
and tests/test_wrap_child_death.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson

from tests.support.acp_client import AgentProcess
from tests.support.wrapped import command_line, descendants

HERE = Path(__file__).resolve().parent
UNRULY = HERE / "unruly_agent.py"
LAUNCHER = HERE / "launcher.sh"


def unruly_command(record: Path | None = None, *, launcher: bool = False, hang_if: Path | None = None) -> list[str]:
    """The unruly agent (what it reads appended to `record`; hung from the start if
    `hang_if` exists then), maybe behind the launcher."""
    agent = [sys.executable, str(UNRULY), *(["--record", str(record)] if record is not None else []),
             *(["--hang-if", str(hang_if)] if hang_if is not None else [])]
    return ["/bin/sh", str(LAUNCHER), *agent] if launcher else agent


def agent_pids(wrapper_pid: int) -> list[int]:
    """The unruly agents running under the wrapper (not a launcher, not the reaper)."""
    return [p for p in descendants(wrapper_pid) if command_line(p)[1:2] == [str(UNRULY)]]


def launcher_pids(wrapper_pid: int) -> list[int]:
    """The launchers the wrapper started (its own children only: a launcher's forks for a
    moment carry its command line too)."""
    try:
        kids = Path(f"/proc/{wrapper_pid}/task/{wrapper_pid}/children").read_text().split()
    except OSError:
        return []
    return [int(p) for p in kids if command_line(int(p))[1:2] == [str(LAUNCHER)]]


def one_agent(wrapper_pid: int) -> int:
    pids = agent_pids(wrapper_pid)
    assert len(pids) == 1, pids
    return pids[0]


def read_by_agent(record: Path) -> list[dict[str, Any]]:
    """Every message the unruly agent read, in order (its --record file)."""
    if not record.exists():
        return []
    return [orjson.loads(line) for line in record.read_bytes().splitlines() if line.strip()]


def chunks(agent: AgentProcess, sid: str) -> list[str]:
    """The message chunks the editor was shown for `sid`, in order."""
    return [u["content"]["text"] for u in agent.updates_of(sid) if u["sessionUpdate"] == "agent_message_chunk"]


def turn_ends(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"]["reason"] for e in events if e["type"] == "turn/end"]


def between_turns(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `wrapped/update`s recorded outside every turn (naming none)."""
    return [e["data"]["update"] for e in events if e["type"] == "wrapped/update" and "turn" not in e["data"]]
