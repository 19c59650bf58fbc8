"""A wrapped agent's subagents (ACP's unstable `subagent_update`; docs/wrap.md,
"Subagents"): a child session the agent announces on a session of ours becomes a session
of ours too, recorded apart, its header naming the parent; the editor sees only our ids;
`sessions list` lists it under its parent; a new wrapper loads it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.acp_client import ClientPolicy
from tests.support.logs import loaded_events
from tests.support.wrapped import WrappedProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

AGENT = [sys.executable, str(Path(__file__).parent / "support" / "subagent_agent.py")]


def sessions(store: Path, *args: str) -> str:
    return subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(store), "list", *args],
                          capture_output=True, text=True, timeout=60, check=True).stdout


async def test_a_subagent_is_a_session_of_ours_under_its_parent(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    policy = ClientPolicy(permissions=["allow"])
    async with WrappedProcess(store, AGENT, policy=policy) as editor:
        await editor.initialize()
        parent = await editor.new_session(work)
        answer = await editor.prompt(parent, "go")
        assert answer["stopReason"] == "end_turn"
        announced = [u for u in editor.updates_of(parent) if u["sessionUpdate"] == "subagent_update"]
        assert [u.get("title") for u in announced] == ["Researcher", None]
        ours = {u["sessionId"] for u in announced}
        assert len(ours) == 1 and "sub-1" not in ours  # the editor sees only our ids
        (sub,) = ours
        said = [u["content"]["text"] for u in editor.updates_of(sub) if u["sessionUpdate"] == "agent_message_chunk"]
        assert said == ["looking into it"]
        (asked,) = policy.asked
        assert asked["sessionId"] == sub  # the subagent's request, under our id too
        assert "sub-1" not in orjson.dumps(editor.updates_of(parent)).decode()
    events = loaded_events(store, sub)
    assert [e["type"] for e in events] == ["wrapped/update"]
    listed: list[dict[str, Any]] = orjson.loads(sessions(store, "--json"))
    row = next(r for r in listed if r["id"] == sub)
    assert row["parent"] == {"sessionId": parent}
    assert row["wrapped"]["sessionId"] == "sub-1"
    lines = sessions(store).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(parent))
    assert lines[at + 1].startswith(sub) and lines[at + 1].endswith("└ Researcher")
    async with WrappedProcess(store, AGENT) as second:  # a new wrapper: it loads and replays
        await second.initialize()
        await second.load_session(sub, work)
        replayed = [u["content"]["text"] for u in second.replayed(sub) if u["sessionUpdate"] == "agent_message_chunk"]
        assert replayed == ["looking into it"]
