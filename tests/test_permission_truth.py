"""Permissions tell the truth (issue 24): end to end over stdio, against the real agent
as a subprocess, every message validated against the ACP schema by the harness.

- a permission request the client answers with a JSON-RPC error (or with an answer
  that is no option offered) is recorded as such, and the model is told the request
  failed, not that the user refused;
- "Always allow" on a command covers that command, as its option's name says, and
  nothing else, also after a load in a new process;
- a call whose permission was still open when the agent was killed replays as not run;
- a call is `pending` until it may run (its permission granted), live and on replay.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from acp_bridge.tools import permissions
from session import Event
from session.transcript import derive_messages
from tests.support.acp_client import (
    WRITE_STEP,
    AgentProcess,
    ClientErrorAnswer,
    ClientPolicy,
    write_script,
)
from tests.support.logs import loaded_events

pytestmark = pytest.mark.anyio


def run(call_id: str, command: str) -> dict[str, Any]:
    return {"toolCalls": [{"id": call_id, "name": "run_command", "arguments": {"command": command}}]}


def results(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["data"]["callId"]: e["data"] for e in events if e["type"] == "tool/result"}


def trail(agent: AgentProcess, call_id: str) -> list[str]:
    """The statuses a client applies to `call_id`, in wire order, with the permission
    request where it came (`ask`; its toolCall never sets a status)."""
    out = []
    for where, status in agent.call_trail(call_id):
        if where == "request_permission":
            assert status is None
        out.append("ask" if where == "request_permission" else str(status))
    return out


async def load(agent: AgentProcess, sid: str, work: Path) -> dict[str, Any]:
    await agent.initialize()
    result: dict[str, Any] = await agent.request("session/load", {"sessionId": sid, "cwd": str(work),
                                                                   "mcpServers": []})
    return result


# --- a client's error answer -----------------------------------------------------------


@pytest.mark.parametrize(("answer", "record", "told"), [
    (ClientErrorAnswer(-32603, "the dialog crashed"),
     {"outcome": "error", "code": -32603, "message": "the dialog crashed"},
     "The permission request failed: the client answered it with an error -32603 (the dialog crashed). "
     "The tool call did not run."),
    ({"outcome": {"outcome": "selected", "optionId": "yes_please"}},
     {"outcome": "invalid", "message": "the client's answer "
      '{"outcome":{"outcome":"selected","optionId":"yes_please"}} is not one of the options offered'},
     "The permission request failed: the client's answer "
     '{"outcome":{"outcome":"selected","optionId":"yes_please"}} is not one of the options offered. '
     "The tool call did not run."),
], ids=["json-rpc error", "not an option offered"])
@pytest.mark.integration
async def test_a_failed_permission_request_is_recorded_as_failed_and_the_model_told_so(
        tmp_path: Path, work: Path, answer: Any, record: dict[str, Any], told: str) -> None:
    model = write_script(tmp_path / "script.json", WRITE_STEP, {"text": "I could not write it."})
    store = tmp_path / "store"
    async with AgentProcess(store, model=model, policy=ClientPolicy(permissions=[answer])) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        # Denied, as no answer is no permission; the turn goes on to the model's next step.
        assert (await agent.prompt(sid, "write it"))["stopReason"] == "end_turn"
    assert not (work / "out.txt").exists()
    events = loaded_events(store, sid)
    result = results(events)["w1"]
    assert result["permission"] == record
    assert result["error"] == {"name": "PermissionError", "code": "permission_failed"}
    assert result["content"] == [{"type": "text", "text": told}]
    assert not any(e["type"] == "tool/permission" for e in events)
    # What the model is shown of the call (the transcript of the next step): the failure.
    tool_messages = [m for m in derive_messages(cast("list[Event]", events)) if m.get("role") == "tool"]
    assert [m["content"] for m in tool_messages] == [[{"type": "text", "text": told}]]
    assert "rejected" not in told
    # Replayed with the client's answer as the log has it.
    async with AgentProcess(store) as later:
        await load(later, sid, work)
    (failed,) = [u for u in later.updates_of(sid) if u.get("status") == "failed"]
    assert failed["_meta"]["acpBridge"]["permission"] == record
    assert trail(later, "w1") == ["pending", "failed"]
    # `sessions show` says what the client answered, not just that it was no option.
    shown = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(store), "show", sid],
                           capture_output=True, text=True, check=True, timeout=30).stdout
    words = " ".join(str(record[k]) for k in ("outcome", "code") if k in record)
    assert f"permission: {words} ({record['message']})" in shown


# --- "Always allow" covers what it says ----------------------------------------------------


@pytest.mark.integration
async def test_always_allow_on_a_command_allows_that_command_only(tmp_path: Path, work: Path) -> None:
    steps = [run("c1", "echo one"), run("c2", "echo one"), run("c3", "echo two"), {"text": "done"}]
    store = tmp_path / "store"
    policy = ClientPolicy(permissions=["allow_always", "reject_once"])
    async with AgentProcess(store, model=write_script(tmp_path / "s1.json", *steps), policy=policy) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "run them"))["stopReason"] == "end_turn"
    # Asked for `echo one` (and allowed always), not again for it, asked for `echo two`.
    assert [a["toolCall"]["rawInput"]["command"] for a in policy.asked] == ["echo one", "echo two"]
    first = {o["optionId"]: o["name"] for o in policy.asked[0]["options"]}
    assert first == {"allow_once": "Allow once", "allow_always": "Always allow `echo one`", "reject_once": "Reject"}
    assert {o["optionId"]: o["name"] for o in policy.asked[1]["options"]}["allow_always"] == \
        "Always allow `echo two`"
    done = results(loaded_events(store, sid))
    assert done["c1"]["permission"] == {"outcome": "selected", "optionId": "allow_always"}
    assert "permission" not in done["c2"] and not done["c2"]["isError"]  # remembered
    assert done["c3"]["error"]["code"] == "rejected"

    # A load in a new process rebuilds the rule from the log: the same again.
    again = ClientPolicy(permissions=["reject_once"])
    steps2 = [run("d1", "echo one"), run("d2", "echo two"), {"text": "done"}]
    async with AgentProcess(store, model=write_script(tmp_path / "s2.json", *steps2), policy=again) as agent2:
        await load(agent2, sid, work)
        assert (await agent2.prompt(sid, "once more"))["stopReason"] == "end_turn"
    assert [a["toolCall"]["rawInput"]["command"] for a in again.asked] == ["echo two"]
    later = results(loaded_events(store, sid))
    assert not later["d1"]["isError"] and later["d2"]["error"]["code"] == "rejected"


def test_the_always_option_names_what_it_allows() -> None:
    # Pure: a command's rule is its exact text, shown when it can be read at a glance.
    assert permissions.always_rule("run_command", "execute", {"command": "git status", "cwd": "sub"}) == \
        ("run_command", "git status")
    assert permissions.always_label(("run_command", "git status")) == "Always allow `git status`"
    for unreadable in ("make\nmake install", " rm -rf build", "echo `date`", "x" * 61, "printf '\\033[2J'\x1b"):
        assert permissions.always_label(("run_command", unreadable)) == "Always allow this exact command"
    # Other tools: every call of the tool, and the name says so.
    assert permissions.always_rule("write_file", "edit", {"path": "a"}) == ("write_file", None)
    assert permissions.always_label(("git__log", None)) == "Always allow all git__log calls"
    options = permissions.options_for(("run_command", "ls"))
    assert [o["optionId"] for o in options] == [o["optionId"] for o in permissions.OPTIONS]
    assert permissions.OPTIONS[1]["name"] == "Always allow"  # the table itself is not changed
    rule = ("run_command", "echo one")
    assert permissions.decide("ask", "execute", rule, {rule}) == "allow"
    assert permissions.decide("ask", "execute", ("run_command", "echo one "), {rule}) == "ask"
    assert permissions.decide("read_only", "execute", rule, {rule}) == "deny"


# --- a crash while the permission question was open -------------------------------------------


@pytest.mark.integration
async def test_a_call_waiting_for_its_permission_when_the_agent_was_killed_replays_as_not_run(
        tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    policy = ClientPolicy(hang_permissions=True)
    async with AgentProcess(store, model=write_script(tmp_path / "s.json", run("x1", "touch ran.txt")),
                            policy=policy) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.prompt, sid, "run it")
            await agent.wait_for(lambda: bool(policy.asked))
            agent.kill9()
            with anyio.fail_after(5):
                await agent.proc.wait()
            tg.cancel_scope.cancel()
    assert agent.returncode == -signal.SIGKILL
    assert not (work / "ran.txt").exists()
    async with AgentProcess(store) as later:
        loaded = await load(later, sid, work)
    assert loaded["_meta"]["acpBridge"]["repair"]["syntheticResults"] == 1
    (failed,) = [u for u in later.updates_of(sid) if u.get("status") == "failed"]
    text = failed["content"][0]["content"]["text"]
    # What a clean stdin EOF at the same point says (tests/test_runner.py), not "it may have run".
    assert text == "The run_command call was interrupted before it started; it did not run."
    assert trail(later, "x1") == ["pending", "failed"]


@pytest.mark.integration
async def test_a_call_killed_while_it_runs_may_have_run(tmp_path: Path, work: Path) -> None:
    # The other side of the same line: granted (a durable tool/permission), then killed.
    store = tmp_path / "store"
    pid_file = work / "pid"
    command = f"echo $$ > {pid_file}; exec sleep 30"
    policy = ClientPolicy(permissions=["allow_once"])
    async with AgentProcess(store, model=write_script(tmp_path / "s.json", run("x1", command)),
                            policy=policy) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            tg.start_soon(agent.prompt, sid, "run it")
            await agent.wait_for(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit())
            agent.kill9()
            with anyio.fail_after(5):
                await agent.proc.wait()
            tg.cancel_scope.cancel()
    with contextlib.suppress(ProcessLookupError):
        import os

        os.killpg(int(pid_file.read_text()), signal.SIGKILL)
    async with AgentProcess(store) as later:
        await load(later, sid, work)
    (failed,) = [u for u in later.updates_of(sid) if u.get("status") == "failed"]
    assert "it may have run" in failed["content"][0]["content"]["text"]
    assert trail(later, "x1") == ["pending", "in_progress", "failed"]


# --- pending while it waits -----------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "live", "replayed"), [
    ("allow_once", ["pending", "ask", "in_progress", "completed"], ["pending", "in_progress", "completed"]),
    ("reject_once", ["pending", "ask", "failed"], ["pending", "failed"]),
    (None, ["pending", "ask", "failed"], ["pending", "failed"]),
])
@pytest.mark.integration
async def test_a_call_is_pending_while_it_waits_for_approval_live_and_on_replay(
        tmp_path: Path, work: Path, answer: str | None, live: list[str], replayed: list[str]) -> None:
    store = tmp_path / "store"
    model = write_script(tmp_path / "s.json", WRITE_STEP, {"text": "ok"}, {"text": "ok"})
    async with AgentProcess(store, model=model, policy=ClientPolicy(permissions=[answer])) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "write it")
    assert trail(agent, "w1") == live
    async with AgentProcess(store) as later:
        await load(later, sid, work)
    assert trail(later, "w1") == replayed
    if answer == "allow_once":  # the update that moves it on carries the answer
        (running,) = [u for u in later.updates_of(sid) if u.get("status") == "in_progress"]
        assert running["_meta"]["acpBridge"]["permission"] == {"outcome": "selected", "optionId": "allow_once"}


@pytest.mark.integration
async def test_a_call_that_needs_no_permission_is_in_progress_at_once(tmp_path: Path, work: Path) -> None:
    (work / "notes.txt").write_text("one\n")
    read = {"toolCalls": [{"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}}]}
    async with AgentProcess(tmp_path / "store", model=write_script(tmp_path / "s.json", read, {"text": "ok"}),
                            args=("--log-level", "warning")) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "read it")
    assert trail(agent, "r1") == ["pending", "in_progress", "completed"]
