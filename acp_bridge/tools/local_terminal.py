"""`LocalTerminal`: one command run on this machine, with ACP terminal semantics.

The one local terminal of the project: the agent runs `run_command` through it when the
client has no `terminal/*` (tools/local.py), and `acp-bridge chat` serves the agent's
`terminal/*` requests with it (acp_bridge/client/methods.py).

Lifetime: `start_terminal` starts, in a task group the caller owns, one owner task that
spawns the process (in a new session, so it leads its own process group), pumps its
output into a bounded buffer, and waits for it. The process never outlives its owner
task: `release()` (or `kill()`) SIGKILLs the whole process group, and if the task group
is cancelled first (the session goes away) the owner task kills the group in a shielded
`finally` and reaps the leader. So a command's background children die with it: a
terminal is not a way to start daemons. Its environment is the agent's without the
secrets it holds (tools/environment.py), plus the `env` the caller gives.

The owner task needs this process alive. So that a command dies with the agent however
the agent dies (SIGKILL included), each group is also listed with the process's
watchdog (tools/reaper.py) from its spawn until the owner task has killed it: the
watchdog kills every group still listed when this process goes away.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import anyio.abc

from acp_bridge.tools.base import ExitStatus, TerminalOutput
from acp_bridge.tools.environment import command_environment
from acp_bridge.tools.reaper import REAPER

# After the command exits, how long to wait for the output pipe to reach EOF. A
# background child that keeps the pipe open would otherwise hold the exit status back
# forever.
DRAIN_GRACE_S = 0.5


def signal_name(returncode: int) -> str:
    """The name of the signal that ended a process with this (negative) return code."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"SIG{-returncode}"


class LocalTerminal:
    """A local command; see the module docstring for its lifetime.

    `output_byte_limit` None keeps all the output (an ACP client may omit the limit).
    """

    def __init__(self, output_byte_limit: int | None) -> None:
        self._limit = None if output_byte_limit is None else max(output_byte_limit, 0)
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
        argv: Sequence[str],
        cwd: Path | None,
        env: Mapping[str, str] | None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """The owner task: spawn, pump, wait, and always kill the group at the end."""
        # Without the agent's secrets (tools/environment.py), with what the client gave.
        environ = command_environment(os.environ, env)
        try:
            # Before the spawn: a command that could not be reaped is not started.
            REAPER.ensure_running()
            check_program(argv[0], cwd, environ.get("PATH"))
            process = await anyio.open_process(
                ["/bin/sh", "-c", GATE, "acp-bridge-gate", *argv],
                cwd=cwd,
                env=environ,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            self._finish(ExitStatus(None))
            raise
        self._pid = process.pid
        REAPER.watch(process.pid)
        await _open_gate(process)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump, process)
                task_status.started()
                code = await process.wait()
                with anyio.move_on_after(DRAIN_GRACE_S):
                    await self._eof.wait()
                if code < 0:
                    self._status = ExitStatus(None, signal_name(code))
                else:
                    self._status = ExitStatus(code)
                self._exited.set()
                # Keep pumping (background children may still write) until released.
                await self._released.wait()
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    self._kill_group()
                    await process.aclose()
                finally:
                    # Killed (and its leader reaped): no longer the watchdog's to kill.
                    REAPER.forget(process.pid)
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
                excess = len(self._buffer) - self._limit if self._limit is not None else 0
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


# The command waits at this gate until its process group is listed with the reaper:
# anyio's spawn returns to us some time after the child started, and a kill of the agent
# in between would leave a running command nobody watches. The gate reads one line from
# its stdin (written once the group is listed) and then becomes the command, with stdin
# from /dev/null as before; if we die first, the read sees EOF and the command never runs.
GATE = 'IFS= read -r _ || exit 125; exec "$@" </dev/null'


def check_program(program: str, cwd: Path | None, path: str | None) -> None:
    """Raise FileNotFoundError for a program that cannot be run, as a direct spawn would:
    behind the gate the spawn itself (of /bin/sh) always succeeds."""
    if "/" in program:
        target = Path(program) if Path(program).is_absolute() or cwd is None else cwd / program
        found = target.is_file() and os.access(target, os.X_OK)
    else:
        found = shutil.which(program, path=path) is not None
    if not found:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


async def _open_gate(process: anyio.abc.Process) -> None:
    assert process.stdin is not None
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await process.stdin.send(b"\n")
    with contextlib.suppress(OSError):
        await process.stdin.aclose()


async def start_terminal(
    task_group: anyio.abc.TaskGroup,
    argv: Sequence[str],
    *,
    cwd: Path | None,
    output_byte_limit: int | None,
    env: Mapping[str, str] | None = None,
) -> LocalTerminal:
    """Spawn `argv` (no shell) under an owner task in `task_group`; it is running when
    this returns. Raises OSError if it cannot be spawned (no such program, cwd gone)."""
    terminal = LocalTerminal(output_byte_limit)
    await task_group.start(terminal.run, argv, cwd, env)
    return terminal
