"""Which MCP tools a model is offered over a session's life, end to end against the real
agent: a server that failed to start answers a call of its tools with an error naming
it (not `unknown_tool`), and a server's `notifications/tools/list_changed` is followed,
so the next model step is offered its new list (tests/support/mcp_test_server.py's
`grow` adds a tool and says so, as the MCP spec has a server do).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.acp_client import AgentProcess, ClientPolicy, write_script
from tests.support.logs import loaded_events
from tests.support.sse_server import chunk, openai_server, stream_reply, text_reply
from tests.test_mcp import call, open_session, result_of, test_server, text_of, time_server

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def tool_call_reply(call_id: str, name: str, arguments: str) -> Any:
    return stream_reply(chunk({"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": {
        "name": name, "arguments": arguments}}]}), chunk({}, "tool_calls"))


async def test_a_tool_of_a_server_that_did_not_start_is_an_error_naming_the_server(tmp_path: Path,
                                                                                    work: Path) -> None:
    ghost = {**time_server(), "command": str(tmp_path / "no-such-time-server")}
    model = write_script(tmp_path / "m.json", call("g", "time__get_current_time", timezone="UTC"),
                         {"text": "it is not there"})
    async with AgentProcess(tmp_path / "store", model=model) as agent:
        sid, result = await open_session(agent, work, ghost)
        (status,) = result["_meta"]["acpBridge"]["mcpServers"]
        assert status["tools"] == []  # the stand-in is not a tool the client is told of
        assert (await agent.prompt(sid, "time?"))["stopReason"] == "end_turn"
    failed = result_of(loaded_events(tmp_path / "store", sid), "g")
    assert failed["isError"] and failed["error"] == {"name": "McpServerError", "code": "mcp_unavailable"}
    assert text_of(failed) == (f"MCP server 'time' command not found: {tmp_path / 'no-such-time-server'}; "
                               "its tools are not available in this session")


async def test_an_unknown_name_beside_a_failed_server_is_still_unknown_tool(tmp_path: Path, work: Path) -> None:
    ghost = {**time_server(), "command": str(tmp_path / "no-such-time-server")}
    model = write_script(tmp_path / "m.json", call("u", "clock__now"), {"text": "ok"})
    async with AgentProcess(tmp_path / "store", model=model) as agent:
        sid, _ = await open_session(agent, work, ghost)
        assert (await agent.prompt(sid, "now?"))["stopReason"] == "end_turn"
    unknown = result_of(loaded_events(tmp_path / "store", sid), "u")
    assert unknown["error"]["code"] == "unknown_tool"


async def test_the_tools_of_a_server_without_the_sdk_are_errors_naming_it(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "m.json", call("g", "time__get_current_time", timezone="UTC"), {"text": "ok"})
    agent = AgentProcess(tmp_path / "store", model=model)
    agent.command[1:3] = ["-c", "import sys; sys.modules['mcp'] = None; from acp_bridge.cli.main import main; "
                                "sys.argv[0] = 'acp-bridge'; sys.exit(main())"]
    async with agent:
        sid, _ = await open_session(agent, work, time_server())
        assert (await agent.prompt(sid, "time?"))["stopReason"] == "end_turn"
    failed = result_of(loaded_events(tmp_path / "store", sid), "g")
    assert failed["error"]["code"] == "mcp_unavailable"
    assert text_of(failed).startswith("MCP server 'time' cannot be started: the MCP SDK is not installed")


async def test_a_changed_tool_list_is_offered_at_the_next_step(tmp_path: Path, work: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with openai_server(monkeypatch) as api:
        api.push(tool_call_reply("call_1", "t__grow", "{}"),
                 tool_call_reply("call_2", "t__grown", '{"text": "new"}'),
                 text_reply("Done."))
        async with AgentProcess(tmp_path / "store", model="openai:m",
                                policy=ClientPolicy(permissions=["allow_always", "allow_always"])) as agent:
            sid, result = await open_session(agent, work, test_server())
            assert "t__grown" not in result["_meta"]["acpBridge"]["mcpServers"][0]["tools"]
            assert (await agent.prompt(sid, "grow"))["stopReason"] == "end_turn"
        first, second, third = api.requests
    offered = [{t["function"]["name"] for t in r.json["tools"]} for r in (first, second, third)]
    assert "t__grow" in offered[0] and "t__grown" not in offered[0]
    assert "t__grown" in offered[1] and "t__grown" in offered[2]
    events = loaded_events(tmp_path / "store", sid)
    assert text_of(result_of(events, "call_1")) == "grew a tool"
    assert text_of(result_of(events, "call_2")) == "grown: new"


async def test_a_script_model_can_call_a_tool_added_by_the_previous_step(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "m.json", call("g", "t__grow"), call("n", "t__grown", text="x"), {"text": "ok"})
    async with AgentProcess(tmp_path / "store", model=model,
                            policy=ClientPolicy(permissions=["allow_once", "allow_once"])) as agent:
        sid, _ = await open_session(agent, work, test_server())
        assert (await agent.prompt(sid, "grow"))["stopReason"] == "end_turn"
    assert text_of(result_of(loaded_events(tmp_path / "store", sid), "n")) == "grown: x"


