"""`PromptResponse.usage` (unstable in schema-v1.25.0; tests/support/acp_schema.py checks
every answer against the unstable schema too): the sum of the turn's `assistant/message`
usage as the log recorded it, settled with the rest of the answer (docs/protocol.md,
"Settlement"). Through `wrap`: the child's own `usage` as it sent it, else ours from the
log. Real processes: our agent with a `script:` model, and the wrapper in front of a raw
agent (tests/support/error_agent.py) that answers what its prompt spells out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.host.engine import TurnEnd
from acp_bridge.host.prompts import answer_of
from acp_bridge.host.settlement import turn_usage
from session import Event
from tests.support.acp_client import AgentProcess, write_script
from tests.support.logs import Script, events_of, loaded_events
from tests.support.wrapped import WrappedProcess

pytestmark = pytest.mark.anyio
ERROR_AGENT = Path(__file__).resolve().parent / "support" / "error_agent.py"


def summed(events: list[dict[str, Any]], turn: int) -> dict[str, int]:
    """The turn's usage as the log holds it, added up here from the stored events."""
    total: dict[str, int] = {}
    for event in events:
        if event["type"] == "assistant/message" and event["data"]["turn"] == turn and "usage" in event["data"]:
            for name, count in event["data"]["usage"].items():
                total[name] = total.get(name, 0) + count
    return total


@pytest.mark.integration
async def test_our_agent_answers_the_turns_usage_from_its_log(tmp_path: Path, work: Path) -> None:
    call = {"id": "c1", "name": "read_file", "arguments": {"path": "notes.txt"}}
    model = write_script(
        tmp_path / "m.json",
        {"toolCalls": [call], "usage": {"inputTokens": 100, "outputTokens": 7, "cacheReadTokens": 40}},
        {"text": "two lines", "usage": {"inputTokens": 130, "outputTokens": 3, "reasoningTokens": 2}},
        {"text": "no usage here"})
    store = tmp_path / "store"
    async with AgentProcess(store, model=model) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        first = await agent.prompt(sid, "read it")
        second = await agent.prompt(sid, "again")
    stored = summed(loaded_events(store, sid), 1)
    assert stored == {"inputTokens": 230, "outputTokens": 10, "cacheReadTokens": 40, "reasoningTokens": 2}
    assert first["usage"] == {
        "totalTokens": stored["inputTokens"] + stored["outputTokens"] + stored["cacheReadTokens"],
        "inputTokens": stored["inputTokens"], "outputTokens": stored["outputTokens"],
        "cachedReadTokens": stored["cacheReadTokens"], "thoughtTokens": stored["reasoningTokens"]}
    assert list(first) == ["stopReason", "usage", "_meta"]
    assert "usage" not in second  # a turn that recorded none answers none (not zeros)


@pytest.mark.integration
async def test_a_cancelled_turn_answers_what_it_cost_so_far(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "m.json",
                         {"toolCalls": [{"id": "c1", "name": "run_command", "arguments": {"command": "true"}}],
                          "usage": {"inputTokens": 50, "outputTokens": 5}})
    async with AgentProcess(tmp_path / "store", model=model) as agent:  # asks, and nobody answers
        agent.policy.hang_permissions = True
        await agent.initialize()
        sid = await agent.new_session(work)
        answer = await agent.cancelled_when(sid, "run it", lambda: bool(agent.policy.asked))
    assert answer["result"]["stopReason"] == "cancelled"
    assert answer["result"]["usage"] == {"totalTokens": 55, "inputTokens": 50, "outputTokens": 5}


def wrapped_error_agent(store: Path) -> WrappedProcess:
    return WrappedProcess(store, [sys.executable, str(ERROR_AGENT)])


@pytest.mark.integration
async def test_through_wrap_the_childs_own_usage_as_it_sent_it(tmp_path: Path, work: Path) -> None:
    theirs = {"totalTokens": 12, "inputTokens": 9, "outputTokens": 3, "thoughtTokens": None,
              "_meta": {"vendor": {"x": 1}}}
    async with wrapped_error_agent(tmp_path / "store") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        text = "result " + orjson.dumps({"stopReason": "end_turn", "usage": theirs}).decode()
        answer = await agent.prompt(sid, text)
    assert answer["usage"] == theirs
    # and the log recorded it as ours, so a replay and `sessions` count the same tokens
    assert summed(loaded_events(tmp_path / "store", sid), 1) == {"inputTokens": 9, "outputTokens": 3}


@pytest.mark.integration
async def test_through_wrap_ours_from_the_log_when_the_child_sends_none(tmp_path: Path, work: Path) -> None:
    # gemini-cli's way: no ACP usage, its count in the answer's `_meta` (docs/wrap.md)
    quota = {"quota": {"token_count": {"input_tokens": 21, "output_tokens": 4}}}
    async with wrapped_error_agent(tmp_path / "store") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        answer = await agent.prompt(sid, "result " + orjson.dumps({"stopReason": "end_turn", "_meta": quota}).decode())
        plain = await agent.prompt(sid, "hello")
    stored = summed(loaded_events(tmp_path / "store", sid), 1)
    assert stored == {"inputTokens": 21, "outputTokens": 4}
    assert answer["usage"] == {"totalTokens": 25, "inputTokens": 21, "outputTokens": 4}
    assert answer["_meta"]["quota"] == quota["quota"]  # the child's own `_meta` beside ours
    assert "usage" not in plain


def event(seq: int, etype: str, data: dict[str, Any]) -> Event:
    return {"type": etype, "seq": seq, "time": 0, "data": data}  # type: ignore[typeddict-item]


def test_usage_is_the_turns_own_and_skips_the_window() -> None:
    events = [
        event(0, "assistant/message", {"turn": 2, "step": 1, "content": [], "usage": {
            "inputTokens": 1, "outputTokens": 2, "contextWindow": 9000}}),
        event(1, "assistant/message", {"turn": 3, "step": 1, "content": [], "usage": {
            "inputTokens": 100, "outputTokens": 100}}),
        event(2, "assistant/message", {"turn": 2, "step": 2, "content": [], "usage": {
            "inputTokens": 3, "outputTokens": 4, "cacheWriteTokens": 5}}),
    ]
    assert turn_usage(events, 2) == {"totalTokens": 15, "inputTokens": 4, "outputTokens": 6,
                                     "cachedWriteTokens": 5}
    assert turn_usage(events, 4) is None
    end = event(3, "turn/end", {"turn": 2, "reason": {"kind": "completed"}})
    assert answer_of(TurnEnd(end), events)["usage"] == turn_usage(events, 2)
    assert answer_of(TurnEnd(end, {"usage": {"x": 1}}), events)["usage"] == {"x": 1}  # an engine's own wins


def test_usage_holds_the_turns_compaction_summary_calls() -> None:
    events = events_of(Script().text_turn().compacted_turn("S"))  # the answer 10/3, the summary call 50/5
    assert turn_usage(events, 2) == {"totalTokens": 68, "inputTokens": 60, "outputTokens": 8}
    assert turn_usage(events, 1) == {"totalTokens": 13, "inputTokens": 10, "outputTokens": 3}
