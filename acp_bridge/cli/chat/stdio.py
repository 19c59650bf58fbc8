"""The chat's own stdio: one line reader over stdin (`LineInput`), and the relay of the
agent child's stderr to ours. The JSON-RPC connection with the child is
acp_bridge.client.connection's.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable

import anyio
import anyio.abc

from acp_bridge.cli.safe_text import clean


class LineInput:
    """Lines from a file descriptor, the chat's only reader of stdin (the "Input" part of
    acp_bridge.cli.chat.main's docstring says why it polls and what a cancelled read keeps)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._eof = False
        self._pollable = True
        self._lock = anyio.Lock()

    async def readline(self) -> str | None:
        """The next line without its newline, or None at end of input."""
        async with self._lock:
            while True:
                end = self._buffer.find(b"\n")
                if end >= 0 or (self._eof and self._buffer):
                    stop = end if end >= 0 else len(self._buffer)
                    line = bytes(self._buffer[:stop])
                    del self._buffer[: stop + 1]
                    return line.decode("utf-8", "replace").rstrip("\r")
                if self._eof:
                    return None
                chunk = await self._read()
                if chunk:
                    self._buffer += chunk
                else:
                    self._eof = True

    async def _read(self) -> bytes:
        while True:
            if self._pollable:
                try:
                    await anyio.wait_readable(self._fd)
                except OSError:  # epoll refuses regular files and /dev/null: they never block
                    self._pollable = False
            try:
                return os.read(self._fd, 65536)
            except BlockingIOError:
                continue
            except OSError:  # the terminal went away
                return b""


async def relay_stderr(process: anyio.abc.Process, above: Callable[[str], bool] | None = None) -> None:
    """The agent's stderr (its log, or a wrapped agent's anything) to ours, a line at a
    time with control characters escaped: it is not the agent's to run on the terminal.
    `above` may take the lines instead (True: it wrote them above the line being edited)."""
    assert process.stderr is not None
    pending = b""
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        async for chunk in process.stderr:
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            if len(pending) > 65536:  # no newline in sight: show what came so far
                lines.append(pending)
                pending = b""
            text = "".join(clean(line.decode("utf-8", "replace")) + "\n" for line in lines)
            if text and not (above is not None and above(text)):
                sys.stderr.write(text)
                sys.stderr.flush()
    if pending:
        sys.stderr.write(clean(pending.decode("utf-8", "replace")) + "\n")
        sys.stderr.flush()
