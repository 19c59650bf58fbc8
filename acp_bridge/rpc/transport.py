"""Newline-delimited JSON over a pair of file descriptors (stdin/stdout).

Both descriptors are switched to non-blocking and waited on with anyio, so a client
that stops reading stalls only the writer task, never the event loop; their original
mode is restored on close (a terminal shares it with the shell). There is no line
length limit short of `max_line` (64 MiB by default): a longer line is skipped up to its
newline and reported as `TooLong`, so the connection stays usable.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio

DEFAULT_MAX_LINE = 64 * 1024 * 1024
_READ_SIZE = 256 * 1024


@dataclass(frozen=True)
class TooLong:
    """A line longer than the guard; `size` bytes were skipped."""

    size: int


class FdLineReader:
    """Lines (without the newline) from a file descriptor, until EOF."""

    def __init__(self, fd: int, *, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.fd = fd
        self.max_line = max_line
        self._was_blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)

    async def _read(self) -> bytes:
        while True:
            try:
                return os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)

    async def lines(self) -> AsyncIterator[bytes | TooLong]:
        buffer = bytearray()
        skipping = 0  # bytes of an over-long line dropped so far
        while True:
            chunk = await self._read()
            if not chunk:
                if skipping:
                    yield TooLong(skipping + len(buffer))
                elif buffer.strip():
                    yield bytes(buffer)  # a last line without newline still counts
                return
            start = 0
            while True:
                end = chunk.find(b"\n", start)
                if end < 0:
                    break
                if skipping:
                    yield TooLong(skipping + end - start)
                    skipping = 0
                elif len(buffer) + end - start > self.max_line:
                    yield TooLong(len(buffer) + end - start)
                    buffer = bytearray()
                elif buffer:
                    buffer += chunk[start:end]
                    line, buffer = bytes(buffer), bytearray()
                    yield line
                else:
                    yield chunk[start:end]
                start = end + 1
            rest = chunk[start:]
            if skipping:
                skipping += len(rest)
            elif len(buffer) + len(rest) > self.max_line:
                skipping, buffer = len(buffer) + len(rest), bytearray()
            else:
                buffer += rest

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.set_blocking(self.fd, self._was_blocking)


# A replay writes megabytes while a worker thread parses the next block; the writer
# gets the GIL only every few milliseconds then, and a 64 KiB pipe runs dry long before.
PIPE_BYTES = 1 << 20


def _widen_pipe(fd: int) -> None:
    """Ask for a 1 MiB pipe buffer if `fd` is a pipe (Linux; the default maximum for an
    unprivileged process). Best effort: anything else is left as it is."""
    set_size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if set_size is None:
        return
    with contextlib.suppress(OSError):
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, set_size, PIPE_BYTES)


class FdWriter:
    """Writes whole messages to a file descriptor, waiting (not blocking the loop)
    while the reader on the other side is slow."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._was_blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)
        _widen_pipe(fd)

    def write_now(self, data: bytes) -> int:
        """Write what the descriptor takes at once, without waiting: the number of
        bytes written (0 if it takes none now). Raises what `os.write` raises, but for
        BlockingIOError."""
        try:
            return os.write(self.fd, data)
        except BlockingIOError:
            return 0

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.fd, view)
            except BlockingIOError:
                await anyio.wait_writable(self.fd)
                continue
            view = view[written:]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.set_blocking(self.fd, self._was_blocking)
