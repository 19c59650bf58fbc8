"""The wrapper's fast paths (issue 14, bench/README.md): a batch is checked on the live
invariant tracker and put back if refused; `send` writes at once when nothing is
queued and the writer is idle, after the same `before_write` hook. And the lean paths:
the MCP SDK is imported only for a session with MCP servers (issue 16)."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_bridge.rpc.outgoing import FLUSH_WINDOW_S, Outgoing
from acp_bridge.rpc.transport import FdWriter
from session import EventDataError, InvariantError, SessionStore
from session.invariants import InvariantTracker
from tests.support.acp_client import AgentProcess
from tests.support.logs import Script, write
from tests.support.waiting import until


def state(tracker: InvariantTracker) -> tuple[Any, ...]:
    """Everything a tracker holds, calls by value."""
    calls = {cid: dataclasses.astuple(call) for cid, call in tracker.calls.items()}
    return (tracker.session_id, tracker.next_seq, tracker.turn, tracker.in_turn, tracker.step,
            tracker.step_open, calls)


def open_tool_turn(store: SessionStore) -> Any:
    log = store.create(cwd="/w")
    script = Script().start_turn().start_step().message("reading", calls=("c1", "c2")).call("c1")
    write(log, script)
    return log, script


@pytest.mark.parametrize("bad", ["invariant-late", "invariant-after-end", "data-late"])
def test_refused_batch_leaves_the_tracker_as_it_was(store: SessionStore, bad: str) -> None:
    log, script = open_tool_turn(store)
    before, events, calls = state(log.tracker), list(log.events), log.tracker.calls
    s = Script(first_turn=script.turn)
    s.turn, s.step = script.turn, script.step
    s.result("c1").call("c2").result("c2").message("done")  # flips flags, adds nothing new
    if bad == "invariant-late":
        s.start_step()  # step 1 is still open
        error: type[Exception] = InvariantError
    elif bad == "invariant-after-end":
        s.end_step().end_turn().add("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text", "text": "x"}})
        error = InvariantError
    else:
        s.add("step/end", {"turn": 1, "step": 1, "extra": {1, 2}})
        error = EventDataError
    with pytest.raises(error):
        log.extend(s.items)
    assert state(log.tracker) == before
    assert log.tracker.calls is calls or log.tracker.calls == calls
    assert list(log.events) == events
    # The log goes on from where it stood.
    write(log, Script().add("tool/result", {"turn": 1, "step": 1, "callId": "c1",
                                            "content": [], "isError": False}))
    assert log.tracker.calls["c1"].answered and not log.tracker.calls["c2"].started
    log.close()


def test_accepted_batch_matches_one_by_one(store: SessionStore) -> None:
    script = Script().tool_turn().text_turn()
    one, batch = store.create(cwd="/w"), store.create(cwd="/w")
    write(one, script)
    batch.extend(script.items[:7])
    batch.extend(script.items[7:])
    assert state(one.tracker)[1:] == state(batch.tracker)[1:]
    assert [(e["type"], e["seq"], e["data"]) for e in one.events] == \
        [(e["type"], e["seq"], e["data"]) for e in batch.events]
    assert batch.durable_seq == batch.tracker.next_seq
    one.close()
    batch.close()


# --- direct writes ---------------------------------------------------------------------


def read_all(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


@pytest.mark.anyio
async def test_send_writes_at_once_after_the_hook_and_in_order() -> None:
    r, w = os.pipe()
    os.set_blocking(r, False)
    calls: list[bytes] = []

    def hook() -> Awaitable[None] | None:
        calls.append(read_all(r))  # what was written before the hook ran
        return None

    out = Outgoing(FdWriter(w), hook)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(out.run)
            await anyio.sleep(0.01)  # the writer is idle
            out.send({"id": 1})
            assert calls == [b""]  # the hook ran first, in the sender
            assert read_all(r) == b'{"id":1}\n'  # written before any await
            out.notify_update("s", {"n": 1})  # an update is queued, never written here
            assert read_all(r) == b""
            out.send({"id": 2})  # written at once, behind it, after the hook
            assert calls == [b"", b""]
            assert read_all(r) == b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s",' \
                b'"update":{"n":1}}}\n{"id":2}\n'
            out.close()
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.anyio
async def test_a_burst_of_updates_is_one_hook_and_one_write_and_the_next_waits_for_the_window() -> None:
    """Updates are written by the loop's callback once the sender's step is over, all
    of them in one write after one hook call (issue 23: one log hand-off per burst, not
    per update); a burst that follows within FLUSH_WINDOW_S waits for the window, and
    the writer task is never woken for them."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    hooks: list[bytes] = []
    writes: list[bytes] = []

    def hook() -> Awaitable[None] | None:
        hooks.append(read_all(r))
        return None

    writer = FdWriter(w)
    real = writer.write_now

    def write_now(data: bytes) -> int:
        writes.append(data)
        return real(data)

    writer.write_now = write_now  # type: ignore[method-assign]
    out = Outgoing(writer, hook)
    line = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"n":%d}}}\n'
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(out.run)
            await anyio.wait_all_tasks_blocked()  # the writer is idle
            for n in range(3):
                out.notify_update("s", {"n": n})
            assert read_all(r) == b"" and not hooks  # nothing during the sender's step
            await anyio.sleep(0)
            assert hooks == [b""] and writes == [b"".join(line % n for n in range(3))]
            assert read_all(r) == writes[0]
            out.notify_update("s", {"n": 3})  # within the window of that write
            await anyio.sleep(0)
            assert read_all(r) == b"" and len(hooks) == 1
            await anyio.sleep(FLUSH_WINDOW_S * 3)  # the window's timer is what is tested: it runs out
            assert read_all(r) == line % 3 and len(hooks) == 2 and len(writes) == 2
            out.close()
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.anyio
async def test_a_hook_that_must_wait_or_a_full_pipe_leaves_it_to_the_writer() -> None:
    r, w = os.pipe()
    os.set_blocking(r, False)
    waited: list[str] = []
    busy = [True]

    async def wait_for_thread() -> None:
        waited.append("waited")

    def hook() -> Awaitable[None] | None:
        if busy[0]:
            busy[0] = False
            return wait_for_thread()
        return None

    writer = FdWriter(w)
    out = Outgoing(writer, hook)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(out.run)
            await anyio.wait_all_tasks_blocked()  # the writer is idle
            out.send({"id": 1})  # the hook says wait: not written here, nothing awaited here
            assert read_all(r) == b"" and waited == []
            # Written by the writer task once the log's thread is done.
            assert await until(lambda: read_all(r), "the write after the log's thread") == b'{"id":1}\n'
            # A message bigger than the pipe takes: the rest goes through the writer.
            big = {"text": "x" * (4 << 20)}
            out.send(big)
            got = read_all(r)
            assert 0 < len(got) < len(orjson.dumps(big)) + 1
            while len(got) < len(orjson.dumps(big)) + 1:
                await anyio.sleep(0.001)
                got += read_all(r)
            assert got == orjson.dumps(big) + b"\n"
            out.close()
    finally:
        os.close(r)
        os.close(w)


# --- the reader stays registered between reads ------------------------------------------


@pytest.mark.anyio
async def test_reader_registration_ends_with_the_wait_eof_and_close() -> None:
    import asyncio

    from acp_bridge.rpc.transport import FdLineReader

    loop = asyncio.get_running_loop()
    for how in ("cancel", "eof", "close"):
        r, w = os.pipe()
        reader = FdLineReader(r)
        got: list[bytes] = []

        async def consume(reader: FdLineReader = reader, got: list[bytes] = got) -> None:
            async for line in reader.lines():
                got.append(line if isinstance(line, bytes) else b"?")

        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            for n in range(3):
                os.write(w, b"line %d\n" % n)
                await anyio.sleep(0.005)  # what is tested: lines that come apart, each read as it comes
            assert got == [b"line 0", b"line 1", b"line 2"]
            if how == "cancel":
                tg.cancel_scope.cancel()
            elif how == "eof":
                os.close(w)
            else:
                reader.close()
                tg.cancel_scope.cancel()
        assert loop.remove_reader(r) is False  # nothing left registered for the number
        reader.close()
        os.close(r)
        if how != "eof":
            os.close(w)
    # A new pipe that reuses the numbers is read as any other.
    r, w = os.pipe()
    reader = FdLineReader(r)
    os.write(w, b"again\n")
    os.close(w)
    assert [line async for line in reader.lines()] == [b"again"]
    reader.close()
    os.close(r)


@pytest.mark.anyio
async def test_readiness_with_nobody_waiting_stops_watching() -> None:
    import asyncio

    from acp_bridge.rpc.transport import FdLineReader

    r, w = os.pipe()
    reader = FdLineReader(r)
    lines = reader.lines()
    first = asyncio.ensure_future(lines.__anext__())
    await anyio.wait_all_tasks_blocked()
    assert reader._loop is not None  # waiting: registered
    os.write(w, b"a\n")
    assert await first == b"a"
    assert reader._loop is not None  # still registered between reads
    # Data comes while the consumer is not reading: the loop sees it, drops the watch,
    # does not spin.
    os.write(w, b"b\n")
    for _ in range(5):
        await anyio.sleep(0)
    assert reader._loop is None
    assert await lines.__anext__() == b"b"
    await lines.aclose()
    reader.close()
    os.close(r)
    os.close(w)


# --- the MCP SDK stays off the path of sessions without MCP servers ---------------------


def imported_modules(stderr: bytes) -> set[str]:
    """The modules a `python -X importtime` run imported, from its stderr."""
    names = set()
    for line in stderr.decode(errors="replace").splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


@pytest.mark.anyio
@pytest.mark.parametrize("with_server", [False, True])
@pytest.mark.integration
async def test_mcp_is_imported_only_for_a_session_with_mcp_servers(tmp_path: Path, work: Path,
                                                                   with_server: bool) -> None:
    servers = [{"name": "time", "command": str(Path(sys.executable).parent / "mcp-server-time"),
                "args": [], "env": []}] if with_server else []
    agent = AgentProcess(tmp_path / "store")
    agent.command[1:1] = ["-X", "importtime"]
    async with agent:
        await agent.initialize()
        sid = (await agent.request("session/new", {"cwd": str(work), "mcpServers": servers}, timeout=60))["sessionId"]
        assert (await agent.prompt(sid, "hello"))["stopReason"] == "end_turn"
        await agent.request("session/close", {"sessionId": sid})
    heavy = {"mcp", "mcp_types", "pydantic"} & imported_modules(agent.stderr)
    assert heavy == ({"mcp", "mcp_types", "pydantic"} if with_server else set())
