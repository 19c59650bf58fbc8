"""The official ACP SDK clients drive `acp-bridge serve`, `wrap` in front of `serve` and
`wrap` in front of the SDK echo agent (tests/support/sdk_setups.py): every method the
agent advertises, a prompt with tool calls and a permission request, and an MCP server's
elicitation. Each message the agent sends is checked by the SDK's own schemas (zod,
pydantic: refused or changed values fail) and by the vendored v1.25 schema, and every
request is answered once (tests/support/sdk_clients.py, `check_traffic`). The rules of the
spec, each a test of its own, are in tests/test_sdk_client_rules.py.

Marked `sdk_clients`: left out of the default run, run by `.ci/run` as a step of its own,
with the TypeScript SDK's current 2.x and its previous major installed
(`$ACP_BRIDGE_TEST_TS_SDK`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.sdk_clients import SdkClient
from tests.support.sdk_setups import (
    AGENTS,
    Setup,
    client_params,
    initialize,
    new_session,
    sdk_client,
)
from tests.test_mcp import test_server

pytestmark = [pytest.mark.anyio, pytest.mark.sdk_clients, pytest.mark.timeout(180)]

TOOL_STEPS: list[dict[str, Any]] = [
    {"text": "Reading.", "toolCalls": [
        {"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}},
        {"id": "w1", "name": "write_file", "arguments": {"path": "out.txt", "content": "hi\n"}}]},
    {"text": "Done."},
]


def advertised(init: dict[str, Any], new: dict[str, Any]) -> set[str]:
    """The methods the `initialize` and `session/new` answers advertise."""
    caps = init["agentCapabilities"]
    methods = {"initialize", "session/new", "session/prompt"}
    methods |= {"session/load"} if caps.get("loadSession") else set()
    methods |= {f"session/{name}" for name in caps.get("sessionCapabilities") or {}} - {
        "session/additionalDirectories"}
    methods |= {"authenticate"} if init.get("authMethods") else set()
    methods |= {"logout"} if (caps.get("auth") or {}).get("logout") is not None else set()
    methods |= {"session/set_mode"} if new.get("modes") else set()
    methods |= {"session/set_config_option"} if new.get("configOptions") else set()
    return methods


async def prompt_with_tools(client: SdkClient, setup: Setup, sid: str) -> None:
    """A turn that reads through the client, asks to write and writes through it."""
    (setup.work / "notes.txt").write_text("one\ntwo\n")
    await client.answer_with(permissions=["allow_once"])
    since = len(client.traffic)
    answer = await client.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]})
    assert answer["stopReason"] == "end_turn"
    assert (setup.work / "out.txt").read_text() == "hi\n"
    asked = [(method, params.get("path") or params["toolCall"]["toolCallId"]) for method, params in client.asked]
    assert asked == [("fs/read_text_file", str(setup.work / "notes.txt")), ("session/request_permission", "w1"),
                     ("fs/write_text_file", str(setup.work / "out.txt"))]
    updates = client.updates(sid, since)
    starts = {u["toolCallId"]: u for u in updates if u["sessionUpdate"] == "tool_call"}
    assert set(starts) == {"r1", "w1"} and starts["r1"]["kind"] == "read" and starts["w1"]["kind"] == "edit"
    final = {u["toolCallId"]: u["status"] for u in updates if u["sessionUpdate"] == "tool_call_update" and "status" in u}
    assert final == {"r1": "completed", "w1": "completed"}
    assert client.text(sid, since=since) == "Reading.Done."


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("client", client_params())
async def test_every_method_the_agent_advertises(client: str, agent: str, tmp_path: Path) -> None:
    setup = Setup(agent, tmp_path)
    async with sdk_client(client, setup, TOOL_STEPS) as c:
        init = await initialize(c)
        caps = init["agentCapabilities"]
        done = {"initialize"}
        for method in init.get("authMethods", []):
            if method.get("type", "agent") == "agent":
                await c.request("authenticate", {"methodId": method["id"]})
                done.add("authenticate")
        new = await c.request("session/new", {"cwd": str(setup.work), "mcpServers": []})
        sid = new["sessionId"]
        done.add("session/new")
        if new.get("modes"):
            modes = new["modes"]
            other = next(m["id"] for m in modes["availableModes"] if m["id"] != modes["currentModeId"])
            await c.request("session/set_mode", {"sessionId": sid, "modeId": other})
            done.add("session/set_mode")
        if new.get("configOptions"):
            option = next(o for o in new["configOptions"] if o["type"] == "select")
            back = new["modes"]["currentModeId"] if option.get("category") == "mode" else option["currentValue"]
            answer = await c.request("session/set_config_option",
                                     {"sessionId": sid, "configId": option["id"], "value": back})
            assert next(o for o in answer["configOptions"] if o["id"] == option["id"])["currentValue"] == back
            done.add("session/set_config_option")
        if setup.ours:
            await prompt_with_tools(c, setup, sid)
        else:
            answer = await c.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "hi sdk"}]})
            assert answer["stopReason"] == "end_turn" and c.text(sid) == "hi sdk "
        done.add("session/prompt")
        session_caps = caps.get("sessionCapabilities") or {}
        if "list" in session_caps:
            listed = await c.request("session/list", {})
            assert sid in [s["sessionId"] for s in listed["sessions"]]
            done.add("session/list")
        if caps.get("loadSession"):
            since = len(c.traffic)
            await c.request("session/load", {"sessionId": sid, "cwd": str(setup.work), "mcpServers": []})
            assert c.text(sid, "user_message_chunk", since) == ("go" if setup.ours else "hi sdk")
            done.add("session/load")
        if "resume" in session_caps:
            await c.request("session/resume", {"sessionId": sid, "cwd": str(setup.work)})
            done.add("session/resume")
        other_sid = sid
        if "fork" in session_caps:
            other_sid = (await c.request("session/fork", {"sessionId": sid, "cwd": str(setup.work)}))["sessionId"]
            assert other_sid != sid
            done.add("session/fork")
        if "close" in session_caps:
            await c.request("session/close", {"sessionId": other_sid})
            done.add("session/close")
        if "delete" in session_caps:
            await c.request("session/delete", {"sessionId": other_sid})
            if "list" in session_caps:
                assert other_sid not in [s["sessionId"] for s in (await c.request("session/list", {}))["sessions"]]
            done.add("session/delete")
        if (caps.get("auth") or {}).get("logout") is not None:
            await c.request("logout", {})
            done.add("logout")
        assert advertised(init, new) <= done, f"advertised, not driven: {advertised(init, new) - done}"
        if setup.ours:  # our agent advertises all of these, alone or wrapped
            assert done >= {"authenticate", "logout", "session/load", "session/resume", "session/list",
                            "session/close", "session/delete", "session/fork", "session/set_mode",
                            "session/set_config_option"}


ASK_ANSWER = {"action": "accept", "content": {"name": "Ada", "subscribe": True}}


@pytest.mark.parametrize("agent", [a for a in AGENTS if a != "wrap-echo"])
@pytest.mark.parametrize("client", client_params())
async def test_an_mcp_servers_elicitation_reaches_the_client(client: str, agent: str, tmp_path: Path) -> None:
    """The test MCP server's `ask` tool asks the person (MCP elicitation): our agent, alone
    or wrapped, asks the client (`elicitation/create`), and the client's answer is the
    tool's result."""
    setup = Setup(agent, tmp_path)
    steps: list[dict[str, Any]] = [{"toolCalls": [{"id": "c1", "name": "t__ask", "arguments": {}}]}, {"text": "done"}]
    async with sdk_client(client, setup, steps) as c:
        await initialize(c)
        sid = await new_session(c, setup, [test_server()])
        await c.answer_with(permissions=["allow_once"], elicitations=[ASK_ANSWER])
        answer = await c.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "ask"}]},
                                 timeout=60)
        assert answer["stopReason"] == "end_turn"
        (elicited,) = [params for method, params in c.asked if method == "elicitation/create"]
        assert elicited["message"] == "Who is there?"
        results = [block["content"]["text"] for u in c.updates(sid) if u["sessionUpdate"] == "tool_call_update"
                   for block in u.get("content") or [] if block.get("type") == "content"]
        assert "accept: name=Ada subscribe=True" in results


SLOPPY_AGENT = Path(__file__).resolve().parent / "support" / "sloppy_agent.py"


@pytest.mark.parametrize("client", client_params())
async def test_the_checks_refuse_what_an_agent_must_not_send(client: str, tmp_path: Path) -> None:
    """The checks above have teeth: against an agent that sends one of each thing they
    are for (tests/support/sloppy_agent.py), each says so."""
    setup = Setup("serve", tmp_path)
    with pytest.raises(AssertionError) as failed:
        async with sdk_client(client, setup, command=[sys.executable, str(SLOPPY_AGENT)]) as c:
            await c.request("initialize", {"protocolVersion": 1})
            sid = (await c.request("session/new", {"cwd": str(setup.work), "mcpServers": []}))["sessionId"]
            await c.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]})
            listing = c.start("session/list", {})
            await c.until(lambda: c.sent_id("session/list") is not None, "the list request to go out")
    verdict = str(failed.value)
    assert "the v1.25 schema: InitializeResponse" in verdict  # loadSession: "yes"
    assert "the SDK's schemas: InitializeResponse" in verdict  # defaulted, not refused
    assert "answered more than once" in verdict and "never: [" in verdict  # session/new twice, the list never
    assert "the SDK delivered 0 of 1 session/update" in verdict  # the chunk whose text is a number
    assert listing.error is not None and listing.result is None  # no answer: the agent went first
