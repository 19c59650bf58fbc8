"""`acp-bridge wrap --agent`: a conversation started in a real third-party agent,
fast-agent (its `passthrough` model: no key, it echoes the prompt), and continued in
another, our own `serve` (its `echo` model), whose model is shown fast-agent's turn; then
handed back to fast-agent, and loaded again in the agent of its last turn.

fast-agent needs Python >= 3.12: `.ci/run` installs it and runs this module (marker
`fast_agent`) with the executable in $ACP_BRIDGE_TEST_FAST_AGENT; without it, it skips
(tests/test_wrap_fast_agent.py says the same)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from session import check_invariants
from tests.support.logs import loaded_events
from tests.support.peers import FAST_AGENT_ENV, fast_agent, fast_agent_command, texts
from tests.support.switching import Switching, ours
from tests.support.wrapped import serve_command

EXECUTABLE = fast_agent()
pytestmark = [
    pytest.mark.fast_agent,
    pytest.mark.anyio,
    pytest.mark.timeout(240),
    pytest.mark.skipif(EXECUTABLE is None, reason=(
        f"${FAST_AGENT_ENV} names no fast-agent executable (fast-agent needs Python >= 3.12; "
        ".ci/run installs it into .venv-fast-agent and sets the variable)")),
]
START = 120.0  # seconds: fast-agent's start-up on a busy machine


async def test_a_conversation_in_fast_agent_continued_in_our_agent(tmp_path: Path) -> None:
    assert EXECUTABLE is not None
    store, inner, work = tmp_path / "store", tmp_path / "inner", tmp_path / "work"
    work.mkdir()
    agents = [("fast", fast_agent_command(EXECUTABLE)), ("ours", serve_command(inner))]
    async with Switching(store, agents) as wrapper:
        init = await wrapper.request("initialize", {"protocolVersion": 1, "clientCapabilities": {},
                                                    "clientInfo": {"name": "tests", "version": "0"}}, timeout=START)
        assert init["agentInfo"]["name"] == "fast-agent-acp"
        new = await wrapper.request("session/new", {"cwd": str(work), "mcpServers": []}, timeout=START)
        sid = new["sessionId"]
        assert ours(new["configOptions"], next(o["id"] for o in new["configOptions"] if o["name"] == "Agent"))[
            "currentValue"] == "fast"
        await wrapper.prompt(sid, "the password is marmalade", timeout=START)
        assert texts(wrapper.updates_of(sid), "agent_message_chunk") == ["the password is marmalade"]

        switched = await wrapper.set_option(sid, "agent", "ours", timeout=START)
        assert switched["_meta"]["acpBridge"]["wrapped"]["seeded"] is True
        shown = len(wrapper.updates_of(sid))
        await wrapper.prompt(sid, "what was it?", timeout=START)
        assert "".join(texts(wrapper.updates_of(sid)[shown:], "agent_message_chunk")) == "what was it?"

        back = await wrapper.set_option(sid, "agent", "fast", timeout=START)
        assert back["_meta"]["acpBridge"]["wrapped"]["agent"] == "fast"
        shown = len(wrapper.updates_of(sid))
        await wrapper.prompt(sid, "thanks", timeout=START)
        assert texts(wrapper.updates_of(sid)[shown:], "agent_message_chunk") == ["thanks"]

    # Our agent's model was shown fast-agent's turn: the seed is its first user message,
    # with the prompt fast-agent had and fast-agent's answer.
    inner_sessions = list((inner / "sessions").glob("*.jsonl"))
    assert len(inner_sessions) == 1
    seen = [json.dumps(e["data"]["content"]) for e in loaded_events(inner, inner_sessions[0].stem)
            if e["type"] == "user/message"]
    assert len(seen) == 2 and seen[0].count("the password is marmalade") == 2 and "what was it?" in seen[1]

    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    assert [e["data"]["agent"] for e in events if e["type"] == "turn/start"] == ["fast", "ours", "fast"]
    assert [e["data"]["value"] for e in events if e["type"] == "config/set"] == ["ours", "fast"]

    async with Switching(store, agents) as again:
        await again.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}}, timeout=START)
        loaded = await again.request("session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []},
                                     timeout=START)
        wrapped = loaded["_meta"]["acpBridge"]["wrapped"]
        # fast-agent loads its own session, the one the switch back gave it.
        assert wrapped["agent"] == "fast" and wrapped["restored"] == "load", wrapped
        shown = len(again.updates_of(sid))
        await again.prompt(sid, "once more", timeout=START)
        assert texts(again.updates_of(sid)[shown:], "agent_message_chunk") == ["once more"]
