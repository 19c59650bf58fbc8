"""`LocalServices`: the client services implemented on this machine.

Used when the client does not advertise `fs/*` or `terminal/*`, and by tests.

Lifetime of local commands: `LocalServices` owns an anyio task group passed to its
constructor (`LocalServices(task_group=tg)`). Each `create_terminal` starts, in that
task group, one owner task that spawns the process (in a new session, so it leads its
own process group), pumps its output into a bounded buffer, and waits for it. The
process never outlives its owner task: `release()` (or `kill()`) SIGKILLs the whole
process group, and if the task group is cancelled first (the session goes away) the
owner task kills the group in a shielded `finally` and reaps the leader. So a command's
background children die with it: `run_command` is not a way to start daemons.

Without a task group, files work but `create_terminal` raises RuntimeError (a wiring
mistake, not something the model can fix).

Nobody sits in front of `LocalServices` to answer permission prompts: the
`permission_answer` callable decides (default: reject once), so tests can script answers.
"""

from __future__ import annotations

import codecs
import contextlib
import inspect
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread

from acp_bridge.tools.base import (
    ExitStatus,
    PermissionOutcome,
    PermissionRequest,
    TerminalOutput,
    ToolError,
)

PermissionAnswer = Callable[[PermissionRequest], PermissionOutcome | Awaitable[PermissionOutcome]]

# After the shell exits, how long to wait for the output pipe to reach EOF. A background
# child that keeps the pipe open would otherwise hold the exit status back forever.
DRAIN_GRACE_S = 0.5


def reject_once(request: PermissionRequest) -> PermissionOutcome:
    return PermissionOutcome("selected", "reject_once")


def _read_text(path: Path, line: int | None, limit: int | None) -> str:
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


def _write_text(path: Path, content: str) -> None:
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


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"SIG{-returncode}"


class LocalTerminal:
    """A local shell command; see the module docstring for its lifetime."""

    def __init__(self, output_byte_limit: int) -> None:
        self._limit = max(output_byte_limit, 0)
        self._buffer = bytearray()
        self._truncated = False
        self._status: ExitStatus | None = None
        self._pid: int | None = None
        self._eof = anyio.Event()
        self._exited = anyio.Event()
        self._released = anyio.Event()
        self._done = anyio.Event()

    @property
    def terminal_id(self) -> str | None:
        return None

    @property
    def pid(self) -> int | None:
        return self._pid

    async def run(
        self,
        command: str,
        cwd: Path,
        env: Mapping[str, str] | None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """The owner task: spawn, pump, wait, and always kill the group at the end."""
        try:
            process = await anyio.open_process(
                ["/bin/sh", "-c", command],
                cwd=cwd,
                env={**os.environ, **env} if env else None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            self._finish(ExitStatus(None))
            raise
        self._pid = process.pid
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump, process)
                task_status.started()
                code = await process.wait()
                with anyio.move_on_after(DRAIN_GRACE_S):
                    await self._eof.wait()
                if code < 0:
                    self._status = ExitStatus(None, _signal_name(code))
                else:
                    self._status = ExitStatus(code)
                self._exited.set()
                # Keep pumping (background children may still write) until released.
                await self._released.wait()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                self._kill_group()
                await process.aclose()
                self._finish(self._status or ExitStatus(None, "SIGKILL"))

    def _finish(self, status: ExitStatus) -> None:
        if self._status is None:
            self._status = status
        self._exited.set()
        self._eof.set()
        self._done.set()

    async def _pump(self, process: anyio.abc.Process) -> None:
        assert process.stdout is not None
        try:
            async for chunk in process.stdout:
                self._buffer += chunk
                excess = len(self._buffer) - self._limit
                if excess > 0:
                    # Keep the tail, as ACP clients do: the end says how it finished.
                    del self._buffer[:excess]
                    self._truncated = True
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        finally:
            self._eof.set()

    def _kill_group(self) -> None:
        if self._pid is None:
            return
        # The group id is the leader's pid; ESRCH means everyone in it is gone.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pid, signal.SIGKILL)

    async def wait_for_exit(self) -> ExitStatus:
        await self._exited.wait()
        assert self._status is not None
        return self._status

    async def output(self) -> TerminalOutput:
        data = bytes(self._buffer)
        if self._truncated:
            # Start at a character boundary: skip UTF-8 continuation bytes.
            skip = 0
            while skip < min(len(data), 3) and data[skip] & 0xC0 == 0x80:
                skip += 1
            data = data[skip:]
        exited = self._exited.is_set()
        # While running, hold back a half-written character instead of showing U+FFFD.
        text = codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=exited)
        return TerminalOutput(text, self._truncated, self._status if exited else None)

    async def kill(self) -> None:
        self._kill_group()

    async def release(self) -> None:
        self._released.set()
        self._kill_group()
        with anyio.CancelScope(shield=True):
            await self._done.wait()


class LocalServices:
    """ClientServices on the local machine (see the module docstring)."""

    def __init__(
        self,
        *,
        task_group: anyio.abc.TaskGroup | None = None,
        permission_answer: PermissionAnswer = reject_once,
    ) -> None:
        self._task_group = task_group
        self._permission_answer = permission_answer

    async def read_text_file(
        self, path: Path, line: int | None = None, limit: int | None = None
    ) -> str:
        return await anyio.to_thread.run_sync(_read_text, path, line, limit)

    async def write_text_file(self, path: Path, content: str) -> None:
        await anyio.to_thread.run_sync(_write_text, path, content)

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
        terminal = LocalTerminal(output_byte_limit)
        try:
            await self._task_group.start(terminal.run, command, cwd, env)
        except OSError as e:  # no /bin/sh, cwd gone since it was checked...
            raise ToolError(f"cannot start {command!r} in {cwd}: {e}", code="spawn_failed") from e
        return terminal

    async def request_permission(self, request: PermissionRequest) -> PermissionOutcome:
        answer = self._permission_answer(request)
        if inspect.isawaitable(answer):
            return await answer
        return answer
