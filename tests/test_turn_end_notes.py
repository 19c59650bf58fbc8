"""Replays say how each turn ended (issue 24): a turn that did not complete (cancelled,
failed, interrupted, stopped at a limit) ends with a visible note in the conversation,
live and on every later `session/load`, the same update both times (schema-checked by
the harness); the load names the session again (`session_info_update`); and
`acp-bridge chat` shows the same notes, live and after `/load`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.host.listing import iso_time
from acp_bridge.host.replay import ReplayEncoder
from acp_bridge.host.updates import end_notice
from session.events import CancelledReason, ErrorReason, MaxTokensReason, Reason
from tests.support.acp_client import (
    WRITE_STEP,
    AgentError,
    AgentProcess,
    ClientPolicy,
    write_script,
)
from tests.support.logs import loaded_events

pytestmark = pytest.mark.anyio

CANCELLED: CancelledReason = {"kind": "cancelled", "by": "session/cancel"}
BY_PERMISSION: CancelledReason = {"kind": "cancelled", "by": "session/request_permission"}
FAILED: ErrorReason = {"kind": "error", "step": 1, "message": "the provider is overloaded", "code": "overloaded",
                       "retryable": True}
MAX_TOKENS: MaxTokensReason = {"kind": "max_tokens"}


def notes(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u for u in updates if u["sessionUpdate"] == "agent_message_chunk"
            and str(u.get("messageId", "")).endswith("-end")]


def note(turn: int, reason: Reason) -> dict[str, Any]:
    text = end_notice(reason)
    assert text is not None
    return {"sessionUpdate": "agent_message_chunk", "messageId": f"t{turn}-end",
            "content": {"type": "text", "text": text}, "_meta": {"acpBridge": {"turn": turn, "reason": reason}}}


async def four_ends(tmp_path: Path, work: Path) -> tuple[Path, str, AgentProcess]:
    """A session of five turns: cancelled by the client, cancelled by a permission answer,
    failed, cut at the model's output limit, completed."""
    model = write_script(
        tmp_path / "script.json",
        {"text": "counting one two", "hang": True},
        WRITE_STEP,
        {"text": "partial", "error": {"message": FAILED["message"], "code": "overloaded", "retryable": True}},
        {"text": "cut", "finish": "max_tokens"},
        {"text": "all good"},
        chunk_delay_ms=2,
    )
    store = tmp_path / "store"
    agent = AgentProcess(store, model=model, policy=ClientPolicy(permissions=[None]))
    async with agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        answer = await agent.cancelled_when(sid, "Count slowly", lambda: len(agent.updates_of(sid)) >= 3)
        assert answer["result"]["stopReason"] == "cancelled"
        assert (await agent.prompt(sid, "write it"))["stopReason"] == "cancelled"
        with pytest.raises(AgentError):
            await agent.prompt(sid, "try")
        assert (await agent.prompt(sid, "long"))["stopReason"] == "max_tokens"
        assert (await agent.prompt(sid, "fine"))["stopReason"] == "end_turn"
    return store, sid, agent


@pytest.mark.integration
async def test_every_end_but_completed_has_its_note_live_and_on_load(tmp_path: Path, work: Path) -> None:
    store, sid, agent = await four_ends(tmp_path, work)
    expected = [note(1, CANCELLED), note(2, BY_PERMISSION), note(3, FAILED), note(4, MAX_TOKENS)]
    assert notes(agent.updates_of(sid)) == expected
    # Live, each note is the turn's last update, before the prompt's answer.
    for turn in range(1, 5):
        where = next(i for i, (d, m) in enumerate(agent.transcript) if d == "<-" and m.get("method") ==
                     "session/update" and m["params"]["update"].get("messageId") == f"t{turn}-end")
        later = [m for d, m in agent.transcript[where + 1:] if d == "<-"]
        assert "result" in later[0] or "error" in later[0], later[0]
    async with AgentProcess(store) as loader:
        await loader.initialize()
        await loader.load_session(sid, work)
    replayed = loader.replayed(sid)
    assert notes(replayed) == expected
    # The replay names the session last, as the live stream named it at the first
    # prompt; only the session's commands follow it before the answer.
    (live_title,) = [u for u in agent.updates_of(sid) if u["sessionUpdate"] == "session_info_update"]
    assert [u["sessionUpdate"] for u in replayed[-2:]] == ["session_info_update", "available_commands_update"]
    assert replayed[-2]["title"] == live_title["title"] == "Count slowly"
    assert replayed[-2]["updatedAt"] >= live_title["updatedAt"]
    assert loader.returncode == 0


def test_the_notes_say_why() -> None:
    assert end_notice({"kind": "completed"}) is None
    assert end_notice(CANCELLED) == "\n\n[This turn was cancelled: it was stopped before it finished.]"
    assert end_notice(FAILED) == "\n\n[This turn failed: the provider is overloaded.]"
    assert end_notice({"kind": "interrupted", "cause": "crash"}) == (
        "\n\n[This turn was interrupted: the agent stopped unexpectedly (crash) before it finished.]")


def run_chat(store: Path, work: Path, lines: list[str], *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    proc = subprocess.run([sys.executable, "-m", "acp_bridge", "chat", "--store", str(store), "--cwd", str(work),
                           *args], input="".join(line + "\n" for line in lines), capture_output=True, text=True,
                          encoding="utf-8", env={**env, "PYTHONUNBUFFERED": "1"}, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.integration
async def test_chat_shows_the_notes_of_a_loaded_session(tmp_path: Path, work: Path) -> None:
    store, sid, _ = await four_ends(tmp_path, work)
    out = run_chat(store, work, [], "--load", sid)
    shown = [line for line in out.splitlines() if line.startswith("[This turn")]
    assert shown == [(end_notice(r) or "").strip() for r in (CANCELLED, BY_PERMISSION, FAILED, MAX_TOKENS)]


@pytest.mark.integration
def test_chat_says_how_a_live_turn_ended_once(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "script.json", {"text": "so far", "finish": "max_tokens"},
                         {"error": {"message": "boom", "code": "provider"}})
    out = run_chat(tmp_path / "store", work, ["first", "second"], "--model", model)
    assert "so far\n[This turn stopped: the model reached its output limit.]\n> " in out
    assert "> second\n[This turn failed: boom.]\n> " in out
    # The prompt's answer says it again in other words: not shown a second time.
    assert "[stopped:" not in out and "[error:" not in out


@pytest.mark.integration
async def test_a_load_names_the_session_again(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with AgentProcess(store) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "  Plan   the\nrelease  ")
        await agent.prompt(sid, "and then?")
    async with AgentProcess(store) as loader:
        await loader.initialize()
        await loader.load_session(sid, work)
        listed = await loader.request("session/list", {})
    named = loader.replayed(sid)[-2]  # the replay's last update: the session's commands follow it
    assert named["sessionUpdate"] == "session_info_update"
    (info,) = listed["sessions"]
    assert named["title"] == info["title"] == "Plan the release"  # what the list calls it
    assert named["updatedAt"] == iso_time(loaded_events(store, sid)[-1]["time"])  # its last event's


def test_the_title_a_load_sends_is_the_header_s_else_the_agent_s_else_the_first_prompt_s() -> None:
    def title(header: dict[str, Any], events: list[dict[str, Any]]) -> Any:
        encoder = ReplayEncoder("s-1", None)
        encoder.encode(events)  # type: ignore[arg-type]
        line = encoder.title(header)  # type: ignore[arg-type]
        return orjson.loads(line)["params"]["update"] if line else None

    prompt = {"type": "user/message", "seq": 1, "time": 1_700_000_000_000,
              "data": {"turn": 1, "content": [{"type": "text", "text": "fix the build"}]}}
    agent_named = {"type": "wrapped/update", "seq": 2, "time": 1_700_000_000_500,
                   "data": {"turn": 1, "update": {"sessionUpdate": "session_info_update", "title": "Build fix"}}}
    assert title({}, [prompt]) == {"sessionUpdate": "session_info_update", "title": "fix the build",
                                   "updatedAt": "2023-11-14T22:13:20.000Z"}
    assert title({}, [prompt, agent_named])["title"] == "Build fix"  # a wrapped agent's own, as it streamed
    assert title({"title": "Given"}, [prompt, agent_named])["title"] == "Given"
    assert title({}, []) is None  # nothing to name it by: nothing sent
