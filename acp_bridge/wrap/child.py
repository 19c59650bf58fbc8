"""`ChildAgent`: the wrapped agent's process (docs/wrap.md, process hygiene).

The child is spawned with three pipes. Its stdin and stdout are our ends of its ACP
connection, switched to non-blocking for `rpc.transport` (as `agent.serve` does with our
own stdio); its stderr is read line by line into our log, never our stdout (which
carries protocol messages only).

It runs in a session of its own, so it leads a process group that holds the children
it starts (an npx wrapper, a node server, the tools it runs). That group is listed with
the process's watchdog (tools/reaper.py) from the spawn until we have killed it, so it
dies with us however we die, SIGKILL included.

It also dies with its leader: when the process we started exits and we did not ask it
to, the rest of its group is SIGKILLed at once, before the leader is reaped (so the
group id cannot have been reused). An npm launcher that dies leaves the real agent it
started orphaned, still holding our pipes and still talking; nothing it does after that
is anyone's to see or cancel (issue 23). A descendant that left the group (setsid) but
still holds one of the child's pipes is found by the pipe (`kill_pipe_holders`, Linux).
The exit is also seen without waiting for the watcher task (`alive` asks the kernel), so
a request that comes right after the death restarts the child instead of going to a
dead one.

Closing is gentle first: real agents finish their work for a while after their stdin
closes (5-10 s measured for some), and leave children behind when they do exit. So
`close` closes its stdin, waits `grace` seconds for the leader to exit, then kills the
whole group (SIGTERM, a short wait, SIGKILL): nothing of it is left either way.

Death is seen through a pidfd where the OS has one (Linux), else by polling: no thread
is tied up waiting for the process.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import struct
import subprocess
import termios
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING

import anyio
import anyio.abc

from acp_bridge.rpc.transport import FdLineReader, FdWriter, TooLong
from acp_bridge.tools.reaper import REAPER
from acp_bridge.wrap.spawn import Early, spawn

if TYPE_CHECKING:
    from acp_bridge.wrap.handshake import Greeting

log = logging.getLogger("acp_bridge.wrap.child")

POLL_S = 0.05  # how often the exit is polled where there is no pidfd
TERM_GRACE_S = 0.5  # between SIGTERM and SIGKILL of the group
STDERR_LINE = 64 * 1024  # longer stderr lines are logged as their size only


class ChildAgent:
    """The wrapped agent's process; see the module docstring."""

    def __init__(self, argv: list[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
                 grace: float = 2.0, early: Early | None = None) -> None:
        if not argv:
            raise ValueError("the wrapped agent needs a command")
        self.argv = list(argv)
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.grace = grace
        self._early = early  # the first process, spawned by the command line already
        self.greeting: Greeting | None = None  # what the start-up handshake did with the current process
        self.starts = 0  # processes spawned so far (a restart makes one more)
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: FdLineReader | None = None
        self._writer: FdWriter | None = None
        self._died: anyio.Event | None = None
        self._stdin: int | None = None
        self._stdout: int | None = None
        self._status: int | None = None
        self._closing = False  # `close` runs: it stops the group its own, gentler way

    @property
    def reader(self) -> FdLineReader:
        assert self._reader is not None, "start() first"
        return self._reader

    @property
    def writer(self) -> FdWriter:
        assert self._writer is not None, "start() first"
        return self._writer

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def alive(self) -> bool:
        """Running: asked of the kernel (one waitid), so an exit the watcher task has not
        seen yet counts (and is handled here as the watcher would)."""
        proc, died = self._proc, self._died
        if proc is None or self._status is not None or died is None:
            return False
        if _exited(proc):
            self._on_exit(proc, died)
            return False
        return True

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Spawn the command; its stderr and its exit are watched by tasks of
        `task_group`. Raises OSError if it cannot be spawned (no such program). The
        first start takes the process the command line spawned early, if any."""
        early, self._early = self._early, None
        proc = early.take() if early is not None else spawn(self.argv, cwd=self.cwd, env=self.env)
        # What the start-up handshake read and wrote (acp_bridge.wrap.handshake): the
        # first process's only.
        greeting = self.greeting = early.greeting if early is not None else None
        # The pipes' descriptors are ours from here, each closed once at a known
        # moment (see `close` and `close_output`), never by a file object's finaliser:
        # a descriptor number closed early can come back as the next child's pipe.
        stdin, stdout, stderr = (_take(f) for f in (proc.stdin, proc.stdout, proc.stderr))
        proc.stdin = proc.stdout = proc.stderr = None
        self._proc, self._status, self._died, self._closing = proc, None, anyio.Event(), False
        self._stdin, self._stdout = stdin, stdout
        self.starts += 1
        self._reader = FdLineReader(stdout, prefix=greeting.child_out if greeting is not None else b"")
        self._writer = FdWriter(stdin)
        if greeting is not None:
            self._writer.written = greeting.child_in
        log.info("started the wrapped agent (pid %d): %s", proc.pid, " ".join(self.argv))
        task_group.start_soon(self._watch, proc, self._died)
        task_group.start_soon(self._stderr, proc.pid, stderr, greeting.child_err if greeting is not None else b"")

    async def wait_died(self) -> int:
        """Wait for the process to exit; its status (negative: the signal)."""
        assert self._died is not None, "start() first"
        await self._died.wait()
        assert self._status is not None
        return self._status

    async def close(self, *, grace: float | None = None) -> None:
        """Close its stdin, give it `grace` seconds (the configured ones by default) to
        exit, then kill its process group. Idempotent; shielded (it runs at shutdown, in
        cancelled scopes)."""
        proc = self._proc
        if proc is None:
            return
        self._closing = True
        with anyio.CancelScope(shield=True):
            # Its EOF. The caller has stopped writing to it (ChildLink.close drains
            # and closes the connection's output first).
            _close_fd(self._stdin)
            self._stdin = None
            if self.alive:
                with anyio.move_on_after(self.grace if grace is None else grace):
                    await self.wait_died()
            # The leader may be gone and its children not: the group goes either way.
            if self._signal_group(proc, signal.SIGTERM) and self.alive:
                with anyio.move_on_after(TERM_GRACE_S):
                    await self.wait_died()
            self._signal_group(proc, signal.SIGKILL)
            with anyio.move_on_after(TERM_GRACE_S):
                await self.wait_died()
            REAPER.forget(proc.pid)

    def kill(self, pid: int) -> None:
        """Its stdout ended (or its process is gone): the run `pid` is over for us, so
        its group dies now, leader included (the watcher reaps it). Not while `close`
        runs, and never a later run's."""
        proc = self._proc
        if proc is not None and proc.pid == pid and not self._closing and self.alive:
            log.info("the wrapped agent (pid %d) closed its stdout: stopping its process group", pid)
            self._signal_group(proc, signal.SIGKILL)

    def stdin_unread(self) -> int | None:
        """Bytes written to its stdin that nothing has read (FIONREAD on our end of the
        pipe: the kernel keeps what is unread after the reader died); None if unknown."""
        if self._stdin is None:
            return None
        try:
            return int(struct.unpack("i", fcntl.ioctl(self._stdin, termios.FIONREAD, b"\0" * 4))[0])
        except OSError:
            return None

    def pipes(self) -> set[str]:
        """Its stdin and stdout pipes as /proc names them (`pipe:[INODE]`)."""
        inodes = set()
        for fd in (self._stdin, self._stdout):
            if fd is not None:
                with contextlib.suppress(OSError):
                    inodes.add(f"pipe:[{os.fstat(fd).st_ino}]")
        return inodes

    @staticmethod
    def kill_pipe_holders(pipes: set[str]) -> list[int]:
        """SIGKILL every other process that holds one of `pipes` (a descendant that left
        its group and outlived it, keeping its stdout open); their pids. Linux (/proc);
        blocking: run it in a worker thread."""
        killed: list[int] = []
        for pid in _pipe_holders(pipes):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        if killed:
            log.warning("killed %s: they held the dead wrapped agent's pipes", ", ".join(map(str, killed)))
        return killed

    def close_output(self) -> None:
        """Close our end of its stdout: its reader has seen EOF (the connection over it
        has ended). Until then the descriptor stays open, so its number cannot be
        reused under a reader still waiting on it."""
        if self._reader is not None:
            self._reader.close()
        _close_fd(self._stdout)
        self._stdout = None

    async def restart(self, task_group: anyio.abc.TaskGroup) -> None:
        """A new process for the dead (or closed) one; between turns only."""
        await self.close()
        await self.start(task_group)

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> bool:
        """Signal the child's process group (its id is the leader's pid); False if
        nothing of it is left."""
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    async def _watch(self, proc: subprocess.Popen[bytes], died: anyio.Event) -> None:
        try:
            pidfd = os.pidfd_open(proc.pid)  # type: ignore[attr-defined,unused-ignore]
        except (AttributeError, OSError):
            pidfd = None
        try:
            while not _exited(proc):
                if pidfd is not None:
                    await anyio.wait_readable(pidfd)
                else:
                    await anyio.sleep(POLL_S)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        self._on_exit(proc, died)

    def _on_exit(self, proc: subprocess.Popen[bytes], died: anyio.Event) -> None:
        """The leader exited (not reaped yet, where waitid can tell): its group dies
        now unless `close` is stopping it, then it is reaped. Once per process."""
        if died.is_set():
            return
        stopped = proc is not self._proc or self._closing
        if not stopped and self._signal_group(proc, signal.SIGKILL):
            log.info("the wrapped agent (pid %d) exited: killed what was left of its process group", proc.pid)
        status = proc.wait()  # exited: returns at once
        if proc is self._proc:
            self._status = status
        if not stopped:
            REAPER.forget(proc.pid)  # its group is killed, its leader reaped
        log.log(logging.INFO if status == 0 else logging.WARNING,
                "the wrapped agent (pid %d) exited with status %s", proc.pid, status)
        died.set()

    @staticmethod
    async def _stderr(pid: int, fd: int, prefix: bytes) -> None:
        """The child's stderr into our log (at warning: what it says there is what an
        editor would have shown from it unwrapped), until EOF; `prefix` first (what the
        start-up handshake read of it)."""
        reader = FdLineReader(fd, max_line=STDERR_LINE, prefix=prefix)
        try:
            async for line in reader.lines():
                if isinstance(line, TooLong):
                    log.warning("[%d] (a stderr line of %d bytes)", pid, line.size)
                else:
                    log.warning("[%d] %s", pid, line.decode("utf-8", "replace").rstrip())
        finally:
            reader.close()  # no longer watched by the loop before its number is freed
            _close_fd(fd)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether `proc` exited, leaving it unreaped where the OS can (waitid WNOWAIT), so
    its pid, and so its process group's id, cannot be reused before the group is killed."""
    if proc.returncode is not None:
        return True
    waitid = getattr(os, "waitid", None)
    if waitid is None:
        return proc.poll() is not None
    try:
        return waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already (by its Popen)
        return True


def _pipe_holders(inodes: set[str]) -> list[int]:
    """The other processes with a descriptor on one of the pipes `inodes` names."""
    if not inodes:
        return []
    me, found = os.getpid(), []
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) == me:
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        found.append(int(proc.name))
                        break
    return found


def _take(file: IO[bytes] | None) -> int:
    """The descriptor of one of Popen's pipe files, ours to close (a duplicate; the
    file object is closed here)."""
    assert file is not None
    fd = os.dup(file.fileno())
    file.close()
    return fd


def _close_fd(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
