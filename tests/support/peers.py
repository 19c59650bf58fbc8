"""Third-party ACP agents wrapped in tests (fast-agent, from an executable named in
the environment), and what those tests read back: the stored log, read without taking
it from its owner, and the streamed text. The wrapper itself is driven through
tests/support/wrapped.py's `WrappedProcess`.

fast-agent needs Python 3.12 or newer, which the project's own interpreter (3.11) is
not: `.ci/run` installs it into a virtual environment of its own and names the
executable in `FAST_AGENT_ENV`; without it the fast-agent tests skip, saying so.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from session import Event, Header, open_reader
from session.backends.base import read_stored

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


def stored_log(store: Path | str, sid: str, backend: str = "jsonl") -> tuple[Header, list[Event]]:
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
