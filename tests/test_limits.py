"""One policy for what a connection cannot take (issue 34, points 2 and 9; docs/protocol.md,
"Limits"): a message nested deeper than `MAX_DEPTH`, or a line the parser refuses, is
refused where it is read, whichever side sent it: a request is answered with its id, an
answer to a request of ours fails that request, a notification is dropped; the
connection goes on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_bridge.rpc.connection import Connection
from acp_bridge.rpc.protocol import MAX_DEPTH, ClientError, nested_deeper, salvaged_id
from tests.support.acp_client import WRITE_STEP, AgentProcess, ClientPolicy, write_script
from tests.support.rpc_pipes import FakeWriter
from tests.support.wrapped import WrappedProcess, serve_command

pytestmark = [pytest.mark.anyio,
              pytest.mark.filterwarnings("ignore:(read_text|open_text) is deprecated:DeprecationWarning")]


def deep(levels: int) -> Any:
    value: Any = "core"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(("value", "deeper"), [
    (deep(MAX_DEPTH), False),  # MAX_DEPTH arrays, one in the other
    (deep(MAX_DEPTH + 1), True),
    ({"a": deep(MAX_DEPTH - 1)}, False),  # the object counts as a level
    ({"a": {"b": deep(MAX_DEPTH - 1)}}, True),
    ({"text": "[" * 5000}, False),  # brackets in a string are not nesting (counted, then walked)
    ([deep(3), deep(MAX_DEPTH)], True),
])
def test_nested_deeper(value: Any, deeper: bool) -> None:
    assert nested_deeper(orjson.dumps(value), value) is deeper


@pytest.mark.parametrize(("line", "theirs", "ours"), [
    (b'{"jsonrpc":"2.0","id":"acp-bridge:7","result":{"x":"\\ud800"}}', None, "acp-bridge:7"),
    (b'{"jsonrpc":"2.0","id":5,"method":"m","params":{"x":"\\ud800"}}', 5, None),
    (b'[{"id":"acp-bridge:7"}]', None, None),
])
def test_salvaged_ids_theirs_and_ours(line: bytes, theirs: Any, ours: Any) -> None:
    assert salvaged_id(line) == theirs
    assert salvaged_id(line, ours=True) == ours


class Lines:
    """A reader of `lines` (each with its newline), after `gate` is set."""

    max_line = 1 << 26

    def __init__(self, lines: list[bytes], gate: anyio.Event) -> None:
        self._lines, self._gate = lines, gate

    async def batches(self) -> AsyncIterator[list[bytes]]:
        await self._gate.wait()
        for line in self._lines:
            yield [line]

    async def lines(self) -> AsyncIterator[bytes]:
        async for batch in self.batches():
            for line in batch:
                yield line


def line(message: Any) -> bytes:
    return orjson.dumps(message) + b"\n"


async def test_what_is_too_deep_or_unreadable_is_refused_and_the_connection_goes_on() -> None:
    seen: list[Any] = []
    gate = anyio.Event()
    lines = [
        line({"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {"deep": deep(MAX_DEPTH)}}),
        line({"jsonrpc": "2.0", "method": "note", "params": {"deep": deep(MAX_DEPTH)}}),
        line({"jsonrpc": "2.0", "id": "acp-bridge:1", "result": {"deep": deep(MAX_DEPTH)}}),
        b'{"jsonrpc":"2.0","id":"acp-bridge:2","result":{"outcome":"\\ud800"}}\n',
        line({"jsonrpc": "2.0", "method": "note", "params": {"n": 2}}),
        line({"jsonrpc": "2.0", "id": 3, "method": "echo", "params": {"n": 3}}),
    ]
    writer = FakeWriter()

    async def echo(**params: Any) -> Any:
        return params

    conn = Connection(Lines(lines, gate), writer, {"echo": echo}, inline={"note": lambda p: seen.append(p)},
                      ids=(f"acp-bridge:{n}" for n in range(1, 100)))
    failures: list[Any] = []

    async def ask(method: str) -> None:
        try:
            await conn.request(method, {})
        except ClientError as exc:
            error: dict[str, Any] = exc.error
            failures.append((method, error["code"], error["data"]["code"]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(conn.serve)
        tg.start_soon(ask, "first")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(ask, "second")
        await anyio.wait_all_tasks_blocked()
        gate.set()
        with anyio.fail_after(5):
            while len(failures) < 2 or len(writer.messages()) < 4:
                await anyio.sleep(0.001)
        tg.cancel_scope.cancel()
    assert sorted(failures) == [("first", -32600, "too_deep"), ("second", -32700, "parse_error")]
    assert seen == [{"n": 2}]  # the deep notification dropped, the next one handled
    answers = [m for m in writer.messages() if "method" not in m]
    assert [(a["id"], a.get("error", {}).get("data", {}).get("code"), a.get("result")) for a in answers] == [
        (1, "too_deep", None), (3, None, {"n": 3})]


# --- over real processes: `serve`, and `wrap` in front of it ----------------------------------

DEEP_META = {"deep": deep(230)}  # past MAX_DEPTH, within what the tests' encoder writes


@pytest.mark.integration
@pytest.mark.parametrize("through", ["serve", "wrap"])
async def test_a_deep_permission_answer_and_a_deep_prompt_are_refused_and_the_agent_goes_on(
        tmp_path: Path, work: Path, through: str) -> None:
    # The editor's answer to a permission, nested past the limit: before, `wrap` exited
    # (status 1, every session gone) as orjson's writer stopped at 254 levels.
    model = write_script(tmp_path / "script.json", WRITE_STEP, {"text": "Done."}, {"text": "again"})
    answer = {"outcome": {"outcome": "selected", "optionId": "allow_once"}, "_meta": DEEP_META}
    policy = ClientPolicy(permissions=[answer])
    agent = (AgentProcess(tmp_path / "store", model=model, policy=policy) if through == "serve" else
             WrappedProcess(tmp_path / "store", serve_command(tmp_path / "child", model), policy=policy))
    async with agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        first = await agent.prompt(sid, "write it")
        assert first["stopReason"] in ("end_turn", "cancelled")
        assert not (work / "out.txt").exists()  # an answer that could not be taken lets nothing run
        refused = await agent.request_raw("session/prompt", {"sessionId": sid, "_meta": DEEP_META,
                                                             "prompt": [{"type": "text", "text": "x"}]})
        assert refused["error"]["code"] == -32600 and refused["error"]["data"]["code"] == "too_deep"
        again = await agent.prompt(sid, "go on")
        assert again["stopReason"] == "end_turn"
    assert agent.returncode == 0
