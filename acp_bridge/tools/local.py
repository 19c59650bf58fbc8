"""`LocalServices`: the client services implemented on this machine, and the local
file reads and (atomic) writes behind them.

Used when the client does not advertise `fs/*` or `terminal/*`, and by tests; `acp-bridge
chat` serves the agent's `fs/*` with `read_text` and `write_text`, so a file is read
and written the same way whichever side does it.

Local commands run in `LocalTerminal`s (tools/local_terminal.py) under owner tasks in
the task group passed to the constructor (`LocalServices(task_group=tg)`): they die
with it. Without a task group, files work but `create_terminal` raises RuntimeError (a
wiring mistake, not something the model can fix).

It answers no permission requests: nobody sits in front of the local machine. The agent
asks its client (acp_bridge.agent.client_services), whatever serves files and commands.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path

import anyio.abc
import anyio.to_thread

from acp_bridge.tools.base import ToolError
from acp_bridge.tools.local_terminal import LocalTerminal, start_terminal


def read_text(path: Path, line: int | None, limit: int | None) -> str:
    """`limit` lines from line `line` (1-based) on, or the whole file; undecodable bytes
    become U+FFFD and line endings stay as they are. ToolError if there is no file."""
    try:
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            if line is None and limit is None:
                return f.read()
            start = max(line or 1, 1) - 1
            out: list[str] = []
            for i, text in enumerate(f):
                if i < start:
                    continue
                if limit is not None and len(out) >= limit:
                    break
                out.append(text)
            return "".join(out)
    except FileNotFoundError as e:
        raise ToolError(f"{path} does not exist", code="not_found") from e
    except IsADirectoryError as e:
        raise ToolError(f"{path} is a directory", code="not_a_file") from e


def write_text(path: Path, content: str) -> None:
    """Replace the file's content atomically, keeping its mode (OSError if it cannot)."""
    # Keep a symlink and write through it, as an editor would.
    target = os.path.realpath(path)
    directory, name = os.path.split(target)
    try:
        mode: int | None = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    tmp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
    # 0o666 lets the umask decide a new file's mode, as open() would.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        # Atomic: a reader sees the old file or the new one, never half of it.
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class LocalServices:
    """WorkspaceServices on the local machine (see the module docstring)."""

    def __init__(
        self,
        *,
        task_group: anyio.abc.TaskGroup | None = None,
    ) -> None:
        self._task_group = task_group

    async def read_text_file(
        self, path: Path, line: int | None = None, limit: int | None = None
    ) -> str:
        return await anyio.to_thread.run_sync(read_text, path, line, limit)

    async def write_text_file(self, path: Path, content: str) -> None:
        await anyio.to_thread.run_sync(write_text, path, content)

    async def create_terminal(
        self,
        command: str,
        *,
        cwd: Path,
        output_byte_limit: int,
        env: Mapping[str, str] | None = None,
    ) -> LocalTerminal:
        if self._task_group is None:
            raise RuntimeError("LocalServices needs a task_group to run commands")
        try:
            return await start_terminal(self._task_group, ["/bin/sh", "-c", command], cwd=cwd,
                                        output_byte_limit=output_byte_limit, env=env)
        except OSError as e:  # no /bin/sh, cwd gone since it was checked...
            raise ToolError(f"cannot start {command!r} in {cwd}: {e}", code="spawn_failed") from e
