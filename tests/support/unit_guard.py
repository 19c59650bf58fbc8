"""The unit tier's guard: while it is on, starting a process or opening a socket raises.

`pytest -m unit` is the fast loop (tests/support/tiers.py gives the `unit` marker to
every test not marked `integration`, `long` or `soak`). A label alone would drift: a
test marked unit that starts an agent would make the loop slow again, and nobody would
notice. So while a unit test sets up and runs, every way this code base has of starting a
process (subprocess, and through it asyncio's and anyio's processes; os.fork,
forkpty, posix_spawn, system; multiprocessing's fork_exec) and of opening a socket
(a new `socket.socket`) raises `NotInUnitTier`; and since code under test may catch
and swallow that, each attempt is also recorded, and tiers.py fails the test on it.

Left open on purpose: `socket.socketpair()` (its two ends are made from descriptors
the kernel hands back, not with a new socket): asyncio's event loop builds its wake-up
channel from one, inside this process, and every anyio test needs it.
"""

from __future__ import annotations

import _posixsubprocess  # multiprocessing's way in
import os
import socket
import subprocess
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["NotInUnitTier", "forbidden"]


class NotInUnitTier(RuntimeError):
    """A unit test tried to start a process or open a socket."""


# (owner, attribute, what it does): each is replaced by a function that refuses.
_SPAWNERS: tuple[tuple[Any, str, str], ...] = (
    (subprocess.Popen, "_execute_child", "starts a process (subprocess, asyncio, anyio)"),
    (os, "fork", "forks"),
    (os, "forkpty", "forks a pseudo-terminal (pty, pexpect)"),
    (os, "posix_spawn", "starts a process (os.posix_spawn)"),
    (os, "posix_spawnp", "starts a process (os.posix_spawnp)"),
    (os, "system", "starts a shell (os.system)"),
    (_posixsubprocess, "fork_exec", "starts a process (fork_exec)"),
)


_ROOT = str(Path(__file__).resolve().parents[2])
_HERE = str(Path(__file__).resolve())


def _where() -> str:
    """The innermost line of the repository's own code that led here."""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename.startswith(_ROOT) and frame.filename != _HERE and "/.venv" not in frame.filename:
            return f"{frame.filename[len(_ROOT) + 1:]}:{frame.lineno}"
    return "outside the repository"


@contextmanager
def forbidden(seen: Callable[[str], None]) -> Iterator[None]:
    """Within: every spawn or new socket calls `seen(what)` and raises NotInUnitTier."""

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            seen(f"{what} ({_where()})")
            raise NotInUnitTier(f"a unit test {what}: mark it (or its module) integration")

        return refused

    socket_init = socket.socket.__init__

    def guarded_socket_init(self: socket.socket, family: Any = -1, type: Any = -1,
                            proto: int = -1, fileno: int | None = None) -> None:
        if fileno is None:  # a new socket; socketpair() and accept() pass their descriptors
            seen(f"opens a socket ({_where()})")
            raise NotInUnitTier("a unit test opens a socket: mark it (or its module) integration")
        socket_init(self, family, type, proto, fileno)

    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in _SPAWNERS]
    try:
        for owner, name, what in _SPAWNERS:
            setattr(owner, name, refuse(what))
        socket.socket.__init__ = guarded_socket_init  # type: ignore[method-assign]
        yield
    finally:
        socket.socket.__init__ = socket_init  # type: ignore[method-assign]
        for owner, name, original in saved:
            setattr(owner, name, original)
