"""Whether processes are still running, as the orphan tests and the crash matrix ask it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

GONE_WITHIN_S = 5.0  # how long a command may take to die after its agent was killed


def alive(pid: int) -> bool:
    """Running (a zombie is dead: PID 1 in a container may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def gone(pid: int) -> Callable[[], bool]:
    """`pid` has exited: a condition for tests/support/waiting.py's waits."""
    return lambda: not alive(pid)


def wait_gone(pids: list[int], timeout: float = GONE_WITHIN_S) -> list[int]:
    """The pids still running after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)
