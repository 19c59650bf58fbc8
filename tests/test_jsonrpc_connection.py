"""acp_bridge.rpc.connection.Connection in-process, over a fake line reader and writer:
`notify_update` bytes, the write queue and `drain`, a client that stops reading,
request tasks reused, `$/cancel_request` and the cancel hook (`on_cancel`), answers
identical to jsonrpcserver's own dispatch, byte for byte, and the stream adapters."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import anyio
import orjson
import pytest

from acp_bridge.host.errors import to_rpc_error
from acp_bridge.rpc import current_request_id, incoming
from acp_bridge.rpc.connection import Connection
from acp_bridge.rpc.protocol import UPDATE_HEAD, RpcError, invalid_params, valid_envelope
from tests.support.rpc_pipes import FakeReader, FakeWriter, line

# jsonrpcserver 5 reads its schema with a deprecated importlib call when imported (so it
# is imported inside the tests, and by the connection after its first message).
pytestmark = pytest.mark.filterwarnings("ignore:(read_text|open_text) is deprecated:DeprecationWarning")


def connection(methods: dict[str, Callable[..., Any]] | None = None) -> tuple[Connection, FakeReader, FakeWriter]:
    reader, writer = FakeReader(), FakeWriter()
    conn = Connection(reader, writer, methods or {})
    return conn, reader, writer


UPDATES: list[Any] = [
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi "}, "messageId": "t1s1"},
    {"sessionUpdate": "tool_call_update", "toolCallId": "c\"1", "status": "failed", "content": [],
     "rawOutput": {"content": [{"type": "text", "text": "é\n\u2028 \x00"}], "isError": True}},
    {"sessionUpdate": "usage_update", "used": 12, "size": 128000, "_meta": {"acpBridge": {"turn": 1}}},
    {},
]
SESSION_IDS = ["0f0f0f0f-0000-4000-8000-000000000001", 'we"ird\\id', "ünï\u2028"]


@pytest.mark.anyio
@pytest.mark.parametrize("sid", SESSION_IDS)
async def test_notify_update_writes_the_bytes_notify_writes(sid: str) -> None:
    conn, reader, writer = connection()
    for update in UPDATES:
        conn.notify_update(sid, update)
        conn.notify("session/update", {"sessionId": sid, "update": update})
    reader.send.close()
    await conn.serve()
    lines = bytes(writer.data).splitlines(keepends=True)
    assert len(lines) == 2 * len(UPDATES)
    for fast, slow in zip(lines[::2], lines[1::2], strict=True):
        assert fast == slow
        assert fast.startswith(b'{"jsonrpc":"2.0","method":"session/update"')  # what clients match on
        assert fast.startswith(UPDATE_HEAD)
    assert [m["params"]["update"] for m in writer.messages()[::2]] == UPDATES


@pytest.mark.anyio
@pytest.mark.parametrize("sid", SESSION_IDS)
async def test_an_update_after_the_answer_follows_it_in_one_write_with_notifys_bytes(sid: str) -> None:
    """`notify_update_after_answer`: the session's update right behind the answer of the
    request that asked for it, in the same write (the client reads both before its next
    request), byte for byte the `session/update` `notify` writes; outside a request (a
    notification's handler), at once."""
    async def opens(**_: Any) -> dict[str, Any]:
        for update in UPDATES:
            conn.notify_update_after_answer(sid, update)
        return {"sessionId": sid}

    async def note(**_: Any) -> None:
        conn.notify_update_after_answer(sid, UPDATES[0])

    conn, reader, writer = connection({"opens": opens, "note": note})
    await reader.send.send(line({"jsonrpc": "2.0", "id": 1, "method": "opens", "params": {}},
                                {"jsonrpc": "2.0", "method": "note", "params": {}}))
    reader.send.close()
    await conn.serve()
    expected, ended, plain = connection()
    for update in [*UPDATES, UPDATES[0]]:
        expected.notify("session/update", {"sessionId": sid, "update": update})
    ended.send.close()
    await expected.serve()
    lines = bytes(writer.data).splitlines(keepends=True)
    assert orjson.loads(lines[0]) == {"jsonrpc": "2.0", "result": {"sessionId": sid}, "id": 1}
    assert b"".join(lines[1:]) == bytes(plain.data)
    assert writer.writes <= 2  # the answer and its updates in one write (the note's may be its own)


@pytest.mark.anyio
async def test_everything_queued_goes_out_in_order_in_few_writes() -> None:
    conn, reader, writer = connection()
    for n in range(1000):
        conn.notify_update("s", {"n": n})
        if n % 100 == 0:
            conn.send({"jsonrpc": "2.0", "id": n, "result": n})
    conn.send_raw(b"")  # nothing: no empty message
    conn.send_raw(b'{"raw":1}\n{"raw":2}\n')
    reader.send.close()
    await conn.serve()
    messages = writer.messages()
    assert [m["params"]["update"]["n"] for m in messages if "params" in m] == list(range(1000))
    assert [m["id"] for m in messages if "id" in m] == list(range(0, 1000, 100))
    assert messages[-2:] == [{"raw": 1}, {"raw": 2}]
    assert writer.writes == 1  # queued before the writer ran: one write
    assert conn.queued_bytes == 0


@pytest.mark.anyio
async def test_drain_waits_for_the_writer_below_the_high_water_mark() -> None:
    conn, reader, writer = connection()
    writer.gate = anyio.Event()
    drained: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.serve)
        await conn.drain(100)  # nothing queued: at once
        for n in range(50):
            conn.notify_update("s", {"n": n})
        queued = conn.queued_bytes
        assert queued > 1000

        async def producer() -> None:
            await conn.drain(1000)
            drained.append(conn.queued_bytes)

        tg.start_soon(producer)
        await anyio.wait_all_tasks_blocked()
        assert drained == []  # the writer is held: the producer waits
        assert conn.queued_bytes == queued
        writer.gate.set()
        with anyio.fail_after(5):
            while not drained:
                await anyio.sleep(0.001)
        assert drained[0] < 1000
        reader.send.close()
    assert len(writer.messages()) == 50 and conn.queued_bytes == 0


@pytest.mark.anyio
async def test_a_client_that_stops_reading_drops_messages_and_releases_drain() -> None:
    conn, reader, writer = connection()
    writer.broken = True
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.serve)
        conn.notify_update("s", {"n": 0})
        await anyio.wait_all_tasks_blocked()
        for n in range(1, 100):
            conn.notify_update("s", {"n": n})  # no exception into the producer
        with anyio.fail_after(5):
            await conn.drain(1)
        assert conn.queued_bytes == 0
        reader.send.close()
    assert writer.data == b""


@pytest.mark.anyio
async def test_requests_run_concurrently_on_reused_tasks() -> None:
    release = anyio.Event()
    tasks: list[Any] = []
    ids: list[Any] = []

    async def hold(**_: Any) -> str:
        await release.wait()
        return "held"

    async def quick(**_: Any) -> str:
        tasks.append(asyncio.current_task())
        ids.append(current_request_id())
        return "quick"

    async def note(**_: Any) -> None:
        ids.append(current_request_id())

    conn, reader, writer = connection({"hold": hold, "quick": quick, "note": note})
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.serve)
        await reader.send.send(line({"jsonrpc": "2.0", "id": "h", "method": "hold", "params": {}}))
        for n in range(5):
            await reader.send.send(line({"jsonrpc": "2.0", "id": n, "method": "quick", "params": {}}))
            with anyio.fail_after(5):
                while len(writer.messages()) < n + 1:
                    await anyio.sleep(0.001)
        await reader.send.send(line({"jsonrpc": "2.0", "method": "note", "params": {}}))
        with anyio.fail_after(5):
            while len(ids) < 6:
                await anyio.sleep(0.001)
        # All five answered while the first request still runs; one task served them.
        assert [m["id"] for m in writer.messages()] == [0, 1, 2, 3, 4]
        assert len({id(t) for t in tasks}) == 1
        assert ids == [0, 1, 2, 3, 4, None]  # a notification does not see the last request's id
        release.set()
        reader.send.close()
    assert writer.messages()[-1] == {"jsonrpc": "2.0", "result": "held", "id": "h"}


@pytest.mark.anyio
async def test_a_cancelled_request_finishes_its_shielded_clean_up() -> None:
    """`$/cancel_request` cancels the request's scope; the handler runs in the request's
    own task, so a shielded clean-up (a cancelled `session/load` releasing its session)
    runs to its end before the -32800 answer. Run in a task of its own, as
    jsonrpcserver's async entry point would, it is cancelled again inside the shield."""
    started, cleaned = anyio.Event(), list[str]()

    async def load(**_: Any) -> str:
        try:
            started.set()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.02)  # what is tested: a handler whose clean-up takes a while
                await anyio.to_thread.run_sync(lambda: None)
                cleaned.append("released")
        return "unreachable"

    conn, reader, writer = connection({"load": load})
    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.serve)
        await reader.send.send(line({"jsonrpc": "2.0", "id": "l", "method": "load", "params": {}}))
        with anyio.fail_after(5):
            await started.wait()
            await reader.send.send(line({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "l"}}))
            while not writer.messages():
                await anyio.sleep(0.001)
        reader.send.close()
    assert cleaned == ["released"]
    assert writer.messages() == [{"jsonrpc": "2.0", "id": "l", "error": {
        "code": -32800, "message": "Request cancelled", "data": {"code": "cancelled"}}}]


# --- the same answers as jsonrpcserver's own dispatch ---------------------------------------


async def ok(**params: Any) -> Any:
    return {"echo": params}


async def rpc_error(**_: Any) -> Any:
    raise invalid_params("bad field", field="x")


async def crash(**_: Any) -> Any:
    raise ValueError("boom")


async def silent(**_: Any) -> None:
    return None


async def no_data(**_: Any) -> Any:
    raise RpcError(-32001, "busy")  # no data: the library's answer carries `"data": null`, ours none


SERVED = {"ok": ok, "rpc_error": rpc_error, "crash": crash, "silent": silent, "no_data": no_data}

# What the library answers as we do: messages with a valid envelope, and invalid
# notifications (an invalid request whose id can be read is answered with its id by
# us, before the library: see WITH_THE_ID).
LIBRARY_CASES: list[Any] = [
    {"jsonrpc": "2.0", "id": 1, "method": "ok", "params": {"a": [1, {"b": None}]}},
    {"jsonrpc": "2.0", "id": "x", "method": "ok"},
    {"jsonrpc": "2.0", "id": 2, "method": "missing", "params": {}},
    {"jsonrpc": "2.0", "id": 3, "method": "rpc_error", "params": {}},
    {"jsonrpc": "2.0", "id": 4, "method": "crash", "params": {}},
    {"jsonrpc": "2.0", "id": 5, "method": "silent", "params": {}},
    {"jsonrpc": "2.0", "id": 6, "method": "no_data", "params": {}},
    {"jsonrpc": "2.0", "id": None, "method": "ok"},
    {"jsonrpc": "2.0", "method": "ok", "params": {}},
    {"jsonrpc": "2.0", "method": "ok", "params": [1]},
    {"jsonrpc": "2.0", "method": "missing"},
    {"jsonrpc": "2.0", "method": "crash"},
    {"jsonrpc": "1.0", "method": "ok"},
    {"jsonrpc": "2.0", "method": 5},
]


def _raise_unless_valid(message: Any) -> Any:
    if not valid_envelope(message):
        raise ValueError("not a JSON-RPC 2.0 request")
    return message


def as_library_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    """One of our handlers as a jsonrpcserver method, its errors mapped as the agent's."""
    from jsonrpcserver import Error, InvalidParams, Success

    async def method(*args: Any, **params: Any) -> Any:
        if args:
            return InvalidParams("params must be an object (by name), not an array")
        try:
            return Success(await fn(**params))
        except Exception as exc:
            error = to_rpc_error(exc)
            return Error(error.code, error.message, error.data)

    return method


@pytest.mark.anyio
@pytest.mark.parametrize("message", LIBRARY_CASES, ids=[orjson.dumps(m).decode()[:60] for m in LIBRARY_CASES])
async def test_answers_are_jsonrpcservers_byte_for_byte(message: Any) -> None:
    from jsonrpcserver import async_dispatch_to_serializable

    theirs = await async_dispatch_to_serializable(
        "", methods={name: as_library_method(fn) for name, fn in SERVED.items()},
        deserializer=lambda _: message, validator=_raise_unless_valid)
    reader, writer = FakeReader(), FakeWriter()
    conn = Connection(reader, writer, SERVED, error_for=to_rpc_error)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            await reader.send.send(line(message))
            reader.send.close()
    # The same members in the same order: the bytes clients have always seen, but for
    # one thing: an error without data gains no `"data": null` (issue 23: a wrapped
    # agent's error goes out as it was sent).
    if isinstance(theirs, dict) and "error" in theirs and theirs["error"].get("data") is None:
        del theirs["error"]["data"]
    assert bytes(writer.data) == (b"" if theirs is None else orjson.dumps(theirs) + b"\n")


@pytest.mark.anyio
async def test_what_rpc_answers_itself_keeps_json_rpcs_member_order() -> None:
    # The first initialize (before the library is loaded), a fallback's answers and a
    # cancel: `jsonrpc, id, result|error`; a method once the library is loaded (a
    # second initialize): the library's `jsonrpc, result, id`.
    release = anyio.Event()

    async def initialize(**_: Any) -> Any:
        return {"protocolVersion": 1}

    async def hang(**_: Any) -> Any:
        await release.wait()

    async def fallback(method: str, params: Any, is_request: bool) -> Any:
        if method == "fails":
            raise RpcError(-32601, "not here")
        return {"passed": method}

    reader, writer = FakeReader(), FakeWriter()
    conn = Connection(reader, writer, {"initialize": initialize, "hang": hang}, fallback=fallback)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            for answers, message in [
                    (1, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}),
                    (2, {"jsonrpc": "1.0", "method": "x"}),  # the library's own answer: it is loaded
                    (3, {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {}}),
                    (4, {"jsonrpc": "2.0", "id": 4, "method": "other", "params": {}}),
                    (5, {"jsonrpc": "2.0", "id": 5, "method": "fails", "params": {}}),
                    (5, {"jsonrpc": "2.0", "id": 6, "method": "hang", "params": {}}),
                    (6, {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 6}})]:
                await reader.send.send(line(message))
                while len(bytes(writer.data).splitlines()) < answers:
                    await anyio.sleep(0.001)
            reader.send.close()
    assert bytes(writer.data).splitlines() == [
        b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}',
        b'{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid request","data":'
        b'"The request failed schema validation"},"id":null}',
        b'{"jsonrpc":"2.0","result":{"protocolVersion":1},"id":3}',
        b'{"jsonrpc":"2.0","id":4,"result":{"passed":"other"}}',
        b'{"jsonrpc":"2.0","id":5,"error":{"code":-32601,"message":"not here"}}',
        b'{"jsonrpc":"2.0","id":6,"error":{"code":-32800,"message":"Request cancelled","data":{"code":"cancelled"}}}',
    ]


@pytest.mark.anyio
async def test_no_message_we_serve_waits_for_jsonrpcservers_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """jsonrpcserver (jsonschema behind it: ~85 ms) is imported by the first message
    nothing of ours serves, and only then: with its import held, `initialize`, the
    requests and notifications after it, and a valid notification nobody serves are
    all answered (in the member order they always had); a request for an unknown method
    waits for it, and gets the library's answer."""
    held, imports = threading.Event(), list[str]()
    real = incoming._import_library

    def held_import() -> Callable[[Any], Any]:
        imports.append("jsonrpcserver")
        held.wait(10)
        return real()

    monkeypatch.setattr(incoming, "_import_library", held_import)
    noted: list[Any] = []

    async def initialize(**_: Any) -> Any:
        return {"protocolVersion": 1}

    async def new(**_: Any) -> Any:
        return {"sessionId": "s"}

    async def note(**params: Any) -> None:
        noted.append(params)

    conn, reader, writer = connection({"initialize": initialize, "session/new": new, "note": note})
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            for message in [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
                            {"jsonrpc": "2.0", "method": "note", "params": {"n": 1}},
                            {"jsonrpc": "2.0", "method": "no/such_notification", "params": {}},
                            {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {}}]:
                await reader.send.send(line(message))
            while len(writer.messages()) < 2 or not noted:
                await anyio.sleep(0.001)
            assert imports == []  # none of them needed the library
            await reader.send.send(line({"jsonrpc": "2.0", "id": 3, "method": "no/such_method", "params": {}}))
            while not imports:
                await anyio.sleep(0.001)
            await anyio.wait_all_tasks_blocked()  # everything that can run has run
            assert len(writer.messages()) == 2  # the unknown method waits for the library
            held.set()
            while len(writer.messages()) < 3:
                await anyio.sleep(0.001)
            reader.send.close()
    assert imports == ["jsonrpcserver"] and noted == [{"n": 1}]
    assert bytes(writer.data).splitlines() == [
        b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":1}}',
        b'{"jsonrpc":"2.0","result":{"sessionId":"s"},"id":2}',
        b'{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found","data":"no/such_method"},"id":3}',
    ]


# --- every request whose id can be read is answered with that id -------------------------------


async def needs_session(**params: Any) -> Any:
    from acp_bridge.host.errors import to_rpc_error
    from acp_bridge.host.params import check_params

    try:
        check_params("session/close", params)
    except Exception as exc:
        raise to_rpc_error(exc) from None  # as a host's connection converts it
    return "closed"


# (message, the answer: ("result", value) or ("error", code, data.field or None))
WITH_THE_ID: list[tuple[Any, tuple[Any, ...]]] = [
    ({"jsonrpc": "2.0", "id": 1, "method": "ok", "params": None}, ("result", {"echo": {}})),
    ({"jsonrpc": "2.0", "id": 2, "method": "needs", "params": None}, ("error", -32602, "sessionId")),
    ({"jsonrpc": "2.0", "id": 3, "method": "missing", "params": None}, ("error", -32601, None)),
    ({"jsonrpc": "2.0", "id": 4, "method": "ok", "params": 1}, ("error", -32602, None)),
    ({"jsonrpc": "2.0", "id": "s", "method": "ok", "params": "x"}, ("error", -32602, None)),
    ({"jsonrpc": "2.0", "id": 5, "method": "ok", "params": True}, ("error", -32602, None)),
    ({"jsonrpc": "2.0", "id": 6, "method": "ok", "params": [1]}, ("error", -32602, None)),
    ({"jsonrpc": "1.0", "id": 7, "method": "ok"}, ("error", -32600, None)),
    ({"id": 8, "method": "ok"}, ("error", -32600, None)),
    ({"jsonrpc": "2.0", "id": 9, "method": 5}, ("error", -32600, None)),
    ({"jsonrpc": "2.0", "id": 10, "method": None, "params": [{}]}, ("error", -32600, None)),
    ({"jsonrpc": "2.0", "id": 11, "method": "ok", "extra": 1}, ("error", -32600, None)),
    ({"jsonrpc": "2.0", "id": 12}, ("error", -32600, None)),
    ({"jsonrpc": "2.0", "id": None, "method": "ok", "params": 1}, ("error", -32602, None)),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("message", "expected"), WITH_THE_ID,
                         ids=[orjson.dumps(m).decode()[:60] for m, _ in WITH_THE_ID])
async def test_a_request_whose_id_can_be_read_is_answered_with_it(message: Any, expected: tuple[Any, ...]) -> None:
    conn, reader, writer = connection({"ok": ok, "needs": needs_session})
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            await reader.send.send(line(message))  # alone, and inside a batch
            await reader.send.send(line([message, {"jsonrpc": "2.0", "id": "next", "method": "ok"}]))
            reader.send.close()
    # Requests are served concurrently: the two answers may come in either order.
    answers = writer.messages()
    assert len(answers) == 2, answers
    (single,) = [a for a in answers if isinstance(a, dict)]
    (batch,) = [a for a in answers if isinstance(a, list)]
    assert [a["id"] for a in batch if a["id"] == "next"] == ["next"]
    (in_batch,) = [a for a in batch if a["id"] != "next"]
    for answer in (single, in_batch):
        assert answer["id"] == message["id"] and type(answer["id"]) is type(message["id"]), answer
        if expected[0] == "result":
            assert answer["result"] == expected[1]
            continue
        assert answer["error"]["code"] == expected[1], answer
        data = answer["error"].get("data")  # (jsonrpcserver's -32601 data is a string)
        assert (data.get("field") if isinstance(data, dict) else None) == expected[2], answer


@pytest.mark.anyio
async def test_initialize_with_null_params_is_checked_before_jsonrpcserver_loads() -> None:
    async def initialize(**params: Any) -> Any:
        from acp_bridge.host.errors import to_rpc_error
        from acp_bridge.host.params import check_params

        try:
            check_params("initialize", params)
        except Exception as exc:
            raise to_rpc_error(exc) from None  # as a host's connection converts it
        return {"protocolVersion": 1}

    conn, reader, writer = connection({"initialize": initialize})
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            await reader.send.send(line({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": None}))
            reader.send.close()
    (answer,) = writer.messages()
    assert answer["id"] == 0 and answer["error"]["code"] == -32602
    assert answer["error"]["data"]["field"] == "protocolVersion"


@pytest.mark.anyio
async def test_a_notification_with_null_params_is_one_without_params() -> None:
    seen: list[Any] = []

    async def note(**params: Any) -> None:
        seen.append(params)

    conn, reader, writer = connection({"note": note})
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(conn.serve)
            await reader.send.send(line({"jsonrpc": "2.0", "method": "note", "params": None}))
            reader.send.close()
    assert seen == [{}] and writer.messages() == []
