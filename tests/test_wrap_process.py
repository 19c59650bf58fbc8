"""`acp-bridge wrap`: load for an agent that cannot, the child's crash, the wrapper's
SIGKILL, the end of stdin, pass-through of what the wrapper does not handle, and the
command line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from session import check_invariants
from tests.support.acp_client import AgentError, ClientPolicy, write_script
from tests.support.logs import loaded_events
from tests.support.processes import wait_gone
from tests.support.wrapped import (
    WrappedProcess,
    command_line,
    descendants,
    sdk_echo_command,
    serve_command,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

def child_pid(wrapper_pid: int) -> int:
    (pid,) = [p for p in descendants(wrapper_pid) if "acp_bridge" in command_line(p) or
              "sdk_echo_agent.py" in " ".join(command_line(p))][:1]
    return pid


def text_of(updates: list[dict[str, Any]], kind: str) -> str:
    return "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == kind)


async def test_sdk_echo_agent_without_load_session_loads_from_our_log(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with WrappedProcess(store, sdk_echo_command()) as first:
        init = await first.initialize()
        assert init["agentInfo"]["name"] == "sdk-echo"  # the child's answer, ours added
        assert init["agentCapabilities"]["loadSession"] is True
        sid = await first.new_session(work)
        assert (await first.prompt(sid, "one two three"))["stopReason"] == "end_turn"
        assert (await first.prompt(sid, "four five"))["_meta"]["acpBridge"]["turn"] == 2
        shown = first.updates_of(sid)
    assert first.returncode == 0
    async with WrappedProcess(store, sdk_echo_command()) as second:
        await second.initialize()
        loaded = await second.load_session(sid, work)
        assert loaded["_meta"]["acpBridge"]["wrapped"] == {"restored": "fresh"}
        assert loaded["_meta"]["acpBridge"]["turns"] == 2
        replayed = second.updates_of(sid)
        assert text_of(replayed, "user_message_chunk") == "one two threefour five"
        assert text_of(replayed, "agent_message_chunk") == text_of(shown, "agent_message_chunk") == \
            "one two three four five "
        after = await second.prompt(sid, "six")
        assert after["stopReason"] == "end_turn" and after["_meta"]["acpBridge"]["turn"] == 3
        assert text_of(second.updates_of(sid)[len(replayed):], "agent_message_chunk") == "six "
    check_invariants(loaded_events(store, sid), closed=True)  # type: ignore[arg-type]


async def test_child_killed_mid_turn_answers_interrupted_and_is_restarted(tmp_path: Path, work: Path) -> None:
    script = tmp_path / "script.json"
    model = write_script(script, {"text": "working on it", "hang": True})
    async with WrappedProcess(tmp_path / "store", serve_command(tmp_path / "inner", model)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        first = child_pid(agent.proc.pid)
        async with anyio.create_task_group() as tg:
            answer = agent.prompt_soon(tg, sid, "work")
            await agent.wait_for(lambda: text_of(agent.updates_of(sid), "agent_message_chunk") == "working on it")
            write_script(script, {"text": "back again"})  # what the restarted child serves
            subprocess.run(["kill", "-9", str(first)], check=True)
        result = answer["result"]
        assert result["stopReason"] == "cancelled"
        assert result["_meta"]["acpBridge"] == {"turn": 1, "reason": {"kind": "interrupted", "cause": "crash"}}
        again = await agent.prompt(sid, "again")
        assert again["stopReason"] == "end_turn" and again["_meta"]["acpBridge"]["turn"] == 2
        assert child_pid(agent.proc.pid) != first
        assert text_of(agent.updates_of(sid), "agent_message_chunk").endswith("back again")
    assert agent.returncode == 0
    events = loaded_events(tmp_path / "store", sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert ends == [{"kind": "interrupted", "cause": "crash"}, {"kind": "completed"}]


async def test_wrapper_killed_takes_the_child_and_its_commands(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "script.json",
                         {"toolCalls": [{"id": "s1", "name": "run_command", "arguments": {"command": "sleep 120"}}]},
                         {"text": "slept"})
    policy = ClientPolicy(permissions=["allow_once"])
    # A child that outlives its stdin (as real agents do for a while), then lingers.
    child = ["/bin/sh", "-c", '"$@"; sleep 120', "sh", *serve_command(tmp_path / "inner", model)]
    async with WrappedProcess(tmp_path / "store", child, policy=policy) as agent:
        await agent.initialize()  # no terminal: our agent runs the command itself
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            agent.prompt_soon(tg, sid, "sleep", timeout=60)
            await agent.wait_for(lambda: any(command_line(p)[:1] == ["sleep"] for p in descendants(agent.proc.pid)))
            family = descendants(agent.proc.pid)
            assert len(family) >= 2  # the child and its command (and the watchdogs)
            agent.kill9()
            left = await anyio.to_thread.run_sync(wait_gone, family)
            tg.cancel_scope.cancel()
    assert left == [], [command_line(p) for p in left]
    assert agent.returncode == -signal.SIGKILL


async def test_stdin_eof_mid_turn_answers_and_closes_the_child(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "script.json", {"text": "working on it", "hang": True})
    async with WrappedProcess(tmp_path / "store", serve_command(tmp_path / "inner", model)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        child = child_pid(agent.proc.pid)
        async with anyio.create_task_group() as tg:
            answer = agent.prompt_soon(tg, sid, "work")
            await agent.wait_for(lambda: text_of(agent.updates_of(sid), "agent_message_chunk") == "working on it")
            await agent.close_stdin()
        assert answer["result"]["_meta"]["acpBridge"]["reason"] == {"kind": "interrupted", "cause": "shutdown"}
    assert agent.returncode == 0
    assert await anyio.to_thread.run_sync(wait_gone, [child]) == []
    check_invariants(loaded_events(tmp_path / "store", sid), closed=True)  # type: ignore[arg-type]


async def test_what_the_wrapper_does_not_handle_passes_through(tmp_path: Path, work: Path) -> None:
    async with WrappedProcess(tmp_path / "store", serve_command(tmp_path / "inner")) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        # Answered by the child, for the child's session: our id mapped to its.
        assert await agent.request("session/set_mode", {"sessionId": sid, "modeId": "read_only"}) == {}
        modes = [u for u in agent.updates_of(sid) if u["sessionUpdate"] == "current_mode_update"]
        assert modes == [{"sessionUpdate": "current_mode_update", "currentModeId": "read_only"}]
        # The child's errors come back as they are.
        with pytest.raises(AgentError) as err:
            await agent.request("session/set_mode", {"sessionId": sid, "modeId": "nonsense"})
        assert err.value.code == -32602 and (err.value.data or {})["field"] == "modeId"
        with pytest.raises(AgentError) as err:
            await agent.request("_vendor/thing", {"x": 1})
        assert err.value.code == -32601
        with pytest.raises(AgentError) as err:
            await agent.request("authenticate", {"methodId": "none"})
        assert err.value.code == -32602 and "this agent offers none" in str(err.value.message)
        listed = await agent.request("session/list", {})
        assert [s["sessionId"] for s in listed["sessions"]] == [sid]
    events = loaded_events(tmp_path / "store", sid)
    recorded = [e["data"]["update"]["sessionUpdate"] for e in events if e["type"] == "wrapped/update"]
    assert "current_mode_update" in recorded  # between turns, replayed by a load


def wrap_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "acp_bridge", "wrap", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30, check=False)


def test_wrap_without_a_command_is_a_usage_error(tmp_path: Path) -> None:
    for args in ([], ["--store", str(tmp_path)], ["--store", str(tmp_path), "--"]):
        done = wrap_cli(*args)
        assert done.returncode == 2 and done.stdout == ""
        assert len(done.stderr.strip().splitlines()) == 1 and "COMMAND" in done.stderr


def test_wrap_of_a_command_that_cannot_run(tmp_path: Path) -> None:
    done = wrap_cli("--store", str(tmp_path), "--", str(tmp_path / "no-such-agent"))
    assert done.returncode == 2 and done.stdout == ""
    assert "cannot run" in done.stderr


def test_the_child_is_spawned_before_the_wrapper_is_imported(tmp_path: Path) -> None:
    """`acp-bridge wrap` starts its child before importing the wrapper (issue 23,
    start-up): what the command line imports up to the spawn (`cli.main`, `wrap.serve`
    for `start_child`) holds none of the wrapper's host, engine, session store, anyio or
    jsonrpcserver, and the child spawned there is the one the wrapper then serves."""
    probe = ("import sys\n"
             "import acp_bridge.cli.main, acp_bridge.wrap.serve\n"
             "heavy = [m for m in ('acp_bridge.host', 'acp_bridge.wrap.engine', 'session.store', 'anyio', "
             "'jsonrpcserver') if m in sys.modules]\n"
             "print(heavy)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=30)
    assert done.stdout.strip() == "[]"
    marker = tmp_path / "started"
    script = f"echo $$ > {marker}; exec {sys.executable} {tmp_path / 'agent.py'}"
    (tmp_path / "agent.py").write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if 'id' in m:\n"
        "        print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': {'protocolVersion': 1}}), flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-m", "acp_bridge", "wrap", "--store", str(tmp_path / "store"), "--",
                             "sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n')
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())
        assert answer["id"] == 1 and answer["result"]["protocolVersion"] == 1
        assert int(marker.read_text()) in _children(proc.pid)  # the wrapper's own child serves it
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    assert marker.exists() and len(marker.read_text().split()) == 1  # one child, started once


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found
