"""MCP servers are tools (issue 16, item 1), end to end over stdio against the real
agent: the third-party servers `mcp-server-time` and `mcp-server-git` from PyPI, and
tests/support/mcp_test_server.py (the official SDK) for what they cannot do on demand
(crash, hang, freeze, images, a grandchild process). Every message the agent sends is
validated against the ACP schema by the harness.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.acp_client import AgentError, AgentProcess, ClientPolicy, write_script
from tests.support.logs import loaded_events
from tests.support.processes import alive, wait_gone
from tests.support.sse_server import chunk, openai_server, stream_reply, text_reply

pytestmark = pytest.mark.anyio

BIN = Path(sys.executable).parent
TEST_SERVER = Path(__file__).resolve().parent / "support" / "mcp_test_server.py"


def time_server(name: str = "time") -> dict[str, Any]:
    return {"name": name, "command": str(BIN / "mcp-server-time"), "args": [], "env": []}


def git_server(repo: Path) -> dict[str, Any]:
    return {"name": "git", "command": str(BIN / "mcp-server-git"), "args": ["--repository", str(repo)], "env": []}


def test_server(name: str = "t", pid_file: Path | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    args = [str(TEST_SERVER), *(["--pid-file", str(pid_file)] if pid_file else [])]
    return {"name": name, "command": sys.executable, "args": args,
            "env": [{"name": k, "value": v} for k, v in (env or {}).items()]}


test_server.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def pids_running(word: str) -> list[int]:
    """The processes whose command line holds `word` (from /proc: no pgrep needed)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if word.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def call(call_id: str, name: str, /, **arguments: Any) -> dict[str, Any]:
    return {"toolCalls": [{"id": call_id, "name": name, "arguments": arguments}]}


async def open_session(agent: AgentProcess, work: Path, *servers: dict[str, Any]) -> tuple[str, Any]:
    await agent.initialize()
    result = await agent.request("session/new", {"cwd": str(work), "mcpServers": list(servers)}, timeout=60)
    return str(result["sessionId"]), result


def result_of(events: list[dict[str, Any]], call_id: str) -> dict[str, Any]:
    (data,) = [e["data"] for e in events if e["type"] == "tool/result" and e["data"]["callId"] == call_id]
    return dict(data)


def final_update(agent: AgentProcess, sid: str, call_id: str) -> dict[str, Any]:
    return [u for u in agent.updates_of(sid) if u.get("toolCallId") == call_id and u.get("status")][-1]


def text_of(data: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in data["content"])


@pytest.mark.integration
async def test_mcp_server_time_tools_are_asked_for_and_always_allow_is_remembered(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "m.json", call("c1", "time__get_current_time", timezone="Europe/Paris"),
                         {"text": "done"},
                         {"toolCalls": [{"id": "c2", "name": "time__get_current_time",
                                         "arguments": {"timezone": "Asia/Tokyo"}},
                                        {"id": "c3", "name": "time__get_current_time",
                                         "arguments": {"timezone": "Nowhere/Atlantis"}}]},
                         {"text": "again"})
    policy = ClientPolicy(permissions=["allow_always"])
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        sid, result = await open_session(agent, work, time_server())
        (status,) = result["_meta"]["acpBridge"]["mcpServers"]
        assert status == {"name": "time", "tools": ["time__get_current_time", "time__convert_time"]}
        assert (await agent.prompt(sid, "time in Paris?"))["stopReason"] == "end_turn"
        assert (await agent.prompt(sid, "and Tokyo?"))["stopReason"] == "end_turn"
    assert len(policy.asked) == 1  # the second call was allowed always
    asked = policy.asked[0]["toolCall"]
    assert asked["title"] == "time: get_current_time" and asked["kind"] == "other"
    events = loaded_events(tmp_path / "store", sid)
    first, second = result_of(events, "c1"), result_of(events, "c2")
    assert not first["isError"] and '"timezone": "Europe/Paris"' in text_of(first)
    assert first["permission"] == {"outcome": "selected", "optionId": "allow_always"}
    assert not second["isError"] and "Asia/Tokyo" in text_of(second) and "permission" not in second
    # The server's own error (isError) is a failed result the model reads.
    failed = result_of(events, "c3")
    assert failed["isError"] and "Nowhere/Atlantis" in text_of(failed)
    assert failed["error"] == {"name": "McpToolError", "code": "mcp_tool_error"}
    (tool_call,) = [e["data"] for e in events if e["type"] == "tool/call" and e["data"]["callId"] == "c1"]
    assert tool_call["name"] == "time__get_current_time" and tool_call["arguments"] == {"timezone": "Europe/Paris"}
    update = final_update(agent, sid, "c1")
    assert update["status"] == "completed"
    assert "Europe/Paris" in update["content"][0]["content"]["text"]


@pytest.mark.integration
async def test_mcp_server_git_reads_a_real_repository(tmp_path: Path, work: Path) -> None:
    for args in (["init", "-q"], ["config", "user.email", "t@example.invalid"], ["config", "user.name", "T"]):
        subprocess.run(["git", *args], cwd=work, check=True)
    subprocess.run(["git", "add", "notes.txt"], cwd=work, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "first notes"], cwd=work, check=True)
    (work / "new.txt").write_text("x")
    model = write_script(tmp_path / "m.json", call("s", "git__git_status", repo_path=str(work)),
                         call("l", "git__git_log", repo_path=str(work)), {"text": "clean enough"})
    policy = ClientPolicy(permissions=["allow_once", "allow_once"])
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        sid, result = await open_session(agent, work, git_server(work))
        tools = result["_meta"]["acpBridge"]["mcpServers"][0]["tools"]
        assert {"git__git_status", "git__git_log", "git__git_diff"} <= set(tools)
        assert (await agent.prompt(sid, "status?"))["stopReason"] == "end_turn"
    events = loaded_events(tmp_path / "store", sid)
    assert "new.txt" in text_of(result_of(events, "s"))
    assert "first notes" in text_of(result_of(events, "l"))


@pytest.mark.integration
async def test_images_and_resources_are_kept_and_shown(tmp_path: Path, work: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-of-the-agent")
    model = write_script(tmp_path / "m.json", call("p", "t__picture"), {"toolCalls": [
        {"id": "k", "name": "t__getenv", "arguments": {"name": "OPENAI_API_KEY"}},
        {"id": "g", "name": "t__getenv", "arguments": {"name": "GIVEN"}}]}, {"text": "nice"})
    policy = ClientPolicy(permissions=["allow_once", "allow_always"])
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        sid, _ = await open_session(agent, work, test_server(env={"GIVEN": "by the client"}))
        assert (await agent.prompt(sid, "draw"))["stopReason"] == "end_turn"
        shown = final_update(agent, sid, "p")["content"]
        # The replay shows the same blocks from the log.
        await agent.load_session(sid, work)
        replayed = final_update(agent, sid, "p")["content"]
    events = loaded_events(tmp_path / "store", sid)
    # The agent's secrets do not reach a server; what the client gave it does.
    assert text_of(result_of(events, "k")) == "(unset)"
    assert text_of(result_of(events, "g")) == "by the client"
    data = result_of(events, "p")
    kinds = [b["type"] for b in data["content"]]
    assert kinds == ["text", "image", "resource"]
    assert data["content"][1]["mimeType"] == "image/png" and data["content"][1]["data"]
    assert data["content"][2]["resource"] == {"uri": "file:///notes.txt", "mimeType": "text/plain",
                                              "text": "resource text"}
    assert [b["content"]["type"] for b in shown] == kinds
    assert replayed == shown


@pytest.mark.integration
async def test_a_server_that_cannot_start_is_named_and_the_session_goes_on(tmp_path: Path, work: Path) -> None:
    missing = {"name": "ghost", "command": str(tmp_path / "no-such-server"), "args": [], "env": []}
    dies = {"name": "dies", "command": "/bin/sh", "args": ["-c", "echo broken config >&2; exit 7"], "env": []}
    model = write_script(tmp_path / "m.json", call("e", "t__echo", text="still here"), {"text": "ok"})
    async with AgentProcess(tmp_path / "store", model=model, policy=ClientPolicy(permissions=["allow_once"])) as agent:
        sid, result = await open_session(agent, work, missing, dies, test_server())
        ghost, dead, good = result["_meta"]["acpBridge"]["mcpServers"]
        assert ghost == {"name": "ghost", "tools": [],
                         "error": f"MCP server 'ghost' command not found: {tmp_path / 'no-such-server'}"}
        assert dead["tools"] == [] and dead["error"].startswith("MCP server 'dies' exited with code 7")
        assert "broken config" in dead["error"]
        assert "t__echo" in good["tools"] and "error" not in good
        assert (await agent.prompt(sid, "echo"))["stopReason"] == "end_turn"
    assert text_of(result_of(loaded_events(tmp_path / "store", sid), "e")) == "still here"
    assert b"MCP server 'ghost' command not found" in agent.stderr


@pytest.mark.integration
async def test_a_server_that_never_answers_initialize_times_out(tmp_path: Path, work: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_BRIDGE_MCP_START_TIMEOUT", "0.3")  # short: the suite waits it out
    pid_file = tmp_path / "pid"
    mute = {"name": "mute", "command": "/bin/sh", "args": ["-c", f"echo $$ > {pid_file}; exec sleep 600"], "env": []}
    async with AgentProcess(tmp_path / "store") as agent:
        with anyio.fail_after(15):
            _, result = await open_session(agent, work, mute)
        (status,) = result["_meta"]["acpBridge"]["mcpServers"]
        assert status["error"] == "MCP server 'mute' did not start within 0.3 s"
        assert wait_gone([int(pid_file.read_text())]) == []  # not left running


@pytest.mark.integration
async def test_a_crash_mid_call_is_a_tool_error_and_the_next_call_starts_it_again(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "m.json", call("c", "t__crash", code=3), {"text": "it crashed"},
                         call("e", "t__echo", text="back"), {"text": "ok"})
    async with AgentProcess(tmp_path / "store", model=model,
                            policy=ClientPolicy(permissions=["allow_once", "allow_once"])) as agent:
        sid, _ = await open_session(agent, work, test_server())
        assert (await agent.prompt(sid, "crash it"))["stopReason"] == "end_turn"
        assert (await agent.prompt(sid, "again"))["stopReason"] == "end_turn"
        assert final_update(agent, sid, "c")["status"] == "failed"
    events = loaded_events(tmp_path / "store", sid)
    crashed = result_of(events, "c")
    assert crashed["isError"] and crashed["error"] == {"name": "McpServerError", "code": "mcp_unavailable"}
    message = text_of(crashed)
    assert message.startswith("MCP server 't' exited with code 3") and "crashing on purpose" in message
    assert "started again on the next call" in message
    assert text_of(result_of(events, "e")) == "back"


@pytest.mark.integration
async def test_a_frozen_server_times_out_and_the_session_goes_on(tmp_path: Path, work: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_BRIDGE_MCP_CALL_TIMEOUT", "0.3")  # short: the suite waits it out
    model = write_script(tmp_path / "m.json", call("f", "t__freeze"), {"text": "frozen"}, {"text": "next turn"})
    async with AgentProcess(tmp_path / "store", model=model, policy=ClientPolicy(permissions=["allow_once"])) as agent:
        sid, _ = await open_session(agent, work, test_server())
        with anyio.fail_after(20):
            assert (await agent.prompt(sid, "freeze"))["stopReason"] == "end_turn"
        assert (await agent.prompt(sid, "still there?"))["stopReason"] == "end_turn"
    data = result_of(loaded_events(tmp_path / "store", sid), "f")
    assert data["isError"] and text_of(data) == "MCP server 't' did not answer freeze within 0.3 s"
    assert data["error"]["code"] == "mcp_timeout"


@pytest.mark.integration
async def test_cancel_stops_a_running_call(tmp_path: Path, work: Path) -> None:
    mark = tmp_path / "hang-state"  # "running", then "cancelled"
    model = write_script(tmp_path / "m.json", call("h", "t__hang", mark=str(mark)),
                         call("e", "t__echo", text="after"), {"text": "ok"})
    policy = ClientPolicy(permissions=["allow_once", "allow_once"])
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        sid, _ = await open_session(agent, work, test_server())
        async with anyio.create_task_group() as tg:
            answer = agent.prompt_soon(tg, sid, "hang")
            await agent.wait_for(lambda: any(u.get("toolCallId") == "h" and u.get("status") == "in_progress"
                                             for u in agent.updates_of(sid)))
            await agent.wait_for(lambda: mark.exists() and mark.read_text() == "running",
                                 why="the call running in the server")
            await agent.notify("session/cancel", {"sessionId": sid})
        assert answer["result"]["stopReason"] == "cancelled"
        await agent.wait_for(lambda: mark.read_text() == "cancelled",
                             why="the server told of the cancel (notifications/cancelled)")
        assert (await agent.prompt(sid, "echo"))["stopReason"] == "end_turn"
    events = loaded_events(tmp_path / "store", sid)
    assert result_of(events, "h")["isError"]
    assert text_of(result_of(events, "e")) == "after"


@pytest.mark.integration
async def test_servers_stop_with_the_session_and_the_agent(tmp_path: Path, work: Path) -> None:
    pids = tmp_path / "pids"
    model = write_script(tmp_path / "m.json", call("s", "t__spawn"), {"text": "ok"})
    async with AgentProcess(tmp_path / "store", model=model, policy=ClientPolicy(permissions=["allow_once"])) as agent:
        sid, _ = await open_session(agent, work, test_server(pid_file=pids))
        assert (await agent.prompt(sid, "spawn"))["stopReason"] == "end_turn"
        server, child = (int(p) for p in pids.read_text().split())
        assert alive(server) and alive(child)
        await agent.request("session/close", {"sessionId": sid})
        assert wait_gone([server, child]) == []
        pids.unlink()
        await open_session(agent, work, test_server(pid_file=pids))
        (again,) = (int(p) for p in pids.read_text().split())
        assert alive(again)
    assert agent.returncode == 0
    assert wait_gone([again]) == []


@pytest.mark.integration
async def test_no_server_outlives_a_kill_9_of_the_agent(tmp_path: Path, work: Path) -> None:
    pids = tmp_path / "pids"
    model = write_script(tmp_path / "m.json", call("s", "t__spawn"), {"text": "ok"})
    async with AgentProcess(tmp_path / "store", model=model, policy=ClientPolicy(permissions=["allow_once"])) as agent:
        sid, _ = await open_session(agent, work, test_server(pid_file=pids), time_server())
        assert (await agent.prompt(sid, "spawn"))["stopReason"] == "end_turn"
        started = [int(p) for p in pids.read_text().split()]
        time_pids = pids_running(str(BIN / "mcp-server-time"))
        assert len(started) == 2 and all(alive(p) for p in started) and time_pids
        agent.kill9()
    assert wait_gone([*started, *time_pids]) == []


@pytest.mark.integration
async def test_load_and_resume_connect_the_servers_they_are_given(tmp_path: Path, work: Path) -> None:
    first = write_script(tmp_path / "m1.json", {"text": "hello"})
    model = write_script(tmp_path / "m2.json", call("e", "t__echo", text="loaded"),
                         {"text": "ok"}, call("x", "t__echo", text="gone"), {"text": "no tool"})
    store = tmp_path / "store"
    async with AgentProcess(store, model=first) as agent:
        sid, _ = await open_session(agent, work)
        await agent.prompt(sid, "hi")
    async with AgentProcess(store, model=model, policy=ClientPolicy(permissions=["allow_once"])) as agent:
        await agent.initialize()
        loaded = await agent.request("session/load", {"sessionId": sid, "cwd": str(work),
                                                      "mcpServers": [test_server()]})
        assert "t__echo" in loaded["_meta"]["acpBridge"]["mcpServers"][0]["tools"]
        assert (await agent.prompt(sid, "echo"))["stopReason"] == "end_turn"
        resumed = await agent.request("session/resume", {"sessionId": sid, "cwd": str(work), "mcpServers": []})
        assert "mcpServers" not in resumed["_meta"]["acpBridge"]
        assert (await agent.prompt(sid, "echo again"))["stopReason"] == "end_turn"
    events = loaded_events(store, sid)
    assert text_of(result_of(events, "e")) == "loaded"
    gone = result_of(events, "x")
    assert gone["error"]["code"] == "unknown_tool"


@pytest.mark.parametrize(("server", "field", "words"), [
    ({"name": "x", "args": [], "env": []}, "mcpServers[0].command", "is required"),
    ({"name": "x", "command": "", "args": [], "env": []}, "mcpServers[0].command", "non-empty"),
    ({"name": "x", "command": "/bin/true", "args": [1], "env": []}, "mcpServers[0].args[0]", "a string"),
    ({"name": "x", "command": "/bin/true", "args": [], "env": [{"name": "A"}]}, "mcpServers[0].env[0].value",
     "is required"),
    ({"type": "http", "name": "x", "url": "ftp://127.0.0.1:9/mcp", "headers": []}, "mcpServers[0].url",
     "http:// or https://"),
    ({"type": "sse", "name": "x", "url": "http://127.0.0.1:9/sse"}, "mcpServers[0].headers", "is required"),
    ({"type": "ftp", "name": "x"}, "mcpServers[0].type", "http, sse or absent"),
])
@pytest.mark.integration
async def test_bad_server_specs_are_refused_naming_the_field(tmp_path: Path, work: Path, server: dict[str, Any],
                                                             field: str, words: str) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        with pytest.raises(AgentError) as caught:
            await agent.request("session/new", {"cwd": str(work), "mcpServers": [server]})
        assert caught.value.code == -32602 and (caught.value.data or {}).get("field") == field
        assert words in str(caught.value.message)
        with pytest.raises(AgentError) as twice:
            await agent.request("session/new", {"cwd": str(work), "mcpServers": [time_server(), time_server()]})
        assert (twice.value.data or {}).get("field") == "mcpServers[1].name"
        await agent.new_session(work)  # the connection goes on


def test_the_environment_of_these_tests_has_the_servers() -> None:
    for name in ("mcp-server-time", "mcp-server-git"):
        assert os.access(BIN / name, os.X_OK), f"{name} is not installed: pip install -e '.[test]'"


@pytest.mark.integration
async def test_an_openai_model_is_offered_the_tools_and_reads_the_result(tmp_path: Path, work: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with openai_server(monkeypatch) as api:
        api.push(stream_reply(chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {
                     "name": "t__echo", "arguments": '{"text": "from the server"}'}}]}), chunk({}, "tool_calls")),
                 text_reply("It said so."))
        async with AgentProcess(tmp_path / "store", model="openai:m",
                                policy=ClientPolicy(permissions=["allow_once"])) as agent:
            sid, _ = await open_session(agent, work, test_server())
            assert (await agent.prompt(sid, "echo"))["stopReason"] == "end_turn"
        first, second = api.requests
    offered = {t["function"]["name"]: t["function"] for t in first.json["tools"]}
    assert {"read_file", "write_file", "edit_file", "run_command", "list_dir"} < set(offered)
    assert offered["t__echo"]["description"] == "Say `text` back."
    assert offered["t__echo"]["parameters"]["required"] == ["text"]
    assert second.json["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "from the server"}


@pytest.mark.integration
async def test_without_the_sdk_a_session_with_servers_goes_on_and_says_why(tmp_path: Path, work: Path) -> None:
    agent = AgentProcess(tmp_path / "store")
    # As if the `mcp` dependency were missing from the environment: importing the SDK fails.
    agent.command[1:3] = ["-c", "import sys; sys.modules['mcp'] = None; from acp_bridge.cli.main import main; "
                                "sys.argv[0] = 'acp-bridge'; sys.exit(main())"]
    async with agent:
        sid, result = await open_session(agent, work, time_server())
        (status,) = result["_meta"]["acpBridge"]["mcpServers"]
        assert status["tools"] == [] and status["error"].startswith(
            "MCP server 'time' cannot be started: the MCP SDK is not installed")
        assert "pip install mcp" in status["error"]
        assert (await agent.prompt(sid, "hi"))["stopReason"] == "end_turn"
    assert agent.returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """The test server over streamable HTTP or SSE on a loopback port; `spec` is it as
    an ACP McpServer. `stop()` and `start()` again on the same port."""

    def __init__(self, transport: str) -> None:
        self.transport, self.port = transport, free_port()
        path = "mcp" if transport == "http" else "sse"
        self.spec = {"type": transport, "name": "web", "url": f"http://127.0.0.1:{self.port}/{path}",
                     "headers": [{"name": "X-Token", "value": "t0ken"}]}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        proc = self.proc = subprocess.Popen([sys.executable, str(TEST_SERVER), f"--{self.transport}", str(self.port)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the HTTP test server did not start"
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture(params=["http", "sse"])
def http_server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[HttpServer]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    server = HttpServer(str(request.param))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.integration
async def test_servers_over_http_and_sse(tmp_path: Path, work: Path, http_server: HttpServer) -> None:
    model = write_script(tmp_path / "m.json", call("e", "web__echo", text="over the wire"),
                         call("h", "web__header", name="x-token"), call("p", "web__picture"), {"text": "ok"},
                         call("gone", "web__echo", text="nobody"), {"text": "it went away"},
                         call("back", "web__echo", text="back again"), {"text": "ok"})
    async with AgentProcess(tmp_path / "store", model=model,
                            policy=ClientPolicy(permissions=["allow_always"] * 3)) as agent:
        caps = (await agent.initialize())["agentCapabilities"]
        assert caps["mcpCapabilities"] == {"http": True, "sse": True}
        result = await agent.request("session/new", {"cwd": str(work), "mcpServers": [http_server.spec]},
                                     timeout=60)
        sid = result["sessionId"]
        (status,) = result["_meta"]["acpBridge"]["mcpServers"]
        assert "error" not in status and "web__echo" in status["tools"]
        assert (await agent.prompt(sid, "echo"))["stopReason"] == "end_turn"
        http_server.stop()  # the server goes away: a tool error naming it, the session goes on
        assert (await agent.prompt(sid, "echo"))["stopReason"] == "end_turn"
        http_server.start()  # and comes back: the next call connects again
        assert (await agent.prompt(sid, "echo"))["stopReason"] == "end_turn"
    events = loaded_events(tmp_path / "store", sid)
    gone = result_of(events, "gone")
    assert gone["isError"] and gone["error"]["code"] == "mcp_unavailable"
    assert text_of(gone).startswith("MCP server 'web' ") and "during echo" in text_of(gone)
    assert text_of(result_of(events, "back")) == "back again"
    assert text_of(result_of(events, "e")) == "over the wire"
    assert text_of(result_of(events, "h")) == "t0ken"  # the client's headers reach the server
    assert [b["type"] for b in result_of(events, "p")["content"]] == ["text", "image", "resource"]
    assert b"t0ken" not in agent.stderr


@pytest.mark.integration
async def test_an_http_server_that_is_not_there_is_named_without_its_secrets(tmp_path: Path, work: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    port = free_port()
    url = f"http://user:pa55word@127.0.0.1:{port}/mcp?token=s3cret-query"
    server = {"type": "http", "name": "away", "url": url, "headers": [{"name": "Authorization",
                                                                      "value": "Bearer s3cret-header"}]}
    async with AgentProcess(tmp_path / "store", args=("--log-level", "debug")) as agent:
        _, result = await open_session(agent, work, server)
    (status,) = result["_meta"]["acpBridge"]["mcpServers"]
    assert status["tools"] == [] and status["error"].startswith(f"MCP server 'away' at http://127.0.0.1:{port}/mcp: ")
    for secret in (b"pa55word", b"s3cret-query", b"s3cret-header"):  # never in a message or a log
        assert secret not in agent.stderr and secret.decode() not in status["error"]
