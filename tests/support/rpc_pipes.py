"""An in-memory line reader and writer for `rpc.Connection` (its `LineReader` and `Writer`
protocols), shared by the connection's in-process tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import orjson


class FakeReader:
    """Lines sent with `send`; an item holding several lines (joined by newlines) is
    read as one read of the pipe: its lines come without a checkpoint between them."""

    max_line = 1 << 20

    def __init__(self) -> None:
        self.send, self._receive = anyio.create_memory_object_stream[bytes](100)

    async def lines(self) -> AsyncIterator[bytes]:
        async with self._receive:
            async for chunk in self._receive:
                for line in chunk.split(b"\n"):
                    yield line


class FakeWriter:
    """Collects what is written; `gate` (when set) holds every write until it opens;
    `broken` makes writes fail like a closed pipe."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.writes = 0
        self.gate: anyio.Event | None = None
        self.broken = False

    async def write(self, data: bytes) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.broken:
            raise BrokenPipeError
        self.data += data
        self.writes += 1

    def messages(self) -> list[Any]:
        return [orjson.loads(line) for line in bytes(self.data).splitlines()]


def line(*messages: Any) -> bytes:
    """`messages` as the lines of one write."""
    return b"\n".join(orjson.dumps(m) for m in messages)
