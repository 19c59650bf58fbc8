"""The wire, end to end: transport and JSON-RPC edge cases against the real agent
subprocess (docs/protocol.md, "Transport": malformed input gets an error answer, unknown
notifications are ignored, and the connection stays usable after any of it).

Most messages here are written as raw bytes (`send_raw`), because they are not what a
well-behaved client would send. The harness still validates everything the agent
writes: answers to raw requests are registered with it first (`expect`).
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_bridge.rpc.transport import FdLineReader, TooLong
from tests.support.acp_client import AgentProcess

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
UNKNOWN_SID = "00000000-0000-4000-8000-000000000000"


# --- helpers ------------------------------------------------------------------------


@pytest.fixture
def empty_work(tmp_path: Path) -> Path:
    w = tmp_path / "work"
    w.mkdir()
    return w


def line(message: Any) -> bytes:
    # json, not orjson: orjson refuses integers beyond 64 bits and deep nesting.
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def request(rid: Any, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


def received(agent: AgentProcess, since: int = 0) -> list[Any]:
    """What the agent wrote after transcript position `since`."""
    return [m for d, m in agent.transcript[since:] if d == "<-"]


def null_errors(agent: AgentProcess, since: int = 0) -> list[dict[str, Any]]:
    return [m for m in received(agent, since)
            if isinstance(m, dict) and m.get("id") is None and "error" in m]


async def until(agent: AgentProcess, predicate: Callable[[], bool], timeout: float = 10) -> None:
    """Wait for `predicate`, failing fast if the agent process dies meanwhile."""
    with anyio.fail_after(timeout):
        while not predicate():
            if agent.proc.returncode is not None:
                with anyio.move_on_after(5):  # the rest of its stderr, to show it
                    await agent.stderr_closed.wait()
                tail = agent.stderr.decode(errors="replace")[-3000:]
                raise AssertionError(f"the agent exited with {agent.proc.returncode}:\n{tail}")
            await anyio.sleep(0.01)


def expect(agent: AgentProcess, *rids: Any, method: str = "session/list") -> None:
    """Tell the harness that answers to these (raw) request ids may arrive, so it
    validates them as answers to `method`."""
    for rid in rids:
        agent._requested[rid] = method


async def raw_call(agent: AgentProcess, data: bytes, rid: Any, method: str = "session/list",
                   timeout: float = 10) -> dict[str, Any]:
    """Send raw bytes carrying a request with id `rid` for `method`; its answer."""
    done, slot = anyio.Event(), list[Any]()
    agent._pending[rid] = (done, slot, method)
    expect(agent, rid, method=method)
    await agent.send_raw(data)
    await until(agent, done.is_set, timeout)
    del agent._pending[rid]
    return dict(slot[0])


async def still_works(agent: AgentProcess) -> None:
    assert await agent.request("session/list", {}, timeout=10) == {"sessions": []}


async def expect_null_errors(agent: AgentProcess, since: int, count: int) -> list[dict[str, Any]]:
    """Exactly `count` errors with id null arrive after `since` (checked after a
    round trip, so a late extra one is seen)."""
    await until(agent, lambda: len(null_errors(agent, since)) >= count)
    await still_works(agent)
    errors = null_errors(agent, since)
    assert len(errors) == count, errors
    return errors


def answers_since(agent: AgentProcess, since: int, count: int) -> Callable[[], bool]:
    """A predicate: at least `count` answers (batch answers unpacked) after `since`."""
    return lambda: len(flat(received(agent, since))) >= count


def nested(depth: int) -> dict[str, Any]:
    """{"x": {"x": ... {}}}, `depth` levels."""
    top: dict[str, Any] = {}
    cursor = top
    for _ in range(depth - 1):
        cursor["x"] = {}
        cursor = cursor["x"]
    return top


def flat(messages: list[Any]) -> list[Any]:
    """Messages with batch answers unpacked."""
    return [a for m in messages for a in (m if isinstance(m, list) else [m])]


def code_of(answer: dict[str, Any]) -> int:
    assert "error" in answer, answer
    code: int = answer["error"]["code"]
    return code


# --- size ---------------------------------------------------------------------------


@pytest.mark.integration
async def test_a_5_mb_prompt_is_accepted_and_echoed(tmp_path: Path, empty_work: Path) -> None:
    words = [letter * 1_000_000 for letter in "abcde"]
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        sid = await agent.new_session(empty_work)
        answer = await agent.prompt(sid, " ".join(words), timeout=30)
        assert answer["stopReason"] == "end_turn"
        chunks = [u["content"]["text"] for u in agent.updates_of(sid) if u["sessionUpdate"] == "agent_message_chunk"]
        assert chunks == [w + " " for w in words[:-1]] + words[-1:]
        assert (await agent.prompt(sid, "small again"))["stopReason"] == "end_turn"
    assert agent.returncode == 0


@pytest.mark.integration
async def test_a_line_over_the_guard_is_refused_and_the_connection_survives(tmp_path: Path, empty_work: Path) -> None:
    size = 65 * MIB  # the agent's guard is 64 MiB
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        mark = len(agent.transcript)
        started_at = time.monotonic()
        await agent.send_raw(b"x" * size + b"\n")
        (error,) = await expect_null_errors(agent, mark, 1)
        assert time.monotonic() - started_at < 5
        assert error["error"]["code"] == -32600
        assert error["error"]["data"] == {"code": "too_large", "size": size, "limit": 64 * MIB}
        sid = await agent.new_session(empty_work)
        assert (await agent.prompt(sid, "after the flood"))["stopReason"] == "end_turn"
    assert agent.returncode == 0


async def _reader_lines(pieces: list[bytes], max_line: int) -> list[bytes | TooLong]:
    """Feed `pieces` through a pipe, each written once the reader has taken the one
    before (so each is its own read), and collect what FdLineReader yields."""
    rfd, wfd = os.pipe()
    reader = FdLineReader(rfd, max_line=max_line)
    out: list[bytes | TooLong] = []

    def unread() -> int:
        pending = array.array("i", [0])
        fcntl.ioctl(rfd, termios.FIONREAD, pending)
        return pending[0]

    async def feed() -> None:
        for piece in pieces:
            os.write(wfd, piece)
            while unread():
                await anyio.sleep(0.002)
        os.close(wfd)

    try:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(feed)
                async for item in reader.lines():
                    out.append(item)
    finally:
        reader.close()
        os.close(rfd)
    return out


async def test_line_reader_guard_across_reads() -> None:
    got = await _reader_lines([b"0123456789", b"0123456789", b"\nok\n", b"x" * 40, b"y" * 40, b"\nafter\n",
                               b"0123456789abcdef", b"\n", b"01234567", b"89abcdef\n", b"tail"], max_line=16)
    assert got == [TooLong(20), b"ok", TooLong(80), b"after", b"0123456789abcdef", b"0123456789abcdef", b"tail"]
    # An over-long line cut short by EOF is still reported.
    assert await _reader_lines([b"z" * 20, b"z" * 20], max_line=16) == [TooLong(40)]


async def test_line_reader_guard_is_exact() -> None:
    assert await _reader_lines([b"0123456789abcdefg\n"], max_line=16) == [TooLong(17)]
    assert await _reader_lines([b"0123456789", b"abcdefg\n"], max_line=16) == [TooLong(17)]


# --- framing ------------------------------------------------------------------------


@pytest.mark.integration
async def test_framing_split_writes_crlf_blank_lines_and_a_last_line_without_newline(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        data = line(request("split", "session/list", {}))
        done, slot = anyio.Event(), list[Any]()
        agent._pending["split"] = (done, slot, "session/list")
        expect(agent, "split")
        for piece in (data[:5], data[5:20], data[20:]):
            await agent.send_raw(piece)
            await anyio.sleep(0.05)  # what is tested: a line that comes in pieces, apart
        await until(agent, done.is_set)
        assert slot[0]["result"] == {"sessions": []}
        answer = await raw_call(agent, b"\n\n   \n" + line(request("crlf", "session/list", {}))[:-1] + b"\r\n", "crlf")
        assert answer["result"] == {"sessions": []}
        # The last message before EOF needs no newline.
        mark = len(agent.transcript)
        expect(agent, "last")
        await agent.send_raw(line(request("last", "session/list", {}))[:-1])
        await agent.close_stdin()
        with anyio.fail_after(5):
            await agent.proc.wait()
    assert [m.get("id") for m in received(agent, mark)] == ["last"]
    assert agent.returncode == 0


# --- malformed input ----------------------------------------------------------------


@pytest.mark.integration
async def test_parse_errors(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        mark = len(agent.transcript)
        expect(agent, 1, 2)
        await agent.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": \n')  # cut short, its id whole
        await agent.send_raw(b"{not json}\n")
        await agent.send_raw(b'{"jsonrpc":"2.0","id":2,"method":"session/list","params":{"cwd":"\xff\xfe"}}\n')
        await agent.send_raw(b"\xc3\x28\n")  # invalid UTF-8, not even JSON
        errors = await expect_null_errors(agent, mark, 2)
        assert [e["error"]["code"] for e in errors] == [-32700] * 2
        with_ids = [m for m in received(agent, mark) if m.get("id") is not None and "error" in m]
        assert [(m["id"], m["error"]["code"]) for m in with_ids] == [(1, -32700), (2, -32700)]
        await agent.initialize()
        await still_works(agent)


@pytest.mark.integration
async def test_a_request_the_parser_refuses_is_answered_with_its_id(tmp_path: Path) -> None:
    """The JSON parser refuses a lone surrogate escape and nesting past 1,024 levels:
    the request is still answered, -32700, with its id, read from its top-level
    object without trusting the rest (before or after the part that is refused)."""
    deep = b'{"x":' * 100_000 + b"1" + b"}" * 100_000
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        mark = len(agent.transcript)
        lines = {
            "surrogate": b'{"jsonrpc":"2.0","id":"surrogate","method":"session/list","params":{"cwd":"\\ud800"}}',
            "deep before": b'{"jsonrpc":"2.0","id":"deep before","method":"session/list","params":{"_meta":'
                           + deep + b"}}",
            77: b'{"jsonrpc":"2.0","method":"session/list","params":{"_meta":' + deep + b'},"id":77}',
        }
        expect(agent, *lines)
        for raw in lines.values():
            await agent.send_raw(raw + b"\n")
        # No top-level id that can be read: id null, as JSON-RPC says.
        await agent.send_raw(b'{"jsonrpc":"2.0","method":"session/list","params":{"id":5,"cwd":"\\ud800"}}\n')
        await agent.send_raw(b'[{"jsonrpc":"2.0","id":6,"method":"session/list","params":{"cwd":"\\ud800"}}]\n')
        await agent.send_raw(b'{"jsonrpc":"2.0","id":"\\ud800","method":"session/list"}\n')
        await agent.send_raw(b'{"jsonrpc":"2.0","id":"acp-bridge:1","result":{"x":"\\ud800"}}\n')  # ours
        await agent.send_raw(b'{"jsonrpc":"2.0","id":123')  # cut inside the id: not taken for 123
        await agent.send_raw(b"\n")
        errors = await expect_null_errors(agent, mark, 5)
        assert {e["error"]["code"] for e in errors} == {-32700}
        answered = {m["id"]: m["error"] for m in received(agent, mark) if m.get("id") is not None and "error" in m}
        assert set(answered) == set(lines), answered
        assert all(e["code"] == -32700 and e["data"]["code"] == "parse_error" for e in answered.values())
        await still_works(agent)
    assert agent.returncode == 0


@pytest.mark.integration
async def test_deep_nesting_is_an_error_and_the_agent_survives(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        # 10,000 levels is past what the JSON parser takes; 1,000 is parsed and then
        # reaches the request checks.
        for depth in (10_000, 1_000):
            mark = len(agent.transcript)
            await agent.send_raw(b"[" * depth + b"]" * depth + b"\n")
            await agent.send_raw(b'{"a":' * depth + b"1" + b"}" * depth + b"\n")
            deep = b'{"x":' * depth + b"1" + b"}" * depth  # inside the params of a request with an id
            expect(agent, "deep")
            await agent.send_raw(b'{"jsonrpc":"2.0","id":"deep","method":"session/list","params":{"_meta":'
                                 + deep + b"}}\n")
            await until(agent, answers_since(agent, mark, 3))
            await still_works(agent)
            # At 1,000 levels `[[...]]` is a batch of one non-object: its answer is an array.
            answers = flat(received(agent, mark)[:-1])  # the last is still_works'
            assert len(answers) == 3, (depth, answers)
            # The two bare values are errors; the request whose `_meta` nests deep is a
            # parse error past the parser's depth, and legal (answered) below it.
            bare = [a for a in answers if a.get("id") is None]
            deep_answers = [a for a in answers if a.get("id") == "deep"]
            assert len(bare) + len(deep_answers) == 3 and all("error" in a for a in bare), answers
            assert all(a["error"]["code"] in (-32700, -32600) for a in bare)
            assert all("result" in a or a["error"]["code"] in (-32700, -32600, -32602) for a in deep_answers)
    assert agent.returncode == 0


@pytest.mark.integration
async def test_deep_content_in_a_prompt_is_refused_and_the_session_stays_usable(tmp_path: Path, empty_work: Path) -> None:
    deep = nested(300)  # legal JSON, deeper than the log's encoder (orjson) takes
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        sid = await agent.new_session(empty_work)
        answer = await raw_call(agent, line(request("deep", "session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": "deep", "_meta": deep}]})), "deep", "session/prompt")
        assert "error" in answer
        result = await agent.prompt(sid, "after that")
        assert result["stopReason"] == "end_turn" and result["_meta"]["acpBridge"]["turn"] == 1
    async with AgentProcess(tmp_path / "store") as again:
        await again.initialize()
        await again.load_session(sid, empty_work)
        users = [u["content"]["text"] for u in again.updates_of(sid) if u["sessionUpdate"] == "user_message_chunk"]
        assert users == ["after that"]


@pytest.mark.integration
async def test_deep_content_in_a_prompt_is_invalid_params(tmp_path: Path, empty_work: Path) -> None:
    deep = nested(300)
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        sid = await agent.new_session(empty_work)
        answer = await raw_call(agent, line(request("deep", "session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": "deep", "_meta": deep}]})), "deep", "session/prompt")
        # Refused where it is read: nested past the one limit (docs/protocol.md, "Limits").
        assert code_of(answer) == -32600 and answer["error"]["data"]["code"] == "too_deep"
        # nothing but the session's commands, offered when it opened
        assert [u["sessionUpdate"] for u in agent.updates_of(sid)] == ["available_commands_update"]


@pytest.mark.integration
async def test_a_non_object_message_is_an_invalid_request(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        for raw in (b"42", b'"x"', b"null", b"true", b"3.5"):
            mark = len(agent.transcript)
            await agent.send_raw(raw + b"\n")
            (error,) = await expect_null_errors(agent, mark, 1)
            assert error["error"]["code"] == -32600, raw


# Every request whose id can be read is answered with that id (a client waits on it):
# (message, the answer's error code or None for a result, data.field where named). An
# id that cannot be read (a boolean) is answered with id null.
ANSWERED_WITH_THE_ID: list[tuple[dict[str, Any], int | None, str | None]] = [
    ({"id": 11, "method": "session/list", "params": {}}, -32600, None),  # no "jsonrpc"
    ({"jsonrpc": "1.0", "id": 12, "method": "session/list", "params": {}}, -32600, None),
    ({"jsonrpc": "2.0", "id": 13, "method": 5, "params": {}}, -32600, None),
    ({"jsonrpc": "2.0", "id": "m", "params": {}}, -32600, None),  # no method
    ({"jsonrpc": "2.0", "id": 15}, -32600, None),  # neither a request nor a response
    ({"jsonrpc": "2.0", "id": 16, "method": "session/list", "params": {}, "extra": 1}, -32600, None),
    ({"jsonrpc": "2.0", "id": 17, "method": "session/list", "params": {}, "result": None}, -32600, None),
    ({"jsonrpc": "2.0", "id": True, "method": "session/list", "params": {}}, -32600, None),
    ({"jsonrpc": "2.0", "id": 14, "method": "session/list", "params": "text"}, -32602, None),
    ({"jsonrpc": "2.0", "id": 18, "method": "session/list", "params": 1}, -32602, None),
    ({"jsonrpc": "2.0", "id": "t", "method": "session/new", "params": True}, -32602, None),
    ({"jsonrpc": "2.0", "id": 19, "method": "no/such_method", "params": 1}, -32602, None),
    ({"jsonrpc": "2.0", "id": 20, "method": "session/list", "params": ["x"]}, -32602, None),
    # "params": null is "no params": fine where every param is optional, else the
    # method's own check names the first field missing.
    ({"jsonrpc": "2.0", "id": 21, "method": "session/list", "params": None}, None, None),
    ({"jsonrpc": "2.0", "id": "n", "method": "session/new", "params": None}, -32602, "cwd"),
    ({"jsonrpc": "2.0", "id": 22, "method": "session/prompt", "params": None}, -32602, "sessionId"),
    ({"jsonrpc": "2.0", "id": 23, "method": "initialize", "params": None}, -32602, "protocolVersion"),
    ({"jsonrpc": "2.0", "id": 24, "method": "no/such_method", "params": None}, -32601, None),
]


@pytest.mark.integration
async def test_every_request_whose_id_can_be_read_is_answered_with_it(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        # Before the first `initialize` is answered (its own member order).
        answer = await raw_call(agent, line(request(0, "initialize", None) | {"params": None}), 0, "initialize")
        assert code_of(answer) == -32602 and answer["error"]["data"]["field"] == "protocolVersion"
        await agent.initialize()
        for message, code, field in ANSWERED_WITH_THE_ID:
            rid = message["id"]
            readable = not isinstance(rid, bool)
            mark = len(agent.transcript)
            expect(agent, *([rid] if readable else []), method=str(message.get("method")))
            await agent.send_raw(line(message))
            await until(agent, answers_since(agent, mark, 1))
            (answer,) = received(agent, mark)
            assert answer["id"] == (rid if readable else None) and type(answer["id"]) is type(rid if readable else None), \
                (message, answer)
            if code is None:
                assert answer["result"] == {"sessions": []}, (message, answer)
                continue
            assert code_of(answer) == code, (message, answer)
            if field is not None:
                assert answer["error"]["data"]["field"] == field, (message, answer)
        mark = len(agent.transcript)  # a notification with null params is one without: no answer
        await agent.send_raw(line({"jsonrpc": "2.0", "method": "session/cancel", "params": None}))
        await agent.send_raw(line({"jsonrpc": "2.0", "method": "no/such_notification", "params": None}))
        await still_works(agent)
        assert len(received(agent, mark)) == 1
    assert agent.returncode == 0


@pytest.mark.parametrize("raw_id", [b'{"a":1}', b"[1]"])
@pytest.mark.integration
async def test_an_object_or_array_id_is_an_invalid_request(tmp_path: Path, raw_id: bytes) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        mark = len(agent.transcript)
        await agent.send_raw(b'{"jsonrpc":"2.0","id":' + raw_id + b',"method":"session/list","params":{}}\n')
        (error,) = await expect_null_errors(agent, mark, 1)
        assert error["error"]["code"] == -32600


@pytest.mark.integration
async def test_params_by_position_are_invalid_params(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        answer = await raw_call(agent, line(request(21, "session/list", ["/tmp"])), 21)
        assert code_of(answer) == -32602 and answer["id"] == 21
        answer = await raw_call(agent, line(request(22, "session/new", ["/tmp", []])), 22)
        assert code_of(answer) == -32602
        await still_works(agent)


@pytest.mark.integration
async def test_an_empty_params_array_is_invalid_params(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        answer = await raw_call(agent, line(request(23, "session/list", [])), 23)
        assert code_of(answer) == -32602


@pytest.mark.integration
async def test_unknown_methods(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        for rid, method in ((31, "no/such_method"), (32, "_acme/unknown"), (33, "session/set_model"),
                            (34, "session/request_permission")):
            answer = await raw_call(agent, line(request(rid, method, {})), rid)
            assert code_of(answer) == -32601 and answer["id"] == rid, (method, answer)
        await still_works(agent)


def loaded_at_exit(marker: Path) -> list[str]:
    """The agent's command line after the interpreter: the agent, which writes at its
    exit whether jsonrpcserver was imported to `marker`."""
    return ["-c", "import atexit, sys\n"
                  f"atexit.register(lambda: open({str(marker)!r}, 'w').write(str('jsonrpcserver' in sys.modules)))\n"
                  "from acp_bridge.cli.main import main\nsys.argv[0] = 'acp-bridge'\nsys.exit(main())\n"]


@pytest.mark.parametrize("unknown", [False, True])
@pytest.mark.integration
async def test_jsonrpcserver_is_imported_only_for_what_nothing_of_ours_serves(tmp_path: Path, empty_work: Path,
                                                                               unknown: bool) -> None:
    """A session opened and used, notifications ours and nobody's: no jsonrpcserver
    (and no jsonschema behind it) in the process. A request for an unknown method: the
    library answers it, as it always has."""
    marker = tmp_path / "loaded"
    agent = AgentProcess(tmp_path / "store")
    agent.command[1:3] = loaded_at_exit(marker)
    async with agent:
        await agent.initialize()
        sid = await agent.new_session(empty_work)
        await agent.notify("session/cancel", {"sessionId": sid})
        await agent.notify("no/such_notification", {})
        assert (await agent.prompt(sid, "hi"))["stopReason"] == "end_turn"
        if unknown:
            mark = len(agent.lines)
            await raw_call(agent, line(request(9, "no/such_method", {})), 9)
            assert agent.lines[mark:] == [b'{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found",'
                                          b'"data":"no/such_method"},"id":9}']
    assert agent.returncode == 0
    assert marker.read_text() == str(unknown)


@pytest.mark.integration
async def test_unknown_notifications_and_stray_responses_are_ignored(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        mark = len(agent.transcript)
        for message in (
            {"jsonrpc": "2.0", "method": "no/such_notification", "params": {}},
            {"jsonrpc": "2.0", "method": "_acme/ping", "params": {"x": 1}},
            {"jsonrpc": "2.0", "method": "session/list", "params": {}},  # a request sent as a notification
            {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": UNKNOWN_SID}},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 999}},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": "nope"}},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": {"not": "an id"}}},
            {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {}},
            # Responses to requests the agent never made.
            {"jsonrpc": "2.0", "id": "acp-bridge:999", "result": {}},
            {"jsonrpc": "2.0", "id": 12345, "error": {"code": -32603, "message": "no"}},
            {"jsonrpc": "2.0", "id": None, "result": None},
        ):
            await agent.send_raw(line(message))
        await still_works(agent)
        await still_works(agent)
        assert len(received(agent, mark)) == 2  # the two answers to still_works, nothing else


# --- batches ------------------------------------------------------------------------


@pytest.mark.integration
async def test_an_empty_batch_is_one_invalid_request(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        mark = len(agent.transcript)
        await agent.send_raw(b"[]\n")
        (error,) = await expect_null_errors(agent, mark, 1)
        assert error["error"]["code"] == -32600


@pytest.mark.integration
async def test_a_batch_is_answered_by_one_array(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        mark = len(agent.transcript)
        expect(agent, "b1", "b2")
        await agent.send_raw(line([request("b1", "session/list", {}),
                                   {"jsonrpc": "2.0", "method": "no/such_notification", "params": {}},
                                   request("b2", "session/list", {"cwd": "/nowhere"})]))
        await until(agent, lambda: bool(received(agent, mark)))
        await still_works(agent)
        batch, _ = received(agent, mark)
        assert isinstance(batch, list) and len(batch) == 2
        assert sorted(a["id"] for a in batch) == ["b1", "b2"]
        assert all(a["result"] == {"sessions": []} for a in batch)


@pytest.mark.integration
async def test_a_batch_mixing_valid_and_invalid_entries(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        mark = len(agent.transcript)
        expect(agent, "m1", "m2", "m3")
        await agent.send_raw(line([
            request("m1", "session/list", {}),
            1,
            {"foo": 1},
            request("m2", "no/such_method", {}),
            {"jsonrpc": "2.0", "method": "no/such_notification"},
            {"jsonrpc": "2.0", "id": "acp-bridge:42", "result": {}},  # a stray response
            request("m3", "session/list", ["by", "position"]),
        ]))
        await until(agent, lambda: bool(received(agent, mark)))
        await still_works(agent)
        batch, _ = received(agent, mark)
        assert isinstance(batch, list)
        by_id = {a["id"]: a for a in batch if a["id"] is not None}
        assert by_id["m1"]["result"] == {"sessions": []}
        assert code_of(by_id["m2"]) == -32601
        assert code_of(by_id["m3"]) == -32602
        nulls = [a for a in batch if a["id"] is None]
        assert [code_of(a) for a in nulls] == [-32600, -32600]
        assert len(batch) == 5


@pytest.mark.integration
async def test_a_batch_of_notifications_gets_no_answer(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        mark = len(agent.transcript)
        await agent.send_raw(line([{"jsonrpc": "2.0", "method": "no/such_notification", "params": {}},
                                   {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": UNKNOWN_SID}}]))
        await still_works(agent)
        await still_works(agent)
        assert len(received(agent, mark)) == 2


def answered_ids(messages: list[Any]) -> list[Any]:
    return sorted(str(a.get("id")) for a in flat(messages))


@pytest.mark.integration
async def test_a_batch_can_open_the_connection(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        mark = len(agent.transcript)
        expect(agent, "i", method="initialize")
        expect(agent, "l")
        await agent.send_raw(line([request("i", "initialize", {"protocolVersion": 1, "clientCapabilities": {}}),
                                   request("l", "session/list", {})]))
        await until(agent, lambda: answered_ids(received(agent, mark)) == ["i", "l"])
        (batch,) = received(agent, mark)
        assert isinstance(batch, list) and sorted(a["id"] for a in batch) == ["i", "l"]
        assert all("result" in a for a in batch), batch


# --- ids ----------------------------------------------------------------------------


@pytest.mark.integration
async def test_ids_are_echoed_exactly(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        for rid in (0, -1, 2**63 - 1, -(2**63), 2**64 - 1, "", "x" * 1000, "1", "héllo", "acp-bridge:1"):
            answer = await raw_call(agent, line(request(rid, "session/list", {})), rid)
            assert answer["id"] == rid and type(answer["id"]) is type(rid), (rid, answer)
            assert answer["result"] == {"sessions": []}


@pytest.mark.integration
async def test_an_id_beyond_64_bits_is_echoed_exactly_or_refused(tmp_path: Path) -> None:
    # A plain subprocess: the harness would reject the answer's float id before any
    # assertion here could say what is wrong with it.
    rid = 123456789012345678901234567890
    command = AgentProcess(tmp_path / "store").command
    stdin = line(request(1, "initialize", {"protocolVersion": 1})) + line(request(rid, "session/list", {}))
    with anyio.fail_after(10):
        done = await anyio.run_process(command, input=stdin, check=False)
    assert done.returncode == 0
    raw = done.stdout.splitlines()[1]
    answer = json.loads(raw)  # json keeps big integers exact
    if answer["id"] is None:
        assert code_of(answer) == -32600
    else:
        assert answer["id"] == rid and type(answer["id"]) is int, raw


# --- initialize and cancel -----------------------------------------------------------


@pytest.mark.integration
async def test_initialize_answers_version_1_and_may_be_repeated(tmp_path: Path, empty_work: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        first = await agent.request("initialize", {"protocolVersion": 5, "clientCapabilities": {}})
        assert first["protocolVersion"] == 1
        second = await agent.initialize()
        assert second == first
        sid = await agent.new_session(empty_work)
        third = await agent.request("initialize", {"protocolVersion": 1})
        assert third["protocolVersion"] == 1
        assert (await agent.prompt(sid, "still here"))["stopReason"] == "end_turn"


@pytest.mark.integration
async def test_cancel_request_settles_a_running_prompt(tmp_path: Path, empty_work: Path) -> None:
    script = tmp_path / "script.json"
    script.write_bytes(orjson.dumps({"steps": [{"text": "a b", "hang": True}, {"text": "next"}]}))
    async with AgentProcess(tmp_path / "store", model=f"script:{script}") as agent:
        await agent.initialize()
        sid = await agent.new_session(empty_work)
        answers: list[Any] = []

        async def run() -> None:
            answers.append(await agent.request_raw(
                "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]},
                request_id="the-prompt"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await until(agent, lambda: len([u for u in agent.updates_of(sid)
                                             if u["sessionUpdate"] == "agent_message_chunk"]) == 2)
            await agent.notify("$/cancel_request", {"requestId": "other"})  # not it: ignored
            await agent.notify("$/cancel_request", {"requestId": 1})  # the answered initialize: ignored
            await anyio.sleep(0.1)  # an absence: no event says a wrong cancel did nothing
            assert answers == []
            await agent.notify("$/cancel_request", {"requestId": "the-prompt"})
        (answer,) = answers
        assert answer["result"]["stopReason"] == "cancelled"
        assert (await agent.prompt(sid, "again"))["stopReason"] == "end_turn"


# --- process ------------------------------------------------------------------------


@pytest.mark.integration
async def test_stdout_carries_protocol_only_and_the_log_goes_to_stderr(tmp_path: Path, empty_work: Path) -> None:
    async with AgentProcess(tmp_path / "store", args=("--log-level", "debug")) as agent:
        await agent.send_raw(b"garbage\n")
        await agent.initialize()
        sid = await agent.new_session(empty_work)
        await agent.prompt(sid, "some words")
    # The harness parsed and schema-checked every stdout line as it arrived.
    out = received(agent)
    assert out and all(isinstance(m, dict) and m["jsonrpc"] == "2.0" for m in out)
    assert b"acp-bridge" in agent.stderr
    assert agent.returncode == 0


@pytest.mark.parametrize("open_session", [False, True])
@pytest.mark.integration
async def test_stdin_eof_exits_0_promptly(tmp_path: Path, empty_work: Path, open_session: bool) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        if open_session:
            sid = await agent.new_session(empty_work)
            await agent.prompt(sid, "hi")
        started_at = time.monotonic()
        await agent.close_stdin()
        with anyio.fail_after(2):
            await agent.proc.wait()
        elapsed = time.monotonic() - started_at
    assert agent.returncode == 0
    assert elapsed < 2
    assert b"Traceback" not in agent.stderr


@pytest.mark.integration
async def test_stdin_eof_before_anything_exits_0(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.close_stdin()
        with anyio.fail_after(5):
            await agent.proc.wait()
    assert agent.returncode == 0
    assert received(agent) == []
