"""`acp-bridge wrap --seed-fresh`: a load whose child session is fresh (the wrapped agent
cannot load or resume) seeds it with the transcript by one prompt of the wrapper's own,
kept from the editor and from our log (docs/wrap.md, "Load")."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.wrap.seed import PREFACE, seed_text
from session import check_invariants, derive_messages
from tests.support.acp_client import AgentProcess
from tests.support.logs import Script, events_of, loaded_events
from tests.support.wrapped import WrappedProcess

pytestmark = pytest.mark.anyio

AGENT = Path(__file__).resolve().parent / "support" / "wrap_seed_agent.py"


def agent_command(record: Path, *flags: str) -> list[str]:
    return [sys.executable, str(AGENT), str(record), *flags]


def received(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


async def two_turns(store: Path, work: Path, record: Path) -> str:
    async with WrappedProcess(store, agent_command(record)) as first:
        await first.initialize()
        sid = await first.new_session(work)
        assert (await first.prompt(sid, "one two three"))["stopReason"] == "end_turn"
        assert (await first.prompt(sid, "four five"))["stopReason"] == "end_turn"
    return sid


async def load(agent: AgentProcess, sid: str, work: Path) -> dict[str, Any]:
    await agent.initialize()
    result = await agent.load_session(sid, work)
    assert isinstance(result, dict)
    return result


@pytest.mark.integration
async def test_seed_fresh_sends_the_transcript_unseen_and_unrecorded(tmp_path: Path, work: Path) -> None:
    store, record = tmp_path / "store", tmp_path / "received.jsonl"
    sid = await two_turns(store, work, record)
    async with WrappedProcess(store, agent_command(record, "--ask"), wrap_args=("--seed-fresh",)) as second:
        loaded = await load(second, sid, work)
        assert loaded["_meta"]["acpBridge"]["wrapped"] == {
            "restored": "fresh", "seeded": True, "seedTurns": 2, "seedLeftOut": 0}
        replayed = second.updates_of(sid)
        # Only our replay (and, after the answer, the wrapper's commands): no chunk of
        # the echoed seed, no permission asked.
        assert [u["sessionUpdate"] for u in replayed] == [
            "user_message_chunk", "agent_message_chunk", "agent_message_chunk", "agent_message_chunk",
            "user_message_chunk", "agent_message_chunk", "agent_message_chunk", "session_info_update",
            "available_commands_update"]
        assert not second.policy.asked
        after = await second.prompt(sid, "six")
        assert after["_meta"]["acpBridge"]["turn"] == 3
        assert "".join(u["content"]["text"] for u in second.updates_of(sid)[len(replayed):]) == "six "
    got = received(record)
    assert [g.get("text") for g in got[:2]] == ["one two three", "four five"]
    seed = got[2]["text"]
    assert seed.startswith(PREFACE) and "earliest" not in seed
    for text in ("one two three", "one two three ", "four five", "four five "):
        assert text in seed
    assert seed.index("one two three") < seed.index("four five")
    assert got[3] == {"permission": {"outcome": "cancelled"}}  # answered by the wrapper
    assert got[4]["text"] == "six" and got[4]["sessionId"] == got[2]["sessionId"]
    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    turns = [e for e in events if e["type"] == "turn/start"]
    assert len(turns) == 3  # the two, and "six": the seed is no turn
    assert not any(PREFACE in json.dumps(e) for e in events)


@pytest.mark.integration
async def test_without_the_option_no_seed_is_sent(tmp_path: Path, work: Path) -> None:
    store, record = tmp_path / "store", tmp_path / "received.jsonl"
    sid = await two_turns(store, work, record)
    async with WrappedProcess(store, agent_command(record)) as second:
        loaded = await load(second, sid, work)
        assert loaded["_meta"]["acpBridge"]["wrapped"] == {"restored": "fresh"}
    assert [g["text"] for g in received(record)] == ["one two three", "four five"]


@pytest.mark.integration
async def test_a_failed_seed_still_loads(tmp_path: Path, work: Path) -> None:
    store, record = tmp_path / "store", tmp_path / "received.jsonl"
    sid = await two_turns(store, work, record)
    async with WrappedProcess(store, agent_command(record, "--fail-seed"), wrap_args=("--seed-fresh",)) as second:
        loaded = await load(second, sid, work)
        wrapped = loaded["_meta"]["acpBridge"]["wrapped"]
        assert wrapped["restored"] == "fresh" and wrapped["seeded"] is False
        assert isinstance(wrapped["seedError"], str) and wrapped["seedError"]
        assert (await second.prompt(sid, "six"))["_meta"]["acpBridge"]["turn"] == 3
    check_invariants(loaded_events(store, sid), closed=True)  # type: ignore[arg-type]


@pytest.mark.integration
async def test_an_empty_session_is_not_seeded(tmp_path: Path, work: Path) -> None:
    store, record = tmp_path / "store", tmp_path / "received.jsonl"
    async with WrappedProcess(store, agent_command(record)) as first:
        await first.initialize()
        sid = await first.new_session(work)
    async with WrappedProcess(store, agent_command(record), wrap_args=("--seed-fresh",)) as second:
        loaded = await load(second, sid, work)
        assert loaded["_meta"]["acpBridge"]["wrapped"] == {"restored": "fresh", "seeded": False, "seedTurns": 0}
    assert received(record) == []


def test_the_seed_keeps_the_last_whole_turns_that_fit() -> None:
    messages: list[Any] = []
    for i in range(10):
        messages.append({"role": "user", "content": [{"type": "text", "text": f"question {i} " + "x" * 100}]})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "thinking"},
                                                          {"type": "tool-call", "id": f"c{i}", "name": "t",
                                                           "arguments": "{}"}]})
        messages.append({"role": "tool", "callId": f"c{i}", "name": "t", "content": [], "isError": False})
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]})
    whole = seed_text(messages)
    assert whole.turns == 10 and whole.left_out == 0 and "thinking" not in whole.text
    cut = seed_text(messages, limit=500)
    assert cut.left_out > 0 and cut.turns + cut.left_out == 10
    assert "question 9" in cut.text and "answer 9" in cut.text and "question 0" not in cut.text
    assert f"The {cut.left_out} earliest turn(s) were left out" in cut.text
    assert len(cut.text) - len(cut.text.split("\n\n", 1)[0]) <= 500 + 2


def test_a_compactions_summary_seeds_the_turns_it_stands_for() -> None:
    script = Script().text_turn("one", "uno").text_turn("two", "dos").compacted_turn("They spoke Spanish.", "three",
                                                                                      "tres")
    seeded = seed_text(derive_messages(events_of(script.text_turn("four", "cuatro"))))
    assert seeded.turns == 2 and seeded.left_out == 0
    assert seeded.text == (f"{PREFACE}\n\n## Summary of the earlier conversation\nThey spoke Spanish.\n\n"
                           "## User (turn 1)\nthree\n\n## Agent (turn 1)\ntres\n\n"
                           "## User (turn 2)\nfour\n\n## Agent (turn 2)\ncuatro\n")
    # When the turns after it do not all fit, the summary goes with the earliest of them.
    cut = seed_text(derive_messages(events_of(script)), limit=60)
    assert "Summary" not in cut.text and cut.left_out == 1
