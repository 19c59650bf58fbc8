"""`acp-bridge wrap -- ...` driven as the agent under test (tests/support/acp_client.py's
`AgentProcess`, with the wrapper's command line), and the command lines of the agents
the tests wrap."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.support.acp_client import AgentProcess

ROOT = Path(__file__).resolve().parents[2]
SDK_ECHO_AGENT = ROOT / "bench" / "sdk_echo_agent.py"


def serve_command(store: Path, model: str = "echo", *, backend: str = "jsonl", args: tuple[str, ...] = ()) -> list[str]:
    """Our own agent, as the wrapped agent."""
    return [sys.executable, "-m", "acp_bridge", "serve", "--store", str(store), "--backend", backend,
            "--model", model, *args]


def sdk_echo_command() -> list[str]:
    """The official SDK's echo agent (no loadSession), as the wrapped agent."""
    return [sys.executable, str(SDK_ECHO_AGENT)]


class WrappedProcess(AgentProcess):
    """`async with WrappedProcess(store, child_command) as agent:` the wrapper, running
    `child_command`, as the agent under test (every message validated, as for ours)."""

    def __init__(self, store: Path | str, child: list[str], *, backend: str = "jsonl",
                 wrap_args: tuple[str, ...] = (), **kw: Any) -> None:
        super().__init__(store, backend=backend, **kw)
        self.command = [sys.executable, "-m", "acp_bridge", "wrap", "--store", str(store), "--backend", backend,
                        *wrap_args, "--", *child]


def descendants(pid: int) -> list[int]:
    """The pids of `pid`'s children, their children and so on (Linux /proc)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            text = Path(f"/proc/{parent}/task/{parent}/children").read_text()
        except OSError:
            continue
        kids = [int(p) for p in text.split()]
        found.extend(kids)
        todo.extend(kids)
    return found


def command_line(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]

