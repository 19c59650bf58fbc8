"""MCP against the reference server of the MCP project, `@modelcontextprotocol/server-everything`
from npm (Node.js): text, an image, a resource link, an embedded resource, structured content,
an elicitation form answered through the client, and a long-running operation cancelled, through the real agent, over stdio; and over
streamable HTTP and SSE on loopback.

Marked `mcp_everything`; skips unless `$ACP_BRIDGE_TEST_MCP_EVERYTHING` holds the command that
starts the server over stdio (an installed copy's `mcp-server-everything`, or
`npx -y @modelcontextprotocol/server-everything@VERSION`). `.ci/run` installs a pinned copy
with npm and sets it.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.acp_client import AgentProcess, ClientPolicy, write_script
from tests.support.logs import loaded_events

COMMAND = os.environ.get("ACP_BRIDGE_TEST_MCP_EVERYTHING", "")
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.mcp_everything,
    pytest.mark.skipif(not COMMAND, reason="set $ACP_BRIDGE_TEST_MCP_EVERYTHING (.ci/run does)"),
]


def everything() -> dict[str, Any]:
    command, *args = shlex.split(COMMAND)
    return {"name": "everything", "command": command, "args": [*args, "stdio"], "env": []}


def call(call_id: str, name: str, /, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def results(store: Path, sid: str) -> dict[str, dict[str, Any]]:
    return {e["data"]["callId"]: e["data"] for e in loaded_events(store, sid) if e["type"] == "tool/result"}


async def test_server_everything_tools_through_the_agent(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "m.json", {"toolCalls": [
        call("echo", "everything__echo", message="hello MCP"),
        call("img", "everything__get-tiny-image"),
        call("links", "everything__get-resource-links", count=2),
        call("ref", "everything__get-resource-reference", resourceType="Text", resourceId=1),
        call("sum", "everything__get-sum", a=2, b=3),
    ]}, {"text": "done"})
    store = tmp_path / "store"
    async with AgentProcess(store, model=model, policy=ClientPolicy(permissions=["allow_once"] * 5)) as agent:
        await agent.initialize()
        new = await agent.request("session/new", {"cwd": str(work), "mcpServers": [everything()]}, timeout=120)
        sid = new["sessionId"]
        (status,) = new["_meta"]["acpBridge"]["mcpServers"]
        assert "error" not in status and "everything__echo" in status["tools"]
        assert (await agent.prompt(sid, "use them", timeout=60))["stopReason"] == "end_turn"
        shown = {u["toolCallId"]: u for u in agent.updates_of(sid) if u.get("status") == "completed"}
    got = results(store, sid)
    assert all(not r["isError"] for r in got.values()), got
    assert "hello MCP" in got["echo"]["content"][0]["text"]
    images = [b for b in got["img"]["content"] if b["type"] == "image"]
    assert images and images[0]["mimeType"] == "image/png" and images[0]["data"]
    assert [b["content"]["type"] for b in shown["img"]["content"]].count("image") == 1
    assert sum(b["type"] == "resource_link" for b in got["links"]["content"]) == 2
    assert any(b["type"] == "resource" and b["resource"]["uri"] for b in got["ref"]["content"])
    assert "5" in "".join(b.get("text", "") for b in got["sum"]["content"])


async def test_a_long_running_operation_is_cancelled(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "m.json", {"toolCalls": [
        call("long", "everything__trigger-long-running-operation", duration=60, steps=60)]},
        {"toolCalls": [call("echo", "everything__echo", message="after")]}, {"text": "ok"})
    store = tmp_path / "store"
    async with AgentProcess(store, model=model, policy=ClientPolicy(permissions=["allow_once"] * 2)) as agent:
        await agent.initialize()
        sid = (await agent.request("session/new", {"cwd": str(work), "mcpServers": [everything()]},
                                   timeout=120))["sessionId"]
        async with anyio.create_task_group() as tg:
            answer = agent.prompt_soon(tg, sid, "wait")
            await agent.wait_for(lambda: any(u.get("toolCallId") == "long" and u.get("status") == "in_progress"
                                             for u in agent.updates_of(sid)), timeout=30)
            await anyio.sleep(1)  # a third-party server: nothing says when the call reached it
            await agent.notify("session/cancel", {"sessionId": sid})
        assert answer["result"]["stopReason"] == "cancelled"
        assert (await agent.prompt(sid, "echo", timeout=60))["stopReason"] == "end_turn"
    got = results(store, sid)
    assert got["long"]["isError"] and "after" in got["echo"]["content"][0]["text"]


async def test_its_elicitation_reaches_the_client_and_the_answer_the_server(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "m.json", {"toolCalls": [call("ask", "everything__trigger-elicitation-request")]},
                         {"text": "ok"})
    given = {"name": "Ada Lovelace", "check": True, "integer": 7, "untitledMultipleSelectEnum": ["Piano"]}
    policy = ClientPolicy(permissions=["allow_once"], elicitations=[{"action": "accept", "content": given}])
    store = tmp_path / "store"
    async with AgentProcess(store, model=model, policy=policy) as agent:
        await agent.initialize({"elicitation": {"form": {}}})
        new = await agent.request("session/new", {"cwd": str(work), "mcpServers": [everything()]}, timeout=120)
        sid = new["sessionId"]
        assert "everything__trigger-elicitation-request" in new["_meta"]["acpBridge"]["mcpServers"][0]["tools"]
        assert (await agent.prompt(sid, "ask me", timeout=60))["stopReason"] == "end_turn"
    (asked,) = policy.elicited  # schema-checked as ACP's CreateElicitationRequest by AgentProcess
    assert asked["sessionId"] == sid and asked["toolCallId"] == "ask" and asked["mode"] == "form"
    assert {"name", "check", "integer"} <= set(asked["requestedSchema"]["properties"])
    got = results(store, sid)["ask"]
    text = "".join(b.get("text", "") for b in got["content"])
    assert "Name: Ada Lovelace" in text and "Favorite Integer: 7" in text  # the server read the answer
    assert got["elicitations"][0]["answer"] == {"action": "accept", "content": given}


async def test_without_the_clients_elicitation_it_offers_no_elicitation_tool(tmp_path: Path, work: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        new = await agent.request("session/new", {"cwd": str(work), "mcpServers": [everything()]}, timeout=120)
    tools = new["_meta"]["acpBridge"]["mcpServers"][0]["tools"]
    assert "everything__echo" in tools and "everything__trigger-elicitation-request" not in tools


@pytest.mark.parametrize("transport", ["streamableHttp", "sse"])
async def test_server_everything_over_http(tmp_path: Path, work: Path, transport: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command, *args = shlex.split(COMMAND)
    proc = subprocess.Popen([command, *args, transport], env={**os.environ, "PORT": str(port)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        with anyio.fail_after(60):
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert proc.poll() is None, "server-everything did not start"
                    await anyio.sleep(0.1)
        url = f"http://127.0.0.1:{port}/{'mcp' if transport == 'streamableHttp' else 'sse'}"
        kind = "http" if transport == "streamableHttp" else "sse"
        server: dict[str, Any] = {"type": kind, "name": "everything", "url": url, "headers": []}
        model = write_script(tmp_path / "m.json", {"toolCalls": [
            call("echo", "everything__echo", message="over HTTP"), call("img", "everything__get-tiny-image")]},
            {"text": "done"})
        store = tmp_path / "store"
        async with AgentProcess(store, model=model, policy=ClientPolicy(permissions=["allow_once"] * 2)) as agent:
            await agent.initialize()
            new = await agent.request("session/new", {"cwd": str(work), "mcpServers": [server]}, timeout=60)
            assert "error" not in new["_meta"]["acpBridge"]["mcpServers"][0]
            assert (await agent.prompt(new["sessionId"], "use them", timeout=60))["stopReason"] == "end_turn"
        got = results(store, new["sessionId"])
        assert "over HTTP" in got["echo"]["content"][0]["text"]
        assert any(b["type"] == "image" for b in got["img"]["content"])
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
