"""Reading a read's lines at once (issue 32): `_Lines.batches` finds the same lines as
the one-line-at-a-time splitter it replaced, with the same length guard, however the
stream is cut into reads; and `Connection` hands a run of notifications read together
to a handler that takes runs (`InlineRun`) in the order the lines came, everything
else (requests, other notifications, answers, lines too long or not JSON) handled
between the runs exactly where it stood."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acp_bridge.rpc.connection import Connection
from acp_bridge.rpc.transport import StreamLineReader, TooLong
from tests.support.rpc_pipes import FakeWriter

# jsonrpcserver (which answers what nobody serves) reads its schema with a deprecated call
# when the connection imports it (tests/test_jsonrpc_connection.py says the same).
pytestmark = [pytest.mark.anyio,
              pytest.mark.filterwarnings("ignore:(read_text|open_text) is deprecated:DeprecationWarning")]


class Chunks(anyio.abc.ByteReceiveStream):
    """A byte stream whose receives return `chunks`, in order, then its end."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = iter(chunks)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        chunk = next(self._chunks, None)
        if chunk is None:
            raise anyio.EndOfStream
        return chunk

    async def aclose(self) -> None:
        pass


def reads(chunks: list[bytes], max_line: int) -> StreamLineReader:
    return StreamLineReader(Chunks(chunks), max_line=max_line)


def expected(stream: bytes, max_line: int) -> list[bytes | TooLong]:
    """What the reader yields: each line (without its newline), one longer than
    `max_line` as its length; a last line without a newline if it holds more than
    blanks (or is too long)."""
    *whole, last = stream.split(b"\n")
    out: list[bytes | TooLong] = [TooLong(len(line)) if len(line) > max_line else line for line in whole]
    if len(last) > max_line:
        out.append(TooLong(len(last)))
    elif last.strip():
        out.append(last)
    return out


def cut(stream: bytes, at: list[int]) -> list[bytes]:
    bounds = sorted({0, len(stream), *(a % (len(stream) + 1) for a in at)})
    return [stream[a:b] for a, b in itertools.pairwise(bounds) if b > a]


async def collect(chunks: list[bytes], max_line: int) -> tuple[list[Any], list[Any]]:
    lines = [line async for line in reads(chunks, max_line).lines()]
    batches = [batch async for batch in reads(chunks, max_line).batches()]
    return lines, batches


LINES = st.lists(st.one_of(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")),
                           st.sampled_from([b"", b"  ", b"\r", b"x" * 30, b"{}"])), max_size=12)


@settings(max_examples=300, deadline=None)
@given(LINES, st.booleans(), st.lists(st.integers(0, 400), max_size=10), st.integers(1, 20))
async def test_any_stream_in_any_reads_gives_the_lines_and_the_guard(
        lines: list[bytes], newline_at_end: bool, at: list[int], max_line: int) -> None:
    stream = b"\n".join(lines) + (b"\n" if newline_at_end and lines else b"")
    got, batches = await collect(cut(stream, at), max_line)
    assert got == expected(stream, max_line)
    assert all(batches)  # never an empty batch
    flat = [line for batch in batches for line in batch]
    # A batch's lines keep their newlines (the last of the stream may have none).
    assert [line[:-1] if isinstance(line, bytes) and line.endswith(b"\n") else line for line in flat] == got
    assert all(line.endswith(b"\n") for line in flat[:-1] if isinstance(line, bytes))


# --- runs of inline notifications ---------------------------------------------------------


class Batches:
    """A reader whose reads are `reads`, each a list of lines (with newlines)."""

    max_line = 1 << 20

    def __init__(self, reads: list[list[bytes | TooLong]]) -> None:
        self._reads = reads

    async def batches(self) -> AsyncIterator[list[bytes | TooLong]]:
        for batch in self._reads:
            yield batch

    async def lines(self) -> AsyncIterator[bytes | TooLong]:
        for batch in self._reads:
            for line in batch:
                yield line


class Updates:
    """An inline handler that takes runs; calls noted in `seen`."""

    def __init__(self, seen: list[Any]) -> None:
        self.seen = seen

    def __call__(self, params: Any) -> None:
        self.seen.append(("one", params))

    def run(self, params: list[Any]) -> None:
        self.seen.append(("run", params))


def msg(method: str, params: Any = None, **more: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params, **more}) + b"\n"


async def serve(reads: list[list[bytes | TooLong]]) -> tuple[list[Any], FakeWriter]:
    seen: list[Any] = []
    writer = FakeWriter()

    async def method(**params: Any) -> Any:
        seen.append(("request", params))
        return {}

    conn = Connection(Batches(reads), writer, {"m": method},
                      inline={"u": Updates(seen), "note": lambda p: seen.append(("note", p))})
    with anyio.fail_after(5):
        await conn.serve()
    return seen, writer


async def test_a_run_goes_together_and_whatever_stands_between_runs_is_handled_there() -> None:
    seen, writer = await serve([
        [msg("u", 1), msg("u", 2), msg("note", "a"), msg("u", 3), b"{not json\n", msg("u", 4),
         TooLong(99), msg("u", 5), msg("u", 6, id=9), msg("u", 7)],
        [msg("u", 8), msg("u", 9), b"\n", msg("u", 10)],
    ])
    assert seen == [("run", [1, 2]), ("note", "a"), ("run", [3]), ("run", [4]), ("run", [5]),
                    ("run", [7]), ("run", [8, 9]), ("run", [10])]
    # The line that is no JSON and the one too long are answered, in their places; `u`
    # with an id is a request (its params no object: -32602), never part of a run.
    assert [(m["id"], m["error"]["code"]) for m in writer.messages()] == [(None, -32700), (None, -32600), (9, -32602)]


async def test_a_broken_envelope_is_not_part_of_a_run() -> None:
    seen, _ = await serve([[msg("u", 1), orjson.dumps({"jsonrpc": "1.0", "method": "u", "params": 2}) + b"\n",
                            orjson.dumps({"method": "u", "params": 3}) + b"\n", msg("u", 4)]])
    assert seen == [("run", [1]), ("run", [4])]  # the two others are not inline notifications


async def test_a_parse_error_names_the_line_as_it_was_read() -> None:
    """The error answer of a line that is no JSON is the one the line without its
    newline gets (its detail names where reading stopped)."""
    bad = b'{"jsonrpc": "2.0", "id": 3, "method": '
    _, with_batches = await serve([[bad + b"\n"]])
    conn_writer = FakeWriter()

    class OneLine:
        max_line = 1 << 20

        async def lines(self) -> AsyncIterator[bytes]:
            yield bad

    with anyio.fail_after(5):
        await Connection(OneLine(), conn_writer, {}).serve()
    assert with_batches.messages() == conn_writer.messages()
    assert with_batches.messages()[0]["id"] == 3


# --- holding a read back (the wrapped agent's stdout while it streams) ---------------------


async def _reads(gaps: list[float], hold: float) -> tuple[list[int], list[float], list[float]]:
    """A writer that sends a line after each of `gaps` (seconds) into a pipe read by an
    FdLineReader whose every read is held `hold` seconds after the one before (as the
    wrapper's link holds a streaming child's): the lines of each read, and how long
    each read came after the last line it holds was written, and when each line was
    written (a loaded machine stretches the gaps: what is asserted is relative to them)."""
    import os

    from acp_bridge.rpc.transport import FdLineReader

    rfd, wfd = os.pipe()
    reader = FdLineReader(rfd)
    sizes: list[int] = []
    late: list[float] = []
    written: list[float] = []

    async def write() -> None:
        for n, gap in enumerate(gaps):
            await anyio.sleep(gap)  # what is tested: lines that come this far apart
            written.append(anyio.current_time())
            os.write(wfd, b"%d\n" % n)
        os.close(wfd)

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(write)
                async for batch in reader.batches():
                    sizes.append(len(batch))
                    late.append(anyio.current_time() - written[sum(sizes) - 1])
                    if hold:
                        reader.hold_next(reader.read_at + hold)
    finally:
        reader.close()
        os.close(rfd)
    return sizes, late, written


async def test_a_held_reader_takes_a_stream_a_while_at_a_time() -> None:
    sizes, _, written = await _reads([0.005] * 60, hold=0.05)  # 0.3 s of lines, 5 ms apart
    # About one read per 50 ms of writing, not one per line (the writing took as long as
    # the machine let it: 0.3 s when idle, more under load, which made a fixed count flaky).
    assert sum(sizes) == 60 and len(sizes) <= (written[-1] - written[0]) / 0.05 + 2
    unheld, late, _ = await _reads([0.005] * 60, hold=0.0)
    assert sum(unheld) == 60 and len(unheld) > len(sizes)  # nothing waits: more, smaller reads
    assert sorted(late)[len(late) // 2] < 0.05  # a line is read as it comes, not held


async def test_a_hold_that_has_passed_does_not_delay_a_read() -> None:
    sizes, late, _ = await _reads([0.0, 0.5], hold=0.2)
    assert sizes == [1, 1]
    assert late[1] < 0.1  # the hold was over when the line came: read at once


def test_the_link_holds_a_read_only_while_runs_come_read_after_read() -> None:
    from acp_bridge.wrap.link import Pacer

    pacer = Pacer(window=0.001)
    # A turn's chunk, its answer (a read without a run), the next turn's chunk: none held.
    assert [pacer.ran(1, 0.0), pacer.ran(3, 0.002)] == [None, None]
    # A stream (that chunk's read, then more): each next read is held for the window.
    assert [pacer.ran(4, 0.003), pacer.ran(5, 0.004), pacer.ran(6, 0.005)] == pytest.approx([0.004, 0.005, 0.006])
    assert pacer.ran(6, 0.005) is None  # a second run in the same read (another session's)
    assert pacer.ran(8, 0.010) is None  # the stream paused for a read


async def test_a_hook_on_an_answer_runs_as_it_is_read_before_what_follows_it() -> None:
    """`ask(..., on_answer=)`: the hook runs in the reader as the answer is read, before
    a notification read right after it in the same read (the wrapper binds a loaded
    session there, so what the child sends behind its load answer is the session's)."""
    seen: list[Any] = []
    gate = anyio.Event()

    class Later(Batches):
        async def batches(self) -> AsyncIterator[list[bytes | TooLong]]:
            await gate.wait()  # after the request went out
            async for batch in super().batches():
                yield batch

    answer = orjson.dumps({"jsonrpc": "2.0", "id": 7, "result": {"ok": True}}) + b"\n"
    conn = Connection(Later([[answer, msg("note", {"n": 1})]]), FakeWriter(), {},
                      inline={"note": lambda p: seen.append(("note", p))}, ids=iter([7]))
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.serve)

        async def ask() -> None:
            result = await conn.ask("x", {}, on_answer=lambda ok: seen.append(("answered", ok)))
            seen.append(("awaited", result))

        tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        gate.set()
        with anyio.fail_after(5):
            while len(seen) < 3:
                await anyio.sleep(0)
        tg.cancel_scope.cancel()
    assert seen == [("answered", True), ("note", {"n": 1}), ("awaited", {"ok": True})]
