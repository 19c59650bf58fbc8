"""Slash commands of our agent (docs/protocol.md, "Slash commands"): the table offered
as `available_commands_update` after `session/new`, `session/load` and `session/resume`
(every message checked against the vendored schema by AgentProcess), and each command,
sent as a prompt, doing what it says as a turn of its own, recorded in the log. Real
processes: our agent with `echo` and `script:` models, and `acp-bridge sessions export`
for what `/export` must have written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.acp_client import AgentError, AgentProcess, write_script
from tests.support.logs import loaded_events

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def offered(agent: AgentProcess, sid: str) -> list[list[str]]:
    """The command names of every `available_commands_update` sent for `sid`, in order."""
    return [[c["name"] for c in u["availableCommands"]] for u in agent.updates_of(sid)
            if u["sessionUpdate"] == "available_commands_update"]


async def command(agent: AgentProcess, sid: str, text: str) -> dict[str, Any]:
    """The raw answer of a prompt of `text`."""
    return await agent.request_raw("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})


def said(agent: AgentProcess, sid: str, turn: int) -> str:
    """What the agent's message chunks of `turn` said."""
    return "".join(u["content"]["text"] for u in agent.updates_of(sid) if u["sessionUpdate"] == "agent_message_chunk"
                   and u.get("messageId", "").startswith(f"t{turn}"))


def could_not_run(answer: dict[str, Any]) -> str:
    """A command that could not run is answered, not failed (issue 35, point 5): `end_turn`,
    its `turn/end` reason in `_meta` (`command_failed`); what was wrong, its message."""
    assert "error" not in answer, answer
    reason = answer["result"]["_meta"]["acpBridge"]["reason"]
    assert answer["result"]["stopReason"] == "end_turn" and reason["code"] == "command_failed"
    return str(reason["message"])


def of_turn(events: list[dict[str, Any]], turn: int) -> list[dict[str, Any]]:
    return [e for e in events if e["data"].get("turn") == turn]


async def test_commands_are_offered_after_new_load_and_resume(tmp_path: Path, work: Path) -> None:
    store, script = tmp_path / "store", write_script(tmp_path / "m.json", {"text": "hi"})
    async with AgentProcess(store, args=("--model", script)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.wait_for(lambda: bool(offered(agent, sid)))
        assert offered(agent, sid) == [["title", "fork", "export", "mode", "model"]]
        # sent after the answer that names the session, never before it
        names = [i for i, (d, m) in enumerate(agent.transcript) if d == "<-" and m.get("result", {}).get("sessionId")]
        commands = [i for i, (d, m) in enumerate(agent.transcript) if d == "<-" and m.get("method") == "session/update"
                    and m["params"]["update"]["sessionUpdate"] == "available_commands_update"]
        assert names[0] < commands[0]
        await agent.prompt(sid, "hello")
    async with AgentProcess(store, args=("--model", script)) as agent:
        await agent.initialize()
        await agent.load_session(sid, work)
        await agent.wait_for(lambda: len(offered(agent, sid)) == 1)
        await agent.request("session/resume", {"sessionId": sid, "cwd": str(work), "mcpServers": []})
        await agent.wait_for(lambda: len(offered(agent, sid)) == 2)
        assert offered(agent, sid)[1] == ["title", "fork", "export", "mode", "model"]
    async with AgentProcess(tmp_path / "store1") as agent:  # one model: nothing to switch to
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.wait_for(lambda: bool(offered(agent, sid)))
        assert offered(agent, sid) == [["title", "fork", "export", "mode"]]
        update = next(u for u in agent.updates_of(sid) if u["sessionUpdate"] == "available_commands_update")
        assert {c["name"]: c.get("input") for c in update["availableCommands"]}["export"] == {
            "hint": "a file name (optional)"}


async def test_title_is_recorded_and_named_live_and_on_load(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with AgentProcess(store) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "first question")
        answer = await command(agent, sid, "/title   Budget   review ")
        assert answer["result"]["stopReason"] == "end_turn"
        titles = [u["title"] for u in agent.updates_of(sid) if u["sessionUpdate"] == "session_info_update"]
        assert titles[-1] == "Budget review"
        assert "Budget review" in said(agent, sid, 2)
        empty = await command(agent, sid, "/title")
        assert "needs the new title" in could_not_run(empty)
    turn2 = of_turn(loaded_events(store, sid), 2)
    assert [e["type"] for e in turn2] == ["turn/start", "user/message", "config/set", "step/start",
                                          "assistant/chunk", "assistant/message", "step/end", "turn/end"]
    assert turn2[0]["data"]["trigger"] == {"kind": "command", "name": "title"}
    assert turn2[2]["data"] == {"configId": "session/title", "value": "Budget review", "turn": 2}
    async with AgentProcess(store) as agent:
        await agent.initialize()
        await agent.load_session(sid, work)
        replay = agent.replayed(sid)
    named = [u["title"] for u in replay if u["sessionUpdate"] == "session_info_update"]
    assert named and named[-1] == "Budget review"  # the replay's last word on the title is the set one


def exported(store: Path, sid: str) -> str:
    """What `acp-bridge sessions export ID --format md` writes now."""
    out = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(store), "--backend", "jsonl",
                          "export", sid, "--format", "md"], capture_output=True, text=True, check=True,
                         stdin=subprocess.DEVNULL)
    return out.stdout


def turn_section(markdown: str, turn: int) -> str:
    """The Markdown of one turn: from its heading to the next turn's, or to the footer."""
    rest = markdown.split(f"\n## Turn {turn} ")[1]
    return rest.split("\n## Turn ")[0].split("\n---\n")[0]


async def test_export_writes_a_new_file_and_never_overwrites(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with AgentProcess(store) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "a question worth keeping")
        mine = work / f"session-{sid[:8]}.md"
        mine.write_text("the user's own notes\n")
        answer = await command(agent, sid, "/export")
        assert answer["result"]["stopReason"] == "end_turn"
        first = work / f"session-{sid[:8]}-2.md"
        text = said(agent, sid, 2)
        assert str(first) in text and mine.name in text  # the name it did not take, said
        assert mine.read_text() == "the user's own notes\n"
        named = await command(agent, sid, "/export notes")
        assert named["result"]["stopReason"] == "end_turn"
        refused = await command(agent, sid, "/export ../outside.md")
        assert "../outside.md" in could_not_run(refused)
        assert not (tmp_path / "outside.md").exists()
    # the first export held turn 1 exactly as `sessions export` renders it (the
    # command's own turn was recorded after the file was written)
    body = first.read_text()
    assert "a question worth keeping" in body and "## Turn 2" not in body
    assert turn_section(body, 1) == turn_section(exported(store, sid), 1)
    assert "## Turn 2" in (work / "notes.md").read_text()  # the second saw the first's turn
    events = loaded_events(store, sid)
    assert [e["data"]["trigger"] for e in events if e["type"] == "turn/start"][1:] == [
        {"kind": "command", "name": "export"}] * 3
    assert events[-1]["data"]["reason"]["code"] == "command_failed"


async def test_mode_and_model_take_the_paths_of_their_methods(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    script = write_script(tmp_path / "m.json", {"text": "from the script"})
    async with AgentProcess(store, args=("--model", script)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        listing = await command(agent, sid, "/mode")
        assert listing["result"]["stopReason"] == "end_turn" and "read_only" in said(agent, sid, 1)
        await command(agent, sid, "/mode read_only")
        assert any(u["sessionUpdate"] == "current_mode_update" and u["currentModeId"] == "read_only"
                   for u in agent.updates_of(sid))
        bad = await command(agent, sid, "/mode plan")
        assert "unknown mode" in could_not_run(bad)
        assert said(agent, sid, 3).strip().startswith("[The command could not run: unknown mode 'plan'")
        await command(agent, sid, f"/model {script}")
        options = [u for u in agent.updates_of(sid) if u["sessionUpdate"] == "config_option_update"]
        assert options[-1]["configOptions"][1]["currentValue"] == script
        answer = await agent.prompt(sid, "and now?")
        assert answer["stopReason"] == "end_turn"
        assert said(agent, sid, 5).strip() == "from the script"  # the switched model answered
    events = loaded_events(store, sid)
    starts = {e["data"]["turn"]: e["data"] for e in events if e["type"] == "turn/start"}
    assert starts[2]["mode"] == "read_only"  # the mode's own turn already runs in it
    assert starts[5]["mode"] == "read_only" and starts[5]["model"] == script
    assert [e["data"] for e in events if e["type"] == "config/set"] == [  # each durable at its switch
        {"configId": "mode", "value": "read_only"}, {"configId": "model", "value": script}]
    # a reload takes them back as `session/set_mode` and `set_config_option` would leave them
    async with AgentProcess(store, args=("--model", script)) as agent:
        await agent.initialize()
        loaded = await agent.load_session(sid, work)
    assert loaded["modes"]["currentModeId"] == "read_only"
    assert loaded["configOptions"][1]["currentValue"] == script


async def test_text_that_names_no_command_is_a_prompt(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with AgentProcess(store) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        for text in ("/usr/bin/env is where?", "/titles please", "say /title here"):
            await agent.prompt(sid, text)
        with anyio.fail_after(5):
            await agent.prompt(sid, "/title x")  # the one that is a command
    triggers = [e["data"]["trigger"]["kind"] for e in loaded_events(store, sid) if e["type"] == "turn/start"]
    assert triggers == ["prompt", "prompt", "prompt", "command"]


async def test_a_command_while_a_turn_runs_is_refused(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "m.json",
                         {"toolCalls": [{"id": "c1", "name": "run_command", "arguments": {"command": "true"}}]})
    async with AgentProcess(tmp_path / "store", model=model) as agent:
        agent.policy.hang_permissions = True
        await agent.initialize()
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            agent.prompt_soon(tg, sid, "run it")
            await agent.wait_for(lambda: bool(agent.policy.asked))
            with pytest.raises(AgentError) as refused:
                await agent.prompt(sid, "/title too soon")
            assert refused.value.code == -32001
            await agent.notify("session/cancel", {"sessionId": sid})


async def test_fork_makes_a_stored_fork_to_open(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with AgentProcess(store) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "first words")
        await agent.prompt(sid, "second words")
        whole = await command(agent, sid, "/fork")
        assert whole["result"]["stopReason"] == "end_turn"
        first = await command(agent, sid, "/fork 1")
        assert first["result"]["stopReason"] == "end_turn"
        bad = await command(agent, sid, "/fork one")
        could_not_run(bad)
        beyond = await command(agent, sid, "/fork 99")
        could_not_run(beyond)
        text3, text4 = said(agent, sid, 3), said(agent, sid, 4)
        forks = [line.split(" into ")[1].split(",")[0] for line in (text3, text4)]
        assert "turns 1-2" in text3 and "turns 1-1" in text4
        for fork_id in forks:  # stored, not opened: the client opens it
            assert not agent.updates_of(fork_id)
    async with AgentProcess(store) as agent:
        await agent.initialize()
        for fork_id, prompts in zip(forks, (["first words", "second words"], ["first words"]), strict=True):
            loaded = await agent.load_session(fork_id, work)
            assert loaded["_meta"]["acpBridge"]["turns"] == len(prompts)
            users = [u["content"]["text"] for u in agent.replayed(fork_id) if u["sessionUpdate"] == "user_message_chunk"]
            assert users == prompts
            assert (await agent.prompt(fork_id, "goes on"))["stopReason"] == "end_turn"
    original = loaded_events(store, sid)
    assert [e["data"]["trigger"] for e in original if e["type"] == "turn/start"][2:] == [
        {"kind": "command", "name": "fork"}] * 4  # the original gained only its command turns
