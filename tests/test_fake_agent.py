"""`acp-bridge snapshot fake-agent LOG` beyond prompts: session/load replaying the
recording, set_mode and set_config_option over what the recording offered, -32601 for
what it does not serve, permission requests with the recorded call and option, and the
updates recorded between turns sent after the answer of the turn they followed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.snapshot.fake_recording import option_kind, permission_options
from tests.support.logs import Script, events_of
from tests.test_snapshot_harness import FakeAgentClient

RECORDED = Path(__file__).resolve().parent / "recorded"
EFFORT = {"id": "effort", "name": "Effort", "category": "thought_level", "type": "select", "currentValue": "low",
          "options": [{"value": "low", "name": "Low"}, {"value": "high", "name": "High"}]}


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


def updates(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"]["update"] for m in messages if m.get("method") == "session/update"]


def wrapped_log(tmp_path: Path) -> Path:
    """wrap_turns' recording with a wrapped agent's updates before its first turn and
    between its turns (a command list; a mode and its config options changed), and the
    permission answered with an option of the wrapped agent's own."""
    lines = [orjson.loads(line) for line in (RECORDED / "wrap_turns" / "session.jsonl").read_bytes().splitlines()]
    def wrapped(update: dict[str, Any]) -> dict[str, Any]:
        return {"type": "wrapped/update", "seq": 0, "time": 0, "data": {"update": update}}
    end_1 = next(i for i, e in enumerate(lines) if e["type"] == "turn/end")
    lines[end_1 + 1:end_1 + 1] = [
        wrapped({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}),
        wrapped({"sessionUpdate": "config_option_update", "configOptions": [EFFORT]})]
    lines[1:1] = [wrapped({"sessionUpdate": "available_commands_update", "availableCommands": []})]
    for seq, event in enumerate(lines[1:]):
        event["seq"] = seq
        if event["type"] == "tool/result":
            event["data"]["permission"]["optionId"] = "proceed-always"
    path = tmp_path / "wrapped.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


@pytest.mark.integration
def test_updates_between_turns_follow_the_answer_and_permissions_use_the_recorded_option(tmp_path: Path) -> None:
    client = FakeAgentClient(wrapped_log(tmp_path))
    try:
        client.request("initialize", {"protocolVersion": 1})
        new, before = client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        assert before == []  # the update before the first turn follows the session/new answer
        sid = new["result"]["sessionId"]
        assert new["result"]["modes"]["availableModes"] == [{"id": "ask", "name": "ask"}, {"id": "plan", "name": "plan"}]
        answer, seen = client.request("session/prompt", {"sessionId": sid, "prompt": text("Hello?")})
        assert next(u["sessionUpdate"] for u in updates(seen)) == "available_commands_update"
        assert "current_mode_update" not in [u["sessionUpdate"] for u in updates(seen)]
        assert answer["result"]["stopReason"] == "end_turn"
        # The mode and options the wrapped agent sent after turn 1 come right after its answer.
        mode, after = client.request("session/set_mode", {"sessionId": sid, "modeId": "plan"})
        assert [u["sessionUpdate"] for u in updates(after)] == ["current_mode_update", "config_option_update"]
        assert mode == {"jsonrpc": "2.0", "id": client.ids, "result": {}}
        answer, seen = client.request("session/prompt", {"sessionId": sid, "prompt": text("Write a.txt")},
                                      answer_permission="proceed-always")
        ask = next(m for m in seen if m.get("method") == "session/request_permission")["params"]
        assert ask["toolCall"] == {"toolCallId": "call_w", "title": "Write a.txt", "kind": "edit",
                                   "rawInput": {"path": "a.txt", "content": "hi\n"},
                                   "locations": [{"path": "<cwd>/a.txt"}]}
        assert {"optionId": "proceed-always", "name": "proceed-always", "kind": "allow_always"} in ask["options"]
        assert [o["kind"] for o in ask["options"]] == ["allow_once", "allow_always", "reject_once"]
        assert answer["result"]["stopReason"] == "end_turn"
    finally:
        assert client.close() == 0


@pytest.mark.integration
def test_load_replays_the_recording_and_the_session_goes_on(tmp_path: Path) -> None:
    log = tmp_path / "switch.jsonl"
    shutil.copyfile(RECORDED / "model_switch" / "session.jsonl", log)
    recorded_id = orjson.loads(log.read_bytes().splitlines()[0])["id"]
    client = FakeAgentClient(log)
    try:
        init, _ = client.request("initialize", {"protocolVersion": 1})
        assert init["result"]["agentCapabilities"]["loadSession"] is True
        load = {"sessionId": recorded_id, "cwd": str(tmp_path), "mcpServers": []}
        loaded, seen = client.request("session/load", {**load, "_meta": {"acpBridge": {"fakeAgent": {"turns": 1}}}})
        shown = updates(seen)
        assert [u["content"]["text"] for u in shown if u["sessionUpdate"] == "user_message_chunk"] \
            == ["Hello, fast model."]
        assert "".join(u["content"]["text"] for u in shown if u["sessionUpdate"] == "agent_message_chunk") \
            == "Fast answer."
        assert loaded["result"]["modes"]["currentModeId"] == "ask"
        # The session goes on from the turns loaded, with the recorded settings.
        switched, after = client.request("session/set_config_option", {
            "sessionId": recorded_id, "configId": "model", "value": "openai:test-model-strong"})
        model = next(o for o in switched["result"]["configOptions"] if o["id"] == "model")
        assert model["currentValue"] == "openai:test-model-strong"
        assert [u["sessionUpdate"] for u in updates(after)] == ["config_option_update"]
        answer, seen = client.request("session/prompt", {"sessionId": recorded_id, "prompt": text("Now think hard.")})
        assert answer["result"]["stopReason"] == "end_turn"
        assert [u["content"]["text"] for u in updates(seen) if u["sessionUpdate"] == "agent_thought_chunk"] \
            == ["Thinking ", "hard."]
        # All the turns by default; the same session loaded again shows the turns served.
        again, seen = client.request("session/load", load)
        assert again["result"]["modes"]["currentModeId"] == "ask"
        assert len([u for u in updates(seen) if u["sessionUpdate"] == "user_message_chunk"]) == 2
        other, _ = client.request("session/load", {**load, "sessionId": "0b9e2f4c-1d2e-4f00-8a00-123456789abc"})
        assert other["error"]["code"] == -32002 and recorded_id in other["error"]["message"]
        bad, _ = client.request("session/load", {**load, "_meta": {"acpBridge": {"fakeAgent": {"turns": 9}}}})
        assert bad["error"]["code"] == -32602 and "from 0 to 3" in bad["error"]["message"]
    finally:
        assert client.close() == 0


@pytest.mark.integration
def test_settings_and_unknown_methods_are_answered_with_json_rpc_errors(tmp_path: Path) -> None:
    client = FakeAgentClient(RECORDED / "text_turn" / "session.jsonl")
    try:
        client.request("initialize", {"protocolVersion": 1})
        new, _ = client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        sid = new["result"]["sessionId"]
        unknown, _ = client.request("session/list", {})
        assert unknown["error"]["code"] == -32601 and unknown["error"]["data"] == {"method": "session/list"}
        assert "the fake agent serves" in unknown["error"]["message"]
        client.send({"jsonrpc": "2.0", "method": "_x/notice", "params": {}})  # a notification: no answer
        mode, seen = client.request("session/set_mode", {"sessionId": sid, "modeId": "read_only"})
        assert mode["result"] == {} and updates(seen)[0] == {"sessionUpdate": "current_mode_update",
                                                              "currentModeId": "read_only"}
        wrong, _ = client.request("session/set_mode", {"sessionId": sid, "modeId": "yolo"})
        assert wrong["error"]["code"] == -32602 and wrong["error"]["data"]["field"] == "modeId"
        missing, _ = client.request("session/set_mode", {"sessionId": sid})
        assert missing["error"]["code"] == -32602 and missing["error"]["message"] == "invalid params: modeId is required"
        option, _ = client.request("session/set_config_option", {"sessionId": sid, "configId": "speed", "value": "x"})
        assert option["error"]["code"] == -32602 and "the recording has mode, model" in option["error"]["message"]
        value, _ = client.request("session/set_config_option", {"sessionId": sid, "configId": "mode", "value": "x"})
        assert value["error"]["data"]["field"] == "value"
        gone, _ = client.request("session/prompt", {"sessionId": "0a0b0c0d-0000-4000-8000-00000000dead",
                                                    "prompt": text("hi")})
        assert gone["error"]["code"] == -32002 and "is not open in the fake agent" in gone["error"]["message"]
        # A malformed id is refused as the agent refuses it (one host: issue 22).
        bad, _ = client.request("session/prompt", {"sessionId": "nope", "prompt": text("hi")})
        assert bad["error"]["code"] == -32602 and bad["error"]["data"]["field"] == "sessionId"
        closed, _ = client.request("session/close", {"sessionId": sid})
        assert closed["result"] == {}
    finally:
        assert client.close() == 0


def test_an_option_kind_is_read_from_its_id() -> None:
    assert [option_kind(i) for i in ("allow", "proceed_always", "reject-once", "deny", "never", "no")] \
        == ["allow_once", "allow_always", "reject_once", "reject_once", "reject_always", "reject_once"]
    ours = permission_options({"outcome": "selected", "optionId": "allow_once"})
    assert [o["optionId"] for o in ours] == ["allow_once", "allow_always", "reject_once"]
    theirs = permission_options({"outcome": "selected", "optionId": "deny-forever"})
    assert len(theirs) == 4 and theirs[-1] == {"optionId": "deny-forever", "name": "deny-forever",
                                               "kind": "reject_always"}  # ours have none of its kind


@pytest.mark.integration
def test_a_second_prompt_while_one_runs_is_refused_as_the_agent_refuses_it(tmp_path: Path) -> None:
    # One host (issue 22): the fake agent said -32602 here, our agent -32001.
    client = FakeAgentClient(RECORDED / "cancel" / "session.jsonl")
    try:
        client.request("initialize", {"protocolVersion": 1})
        new, _ = client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        sid = new["result"]["sessionId"]
        client.send({"jsonrpc": "2.0", "id": "first", "method": "session/prompt",
                     "params": {"sessionId": sid, "prompt": text("Count to ten, slowly.")}})
        # The recorded turn was cancelled by the client: it streams, then waits for a cancel.
        second, seen = client.request("session/prompt", {"sessionId": sid, "prompt": text("Write out.txt")})
        assert second["error"]["code"] == -32001 and second["error"]["data"]["code"] == "prompt_in_progress"
        assert not any(m.get("id") == "first" for m in seen)  # the first is still running
        again, _ = client.request("session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []})
        assert again["error"]["code"] == -32001
        client.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        assert client.proc.stdout is not None
        while (message := orjson.loads(client.proc.stdout.readline())).get("id") != "first":
            pass
        assert message["result"]["stopReason"] == "cancelled"
    finally:
        assert client.close() == 0


@pytest.mark.integration
@pytest.mark.parametrize("caps", [{"session": {"compaction": {}}}, {}], ids=["compaction", "none"])
def test_a_recorded_compaction_is_served_to_a_client_that_asked_for_it(tmp_path: Path, caps: dict[str, Any]) -> None:
    script = Script().text_turn("one", "uno").compacted_turn("Uno.", "two", "dos")
    header = {"type": "session", "version": 0, "id": "00000000-0000-4000-8000-000000000001", "createdAt": 0,
              "cwd": str(tmp_path)}
    path = tmp_path / "compacted.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in [header, *events_of(script)]))
    client = FakeAgentClient(path)
    try:
        client.request("initialize", {"protocolVersion": 1, "clientCapabilities": caps})
        new, _ = client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        sid = new["result"]["sessionId"]
        client.request("session/prompt", {"sessionId": sid, "prompt": text("one")})
        _, seen = client.request("session/prompt", {"sessionId": sid, "prompt": text("two")})
        live = [(u["sessionUpdate"], u.get("status")) for u in updates(seen) if "compaction" in u["sessionUpdate"]]
        _, replayed = client.request("session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []})
        again = [(u["sessionUpdate"], u.get("status")) for u in updates(replayed) if "compaction" in u["sessionUpdate"]]
        expected = [("compaction_update", "in_progress"), ("compaction_update", "completed")] if caps else []
        assert live == again == expected
    finally:
        assert client.close() == 0
