"""The reaper: commands this process started die with it, however it dies.

Every local command runs in its own process group (tools/local_terminal.py), and the
owner task kills that group on cancel, timeout and release. That needs this process
alive: after a SIGKILL (or the OOM killer, or a segfault) nobody is left to kill the
group, and a `sleep 600` or a dev server would run on for ever.

So the first command also starts a watchdog: one `/bin/sh` per process (no Python
start-up), in a session of its own (a Ctrl-C or a signal to our process group does not
reach it), whose stdin is a pipe from us. We write `+PGID` when a group starts and
`-PGID` when its owner task has killed and reaped it. Whatever way we die, the kernel
closes our end of the pipe; the watchdog reads EOF, SIGKILLs every group still listed,
and exits. On a normal exit the list is empty and it just exits.

Why not `PR_SET_PDEATHSIG`: it is Linux only (macOS has no prctl), it is cleared on
fork so it reaches the shell but not the command's children, and anyio's
`open_process` has no `preexec_fn` to set it in. A pipe's EOF is POSIX and sees every
kind of death; the group kill reaches every child that stayed in the group.

Our end of the pipe is close-on-exec and `subprocess` closes inherited descriptors, so
no command holds it open (which would keep the watchdog from ever seeing EOF). If the
watchdog itself is killed, the next write notices, and a new one is started and told
every group still listed.

A command cannot run before its group is listed: tools/local_terminal.py starts it
behind a gate (a `/bin/sh` that waits for one line on its stdin, written once the group
is listed, then becomes the command); if we die before, the gate reads EOF and the
command never runs.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
import threading

TYPE_CHECKING = False  # typing's, without importing typing here (mypy takes any TYPE_CHECKING as True)

if TYPE_CHECKING:
    import logging


def _log() -> logging.Logger:
    """Our logger, on the rare path that needs it: `acp-bridge wrap` imports this module
    before it spawns its child, and `logging` costs a few ms there (issue 32)."""
    import logging

    return logging.getLogger(__name__)


# How long a watchdog whose pipe we closed may take to do its kills and exit.
LET_GO_S = 5.0

# Lines that are not `+N` / `-N` are ignored, so a bad line never becomes `kill -- -`.
WATCHDOG_SCRIPT = r"""
groups=' '
while IFS= read -r line; do
  g=${line#?}
  case $g in ''|*[!0-9]*) continue ;; esac
  case $line in
    +*) groups="$groups$g " ;;
    -*) case $groups in *" $g "*) groups="${groups%%" $g "*} ${groups#*" $g "}" ;; esac ;;
  esac
done
for g in $groups; do kill -s KILL -- "-$g" 2>/dev/null; done
"""


class Reaper:
    """The watchdog of one process (see the module docstring). Thread-safe: commands
    may be started from worker threads' callers too."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._groups: set[int] = set()

    @property
    def watchdog_pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def ensure_running(self) -> None:
        """Start the watchdog if it is not running. Raises OSError if it cannot be
        started: a command is not run unless it can be reaped."""
        with self._lock:
            self._ensure_locked()

    def watch(self, pgid: int) -> None:
        """List a new process group: it is killed if this process dies."""
        with self._lock:
            self._groups.add(pgid)
            self._send(f"+{pgid}\n")

    def forget(self, pgid: int) -> None:
        """A group that was killed and reaped by its owner: no longer ours to kill."""
        with self._lock:
            if pgid not in self._groups:
                return
            self._groups.discard(pgid)
            self._send(f"-{pgid}\n")

    def close(self) -> None:
        """Close our end, as our death would: the watchdog kills what is still listed
        and exits. Used at a normal exit (with nothing listed) and by tests."""
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                _let_go(proc, kill=False)

    def _ensure_locked(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if self._proc is not None:
            _log().warning("the command watchdog (pid %d) died; starting a new one", self._proc.pid)
            _let_go(self._proc, kill=True)
            self._proc = None
        proc = subprocess.Popen(
            ["/bin/sh", "-c", WATCHDOG_SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # "/" so the watchdog never keeps a folder busy (an unmount, a removal).
            cwd="/",
            start_new_session=True,
        )
        self._proc = proc
        # Tell a new watchdog every group a dead one was watching.
        if self._groups:
            self._write(proc, "".join(f"+{g}\n" for g in sorted(self._groups)))
        return proc

    def _send(self, line: str) -> None:
        proc = self._ensure_locked()
        try:
            self._write(proc, line)
        except BrokenPipeError:
            # It died since the poll (maybe not reaped yet): a new one gets the whole list.
            _log().warning("the command watchdog (pid %d) died; starting a new one", proc.pid)
            _let_go(proc, kill=True)
            self._proc = None
            self._ensure_locked()

    @staticmethod
    def _write(proc: subprocess.Popen[bytes], text: str) -> None:
        assert proc.stdin is not None
        data = text.encode("ascii")
        fd = proc.stdin.fileno()
        while data:
            data = data[os.write(fd, data):]


def _let_go(proc: subprocess.Popen[bytes], *, kill: bool) -> None:
    """Close our end of a watchdog's pipe and reap it (killing it first if it is one we
    gave up on). Always reaped: a Popen dropped while running would be a zombie and a
    ResourceWarning later, wherever the garbage collector happens to run."""
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.close()
    if kill:
        with contextlib.suppress(OSError):
            proc.kill()
    try:
        # After EOF it only sends a kill per listed group: slow only on a starved machine.
        proc.wait(timeout=LET_GO_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


REAPER = Reaper()
# A normal exit: nothing is listed any more (every owner task killed its group), so the
# watchdog just exits; waiting for it here keeps it from being reported as a leak.
atexit.register(REAPER.close)
