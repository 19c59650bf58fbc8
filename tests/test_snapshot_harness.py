"""The snapshot harness (acp_bridge.snapshot, `acp-bridge snapshot`): our recorded
scenarios in tests/recorded/ replayed through the real stdio agent with no network and
no key, both surfaces compared; what a difference looks like; recording; the command
line; the scenario file's errors; normalisation."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from syrupy.assertion import SnapshotAssertion

from acp_bridge.errors import ScenarioError, SnapshotMismatch
from acp_bridge.snapshot import check, load_scenario, record, replay, scenario_folders
from acp_bridge.snapshot.driver import agent_env
from acp_bridge.snapshot.harness import replay_spec
from acp_bridge.snapshot.normalize import normalize_log, normalize_traffic
from tests.support.recorded_scenarios import DERIVED, MODEL, REPLIES, WRAPPED, record_all
from tests.support.sse_server import SSEServer, text_reply

RECORDED = Path(__file__).resolve().parent / "recorded"
SCENARIOS = scenario_folders(RECORDED)


def test_the_fixtures_are_all_there() -> None:
    names = {folder.name for folder in SCENARIOS}
    assert {"handshake", "text_turn", "tool_call_permission", "multi_turn", "error_finish",
            "cancel"} <= names
    assert set(REPLIES) <= names


@pytest.mark.parametrize("folder", SCENARIOS, ids=[f.name for f in SCENARIOS])
@pytest.mark.integration
def test_recorded_scenario_replays_as_recorded(folder: Path) -> None:
    # No key, no endpoint: a provider call would fail the turn (and the check).
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    environ["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # dropped by the harness anyway
    check(folder, environ=environ)


@pytest.mark.integration
def test_with_syrupy(snapshot_json: SnapshotAssertion) -> None:
    replayed = replay(RECORDED / "text_turn")
    assert replayed.traffic == snapshot_json(name="traffic")
    assert replayed.log == snapshot_json(name="log")


def copy_of(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(RECORDED / name, folder)
    return folder


@pytest.mark.integration
def test_a_traffic_difference_is_a_readable_diff(tmp_path: Path) -> None:
    folder = copy_of("text_turn", tmp_path)
    golden = folder / "traffic.jsonl"
    golden.write_bytes(golden.read_bytes().replace(b'"text":" there"', b'"text":" here"'))
    with pytest.raises(SnapshotMismatch) as caught:
        check(folder)
    text = str(caught.value)
    assert "the traffic differs from traffic.jsonl" in text and "re-persisted log" not in text
    assert re.search(r'^-\s+"text": " here",$', text, re.M) and re.search(r'^\+\s+"text": " there",$', text, re.M)
    assert "@ golden #10, this run #10:" in text  # the message the change is in (after the commands)
    assert f"acp-bridge snapshot check --update {folder}" in text


@pytest.mark.integration
def test_a_log_difference_is_reported_against_its_golden(tmp_path: Path) -> None:
    folder = copy_of("override_error", tmp_path)
    golden = folder / "replayed.jsonl"
    golden.write_bytes(golden.read_bytes().replace(b'"rate_limit"', b'"server"'))
    with pytest.raises(SnapshotMismatch, match=r"the re-persisted log differs from replayed\.jsonl") as caught:
        check(folder)
    assert re.search(r'^-\s+"code": "server",$', str(caught.value), re.M)
    check(folder, update=True)  # the goldens written from this run
    check(folder)


@pytest.mark.integration
def test_tools_run_for_real_and_a_result_that_differs_fails_the_turn(tmp_path: Path) -> None:
    folder = copy_of("tool_call_permission", tmp_path)
    (folder / "workspace" / "notes.txt").write_text("uno\n")
    with pytest.raises(ScenarioError) as caught:
        check(folder)
    text = str(caught.value)
    assert "step 3 (prompt): answered with an error" in text and "replay_mismatch" in text
    assert "the result of tool call call_read (step 1) differs" in text


@pytest.mark.integration
def test_record_then_check(tmp_path: Path) -> None:
    folder = tmp_path / "greeting"
    folder.mkdir()
    (folder / "scenario.json").write_bytes(orjson.dumps({"model": MODEL, "steps": [
        {"op": "initialize"}, {"op": "new_session"}, {"op": "prompt", "text": "hi"}]}))
    with pytest.raises(ScenarioError, match=r"no session\.jsonl: record it first"):
        check(folder)
    with SSEServer() as server:
        server.push(text_reply("Hi", " you."))
        env = dict(os.environ, OPENAI_BASE_URL=server.url, OPENAI_API_KEY="sk-secret-test-key")
        recorded = record(folder, environ=env)
        assert len(server.requests) == 1
    assert [m["msg"]["params"]["update"]["content"]["text"] for m in recorded.traffic
            if m["msg"].get("params", {}).get("update", {}).get("sessionUpdate") == "agent_message_chunk"] \
        == ["Hi", " you."]
    stored = (folder / "session.jsonl").read_text()
    assert '"cwd":"<cwd>"' in stored and str(tmp_path) not in stored and "sk-secret" not in stored
    assert check(folder).traffic == recorded.traffic
    # The model's answer in the recording is what the check replays, not the server.
    (folder / "scenario.json").write_bytes(orjson.dumps({"model": MODEL, "steps": [
        {"op": "initialize"}, {"op": "new_session"}, {"op": "prompt", "text": "hello?"}]}))
    with pytest.raises(ScenarioError, match="the prompt differs from the recorded one"):
        check(folder)


@pytest.mark.integration
def test_recording_a_scenario_with_overrides_writes_the_replays_goldens(tmp_path: Path) -> None:
    folder = copy_of("override_error", tmp_path)
    for name in ("session.jsonl", "traffic.jsonl", "replayed.jsonl"):
        (folder / name).unlink()
    with SSEServer() as server:
        server.push(*REPLIES["text_turn"])
        env = dict(os.environ, OPENAI_BASE_URL=server.url, OPENAI_API_KEY="sk-loopback-test")
        replayed = record(folder, model=MODEL, environ=env)
    answers = [m["msg"] for m in replayed.traffic if m["msg"].get("id") == 3 and m["dir"] == "<-"]
    assert answers[0]["error"]["data"]["code"] == "rate_limit"  # the override, not the recorded answer
    assert (folder / "replayed.jsonl").is_file()
    check(folder)


@pytest.mark.integration
def test_the_client_serves_its_files_when_the_scenario_advertises_fs(tmp_path: Path) -> None:
    folder = tmp_path / "client_fs"
    (folder / "workspace").mkdir(parents=True)
    (folder / "workspace" / "notes.txt").write_text("one\n")
    (folder / "scenario.json").write_bytes(orjson.dumps({"model": MODEL, "steps": [
        {"op": "initialize", "clientCapabilities": {"fs": {"readTextFile": True, "writeTextFile": True}}},
        {"op": "new_session"},
        {"op": "prompt", "text": "Add a line to notes.txt, then delete it.",
         "permissions": ["allow_once", "reject_once"]}]}))
    with SSEServer() as server:
        server.push(*REPLIES["tool_call_permission"])
        env = dict(os.environ, OPENAI_BASE_URL=server.url, OPENAI_API_KEY="sk-loopback-test")
        recorded = record(folder, environ=env)
    asked = {m["msg"]["id"]: m["msg"]["method"] for m in recorded.traffic
             if m["dir"] == "<-" and "id" in m["msg"] and "method" in m["msg"]}
    answers = {m["msg"]["id"]: m["msg"] for m in recorded.traffic if m["dir"] == "->" and "method" not in m["msg"]}
    assert list(asked.values()).count("session/request_permission") == 2
    reads = [answers[i]["result"] for i, method in asked.items() if method == "fs/read_text_file"]
    writes = [answers[i]["result"] for i, method in asked.items() if method == "fs/write_text_file"]
    assert reads[0] == {"content": "one\n"} and writes == [{}]
    assert check(folder).traffic == recorded.traffic


@pytest.mark.integration
def test_the_client_serves_terminals_when_the_scenario_advertises_terminal(tmp_path: Path) -> None:
    replayed = check(RECORDED / "client_terminal")
    asked = {m["msg"]["id"]: m["msg"]["method"] for m in replayed.traffic
             if m["dir"] == "<-" and "id" in m["msg"] and "method" in m["msg"]}
    answers = {m["msg"]["id"]: m["msg"] for m in replayed.traffic if m["dir"] == "->" and "method" not in m["msg"]}
    assert [method for method in asked.values() if method.startswith("terminal/")] == [
        "terminal/create", "terminal/wait_for_exit", "terminal/output", "terminal/release"]
    output = next(answers[i]["result"] for i, method in asked.items() if method == "terminal/output")
    assert output == {"exitStatus": {"exitCode": 0, "signal": None}, "output": "2\n<cwd>\n", "truncated": False}
    # The command ran in this run's workspace copy: a changed file changes its result.
    folder = copy_of("client_terminal", tmp_path)
    (folder / "workspace" / "notes.txt").write_text("one\n")
    with pytest.raises(ScenarioError, match="the result of tool call call_wc"):
        check(folder)


@pytest.mark.integration
def test_a_thought_level_set_mid_scenario_replays_with_the_recorded_models_flags(tmp_path: Path) -> None:
    folder = tmp_path / "effort"
    folder.mkdir()
    (folder / "scenario.json").write_bytes(orjson.dumps({"model": f"{MODEL}#reasoning", "steps": [
        {"op": "initialize"}, {"op": "new_session"},
        {"op": "set_config", "configId": "thought_level", "value": "high"},
        {"op": "prompt", "text": "Think hard."}]}))
    with SSEServer() as server:
        server.push(text_reply("Thought", " hard."))
        env = dict(os.environ, OPENAI_BASE_URL=server.url, OPENAI_API_KEY="sk-loopback-test")
        recorded = record(folder, environ=env)
        assert server.requests[0].json["reasoning_effort"] == "high"
    assert any(m["msg"].get("method") == "session/set_config_option" for m in recorded.traffic)
    assert check(folder).traffic == recorded.traffic  # the replay offers thought_level too


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acp_bridge", "snapshot", *args], capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.integration
def test_the_command_line(tmp_path: Path) -> None:
    ok = run_cli("check", str(RECORDED / "handshake"))
    assert ok.returncode == 0 and ok.stdout.strip() == f"ok {RECORDED / 'handshake'}"
    folder = copy_of("handshake", tmp_path)
    golden = folder / "traffic.jsonl"
    golden.write_bytes(golden.read_bytes().replace(b'"loadSession":true', b'"loadSession":false'))
    bad = run_cli("check", str(tmp_path))  # a folder of scenarios
    assert bad.returncode == 1 and f"FAILED {folder}" in bad.stderr
    assert re.search(r'^-\s+"loadSession": false,$', bad.stderr, re.M)
    assert "0 of 1 scenarios passed" in bad.stdout
    empty = run_cli("check", str(tmp_path / "nothing"))
    assert empty.returncode == 2 and "no scenario folder" in empty.stderr
    nomodel = run_cli("record", str(RECORDED / "override_error"))
    assert nomodel.returncode == 1 and "no model to record with" in nomodel.stderr


@pytest.mark.parametrize(("doc", "message"), [
    ({"steps": []}, "exactly one new_session"),
    ({"steps": [{"op": "new_session"}, {"op": "initialize"}]}, "the first step is initialize"),
    ({"steps": [{"op": "initialize"}, {"op": "new_session"}, {"op": "dance"}]}, "step 3: expected"),
    ({"steps": [{"op": "initialize"}, {"op": "new_session"}, {"op": "prompt"}]}, "give text or prompt"),
    ({"steps": [{"op": "initialize"}, {"op": "new_session"},
                {"op": "prompt", "text": "x", "permissions": ["maybe"]}]}, "permissions must be a list of"),
    ({"steps": [{"op": "initialize"}, {"op": "new_session"}], "check": "lax"}, "check must be strict or loose"),
    ({"steps": [{"op": "initialize"}, {"op": "new_session"}], "timeout": 3}, "unknown fields \\['timeout'\\]"),
])
def test_a_bad_scenario_is_refused_saying_what_is_wrong(tmp_path: Path, doc: object, message: str) -> None:
    (tmp_path / "scenario.json").write_bytes(orjson.dumps(doc))
    with pytest.raises(ScenarioError, match=message):
        check(tmp_path)


def test_normalisation() -> None:
    sid = "0b9e2f4c-1d2e-4f00-8a00-123456789abc"
    traffic = [
        ("->", {"jsonrpc": "2.0", "id": 7, "method": "session/new", "params": {"cwd": "/tmp/r/work"}}),
        ("<-", {"jsonrpc": "2.0", "id": 7, "result": {"sessionId": sid}}),
        ("<-", {"jsonrpc": "2.0", "id": "perm-9", "method": "session/request_permission",
                "params": {"sessionId": sid, "path": "/tmp/r/work/a.txt", "at": "2026-01-02T03:04:05.123Z"}}),
        ("->", {"jsonrpc": "2.0", "id": "perm-9", "result": {}}),
        ("->", {"jsonrpc": "2.0", "id": 8, "method": "session/list", "params": {}}),
        ("<-", {"jsonrpc": "2.0", "id": 8, "result": {"sessions": [{"sessionId": sid, "updatedAt": 1234}]}}),
    ]
    out = normalize_traffic(traffic, [("/tmp/r/work", "<cwd>"), ("/tmp/r", "<tmp>")])
    assert [m["msg"]["id"] for m in out] == [1, 1, 1, 1, 2, 2]
    assert out[0]["msg"]["params"]["cwd"] == "<cwd>" and out[1]["msg"]["result"]["sessionId"] == "<session-1>"
    assert out[2]["msg"]["params"]["path"] == "<cwd>/a.txt" and out[2]["msg"]["params"]["at"] == "<time>"
    assert out[5]["msg"]["result"]["sessions"][0] == {"sessionId": "<session-1>", "updatedAt": 0}
    log = normalize_log([
        orjson.dumps({"type": "session", "version": 0, "id": sid, "createdAt": 99, "cwd": "/tmp/r/work"}),
        orjson.dumps({"type": "turn/start", "seq": 0, "time": 1234,
                      "data": {"turn": 1, "trigger": {"kind": "prompt"}, "model": "openai:x"}}),
        b"{torn",
    ], [("/tmp/r/work", "<cwd>")])
    assert log == [{"type": "session", "version": 0, "id": "<session-1>", "createdAt": 0, "cwd": "<cwd>"},
                   {"type": "turn/start", "seq": 0, "time": 0,
                    "data": {"turn": 1, "trigger": {"kind": "prompt"}, "model": "<model>"}},
                   {"unparsable": "{torn"}]


class FakeAgentClient:
    """A line-at-a-time client of `acp-bridge snapshot fake-agent`, as a client
    developer's test would drive it."""

    def __init__(self, log: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "acp_bridge", "snapshot", "fake-agent", str(log)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.ids = 0

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps(message) + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any], answer_permission: str | None = None
                ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(the answer, the messages before it), answering a permission request."""
        assert self.proc.stdout is not None
        self.ids += 1
        self.send({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        seen: list[dict[str, Any]] = []
        while True:
            message = orjson.loads(self.proc.stdout.readline())
            if message.get("id") == self.ids and "method" not in message:
                return message, seen
            seen.append(message)
            if message.get("method") == "session/request_permission":
                assert answer_permission is not None
                outcome = ({"outcome": "cancelled"} if answer_permission == "cancelled"
                           else {"outcome": "selected", "optionId": answer_permission})
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": outcome}})

    def close(self) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        status = self.proc.wait(timeout=10)
        self.proc.stdout.close()
        return status


@pytest.mark.integration
def test_a_recorded_wrapped_session_is_a_fake_agent(tmp_path: Path) -> None:
    client = FakeAgentClient(RECORDED / "wrap_turns" / "session.jsonl")
    try:
        init, _ = client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        assert init["result"]["agentInfo"]["name"] == "acp-bridge"  # the recorded agent's
        new, _ = client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        sid = new["result"]["sessionId"]
        answer, seen = client.request("session/prompt", {"sessionId": sid,
                                                         "prompt": [{"type": "text", "text": "Hello?"}]})
        updates = [m["params"]["update"] for m in seen]
        kinds = [u["sessionUpdate"] for u in updates]
        assert kinds.count("agent_thought_chunk") == 2 and "session_info_update" in kinds  # the child's title
        assert "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk") \
            == "Hello from the wrapped agent. "
        assert answer["result"]["stopReason"] == "end_turn"
        answer, seen = client.request("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "Write a.txt"}]}, answer_permission="allow_once")
        methods = [m.get("method") for m in seen]
        assert "session/request_permission" in methods and answer["result"]["stopReason"] == "end_turn"
        result = next(m["params"]["update"] for m in seen
                      if m.get("method") == "session/update" and m["params"]["update"].get("status") == "completed")
        assert result["rawOutput"]["content"][0]["text"].startswith("Created ")
        over, _ = client.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "more"}]})
        assert over["error"]["data"]["code"] == "replay_overrun"
        assert "turn 3" in over["error"]["message"] and "record" in over["error"]["message"]
        other, _ = client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        wrong, _ = client.request("session/prompt", {"sessionId": other["result"]["sessionId"],
                                                     "prompt": [{"type": "text", "text": "Bonjour?"}]})
        assert wrong["error"]["data"]["code"] == "replay_mismatch"
    finally:
        assert client.close() == 0
    bad = subprocess.run([sys.executable, "-m", "acp_bridge", "snapshot", "fake-agent", str(tmp_path / "x.jsonl")],
                         capture_output=True, text=True, timeout=30, check=False)
    assert bad.returncode == 2 and "no such session log file" in bad.stderr


@pytest.mark.integration
def test_the_fake_agent_waits_for_the_cancel_of_a_cancelled_turn(tmp_path: Path) -> None:
    client = FakeAgentClient(RECORDED / "cancel" / "session.jsonl")  # any session log serves
    try:
        client.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        new, _ = client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        sid = new["result"]["sessionId"]
        assert new["result"]["modes"]["currentModeId"] == "ask"  # the recorded mode
        assert client.proc.stdout is not None
        client.ids += 1
        client.send({"jsonrpc": "2.0", "id": client.ids, "method": "session/prompt",
                     "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "Count to ten, slowly."}]}})
        texts: list[str] = []
        while len(texts) < 2:  # the recorded chunks, then nothing until the cancel
            message = orjson.loads(client.proc.stdout.readline())
            update = message["params"]["update"]
            if update["sessionUpdate"] == "agent_message_chunk":
                texts.append(update["content"]["text"])
        assert texts == ["Counting:", " one,"]
        client.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        note = orjson.loads(client.proc.stdout.readline())  # how the turn ended, as our agent shows it
        assert note["params"]["update"]["content"]["text"].startswith("\n\n[This turn was cancelled")
        answer = orjson.loads(client.proc.stdout.readline())
        assert answer["id"] == client.ids and answer["result"]["stopReason"] == "cancelled"
        # Ended by the permission answered cancelled: answered without a session/cancel.
        answer, seen = client.request("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "Write out.txt"}]}, answer_permission="cancelled")
        assert answer["result"]["stopReason"] == "cancelled"
        assert answer["result"]["_meta"]["acpBridge"]["reason"]["by"] == "session/request_permission"
        assert any(m.get("method") == "session/request_permission" for m in seen)
    finally:
        assert client.close() == 0


def test_the_replay_takes_the_recorded_models_flags(tmp_path: Path) -> None:
    # What a model takes shapes the agent's answers (image prompts, a thought level):
    # the replay is offered as the scenario's models, flags and all.
    recording = RECORDED / "text_turn" / "session.jsonl"
    folder = copy_of("text_turn", tmp_path)
    assert replay_spec(load_scenario(folder), recording) == f"replay:{recording}"
    (folder / "scenario.json").write_bytes(orjson.dumps({"model": "openai:gpt-4o#reasoning", "steps": [
        {"op": "initialize"}, {"op": "new_session"}]}))
    env = agent_env({}, load_scenario(folder), offline=True)
    assert env["ACP_BRIDGE_REPLAY_MODELS"] == "openai:gpt-4o#reasoning"


@pytest.mark.soak
def test_every_fixture_records_again_and_checks(tmp_path: Path) -> None:
    # The record side of every fixture (CI only replays them): recorded again into a
    # copy against the loopback server, then checked, with the same traffic as committed.
    root = tmp_path / "recorded"
    shutil.copytree(RECORDED, root)
    record_all([*REPLIES, *DERIVED, *WRAPPED], root)
    for folder in scenario_folders(root):
        assert check(folder).traffic == [orjson.loads(line) for line in
                                         (RECORDED / folder.name / "traffic.jsonl").read_bytes().splitlines()]
