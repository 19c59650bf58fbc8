"""End to end over stdio: the real agent as a subprocess, every message it sends
validated against the ACP schema, the wire pinned by snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.acp_client import (
    CLIENT_CAPS_ALL,
    FS_AND_TERMINAL_STEP,
    WRITE_TWICE_STEPS,
    AgentError,
    AgentProcess,
    ClientPolicy,
    normalized,
    write_script,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_handshake_and_text_turn(tmp_path: Path, work: Path, snapshot_json: Any) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        init = await agent.initialize()
        assert init["protocolVersion"] == 1
        assert init["agentCapabilities"]["loadSession"] is True
        assert init["authMethods"] == []
        sid = await agent.new_session(work)
        answer = await agent.prompt(sid, "hello durable world")
        assert answer["stopReason"] == "end_turn"
        assert answer["_meta"]["acpBridge"] == {"turn": 1, "reason": {"kind": "completed"}}
        chunks = [u["content"]["text"] for u in agent.updates_of(sid) if u["sessionUpdate"] == "agent_message_chunk"]
        assert chunks == ["hello ", "durable ", "world"]
        second = await agent.prompt(sid, "again")
        assert second["_meta"]["acpBridge"]["turn"] == 2
    assert agent.returncode == 0
    assert normalized(agent.transcript, tmp_path) == snapshot_json


async def test_tool_call_with_permission_granted_and_rejected(tmp_path: Path, work: Path, snapshot_json: Any) -> None:
    model = write_script(tmp_path / "script.json", *WRITE_TWICE_STEPS)
    policy = ClientPolicy(permissions=["allow_once", "reject_once"])
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "write it"))["stopReason"] == "end_turn"
        assert (work / "out.txt").read_text() == "hi\n"
        assert (await agent.prompt(sid, "write another"))["stopReason"] == "end_turn"
        assert not (work / "no.txt").exists()
    statuses = [(u["toolCallId"], u.get("status")) for u in agent.updates_of(sid)
                if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
    assert statuses == [("w1", "pending"), ("w1", "in_progress"), ("w1", "completed"),
                        ("w2", "pending"), ("w2", "failed")]
    assert [a["toolCall"]["toolCallId"] for a in policy.asked] == ["w1", "w2"]
    assert normalized(agent.transcript, tmp_path) == snapshot_json


async def test_client_side_fs_and_terminal(tmp_path: Path, work: Path) -> None:
    model = write_script(
        tmp_path / "script.json",
        FS_AND_TERMINAL_STEP,
        {"text": "done"},
    )
    policy = ClientPolicy(permissions=["allow_once", "allow_once"])
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        await agent.initialize(CLIENT_CAPS_ALL)
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "go"))["stopReason"] == "end_turn"
    notes = str(work / "notes.txt")
    assert ("fs/read_text_file", notes) in policy.fs_calls
    assert ("fs/write_text_file", notes) in policy.fs_calls
    assert (work / "notes.txt").read_text() == "one\n2\n"
    (term,) = policy.terminals.values()
    assert term["params"]["args"] == ["-c", "cat notes.txt"] and term["released"]
    results = {u["toolCallId"]: u for u in agent.updates_of(sid)
               if u["sessionUpdate"] == "tool_call_update" and u.get("status") in ("completed", "failed")}
    assert results["x1"]["status"] == "completed"
    assert "one\n2\n" in orjson.dumps(results["x1"]["content"]).decode().replace("\\n", "\n")


async def test_no_fs_or_terminal_calls_unless_advertised(tmp_path: Path, work: Path) -> None:
    model = write_script(
        tmp_path / "script.json",
        {"toolCalls": [{"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}},
                       {"id": "x1", "name": "run_command", "arguments": {"command": "echo local"}}]},
        {"text": "done"},
    )
    policy = ClientPolicy(permissions=["allow_once"])
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        await agent.initialize()  # no capabilities
        sid = await agent.new_session(work)
        await agent.prompt(sid, "go")
    methods = {m["method"] for d, m in agent.transcript if d == "<-" and "method" in m and "id" in m}
    assert methods == {"session/request_permission"}
    assert policy.fs_calls == [] and policy.terminals == {}


async def test_errors_keep_the_connection_usable(tmp_path: Path, work: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.send_raw(b"{not json\n")
        await agent.initialize()
        with pytest.raises(AgentError) as err:
            await agent.request("session/new", {"cwd": "relative/path", "mcpServers": []})
        assert err.value.code == -32602 and (err.value.data or {})["field"] == "cwd"
        with pytest.raises(AgentError) as err:
            await agent.request("session/prompt", {"sessionId": "00000000-0000-4000-8000-000000000000",
                                                   "prompt": [{"type": "text", "text": "x"}]})
        assert err.value.code == -32002
        with pytest.raises(AgentError) as err:
            await agent.request("no/such_method", {})
        assert err.value.code == -32601
        with pytest.raises(AgentError) as err:
            await agent.request("session/prompt", {"sessionId": "../../etc/passwd", "prompt": []})
        assert err.value.code == -32602
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "still works"))["stopReason"] == "end_turn"
    parse_errors = [m for d, m in agent.transcript if d == "<-" and m.get("error", {}).get("code") == -32700]
    assert len(parse_errors) == 1 and parse_errors[0]["id"] is None
