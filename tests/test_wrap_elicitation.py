"""A wrapped agent's URL elicitation through `wrap` (docs/wrap.md, "Slash commands,
logout, elicitation, usage"): its `elicitation/create` reaches the editor with the session
id mapped and the answer goes back, and its `elicitation/complete` (a notification that
names no session) reaches the editor unchanged. Real processes: the wrapper over
tests/support/memory_agent.py (its prompt `elicit-url`); every message the wrapper sends
is checked against the vendored schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.acp_client import ClientPolicy
from tests.support.switching import memory
from tests.support.wrapped import WrappedProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_a_childs_url_elicitation_and_its_completion_reach_the_editor(tmp_path: Path, work: Path) -> None:
    policy = ClientPolicy(elicitations=[{"action": "accept"}])
    async with WrappedProcess(tmp_path / "store", memory("solo"), policy=policy) as wrapper:
        await wrapper.initialize({"elicitation": {"url": {}}})
        sid = await wrapper.new_session(work)
        answer = await wrapper.prompt(sid, "elicit-url")
        assert answer["stopReason"] == "end_turn"
        (asked,) = policy.elicited
        assert asked["sessionId"] == sid and asked["elicitationId"] == "page-1" and asked["mode"] == "url"
        completions = [(i, m) for i, (d, m) in enumerate(wrapper.transcript)
                       if d == "<-" and m.get("method") == "elicitation/complete"]
        assert [m["params"] for _, m in completions] == [{"elicitationId": "page-1"}]
        prompt_answer = next(i for i, (d, m) in enumerate(wrapper.transcript)
                             if d == "<-" and "stopReason" in json.dumps(m.get("result") or {}))
        assert completions[0][0] < prompt_answer  # in the order the agent sent them
        said = "".join(u["content"]["text"] for u in wrapper.updates_of(sid)
                       if u["sessionUpdate"] == "agent_message_chunk")
        assert said == 'solo saw: {"action": "accept"}'  # the editor's answer reached the agent
