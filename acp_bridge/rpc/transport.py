"""Newline-delimited JSON: what a connection reads and writes (`LineReader`, `Writer`),
over a pair of file descriptors (stdin/stdout) or an anyio byte stream pair (a child
process's stdout/stdin).

`Connection` takes any `LineReader` and `Writer` (typing protocols, as pygls takes its
reader and writer), so one connection serves our stdio, the pipes of a wrapped agent
and a client's agent child alike, and a wrapper of either can watch the traffic.

The descriptors are switched to non-blocking and waited on with anyio, so a client
that stops reading stalls only the writer task, never the event loop; their original
mode is restored on close (a terminal shares it with the shell). There is no line
length limit short of `max_line` (64 MiB by default): a longer line is skipped up to its
newline and reported as `TooLong`, so the connection stays usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import io
import os
import stat
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Protocol, cast

import anyio
import anyio.abc

DEFAULT_MAX_LINE = 64 * 1024 * 1024
_READ_SIZE = 256 * 1024


@dataclass(frozen=True)
class TooLong:
    """A line longer than the guard; `size` bytes were skipped."""

    size: int


class LineReader(Protocol):
    """What a connection reads: lines without their newline (a line over `max_line`
    comes as `TooLong`), until the peer's output ends."""

    max_line: int

    def lines(self) -> AsyncIterator[bytes | TooLong]: ...


class Writer(Protocol):
    """What a connection writes to: whole messages, in order. A peer that stopped
    reading raises BrokenPipeError (or ConnectionResetError). A writer may also have
    `write_now(data) -> int`, writing what it takes without waiting (FdWriter): the
    connection then writes a lone message at once (acp_bridge.rpc.outgoing)."""

    async def write(self, data: bytes) -> None: ...


class _Lines:
    """`lines` over `_read` (a chunk of bytes, b"" at the end): the line splitting and
    its length guard, one copy for every reader."""

    max_line: int

    async def _read(self) -> bytes:
        raise NotImplementedError

    def _ended(self) -> None:
        """`lines` ended (EOF, an error, or its consumer stopped)."""

    async def lines(self) -> AsyncIterator[bytes | TooLong]:
        batches = self.batches()
        try:
            async for batch in batches:
                for line in batch:
                    yield line[:-1] if type(line) is bytes and line[-1:] == b"\n" else line
        finally:
            await batches.aclose()

    async def batches(self) -> AsyncGenerator[list[bytes | TooLong], None]:
        """What `lines` yields, the lines of one read at a time (never an empty list),
        each with its newline (the last line of the stream may have none): found by
        one C call (a memchr per line) rather than a Python step a line, as a stream of
        small messages comes a few hundred to a read."""
        max_line = self.max_line
        try:
            buffer = bytearray()
            skipping = 0  # bytes of an over-long line dropped so far
            while True:
                chunk = await self._read()
                if not chunk:
                    if skipping:
                        yield [TooLong(skipping + len(buffer))]
                    elif buffer.strip():
                        yield [bytes(buffer)]  # a last line without newline still counts
                    return
                whole = io.BytesIO(chunk).readlines()
                rest = b"" if whole[-1][-1:] == b"\n" else whole.pop()  # the start of a line
                if whole:
                    parts = cast("list[bytes | TooLong]", whole)
                    first = whole[0]  # the end of the line the buffer holds the start of
                    size = len(first) - 1  # without its newline
                    if skipping:
                        parts[0] = TooLong(skipping + size)
                        skipping = 0
                    elif len(buffer) + size > max_line:
                        parts[0] = TooLong(len(buffer) + size)
                        buffer = bytearray()
                    elif buffer:
                        buffer += first
                        parts[0], buffer = bytes(buffer), bytearray()
                    if len(whole) > 1 and max(map(len, whole[1:])) > max_line + 1:
                        parts[1:] = [TooLong(len(line) - 1) if len(line) > max_line + 1 else line
                                     for line in whole[1:]]
                    yield parts
                if skipping:
                    skipping += len(rest)
                elif len(buffer) + len(rest) > max_line:
                    skipping, buffer = len(buffer) + len(rest), bytearray()
                else:
                    buffer += rest
        finally:
            self._ended()


class FdLineReader(_Lines):
    """Lines (without the newline) from a file descriptor, until EOF. `prefix`: bytes
    read from it before (the wrapper's start-up handshake, acp_bridge.wrap.handshake),
    read first, as the first read."""

    def __init__(self, fd: int, *, max_line: int = DEFAULT_MAX_LINE, prefix: bytes = b"") -> None:
        self.fd = fd
        self.max_line = max_line
        self._was_blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)
        # Reads that returned data, and when the last did (loop time); the next read
        # waits until `_hold` (0: it does not wait): `hold_next`.
        self.reads = 0
        self.read_at = float("-inf")
        self.received = 0  # bytes read so far (what the peer has said, in bytes)
        self._hold = 0.0
        # On asyncio the descriptor stays registered with the loop between reads (see
        # `_wait`): where, the wait under way, readiness seen with nobody waiting, and
        # data read for a wait that was cancelled before it took it.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiter: asyncio.Future[bytes] | None = None
        self._idle_hits = 0
        self._kept: bytes | None = prefix or None
        self._empty = False  # the callback's last read left the pipe empty

    def hold_next(self, until: float) -> None:
        """Do not read again before `until` (loop time): the owner of a peer that
        streams small messages has them read a while's worth at a time, one wake-up and
        one read for many (the wrapper's link, acp_bridge.wrap.link). Once: the read
        after the next one does not wait."""
        self._hold = until

    async def _read(self) -> bytes:
        kept, self._kept = self._kept, None
        if kept is None:
            hold, self._hold = self._hold, 0.0
            if hold:
                rest = hold - anyio.current_time()
                if rest > 0:
                    await anyio.sleep(rest)
                    self._empty = False  # what came meanwhile is read at once
            kept = await self._read_more()
        self.reads += 1
        self.read_at = anyio.current_time()
        self.received += len(kept)
        return kept

    async def _read_more(self) -> bytes:
        if self._empty:
            self._empty = False
            data = await self._wait()
            if data is not None:
                return data
        while True:
            try:
                return os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                data = await self._wait()
                if data is not None:
                    return data

    async def _wait(self) -> bytes | None:
        """Until the descriptor is readable: what the loop's callback read then (None:
        read it now). `anyio.wait_readable` registers the descriptor with the loop and
        removes it again at every wait (two epoll_ctl calls and the selector's
        bookkeeping per message read). On asyncio it stays registered while reads
        follow waits, and the callback reads at once (`_ready`), so the loop's next
        poll does not see the same data again; it is removed when the wait is
        cancelled, when readiness finds nobody waiting twice, when `lines` ends and on
        `close`."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio
            await anyio.wait_readable(self.fd)
            return None
        if self._loop is not loop:
            self._unregister()
            try:
                loop.add_reader(self.fd, self._ready)
            except NotImplementedError:  # a loop without add_reader: anyio's way
                await anyio.wait_readable(self.fd)
                return None
            self._loop = loop
        self._idle_hits = 0
        waiter = self._waiter = loop.create_future()
        try:
            data: bytes = await waiter
        except BaseException:
            self._unregister()
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._kept = waiter.result()  # read, not taken: the next read returns it
            raise
        finally:
            self._waiter = None
        # A short read emptied the pipe: the next read waits at once (the descriptor
        # is watched level-triggered, so data that came meanwhile wakes it at once).
        self._empty = len(data) < _READ_SIZE
        return data

    def _ready(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            try:
                data = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                return  # not readable after all: still waiting
            except OSError as exc:
                waiter.set_exception(exc)
                return
            waiter.set_result(data)
            return
        # Nobody waits (the reader is busy elsewhere): after a second time the
        # descriptor is not watched until it waits again, so the loop does not spin.
        self._idle_hits += 1
        if self._idle_hits > 1:
            self._unregister()

    def _unregister(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.remove_reader(self.fd)

    def _ended(self) -> None:
        self._unregister()

    def close(self) -> None:
        self._unregister()
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
        # Bytes the descriptor took so far: with what a pipe still holds unread, how
        # far its reader got (the wrapper asks whether its dead child read a prompt).
        self.written = 0
        self._was_blocking = os.get_blocking(fd)
        os.set_blocking(fd, False)
        _widen_pipe(fd)

    def write_now(self, data: bytes) -> int:
        """Write what the descriptor takes at once, without waiting: the number of
        bytes written (0 if it takes none now). Raises what `os.write` raises, but for
        BlockingIOError."""
        try:
            written = os.write(self.fd, data)
        except BlockingIOError:
            return 0
        self.written += written
        return written

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.fd, view)
            except BlockingIOError:
                await anyio.wait_writable(self.fd)
                continue
            self.written += written
            view = view[written:]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.set_blocking(self.fd, self._was_blocking)


class StreamLineReader(_Lines):
    """Lines from an anyio byte stream (a child process's stdout), until it ends."""

    def __init__(self, stream: anyio.abc.ByteReceiveStream, *, max_line: int = DEFAULT_MAX_LINE) -> None:
        self.stream = stream
        self.max_line = max_line

    async def _read(self) -> bytes:
        try:
            return await self.stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            return b""


class StreamWriter:
    """Writes to an anyio byte stream (a child process's stdin); a stream closed or
    broken under it is a BrokenPipeError, as for a pipe."""

    def __init__(self, stream: anyio.abc.ByteSendStream) -> None:
        self.stream = stream

    async def write(self, data: bytes) -> None:
        try:
            await self.stream.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise BrokenPipeError(str(exc)) from exc
