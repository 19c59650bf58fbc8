"""`acp-bridge wrap --agent NAME=COMMAND ...`: the editor hands a session to another
wrapped agent between turns, through the `agent` config option (docs/wrap.md, "Several
agents"). Real processes: tests/support/memory_agent.py (an agent whose answer shows
every prompt it was shown) and our own `serve`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from acp_bridge.wrap.seed import PREFACE
from session import check_invariants
from tests.support.acp_client import AgentError
from tests.support.acp_schema import validate_def
from tests.support.logs import loaded_events
from tests.support.switching import MEMORY, Switching, memory, ours
from tests.support.waiting import until
from tests.support.wrapped import command_line, descendants, serve_command

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

def received(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def agents_running(pid: int) -> list[str]:
    """The names of the memory agents running under the wrapper `pid`."""
    names = []
    for child in descendants(pid):
        argv = command_line(child)
        if len(argv) > 2 and argv[1] == str(MEMORY):
            names.append(argv[2])
    return sorted(names)


async def test_a_session_moves_to_another_agent_with_its_conversation(tmp_path: Path, work: Path) -> None:
    store, record = tmp_path / "store", tmp_path / "got.jsonl"
    agents = [("alpha", memory("alpha", "--record", str(record))), ("beta", memory("beta", "--record", str(record)))]
    async with Switching(store, agents) as wrapper:
        init = await wrapper.initialize()
        assert init["_meta"]["acpBridge"]["agents"] == ["alpha", "beta"]
        assert init["agentInfo"]["name"] == "alpha"  # the default's own
        new = await wrapper.new(work)
        sid = new["sessionId"]
        option = ours(new["configOptions"])
        assert (option["category"], option["currentValue"]) == ("model", "alpha")
        assert [o["value"] for o in option["options"]] == ["alpha", "beta"]
        assert agents_running(wrapper.proc.pid) == ["alpha"]  # the other starts at its first use

        await wrapper.prompt(sid, "the apple is red")
        assert wrapper.text_of(sid) == "alpha saw: the apple is red"
        shown = len(wrapper.updates_of(sid))
        switched = await wrapper.set_option(sid, "agent", "beta")
        assert ours(switched["configOptions"])["currentValue"] == "beta"
        assert switched["_meta"]["acpBridge"]["wrapped"] == {
            "agent": "beta", "restored": "fresh", "seeded": True, "seedTurns": 1, "seedLeftOut": 0}
        assert len(wrapper.updates_of(sid)) == shown  # the seed is not shown
        assert agents_running(wrapper.proc.pid) == ["beta"]  # alpha had no other session: stopped

        answer = await wrapper.prompt(sid, "what colour is it?")
        assert answer["_meta"]["acpBridge"]["turn"] == 2
        said = wrapper.text_of(sid, shown)
        # beta's model saw alpha's turn: the prompt and alpha's answer, through the seed.
        assert said.startswith("beta saw: " + PREFACE) and "the apple is red" in said
        assert "alpha saw: the apple is red" in said and said.endswith(" | what colour is it?")

    got = received(record)
    alpha = [m.get("method") for m in got if m["agent"] == "alpha"]
    assert alpha == ["initialize", "session/new", "session/prompt", "session/close"]
    beta = [m for m in got if m["agent"] == "beta"]
    assert [m.get("method") for m in beta] == ["initialize", "session/new", "session/prompt", "session/prompt"]
    first_init = next(m for m in got if m["agent"] == "alpha")
    assert beta[0]["params"] == first_init["params"]  # the editor's initialize, as alpha got it

    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    assert [e["data"].get("agent") for e in events if e["type"] == "turn/start"] == ["alpha", "beta"]
    moves = [e for e in events if e["type"] == "config/set"]
    assert [(e["data"]["configId"], e["data"]["value"]) for e in moves] == [("agent", "beta")]
    assert moves[0]["data"]["wrapped"]["sessionId"] == beta[2]["params"]["sessionId"]  # what beta was prompted in
    assert moves[0]["data"]["wrapped"]["command"] == agents[1][1]
    assert moves[0]["data"]["wrapped"]["agentInfo"] == {"name": "beta", "version": "1.0"}
    # Recorded before it was acknowledged: before turn 2, after turn 1.
    kinds = [e["type"] for e in events]
    assert kinds.index("config/set") == kinds.index("turn/end") + 1
    # The seed is no turn of ours (beta's answer quotes it: that is what it was shown).
    assert not any(PREFACE in json.dumps(e) for e in events if e["type"] == "user/message")

    shown_text = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "show", sid, "--store", str(store)],
                                capture_output=True, text=True, check=True).stdout
    assert "agent alpha" in shown_text and "agent beta" in shown_text
    assert shown_text.index("agent alpha") < shown_text.index("agent beta")

    # A load restores the agent of the last turn, and shows it the conversation again
    # (the memory agent cannot load its own session: a fresh one, seeded).
    async with Switching(store, agents) as again:
        await again.initialize()
        loaded = await again.load_session(sid, work)
        assert loaded["_meta"]["acpBridge"]["wrapped"]["agent"] == "beta"
        assert loaded["_meta"]["acpBridge"]["wrapped"]["seeded"] is True
        assert ours(loaded["configOptions"])["currentValue"] == "beta"
        replayed = len(again.updates_of(sid))
        await again.prompt(sid, "and now?")
        said = again.text_of(sid, replayed)
        assert said.startswith("beta saw: ") and "the apple is red" in said and "what colour is it?" in said
        assert sorted(agents_running(again.proc.pid)) == ["alpha", "beta"]  # alpha: the default, at start-up
    turns = [e for e in loaded_events(store, sid) if e["type"] == "turn/start"]
    assert [t["data"]["agent"] for t in turns] == ["alpha", "beta", "beta"]


async def test_a_switch_is_refused_while_a_prompt_runs(tmp_path: Path, work: Path) -> None:
    record = tmp_path / "read.jsonl"
    agents = [("alpha", memory("alpha", "--record", str(record))), ("beta", memory("beta"))]
    async with Switching(tmp_path / "store", agents) as wrapper:
        await wrapper.initialize()
        sid = (await wrapper.new(work))["sessionId"]
        async with anyio.create_task_group() as tg:
            running = wrapper.prompt_soon(tg, sid, "sleep 1500")
            await until(lambda: record.exists() and b'"session/prompt"' in record.read_bytes(),
                        "the prompt passed on to alpha (it runs: 1.5 s)")
            with pytest.raises(AgentError) as refused:
                await wrapper.set_option(sid, "agent", "beta")
            assert refused.value.code == -32001 and "running a prompt" in str(refused.value.message)
        assert running["result"]["stopReason"] == "end_turn"
        assert "alpha saw: sleep 1500" == wrapper.text_of(sid)
        with pytest.raises(AgentError) as unknown:
            await wrapper.set_option(sid, "agent", "gamma")
        assert unknown.value.code == -32602 and "alpha, beta" in str(unknown.value.message)
        assert ours((await wrapper.set_option(sid, "agent", "beta"))["configOptions"])["currentValue"] == "beta"
        # Durable before it was answered: a kill -9 right after the answer keeps it.
        wrapper.kill9()
        await wrapper.proc.wait()
    moves = [e["data"] for e in loaded_events(tmp_path / "store", sid) if e["type"] == "config/set"]
    assert [(m["configId"], m["value"]) for m in moves] == [("agent", "beta")]


async def test_the_childs_own_options_pass_beside_ours(tmp_path: Path, work: Path) -> None:
    flags = ("--model-option", "--agent-option")
    agents = [("alpha", memory("alpha", *flags)), ("beta", memory("beta", *flags))]
    store = tmp_path / "store"
    async with Switching(store, agents) as wrapper:
        await wrapper.initialize()
        new = await wrapper.new(work)
        sid, options = new["sessionId"], new["configOptions"]
        assert [o["id"] for o in options] == ["model", "agent", "acp-bridge.agent"]  # theirs unchanged, ours after
        option = ours(options, "acp-bridge.agent")
        assert option["category"] == "_agent"  # the child has a `model` option of its own
        # The child's options are the child's: its `agent` and `model` go to it.
        set_theirs = await wrapper.set_option(sid, "agent", "pirate")
        assert [o["id"] for o in set_theirs["configOptions"]] == ["model", "agent", "acp-bridge.agent"]
        # The child's own update of its whole set: ours added for the editor, not for the log.
        (told,) = [u for u in wrapper.updates_of(sid) if u["sessionUpdate"] == "config_option_update"]
        assert [o["id"] for o in told["configOptions"]] == ["model", "agent", "acp-bridge.agent"]
        validate_def("ConfigOptionUpdate", told)
        assert ours(set_theirs["configOptions"], "acp-bridge.agent")["currentValue"] == "alpha"
        switched = await wrapper.set_option(sid, "acp-bridge.agent", "beta")
        assert ours(switched["configOptions"], "acp-bridge.agent")["currentValue"] == "beta"
        assert switched["configOptions"][0]["id"] == "model"  # beta's own, from its session/new
        await wrapper.prompt(sid, "hello")
        assert wrapper.text_of(sid).startswith("beta saw: ")
    (kept,) = [e["data"]["update"] for e in loaded_events(store, sid) if e["type"] == "wrapped/update"]
    assert [o["id"] for o in kept["configOptions"]] == ["model", "agent"]  # as alpha sent it


async def test_our_own_serve_as_the_second_agent_is_shown_the_first_turns(tmp_path: Path, work: Path) -> None:
    inner = tmp_path / "inner"
    agents = [("memory", memory("memory")), ("ours", serve_command(inner))]
    async with Switching(tmp_path / "store", agents) as wrapper:
        await wrapper.initialize()
        sid = (await wrapper.new(work))["sessionId"]
        await wrapper.prompt(sid, "the secret word is heliotrope")
        await wrapper.set_option(sid, "agent", "ours")
        await wrapper.prompt(sid, "say it back")
        assert wrapper.text_of(sid).endswith("say it back")  # echo: the last prompt, word by word
    # The inner agent's own log: its model was shown the first agent's turn (the seed).
    (inner_sid,) = [p.name.removesuffix(".jsonl") for p in (inner / "sessions").glob("*.jsonl")]
    shown = [json.dumps(e["data"]["content"]) for e in loaded_events(inner, inner_sid) if e["type"] == "user/message"]
    assert len(shown) == 2 and "heliotrope" in shown[0] and "memory saw: the secret word is heliotrope" in shown[0]


@pytest.mark.parametrize(("args", "why"), [
    (["--agent", "alpha"], "expected NAME=COMMAND"),
    (["--agent", "=cat"], "needs a name"),
    (["--agent", "a=cat", "--agent", "a=cat"], "given twice"),
    (["--agent", "a="], "has no command"),
    (["--agent", "a='cat"], "cannot split"),
    (["--agent", "a=no-such-program-here"], "cannot run"),
    (["--agent", "a=cat", "--", "cat"], "not both"),
])
def test_bad_agents_are_refused_at_start_up(tmp_path: Path, args: list[str], why: str) -> None:
    done = subprocess.run([sys.executable, "-m", "acp_bridge", "wrap", "--store", str(tmp_path), *args],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and why in done.stderr, done.stderr


async def test_a_switch_that_fails_leaves_the_session_where_it_was(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    agents = [("alpha", memory("alpha")), ("broken", [sys.executable, "-c", "import sys; sys.exit(3)"])]
    async with Switching(store, agents) as wrapper:
        await wrapper.initialize()
        sid = (await wrapper.new(work))["sessionId"]
        await wrapper.prompt(sid, "one")
        with pytest.raises(AgentError) as failed:
            await wrapper.set_option(sid, "agent", "broken")
        assert failed.value.code == -32603 and failed.value.data == {"code": "agent_exited", "status": 3}, failed.value.data
        await wrapper.prompt(sid, "two")
        assert wrapper.text_of(sid) == "alpha saw: onealpha saw: one | two"  # the same alpha session
        assert agents_running(wrapper.proc.pid) == ["alpha"]
    events = loaded_events(store, sid)
    assert not [e for e in events if e["type"] == "config/set"]
    assert [e["data"]["agent"] for e in events if e["type"] == "turn/start"] == ["alpha", "alpha"]


async def test_a_fork_of_a_moved_session_stays_with_its_agent(tmp_path: Path, work: Path) -> None:
    # The fork is made by the agent the original was handed to (seeded: the memory agent
    # cannot fork), live or stored; its answer carries our option at that agent.
    store, record = tmp_path / "store", tmp_path / "got.jsonl"
    agents = [("alpha", memory("alpha", "--record", str(record))), ("beta", memory("beta", "--record", str(record)))]
    async with Switching(store, agents) as wrapper:
        await wrapper.initialize()
        sid = (await wrapper.new(work))["sessionId"]
        await wrapper.prompt(sid, "the apple is red")
        await wrapper.set_option(sid, "agent", "beta")
        forked = await wrapper.request("session/fork", {"sessionId": sid, "cwd": str(work), "mcpServers": []})
        fid = forked["sessionId"]
        assert forked["_meta"]["acpBridge"]["wrapped"]["agent"] == "beta"
        assert forked["_meta"]["acpBridge"]["wrapped"]["forked"] == "emulated"
        assert ours(forked["configOptions"])["currentValue"] == "beta"
        await wrapper.prompt(fid, "in the fork")
        said = wrapper.text_of(fid)
        assert said.startswith("beta saw: ") and "the apple is red" in said and said.endswith("in the fork")
    async with Switching(store, agents) as again:  # the original not live: read as stored
        await again.initialize()
        second = await again.request("session/fork", {"sessionId": sid, "cwd": str(work), "mcpServers": []})
        assert second["_meta"]["acpBridge"]["wrapped"]["agent"] == "beta"
        await again.prompt(second["sessionId"], "again")
        assert again.text_of(second["sessionId"]).startswith("beta saw: ")
        # A load of the first fork places it with beta, in a session of its own.
        loaded = await again.load_session(fid, work)
        assert loaded["_meta"]["acpBridge"]["wrapped"]["agent"] == "beta"
    turns = [e["data"]["agent"] for e in loaded_events(store, fid) if e["type"] == "turn/start"]
    assert turns == ["alpha", "beta"]
    prompted = {m["params"]["sessionId"] for m in received(record)
                if m.get("method") == "session/prompt" and "in the fork" in json.dumps(m["params"])}
    # The original's own session in beta (its switch recorded it) is not the fork's.
    moved = [e["data"]["wrapped"]["sessionId"] for e in loaded_events(store, sid) if e["type"] == "config/set"]
    assert len(prompted) == 1 and len(moved) == 1 and moved[0] not in prompted
