"""Compaction and notices through `acp-bridge serve` (ACP v1.25; docs/protocol.md,
"Compaction and notices"), as an editor sees them on the wire: a scripted model whose
answers count 60,000 tokens each (their usage) outgrows the script's window of 200,000
in four turns, and its summary step is the compaction's summary.

A client that advertised compaction sees one entity, from in progress to completed,
live and at the same place on load; one that advertised notices only is told live and
never on load; one that advertised neither sees exactly what it saw before compaction
existed. A kill -9 during the summary call leaves a log that the next load repairs to a
failed compaction, at the same place. The traffic of the capable client is pinned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from session import check_invariants
from tests.support.acp_client import AgentProcess, normalized, write_script
from tests.support.logs import loaded_events

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

BIG = {"inputTokens": 0, "outputTokens": 60_000}
SUMMARY = "Three long answers; the user wants a fourth."
STEPS: tuple[dict[str, Any], ...] = ({"text": "one", "usage": BIG}, {"text": "two", "usage": BIG},
                                     {"text": "three", "usage": BIG},
                                     {"summary": SUMMARY, "usage": {"inputTokens": 180_300, "outputTokens": 9}},
                                     {"text": "four"})
COMPACTION: dict[str, Any] = {"session": {"compaction": {}}}
NOTICES: dict[str, Any] = {"session": {"notices": {}}}
BOTH: dict[str, Any] = {"session": {"compaction": {}, "notices": {}}}


def extensions(updates: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(kind, status or severity) of the updates a client must ask for."""
    return [(u["sessionUpdate"], u.get("status", u.get("severity"))) for u in updates
            if u["sessionUpdate"] in ("compaction_update", "compaction_summary_chunk", "notice")]


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [u["sessionUpdate"] for u in updates]


async def four_turns(agent: AgentProcess, work: Path, caps: dict[str, Any] | None) -> str:
    await agent.initialize(caps)
    sid = await agent.new_session(work)
    for text in ("first", "second", "third", "fourth"):
        assert (await agent.prompt(sid, text))["stopReason"] == "end_turn"
    return sid


async def test_a_client_that_advertised_compaction_sees_it_live_and_on_load(
        tmp_path: Path, work: Path, snapshot_json: Any) -> None:
    store, model = tmp_path / "store", write_script(tmp_path / "script.json", *STEPS)
    async with AgentProcess(store, model=model) as agent:
        sid = await four_turns(agent, work, BOTH)
        live = agent.updates_of(sid)
        # Turn 4: the compaction, in progress then completed with its summary, before
        # the answer's text; no notice: the client takes the compaction itself.
        assert extensions(live) == [("compaction_update", "in_progress"), ("compaction_update", "completed")]
        completed = next(u for u in live if u.get("status") == "completed")
        assert completed == {
            "sessionUpdate": "compaction_update", "compactionId": "t4s1-compaction", "status": "completed",
            "summary": [{"type": "text", "text": SUMMARY}],
            "_meta": {"acpBridge": {"turn": 4, "step": 1, "replaces": {"fromTurn": 1, "toTurn": 2}}}}
        assert kinds(live)[kinds(live).index("compaction_update") + 2] == "agent_message_chunk"
        assert not agent.violations
    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    async with AgentProcess(store, model=model) as agent:
        await agent.initialize(COMPACTION)
        await agent.load_session(sid, work)
        replayed = agent.replayed(sid)
        # The same entity at the same place, in the same two updates.
        assert [u for u in replayed if u["sessionUpdate"] == "compaction_update"] == \
            [u for u in live if u["sessionUpdate"] == "compaction_update"]
        prompt4 = next(n for n, u in enumerate(replayed) if u.get("messageId") == "t4-user")
        assert kinds(replayed)[prompt4 + 1:prompt4 + 4] == ["compaction_update", "compaction_update",
                                                            "agent_message_chunk"]
    # Pinned: what the client is sent of the session live and on load (the command list,
    # which is no part of this, left out).
    pinned = [("live", [u for u in live if u["sessionUpdate"] != "available_commands_update"]),
              ("replayed", [u for u in replayed if u["sessionUpdate"] != "available_commands_update"])]
    assert normalized(pinned, tmp_path, work) == snapshot_json


async def test_a_client_that_advertised_neither_sees_what_it_saw_before(tmp_path: Path, work: Path) -> None:
    store, model = tmp_path / "store", write_script(tmp_path / "script.json", *STEPS)
    async with AgentProcess(store, model=model) as agent:
        sid = await four_turns(agent, work, None)
        assert extensions(agent.updates_of(sid)) == []
        await agent.load_session(sid, work)
        replayed = agent.replayed(sid)
        assert extensions(replayed) == []
    # What a load replays of the log without its compaction is byte for byte the same.
    assert [e for e in loaded_events(store, sid) if e["type"] == "context/compaction"]


async def test_a_client_that_takes_notices_is_told_live_and_never_on_load(tmp_path: Path, work: Path) -> None:
    store, model = tmp_path / "store", write_script(tmp_path / "script.json", *STEPS)
    async with AgentProcess(store, model=model) as agent:
        sid = await four_turns(agent, work, NOTICES)
        notices = [u for u in agent.updates_of(sid) if u["sessionUpdate"] == "notice"]
        assert notices == [{"sessionUpdate": "notice", "severity": "info", "title": "Context compacted",
                            "description": "The conversation up to turns 1 to 2 was summarized to fit the "
                                           "model's context window; the session log keeps it whole."}]
        await agent.load_session(sid, work)
        assert extensions(agent.replayed(sid)) == []
        assert not agent.violations


async def test_a_kill_during_the_summary_is_repaired_to_a_failed_compaction(tmp_path: Path, work: Path) -> None:
    hanging = (*STEPS[:3], {"summary": "never finished", "hang": True})
    store = tmp_path / "store"
    async with AgentProcess(store, model=write_script(tmp_path / "hang.json", *hanging)) as agent:
        await agent.initialize(COMPACTION)
        sid = await agent.new_session(work)
        for text in ("first", "second", "third"):
            assert (await agent.prompt(sid, text))["stopReason"] == "end_turn"
        async with anyio.create_task_group() as tg:
            agent.prompt_soon(tg, sid, "fourth")
            # In progress: the summary call hangs (its event reached the log before the update).
            await agent.wait_for(lambda: ("compaction_update", "in_progress") in extensions(agent.updates_of(sid)))
            agent.kill9()
            with anyio.fail_after(5):
                await agent.proc.wait()
            tg.cancel_scope.cancel()
    again = write_script(tmp_path / "again.json", {"summary": SUMMARY}, {"text": "five"})
    async with AgentProcess(store, model=again) as agent:
        await agent.initialize(COMPACTION)
        loaded = await agent.load_session(sid, work)
        repair = loaded["_meta"]["acpBridge"]["repair"]
        assert repair["repaired"] is True and repair["interruptedTurn"] == 4
        replayed = agent.replayed(sid)
        failed = [u for u in replayed if u["sessionUpdate"] == "compaction_update"]
        assert [(u["compactionId"], u["status"], u.get("error")) for u in failed] == [
            ("t4s1-compaction", "in_progress", None),
            ("t4s1-compaction", "failed", "The agent stopped (crash) before the compaction finished.")]
        # The session goes on: the next turn compacts (turns 1-3 now), and answers.
        assert (await agent.prompt(sid, "fifth"))["stopReason"] == "end_turn"
        assert ("compaction_update", "completed") in extensions(agent.updates_of(sid))
        assert not agent.violations
    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    assert [(e["data"]["turn"], e["data"]["status"]) for e in events if e["type"] == "context/compaction"] == [
        (4, "in_progress"), (4, "failed"), (5, "in_progress"), (5, "completed")]
