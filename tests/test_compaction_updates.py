"""What a client is sent of compaction and notices (ACP v1.25, acp_bridge.host.advertised
through the one mapping, acp_bridge.host.updates): only what it advertised in
`initialize`, a compaction the same live and on replay, a notice never on replay.
Every update is checked against the vendored ACP schema."""

from __future__ import annotations

from typing import Any

import pytest

from acp_bridge.host.advertised import (
    NEITHER,
    ClientSupport,
    client_support,
    forced_notice,
    notice,
)
from acp_bridge.host.updates import UpdateContext, updates_for
from acp_bridge.prices import CostMeter, parse_prices
from session import Event
from tests.support.acp_schema import validate_update
from tests.support.logs import Script, closers_of, events_of

BOTH = ClientSupport(notices=True, compaction=True)
COMPACTION = ClientSupport(compaction=True)
NOTICES = ClientSupport(notices=True)
SUMMARY = [{"type": "text", "text": "The user asked for a parser; it is written, tests pass."}]


def valid(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for update in updates:
        validate_update(update)
    return updates


def sent(events: list[Event], support: ClientSupport, *, replay: bool) -> list[dict[str, Any]]:
    ctx = UpdateContext(replay=replay, support=support)
    return valid([u for e in events for u in updates_for(e, ctx)])


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [u["sessionUpdate"] for u in updates]


def compacted_log() -> list[Event]:
    script = Script().text_turn("one", "uno").text_turn("two", "dos")
    script.start_turn("three").start_step().compaction("t3s1-compaction", to_turn=2)
    script.compaction("t3s1-compaction", "completed", to_turn=2, summary=SUMMARY,
                      usage={"inputTokens": 900, "outputTokens": 40})
    return events_of(script.chunk("tres").message("tres").end_step().end_turn())


META = {"acpBridge": {"turn": 3, "step": 1, "replaces": {"fromTurn": 1, "toTurn": 2}}}
IN_PROGRESS = {"sessionUpdate": "compaction_update", "compactionId": "t3s1-compaction", "status": "in_progress",
               "_meta": META}
COMPLETED = {"sessionUpdate": "compaction_update", "compactionId": "t3s1-compaction", "status": "completed",
             "summary": SUMMARY, "_meta": META}


@pytest.mark.parametrize("replay", [False, True], ids=["live", "replay"])
def test_a_client_that_advertised_compaction_sees_one_entity_live_and_on_replay(replay: bool) -> None:
    updates = [u for u in sent(compacted_log(), COMPACTION, replay=replay) if u["sessionUpdate"].startswith("comp")]
    assert updates == [IN_PROGRESS, COMPLETED]


@pytest.mark.parametrize("replay", [False, True], ids=["live", "replay"])
def test_a_client_that_advertised_neither_sees_nothing_of_it(replay: bool) -> None:
    events = compacted_log()
    without = [e for e in events if e["type"] != "context/compaction"]
    # Byte for byte what it is sent of the same log without the compaction.
    assert sent(events, NEITHER, replay=replay) == sent(without, NEITHER, replay=replay)


def test_a_client_that_takes_notices_only_is_told_live_and_never_on_replay() -> None:
    live = sent(compacted_log(), NOTICES, replay=False)
    assert [u for u in live if u["sessionUpdate"] == "notice"] == [{
        "sessionUpdate": "notice", "severity": "info", "title": "Context compacted",
        "description": "The conversation up to turns 1 to 2 was summarized to fit the model's context window; "
                       "the session log keeps it whole."}]
    assert "notice" not in kinds(sent(compacted_log(), NOTICES, replay=True))


def test_a_failed_compaction_is_a_warning_notice_and_a_cancelled_one_none() -> None:
    script = Script().text_turn().start_turn().start_step().compaction()
    failed = events_of(Script().text_turn().start_turn().start_step().compaction().compaction(
        status="failed", error="The model failed: rate_limited."))
    assert [u for u in sent(failed, NOTICES, replay=False) if u["sessionUpdate"] == "notice"] == [
        {"sessionUpdate": "notice", "severity": "warning", "title": "Context compaction failed",
         "description": "The model failed: rate_limited."}]
    cancelled = events_of(script.compaction(status="cancelled"))
    assert "notice" not in kinds(sent(cancelled, NOTICES, replay=False))


def test_a_compaction_a_crash_left_in_progress_ends_failed_on_replay() -> None:
    events = events_of(Script().text_turn().start_turn().start_step().compaction("t2s1-compaction"))
    repaired = events + closers_of(events)
    updates = [u for u in sent(repaired, COMPACTION, replay=True) if u["sessionUpdate"] == "compaction_update"]
    assert [(u["compactionId"], u["status"], u.get("error")) for u in updates] == [
        ("t2s1-compaction", "in_progress", None),
        ("t2s1-compaction", "failed", "The agent stopped (crash) before the compaction finished.")]
    assert "summary" not in updates[-1]  # left out: the client keeps what it had (nothing)


def test_a_wrapped_agents_compaction_is_replayed_as_it_sent_it() -> None:
    theirs: dict[str, Any] = {"sessionUpdate": "compaction_update", "compactionId": "cmp_1",
                              "status": "completed", "summary": None, "_meta": {"vendor": {"ms": 12}}}
    chunk: dict[str, Any] = {"sessionUpdate": "compaction_summary_chunk", "compactionId": "cmp_1",
                             "content": {"type": "text", "text": "kept"}}
    script = Script().text_turn().start_turn().start_step()
    script.add("wrapped/update", {"update": chunk, "turn": 2})
    script.compaction("cmp_1", "completed", summary=[chunk["content"]], sent=theirs)
    events = events_of(script)
    assert [u for u in sent(events, COMPACTION, replay=True) if u["sessionUpdate"].startswith("comp")] == [
        chunk, theirs]
    # Not to an editor that did not advertise compaction, even recorded between turns.
    between = events_of(Script().text_turn().add("wrapped/update", {"update": theirs}))
    assert sent(between, NEITHER, replay=True) == sent(events_of(Script().text_turn()), NEITHER, replay=True)
    assert "compaction_summary_chunk" not in kinds(sent(events, NOTICES, replay=True))


def test_a_compaction_the_editor_was_never_sent_is_not_replayed() -> None:
    script = Script().text_turn().start_turn().start_step().compaction("cmp_1", sent={
        "sessionUpdate": "compaction_update", "compactionId": "cmp_1", "status": "in_progress"})
    script.compaction("cmp_1", "failed", error="The agent ended the turn without finishing the compaction.",
                      silent=True)
    updates = sent(events_of(script), COMPACTION, replay=True)
    assert [u["status"] for u in updates if u["sessionUpdate"] == "compaction_update"] == ["in_progress"]


@pytest.mark.parametrize("replay", [False, True], ids=["live", "replay"])
def test_a_wrapped_agents_notice_is_never_sent_from_the_log(replay: bool) -> None:
    theirs = notice("warning", "MCP server unavailable", "Continuing without it.")
    events = events_of(Script().text_turn().start_turn().add("wrapped/update", {"update": theirs, "turn": 2}))
    assert "notice" not in kinds(sent(events, BOTH, replay=replay))


@pytest.mark.parametrize(("capabilities", "support"), [
    (None, NEITHER),
    ({}, NEITHER),
    ({"session": None}, NEITHER),
    ({"session": {}}, NEITHER),
    ({"session": {"notices": {}}}, NOTICES),
    ({"session": {"compaction": {}}}, COMPACTION),
    ({"session": {"notices": {}, "compaction": {"_meta": {"x": 1}}}}, BOTH),
    ({"session": {"notices": None, "compaction": None}}, NEITHER),
    # Malformed: read as ACP reads it (x-deserialize-default-on-error), not advertised.
    ({"session": {"notices": True, "compaction": "yes"}}, NEITHER),
    ({"session": []}, NEITHER),
    ({"notices": {}, "compaction": {}}, NEITHER),  # not under `session`
])
def test_what_a_client_advertised(capabilities: Any, support: ClientSupport) -> None:
    assert client_support(capabilities) == support


def test_the_notices_are_acp_notices() -> None:
    valid([notice("info", "t"), notice("error", "t", "d"), forced_notice(5.0)])
    assert "description" not in notice("info", "t", "")


def test_the_summary_calls_cost_is_the_sessions_live_and_on_replay() -> None:
    prices = parse_prices({"models": {"gpt-x": {"input": 1.0, "output": 2.0}}}, "prices.toml")
    script = Script()
    script.add("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}, "model": "gpt-x"})
    script.turn = 1
    script.add("user/message", {"turn": 1, "content": []}).start_step()
    script.compaction(to_turn=0, status="completed", summary=SUMMARY,
                      usage={"inputTokens": 1_000_000, "outputTokens": 0})
    script.message("m").end_step().end_turn()  # usage 10 in, 3 out
    events = events_of(script)
    costs = []
    for replay in (False, True):
        ctx = UpdateContext(replay=replay, cost=CostMeter(prices))
        usage = [u for e in events for u in updates_for(e, ctx) if u["sessionUpdate"] == "usage_update"]
        costs.append(usage[-1]["cost"])
    loaded = CostMeter(prices)
    for event in events:
        loaded.feed(event)
    assert costs == [loaded.amount()] * 2 == [{"amount": 1.000016, "currency": "USD"}] * 2
