"""Driving `acp-bridge wrap` around another ACP agent in tests: the wrapper as an
`AgentProcess` (the same schema-checking client as for our own agent), the third-party
agents the tests wrap (fast-agent, from an executable named in the environment), the
stored log read without ownership, and the wrapped child's process id.

fast-agent needs Python 3.12 or newer, which the project's own interpreter (3.11) is
not: `.ci/run` installs it into a virtual environment of its own and names the
executable in `FAST_AGENT_ENV`; without it the fast-agent tests skip, saying so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from session import Event, Header, open_reader
from session.backends.base import read_stored
from tests.support.acp_client import AgentProcess, ClientPolicy

FAST_AGENT_ENV = "ACP_BRIDGE_TEST_FAST_AGENT"
# No key, no network: the passthrough model echoes the prompt (as measured in peers.md).
FAST_AGENT_ARGS = ("--no-update-check", "acp", "--model", "passthrough")


def fast_agent() -> str | None:
    """The fast-agent executable the environment names, or None when it names none."""
    return os.environ.get(FAST_AGENT_ENV) or None


def fast_agent_command(executable: str) -> list[str]:
    return [executable, *FAST_AGENT_ARGS]


def interpreter_of(executable: str) -> str:
    """Which Python runs a console script (its virtual environment's `python`), as
    `Python X.Y.Z (path)`: the test says which interpreter it used."""
    python = Path(executable).parent / "python"
    if not python.exists():
        return "an unknown interpreter"
    version = subprocess.run([str(python), "--version"], capture_output=True, text=True, timeout=30)
    return f"{(version.stdout or version.stderr).strip()} ({python.resolve()})"


def wrap_command(store: Path, command: list[str], *, backend: str = "jsonl",
                 args: tuple[str, ...] = ()) -> list[str]:
    """`acp-bridge wrap` around `command`, through this interpreter (as `chat` runs it)."""
    return [sys.executable, "-m", "acp_bridge", "wrap", "--store", str(store), "--backend", backend,
            *args, "--", *command]


class WrapProcess(AgentProcess):
    """`async with WrapProcess(store, command) as agent:` the wrapper around `command`,
    driven like our own agent (every message it sends checked against the ACP schema)."""

    def __init__(self, store: Path, command: list[str], *, backend: str = "jsonl",
                 policy: ClientPolicy | None = None, cwd: Path | None = None,
                 args: tuple[str, ...] = ()) -> None:
        super().__init__(store, backend=backend, policy=policy, cwd=cwd)
        self.command = wrap_command(store, command, backend=backend, args=args)

    async def __aenter__(self) -> WrapProcess:
        await super().__aenter__()
        return self

    def child_pids(self) -> list[int]:
        """The wrapper's child processes (the wrapped agent, and the reaper's shell)."""
        pids: list[int] = []
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                pids += [int(p) for p in (task / "children").read_text().split()]
            except OSError:  # the task ended meanwhile
                continue
        return pids


def command_line_of(pid: int) -> list[str]:
    """A process's argv, or [] if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stored_log(store: Path, sid: str, backend: str = "jsonl") -> tuple[Header, list[Event]]:
    """A session's header and events as stored, read without taking it from its owner
    (the read-only reader `acp-bridge sessions` uses)."""
    reader = open_reader(backend, store)
    try:
        stored = read_stored(reader.stream(sid))
    finally:
        reader.close()
    assert stored.torn is None, stored.torn
    return stored.header, stored.events


def texts(updates: list[dict[str, Any]], kind: str) -> list[str]:
    """The text of every `kind` update (e.g. agent_message_chunk), in order."""
    return [u["content"]["text"] for u in updates
            if u.get("sessionUpdate") == kind and u.get("content", {}).get("type") == "text"]
