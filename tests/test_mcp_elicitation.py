"""MCP elicitation through our agent (docs/protocol.md, "MCP servers"): a server's
`elicitation/create` during a tool call reaches the client as ACP `elicitation/create`
(tied to the session and the call) when the client advertises that mode, the answer
goes back to the server, and both are recorded on the call's `tool/result`
(`elicitations`). A mode the client lacks is declined without asking it; a client that
advertises none is not offered elicitation at all (the MCP way: the server does not
ask). Real processes: our agent, and the SDK's server of tests/support/mcp_test_server.py
(every message the agent sends is checked against the vendored ACP schema)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.acp_client import AgentProcess, ClientErrorAnswer, ClientPolicy, write_script
from tests.support.logs import loaded_events
from tests.test_mcp import call, result_of, test_server, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

BOTH: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}


async def run_tool(tmp_path: Path, work: Path, tool: str, caps: dict[str, Any],
                   policy: ClientPolicy) -> tuple[dict[str, Any], AgentProcess, str]:
    """One call of the test server's `tool` in a session of a client with `caps`: the
    call's stored `tool/result`, the agent, the session."""
    model = write_script(tmp_path / "m.json", call("c1", f"t__{tool}"), {"text": "done"})
    policy.permissions = ["allow_once"]
    store = tmp_path / "store"
    async with AgentProcess(store, model=model, policy=policy) as agent:
        await agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": caps,
                                           "clientInfo": {"name": "tests", "version": "0"}})
        result = await agent.request("session/new", {"cwd": str(work), "mcpServers": [test_server()]}, timeout=60)
        sid = result["sessionId"]
        assert (await agent.prompt(sid, "go", timeout=60))["stopReason"] == "end_turn"
    return result_of(loaded_events(store, sid), "c1"), agent, sid


async def test_a_form_reaches_the_client_and_its_answer_the_server(tmp_path: Path, work: Path) -> None:
    policy = ClientPolicy(elicitations=[{"action": "accept", "content": {"name": "Ada", "subscribe": True}}])
    result, _, sid = await run_tool(tmp_path, work, "ask", BOTH, policy)
    (asked,) = policy.elicited
    assert asked["sessionId"] == sid and asked["toolCallId"] == "c1"
    assert asked["mode"] == "form" and asked["message"] == "Who is there?"
    assert set(asked["requestedSchema"]["properties"]) == {"name", "subscribe"}
    assert text_of(result) == "accept: name=Ada subscribe=True"  # what the server made of the answer
    request = {k: v for k, v in asked.items() if k not in ("sessionId", "toolCallId")}
    assert result["elicitations"] == [{"request": request, "answer": policy_answer(True)}]


def policy_answer(subscribe: bool) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": "Ada", "subscribe": subscribe}}


async def test_a_url_reaches_a_client_that_shows_urls(tmp_path: Path, work: Path) -> None:
    policy = ClientPolicy(elicitations=[{"action": "accept"}])
    result, agent, _ = await run_tool(tmp_path, work, "visit", BOTH, policy)
    (asked,) = policy.elicited
    assert (asked["mode"], asked["url"], asked["elicitationId"]) == ("url", "https://example.invalid/sign-in", "e-1")
    assert text_of(result) == "accept"
    assert result["elicitations"][0]["answer"] == {"action": "accept"}
    # The server said the page's work is done: the client is told (ACP
    # `elicitation/complete`, validated against the schema) and the call records it.
    assert completions(agent) == [{"elicitationId": "e-1"}]
    assert result["elicitations"][0]["completed"] is True


async def test_a_completion_after_the_call_is_passed_on_unrecorded(tmp_path: Path, work: Path) -> None:
    policy = ClientPolicy(elicitations=[{"action": "accept"}], permissions=["allow_once"])
    model = write_script(tmp_path / "m.json", call("c1", "t__visit_later"), {"text": "done"})
    store = tmp_path / "store"
    async with AgentProcess(store, model=model, policy=policy) as agent:
        await agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": BOTH,
                                           "clientInfo": {"name": "tests", "version": "0"}})
        sid = (await agent.request("session/new", {"cwd": str(work), "mcpServers": [test_server()]},
                                   timeout=60))["sessionId"]
        assert (await agent.prompt(sid, "go", timeout=60))["stopReason"] == "end_turn"
        await agent.wait_for(lambda: bool(completions(agent)))
        # Only the one the client was shown: the server's "never-asked" was dropped.
        assert completions(agent) == [{"elicitationId": "e-2"}]
    result = result_of(loaded_events(store, sid), "c1")
    assert text_of(result) == "accept"
    assert "completed" not in result["elicitations"][0]  # the result was written before it came


def completions(agent: AgentProcess) -> list[Any]:
    return [m["params"] for d, m in agent.transcript if d == "<-" and m.get("method") == "elicitation/complete"]


async def test_a_mode_the_client_lacks_is_declined_without_asking_it(tmp_path: Path, work: Path) -> None:
    policy = ClientPolicy(elicitations=[{"action": "accept"}])
    result, agent, _ = await run_tool(tmp_path, work, "visit", {"elicitation": {"form": {}}}, policy)
    assert policy.elicited == []
    assert text_of(result) == "decline"
    assert completions(agent) == [] and "completed" not in result["elicitations"][0]
    assert [e["answer"] for e in result["elicitations"]] == [{"action": "decline"}]
    assert result["elicitations"][0]["request"]["mode"] == "url"


async def test_a_client_without_elicitation_is_not_offered_it(tmp_path: Path, work: Path) -> None:
    policy = ClientPolicy(elicitations=[{"action": "accept"}])
    result, _, _ = await run_tool(tmp_path, work, "ask", {}, policy)
    assert policy.elicited == []
    # the server was not told it may ask: the SDK refuses a request it should not send
    assert text_of(result).startswith("refused:")
    assert "elicitations" not in result


@pytest.mark.parametrize("answer", [ClientErrorAnswer(-32603, "no forms today"), {"action": "maybe"},
                                    {"action": "accept", "content": {"name": {"nested": 1}}}])
async def test_a_failed_or_unusable_answer_is_a_cancel(tmp_path: Path, work: Path, answer: Any) -> None:
    policy = ClientPolicy(elicitations=[answer])
    result, _, _ = await run_tool(tmp_path, work, "ask", BOTH, policy)
    assert len(policy.elicited) == 1
    assert text_of(result) == "cancel"
    assert [e["answer"] for e in result["elicitations"]] == [{"action": "cancel"}]


async def test_a_cancelled_turn_withdraws_its_question(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "m.json", call("c1", "t__ask"), {"text": "done"})
    policy = ClientPolicy(permissions=["allow_once"], hang_elicitations=True)
    store = tmp_path / "store"
    async with AgentProcess(store, model=model, policy=policy) as agent:
        await agent.initialize(BOTH)
        new = await agent.request("session/new", {"cwd": str(work), "mcpServers": [test_server()]}, timeout=60)
        sid = new["sessionId"]
        answer = await agent.cancelled_when(sid, "go", lambda: bool(policy.elicited), wait=30, timeout=60)
        assert answer["result"]["stopReason"] == "cancelled"
        withdrawn = [m for d, m in agent.transcript if d == "<-" and m.get("method") == "$/cancel_request"]
        elicit_id = next(m["id"] for d, m in agent.transcript if d == "<-" and m.get("method") == "elicitation/create")
        assert [m["params"]["requestId"] for m in withdrawn] == [elicit_id]
        # the session goes on
        assert (await agent.prompt(sid, "again", timeout=60))["stopReason"] == "end_turn"
    ends = [e["data"]["reason"]["kind"] for e in loaded_events(store, sid) if e["type"] == "turn/end"]
    assert ends[0] == "cancelled"
