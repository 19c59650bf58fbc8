"""The wrapper's own slash commands (docs/wrap.md, "Slash commands, logout, elicitation,
usage"): `/fork` and, with several agents, `/agent`, offered after the wrapped agent's
own (which win a name both have, but for `/fork`: the wrapper's takes the agent's place)
and run as turns of their own, not sent to the agent. Real processes: the wrapper over
tests/support/memory_agent.py (an agent whose answer shows every prompt it was shown;
`--commands`: it offers `fork` and `recall` of its own, `--agent-command` an `agent`).
Every message the wrapper sends is checked against the vendored schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.wrap.seed import PREFACE
from session import check_invariants
from tests.support.acp_schema import validate_def
from tests.support.logs import loaded_events
from tests.support.switching import Switching, memory
from tests.support.wrapped import WrappedProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

OURS_FORK = {"name": "fork", "description": "Fork this session into a new one",
             "input": {"hint": "the last turn it holds (optional)"}}
OURS_AGENT = {"name": "agent", "description": "Hand this session to another wrapped agent",
              "input": {"hint": "alpha | beta"}}
THEIRS = [{"name": "fork", "description": "the memory agent's own fork"},
          {"name": "recall", "description": "say what it saw", "input": {"hint": "anything"}},
          {"name": "agent", "description": "the memory agent's own agent command"}]
# What the editor is shown of alpha's list: ours in the place of its `fork`, the rest as it came.
SHOWN = [OURS_FORK, *THEIRS[1:]]


def offers(updates: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    found = [u["availableCommands"] for u in updates if u["sessionUpdate"] == "available_commands_update"]
    for listed in found:
        for command in listed:
            validate_def("AvailableCommand", command)
    return found


def agents(record: Path | None = None, *alpha: str) -> list[tuple[str, list[str]]]:
    extra = ("--record", str(record)) if record is not None else ()
    return [("alpha", memory("alpha", "--commands", *alpha, *extra)), ("beta", memory("beta", *extra))]


def received(record: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in record.read_text().splitlines()]


def fork_id(text: str) -> str:
    return text.split(" into ")[1].split(",")[0]


async def test_ours_are_offered_after_the_childs_and_its_own_name_wins_but_fork(tmp_path: Path,
                                                                                work: Path) -> None:
    store, record = tmp_path / "store", tmp_path / "got.jsonl"
    async with Switching(store, agents(record, "--agent-command")) as wrapper:
        await wrapper.initialize()
        sid = (await wrapper.new(work))["sessionId"]
        # alpha's list first, as it came but for `fork`, ours in its place; then ours that
        # it does not name (none: its own `agent` hides ours).
        await wrapper.wait_for(lambda: bool(offers(wrapper.updates_of(sid)))
                               and offers(wrapper.updates_of(sid))[-1] == SHOWN)

        answer = await wrapper.prompt(sid, "/agent now")  # alpha's own command: passed on unchanged
        assert answer["stopReason"] == "end_turn"
        assert wrapper.text_of(sid) == "alpha saw: /agent now"
        await wrapper.prompt(sid, "/recall")
        assert wrapper.text_of(sid).endswith("alpha saw: /agent now | /recall")
        forked = await wrapper.prompt(sid, "/fork")  # ours, not alpha's: a fork the wrapper can reach
        assert forked["stopReason"] == "end_turn"
        fid = fork_id(wrapper.text_of(sid))
        assert wrapper.text_of(sid).endswith("The wrapped agent was given a fresh session, shown the fork's "
                                             "conversation.")
        assert fid in [s["sessionId"] for s in (await wrapper.request("session/list", {}))["sessions"]]

    prompts = [m["params"]["prompt"] for m in received(record) if m.get("method") == "session/prompt"
               and not m["params"]["prompt"][0]["text"].startswith(PREFACE)]  # the fork's seed
    assert prompts == [[{"type": "text", "text": "/agent now"}], [{"type": "text", "text": "/recall"}]]
    events = loaded_events(store, sid)
    assert [e["data"]["trigger"] for e in events if e["type"] == "turn/start"] == [
        {"kind": "prompt"}, {"kind": "prompt"}, {"kind": "command", "name": "fork"}]
    # The child's list recorded as it came.
    stored = [e["data"]["update"] for e in events if e["type"] == "wrapped/update"]
    assert stored == [{"sessionUpdate": "available_commands_update", "availableCommands": THEIRS}]

    # Rebuilt on replay: the stored list shown with ours, then offered before the answer.
    async with Switching(store, agents(None, "--agent-command")) as again:
        await again.initialize()
        await again.load_session(sid, work)
        # (alpha cannot load its session: its fresh one sends the list again, before
        # our answer or held until the next request.)
        replayed = offers(again.replayed(sid))
        assert replayed and all(listed == SHOWN for listed in replayed), replayed
        await again.prompt(sid, "/recall")
        assert all(listed == SHOWN for listed in offers(again.updates_of(sid)))


async def test_agent_switches_and_the_command_turns_are_recorded(tmp_path: Path, work: Path) -> None:
    store, record = tmp_path / "store", tmp_path / "got.jsonl"
    async with Switching(store, agents(record)) as wrapper:
        await wrapper.initialize()
        sid = (await wrapper.new(work))["sessionId"]
        await wrapper.prompt(sid, "the apple is red")
        listed = await wrapper.prompt(sid, "/agent")
        assert listed["stopReason"] == "end_turn" and listed["_meta"]["acpBridge"]["turn"] == 2
        assert wrapper.text_of(sid).endswith("The agent is alpha. Agents: alpha (current), beta")

        shown = len(wrapper.updates_of(sid))
        moved = await wrapper.prompt(sid, "/agent beta")
        assert moved["stopReason"] == "end_turn" and moved["_meta"]["acpBridge"]["turn"] == 3
        after = wrapper.updates_of(sid)[shown:]
        kinds = [u["sessionUpdate"] for u in after]
        # The editor is shown the switch (our option), beta's commands (alpha's are
        # gone: ours only), then the command's answer.
        assert kinds == ["config_option_update", "available_commands_update", "agent_message_chunk"], kinds
        option = next(o for o in after[0]["configOptions"] if o["id"] == "agent")
        assert option["currentValue"] == "beta"
        assert after[1]["availableCommands"] == [OURS_FORK, OURS_AGENT]
        assert after[2]["content"]["text"] == "Agent: beta (from the next prompt on; shown the conversation so far)."

        await wrapper.prompt(sid, "what colour is it?")
        said = wrapper.text_of(sid, shown + 3)
        # beta got the conversation through the seed (the `/agent` listing among it, as
        # text), and the next prompt.
        assert said.startswith("beta saw: " + PREFACE) and "the apple is red" in said
        assert "alpha (current), beta" in said and said.endswith(" | what colour is it?")

        # A command that cannot run is answered with what was wrong, not failed (issue 35).
        before = len(wrapper.updates_of(sid))
        refused = await wrapper.prompt(sid, "/agent gamma")
        assert refused["stopReason"] == "end_turn"
        assert refused["_meta"]["acpBridge"]["reason"]["code"] == "command_failed"
        assert "The command could not run: no agent named 'gamma'" in wrapper.text_of(sid, before)

    to_children = [m["params"]["prompt"][0]["text"] for m in received(record) if m.get("method") == "session/prompt"]
    assert not any(text.startswith("/agent") for text in to_children)  # never sent to an agent

    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    starts = [e["data"] for e in events if e["type"] == "turn/start"]
    assert [(s["trigger"], s["agent"]) for s in starts] == [
        ({"kind": "prompt"}, "alpha"), ({"kind": "command", "name": "agent"}, "alpha"),
        ({"kind": "command", "name": "agent"}, "beta"),  # recorded after the switch it made
        ({"kind": "prompt"}, "beta"), ({"kind": "command", "name": "agent"}, "beta")]
    kinds = [e["type"] for e in events]
    turn3 = kinds.index("turn/start", kinds.index("turn/end", kinds.index("turn/end") + 1))
    assert kinds[turn3 - 1] == "config/set"  # the switch, durable before its turn and its answer
    turn2 = [e for e in events if e["data"].get("turn") == 2]
    assert [e["type"] for e in turn2] == ["turn/start", "user/message", "step/start", "assistant/chunk",
                                          "assistant/message", "step/end", "turn/end"]
    assert turn2[1]["data"]["content"] == [{"type": "text", "text": "/agent"}]
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert ends[-1]["kind"] == "error" and ends[-1]["code"] == "command_failed"

    shown_text = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "show", sid, "--store", str(store)],
                                capture_output=True, text=True, check=True).stdout
    assert "/agent beta" in shown_text and "Agent: beta (from the next prompt on" in shown_text


async def test_fork_through_wrap_makes_a_fork_that_loads(tmp_path: Path, work: Path) -> None:
    store, record = tmp_path / "store", tmp_path / "got.jsonl"
    child = memory("solo", "--record", str(record))
    async with WrappedProcess(store, child) as wrapper:
        await wrapper.initialize()
        sid = await wrapper.new_session(work)
        # The child offers none: ours are offered after the answer.
        await wrapper.wait_for(lambda: bool(offers(wrapper.updates_of(sid))))
        assert offers(wrapper.updates_of(sid)) == [[OURS_FORK]]
        await wrapper.prompt(sid, "the sky is green")
        await wrapper.prompt(sid, "and the grass blue")
        answer = await wrapper.prompt(sid, "/fork 1")
        assert answer["stopReason"] == "end_turn"
        text = "".join(u["content"]["text"] for u in wrapper.updates_of(sid)
                       if u["sessionUpdate"] == "agent_message_chunk")
        fid = fork_id(text)
        assert text.endswith(f"Forked this session into {fid}, with its turns 1-1; open it from the session "
                             "list (session/load). The wrapped agent was given a fresh session, shown the "
                             "fork's conversation.")
        assert not wrapper.updates_of(fid)  # stored and kept for the editor, not shown to it
        loaded = await wrapper.load_session(fid, work)
        assert loaded["_meta"]["acpBridge"]["turns"] == 1
        replayed = [u for u in wrapper.replayed(fid) if u["sessionUpdate"] == "user_message_chunk"]
        assert [u["content"]["text"] for u in replayed] == ["the sky is green"]
        loaded_count = len(wrapper.updates_of(fid))
        await wrapper.prompt(fid, "what colour?")
        said = "".join(u["content"]["text"] for u in wrapper.updates_of(fid)[loaded_count:]
                       if u["sessionUpdate"] == "agent_message_chunk")
        # Its agent session was seeded with the fork's turn 1, not the original's turn 2.
        assert said.startswith("solo saw: " + PREFACE) and "the sky is green" in said
        assert "and the grass blue" not in said and said.endswith(" | what colour?")

    prompts = [m["params"]["prompt"][0]["text"] for m in received(record) if m.get("method") == "session/prompt"]
    assert "/fork 1" not in prompts
    events = loaded_events(store, sid)
    starts = [e["data"]["trigger"] for e in events if e["type"] == "turn/start"]
    assert starts == [{"kind": "prompt"}, {"kind": "prompt"}, {"kind": "command", "name": "fork"}]
    fork_events = loaded_events(store, fid)
    check_invariants(fork_events, closed=True)  # type: ignore[arg-type]
    assert [e["data"]["turn"] for e in fork_events if e["type"] == "turn/start"] == [1, 2]
