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
import stat
from collections.abc import Mapping
from pathlib import Path

import anyio.abc
import anyio.to_thread

from acp_bridge.errors import ToolError
from acp_bridge.tools.base import NotTextError
from acp_bridge.tools.local_terminal import LocalTerminal, start_terminal

# A NUL byte in the first 8 KiB makes a file binary, as git and grep decide it.
SNIFF_BYTES = 8192


def decode_text(data: bytes, path: Path, size: int | None = None) -> str:
    """`data` as text, exactly: NotTextError if it holds a NUL byte (binary) or is not
    UTF-8. Never U+FFFD in place of a byte: that text, written back, would replace the
    file's bytes with U+FFFD's three. A BOM stays (as U+FEFF) and so comes back."""
    size = len(data) if size is None else size
    if b"\0" in data:
        raise NotTextError(path, size=size, binary=True)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise NotTextError(path, size=size, binary=False) from None


def read_text(path: Path, line: int | None, limit: int | None) -> str:
    """`limit` lines from line `line` (1-based; lines end at "\n") on, or the whole
    file, exactly as they are on disk (line endings kept). NotTextError if the file is
    binary or the lines read are not UTF-8; ToolError if there is no file."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)  # a big binary file is refused without reading it all
            if b"\0" in head:
                raise NotTextError(path, size=os.fstat(f.fileno()).st_size, binary=True)
            if line is None and limit is None:
                return decode_text(head + f.read(), path)
            size = os.fstat(f.fileno()).st_size
            f.seek(0)
            start = max(line or 1, 1) - 1
            out: list[bytes] = []
            for i, raw in enumerate(f):
                if i < start:
                    continue
                if limit is not None and len(out) >= limit:
                    break
                out.append(raw)
            return decode_text(b"".join(out), path, size)
    except FileNotFoundError as e:
        raise ToolError(f"{path} does not exist", code="not_found") from e
    except IsADirectoryError as e:
        raise ToolError(f"{path} is a directory", code="not_a_file") from e


def write_text(path: Path, content: str) -> None:
    """Replace the file's content with `content` in UTF-8, atomically: a reader (or a
    crash) sees the old file or the new one, never half of it. An existing file keeps
    its mode (a 0755 script stays executable) and, where the OS lets us, its owner and
    group. A symlink is kept and its target replaced, as an editor would. OSError if it
    cannot be written (nothing is changed then)."""
    data = content.encode("utf-8")  # a lone surrogate fails here, before any file exists
    target = os.path.realpath(path)
    directory, name = os.path.split(target)
    try:
        old: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        old = None
    # Beside the file (os.replace stays in one file system), its name cut short enough
    # to fit in NAME_MAX (255 bytes) whatever the file's own name.
    short = os.fsencode(name)[:200].decode(errors="ignore")
    tmp = os.path.join(directory, f".{short}.{os.urandom(6).hex()}.tmp")
    # 0o666 lets the umask decide a new file's mode, as open() would.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if old is not None:
            if (old.st_uid, old.st_gid) != (os.getuid(), os.getgid()):
                # Only root may give a file away; a group we are in is fine too. Before
                # chmod: chown clears the set-id bits.
                with contextlib.suppress(OSError):
                    os.chown(tmp, old.st_uid, old.st_gid)
            os.chmod(tmp, stat.S_IMODE(old.st_mode))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_directory(directory)


def _sync_directory(directory: str) -> None:
    # The rename is durable once the directory is: without this a power loss could
    # bring the old file back after the edit was reported done.
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


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
