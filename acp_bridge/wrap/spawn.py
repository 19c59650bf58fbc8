"""Spawning the wrapped agent's process: the one place it is started.

It imports only the standard library's `subprocess` and the reaper, so `acp-bridge
wrap` can start the child before the wrapper's own imports (issue 23, start-up): the
child then boots while the wrapper imports its ~150 ms of modules, instead of after
them, and the wrapper adds little to the child's own `initialize` (bench/README.md,
"Issue 23: wrap's speed"). Restarts spawn through here too (acp_bridge.wrap.child).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping

from acp_bridge.tools.reaper import REAPER

TYPE_CHECKING = False  # typing's, without importing typing here (mypy takes any TYPE_CHECKING as True)

if TYPE_CHECKING:
    from acp_bridge.host.tuning import Tuning
    from acp_bridge.wrap.handshake import Greeting, Handshake


def spawn(argv: list[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start `argv` with three pipes in a session of its own (it leads a process group
    holding whatever it starts), listed with the watchdog before it can run anything
    unwatched. OSError if it cannot be started, or the watchdog cannot: a child that
    could not be reaped is not started."""
    REAPER.ensure_running()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )
    # At once: the group is watched from here on.
    REAPER.watch(proc.pid)
    return proc


class Early:
    """The child's first process, started by the command line before the wrapper's
    imports (or why it could not be: raised where a spawn would raise it, so a command
    that cannot be run is refused as before). Taken once.

    `greet` starts the start-up handshake with it (acp_bridge.wrap.handshake: the
    editor's `initialize` answered while the wrapper imports), `finish` ends it, before
    anything else reads our stdin or writes our stdout; `greeting` is what it did."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = list(argv)
        self._proc: subprocess.Popen[bytes] | None = None
        self._error: OSError | None = None
        self._handshake: Handshake | None = None
        self.greeting: Greeting | None = None
        self.tuning: Tuning | None = None  # the process's, given to `greet`
        try:
            self._proc = spawn(self.argv)
        except OSError as exc:
            self._error = exc

    def greet(self, agents: list[str] | None, tuning: Tuning, *, held: bool = False) -> None:
        """Start the handshake (`agents`: the names of `wrap --agent`'s agents; `tuning`:
        the process's, which the host takes over; `held`: it answers the editor only once
        `release`d)."""
        self.tuning = tuning
        if self._proc is not None:
            from acp_bridge.wrap.handshake import Handshake

            self._handshake = Handshake(self._proc, agents, tuning, held=held)
            self._handshake.start()

    def release(self) -> None:
        """The handshake may answer the editor (the options were taken)."""
        if self._handshake is not None:
            self._handshake.release()

    def finish(self) -> Greeting | None:
        """The handshake stopped (None if there was none)."""
        handshake, self._handshake = self._handshake, None
        if handshake is not None:
            self.greeting = handshake.finish()
        return self.greeting

    def discard(self) -> None:
        """The command line refused its options: the process and its group are killed
        and reaped, as if never started (nothing was sent to it)."""
        handshake, self._handshake = self._handshake, None
        if handshake is not None:
            handshake.finish()
        proc, self._proc, self._error = self._proc, None, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        REAPER.forget(proc.pid)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

    def take(self) -> subprocess.Popen[bytes]:
        """The process (OSError if it could not be started); once."""
        assert self._handshake is None, "finish() first"
        proc, error, self._proc, self._error = self._proc, self._error, None, None
        if error is not None:
            raise error
        assert proc is not None, "taken already"
        return proc
