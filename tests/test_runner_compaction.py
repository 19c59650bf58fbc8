"""Our agent compacts instead of dropping history (acp_bridge.agent.compaction): the turn
runner over a real JSONL store and a scripted model with a summary step. The model
counts an answer as its usage says (session.transcript), so a few answers of 60,000
tokens outgrow the script's window of 200,000 without writing them out.

What each case pins: the log (the compaction in progress, then completed with the
summary and the summary call's usage, or failed saying why, in the step whose call
needed it), what the model is shown (the summary, then the newest turns), what a client
that advertised compaction or notices is told, and how a cancel or a crash mid-way ends
the compaction."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_bridge.agent.compaction import INSTRUCTION, KEEP_SHARE, plan
from acp_bridge.agent.context import Context
from acp_bridge.agent.runner import TurnRunner
from acp_bridge.errors import ModelSpecError
from acp_bridge.host.advertised import ClientSupport
from acp_bridge.host.updates import UpdateContext, updates_for
from acp_bridge.models import Finish, ModelChunk, ModelRequest
from acp_bridge.models.script import ScriptModel, read_script
from session import Event, SessionStore, check_invariants, derive_messages
from session.backends.jsonl import JsonlBackend
from session.transcript import SUMMARY_INTRO, Transcript
from tests.support.logs import Script, closers_of, events_of, sized_turns
from tests.support.services import ScriptedClient

BIG = {"inputTokens": 0, "outputTokens": 60_000}  # an answer the transcript counts 60,000 tokens
SUMMARY = "The user wrote three long answers; nothing is open."
SUMMARY_USAGE = {"inputTokens": 180_100, "outputTokens": 12}
COMPACTION = ClientSupport(compaction=True)


class Recorded(ScriptModel):
    """A script that keeps every request it was sent."""

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        super().__init__(steps)
        self.requests: list[ModelRequest] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        self.requests.append(request)
        async for chunk in super().stream(request):
            yield chunk


READ = {"toolCalls": [{"id": "r1", "name": "read_file", "arguments": {"path": "nothing.txt"}}]}


def big(text: str) -> dict[str, Any]:
    return {"text": text, "usage": BIG}


def run(tmp_path: Path, steps: list[dict[str, Any]], body: Callable[[TurnRunner], Awaitable[None]],
        *, support: ClientSupport = COMPACTION) -> tuple[list[Event], Recorded, list[dict[str, Any]]]:
    """`body(runner)` over a fresh session; its events, the model, what the client saw."""
    store = SessionStore(JsonlBackend(tmp_path / "store"))
    log = store.create(cwd=str(tmp_path))
    model = Recorded(steps)
    ctx = UpdateContext(replay=False, support=support)
    seen: list[dict[str, Any]] = []

    async def on_event(event: Event) -> None:
        seen.extend(updates_for(event, ctx))

    def on_notice(update: dict[str, Any]) -> None:
        if support.notices:
            seen.append(update)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            runner = TurnRunner(log, model, ScriptedClient(task_group=tg), on_event=on_event, on_notice=on_notice)
            await body(runner)
            tg.cancel_scope.cancel()

    anyio.run(main)
    events = list(log.events)
    log.close()
    check_invariants(events)
    return events, model, seen


async def prompts(runner: TurnRunner, *texts: str) -> None:
    for text in texts:
        await runner.prompt([{"type": "text", "text": text}])


def compactions(events: list[Event]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == "context/compaction"]


def texts(request: ModelRequest) -> list[str]:
    """The first text of each message a request showed."""
    return [str(m["content"][0].get("text", "")) if m["content"] else "" for m in request.messages]


def test_the_oldest_turns_are_summarized_and_the_model_is_shown_the_summary(tmp_path: Path) -> None:
    steps = [big("one"), big("two"), big("three"), {"summary": SUMMARY, "usage": SUMMARY_USAGE}, {"text": "four"},
             {"text": "five"}]
    events, model, seen = run(tmp_path, steps, lambda r: prompts(r, "p1", "p2", "p3", "p4", "p5"))
    # Turn 4's one step: the compaction (in progress, then completed), then its call.
    turn4 = [e for e in events if e["data"].get("turn") == 4]
    assert [e["type"] for e in turn4][:6] == ["turn/start", "user/message", "step/start", "context/compaction",
                                              "context/compaction", "assistant/chunk"]
    replaces = {"fromTurn": 1, "toTurn": 2}  # turn 3 and the running turn fit half the window
    assert compactions(events) == [
        {"turn": 4, "step": 1, "compactionId": "t4s1-compaction", "replaces": replaces, "summary": [],
         "status": "in_progress"},
        {"turn": 4, "step": 1, "compactionId": "t4s1-compaction", "replaces": replaces,
         "summary": [{"type": "text", "text": SUMMARY}], "status": "completed", "usage": SUMMARY_USAGE}]
    # The summarizer was shown turns 1 and 2, then the instruction, with the session's tools.
    summary_call = model.requests[3]
    assert summary_call.purpose == "compaction" and (summary_call.turn, summary_call.step) == (4, 1)
    assert texts(summary_call) == ["p1", "one", "p2", "two", INSTRUCTION]
    assert summary_call.tools == model.requests[2].tools
    # Then turn 4's call, and turn 5's: the summary, then the turns after it.
    assert texts(model.requests[4]) == [SUMMARY_INTRO, "p3", "three", "p4"]
    assert model.requests[4].messages[0]["content"][1] == {"type": "text", "text": SUMMARY}
    assert texts(model.requests[5]) == [SUMMARY_INTRO, "p3", "three", "p4", "four", "p5"]
    # The log keeps every turn; a load's transcript is the same summary and turns.
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/end"] == [1, 2, 3, 4, 5]
    assert derive_messages(events) == [*model.requests[5].messages,
                                       {"role": "assistant", "content": [{"type": "text", "text": "five"}]}]
    # A client that advertised compaction saw the one entity, from in progress to completed.
    assert [(u["compactionId"], u["status"], "summary" in u) for u in seen
            if u["sessionUpdate"] == "compaction_update"] == [("t4s1-compaction", "in_progress", False),
                                                               ("t4s1-compaction", "completed", True)]


def test_a_client_that_takes_notices_only_is_told_once(tmp_path: Path) -> None:
    steps = [big("one"), big("two"), big("three"), {"summary": SUMMARY}, {"text": "four"}]
    _, _, seen = run(tmp_path, steps, lambda r: prompts(r, "p1", "p2", "p3", "p4"),
                     support=ClientSupport(notices=True))
    assert [u for u in seen if u["sessionUpdate"] in ("notice", "compaction_update")] == [
        {"sessionUpdate": "notice", "severity": "info", "title": "Context compacted",
         "description": "The conversation up to turns 1 to 2 was summarized to fit the model's context window; "
                        "the session log keeps it whole."}]


def test_a_summary_that_fails_is_recorded_and_the_older_turns_are_left_out(tmp_path: Path) -> None:
    failing = {"summary": "", "error": {"message": "rate limited", "code": "rate_limit"}}
    steps = [big("one"), big("two"), big("three"), failing, READ, {"text": "four"},
             {"summary": SUMMARY}, {"text": "five"}]
    events, model, seen = run(tmp_path, steps, lambda r: prompts(r, "p1", "p2", "p3", "p4", "p5"),
                              support=ClientSupport(notices=True))
    assert [(c["turn"], c["status"], c.get("error")) for c in compactions(events)] == [
        (4, "in_progress", None), (4, "failed", "The summary could not be made: rate limited."),
        (5, "in_progress", None), (5, "completed", None)]
    assert [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"] == ["completed"] * 5
    # Turn 4's steps are shown the newest turns that fit, as before compaction existed
    # (it is not tried again in the same turn); turn 5 tries again.
    assert texts(model.requests[4])[:3] == texts(model.requests[5])[:3] == ["p2", "two", "p3"]
    assert [r.purpose for r in model.requests] == ["step"] * 3 + ["compaction", "step", "step", "compaction", "step"]
    assert texts(model.requests[7])[0] == SUMMARY_INTRO
    notices = [(u["title"], u.get("description")) for u in seen if u["sessionUpdate"] == "notice"]
    assert notices == [
        ("Context compaction failed", "The summary could not be made: rate limited."),
        ("Older turns left out", "The model is shown this conversation from turn 2 on: the turns before it "
         "do not fit its context window and could not be summarized. The session log keeps them."),
        ("Context compacted", "The conversation up to turns 1 to 2 was summarized to fit the model's context "
         "window; the session log keeps it whole.")]


def test_a_turn_too_big_to_summarize_is_left_out_and_told_once(tmp_path: Path) -> None:
    huge: dict[str, Any] = {"text": "huge", "usage": {"inputTokens": 0, "outputTokens": 170_000}}
    steps = [huge, {"text": "two"}, {"text": "three"}]
    events, model, seen = run(tmp_path, steps, lambda r: prompts(r, "p1", "p2", "p3"),
                              support=ClientSupport(notices=True, compaction=True))
    assert compactions(events) == []  # nothing could be shown the summarizer: no compaction
    assert all(r.purpose == "step" for r in model.requests)
    assert texts(model.requests[1]) == ["p2"] and texts(model.requests[2]) == ["p2", "two", "p3"]
    assert [u["title"] for u in seen if u["sessionUpdate"] == "notice"] == ["Older turns left out"]


def test_a_refusal_as_too_long_is_answered_by_a_compaction(tmp_path: Path) -> None:
    # A server whose window is smaller than the model's known one: it refuses a request
    # that fits the window the agent assumed, without saying its numbers.
    refused = {"error": {"message": "the prompt is too long", "code": "context_length"}}
    steps = [big("one"), big("two"), refused, {"summary": SUMMARY}, {"text": "three"}]
    events, model, _ = run(tmp_path, steps, lambda r: prompts(r, "p1", "p2", "p3"))
    # The refused request showed everything; it bounds the window (what it measured),
    # the turns before the running one that fit the summarizer's call were summarized,
    # and the same step went on, shown the summary.
    assert texts(model.requests[2]) == ["p1", "one", "p2", "two", "p3"]
    assert texts(model.requests[3]) == ["p2", "two", INSTRUCTION]
    assert texts(model.requests[4]) == [SUMMARY_INTRO, "p3"]
    assert [(c["status"], c["replaces"]) for c in compactions(events)] == [
        ("in_progress", {"fromTurn": 2, "toTurn": 2}), ("completed", {"fromTurn": 2, "toTurn": 2})]
    assert events[-1]["data"]["reason"] == {"kind": "completed"}


def test_a_cancel_during_the_summary_cancels_the_compaction_with_the_turn(tmp_path: Path) -> None:
    steps = [big("one"), big("two"), big("three"), {"summary": "partial", "hang": True}]

    async def body(runner: TurnRunner) -> None:
        await prompts(runner, "p1", "p2", "p3")
        async with anyio.create_task_group() as tg:
            tg.start_soon(prompts, runner, "p4")
            while not runner.log.tracker.unended():
                await anyio.sleep(0)  # the compaction is in progress: the summary call hangs
            runner.cancel()

    events, _, seen = run(tmp_path, steps, body)
    assert [(c["status"], c["summary"]) for c in compactions(events)] == [("in_progress", []), ("cancelled", [])]
    assert [e["type"] for e in events[-3:]] == ["context/compaction", "step/end", "turn/end"]
    assert events[-1]["data"]["reason"] == {"kind": "cancelled", "by": "session/cancel"}
    assert [u["status"] for u in seen if u["sessionUpdate"] == "compaction_update"] == ["in_progress", "cancelled"]


def test_a_crash_during_the_summary_is_repaired_to_a_failed_compaction(tmp_path: Path) -> None:
    # The log as a kill -9 leaves it (the in-progress event is durable), repaired as a load repairs it.
    script = Script()
    for n in range(3):
        script.start_turn(f"p{n + 1}").start_step().add("assistant/message", {
            "turn": n + 1, "step": 1, "content": [{"type": "text", "text": "a"}], "usage": BIG})
        script.end_step().end_turn()
    script.start_turn("p4").start_step().compaction("t4s1-compaction", to_turn=2)
    events = events_of(script)
    repaired = events + closers_of(events)
    check_invariants(repaired, closed=True)
    assert [(c["status"], c.get("error")) for c in compactions(repaired)][-1] == (
        "failed", "The agent stopped (crash) before the compaction finished.")
    transcript = Transcript()
    transcript.feed_all(repaired)
    assert transcript.head == 0  # a failed compaction stands for nothing


@pytest.mark.parametrize(("what", "answers", "expected"), [
    ("turns 1-2 compacted, the newest that fit half of what a call may be shown kept",
     (60_000, 60_000, 60_000, 10), (0, 4, 1, 2)),
    ("the summarizer is shown the newest of the turns to compact that fit its call",
     (100_000, 90_000, 90_000, 10), (4, 6, 3, 3)),
    ("everything fits half: nothing to compact", (10, 10), None),
    ("the turn to compact alone does not fit the summarizer's call", (170_000, 10), None),
    ("only the running turn", (10,), None),
])
def test_plan(what: str, answers: tuple[int, ...], expected: tuple[int, int, int, int] | None) -> None:
    found = plan(sized_turns(*answers), Context(), 200_000, [])
    assert (None if found is None else (found.shown, found.keep, found.from_turn, found.to_turn)) == expected
    assert KEEP_SHARE == 0.5


def test_a_plan_shows_an_earlier_summary_first_when_it_fits() -> None:
    script = Script().text_turn("one").compacted_turn("S", "two")
    for n in (3, 4, 5):
        script.start_turn(f"p{n}").start_step().add("assistant/message", {
            "turn": n, "step": 1, "content": [{"type": "text", "text": "a"}], "usage": BIG}).end_step().end_turn()
    transcript = Transcript()
    transcript.feed_all(events_of(script.text_turn("six")))
    found = plan(transcript, Context(), 200_000, [])
    assert found is not None and found.shown == 0 and (found.from_turn, found.to_turn) == (2, 4)


def test_a_script_says_which_calls_summarize(tmp_path: Path) -> None:
    model = ScriptModel([{"summary": "S"}, {"text": "t"}])

    async def call(purpose: str) -> list[ModelChunk]:
        request = ModelRequest([], [], purpose=purpose)  # type: ignore[arg-type]
        return [chunk async for chunk in model.stream(request)]

    async def main() -> None:
        [wrong] = await call("step")
        assert isinstance(wrong, Finish) and wrong.code == "script_mismatch"
        assert wrong.message == "the model script's entry 1 is a summary; call 1 asks for a step"
        [mismatch] = await call("compaction")
        assert isinstance(mismatch, Finish) and mismatch.message == (
            "the model script's entry 2 is a step; call 2 asks for a compaction's summary")

    anyio.run(main)
    for bad in ({"summary": 3}, {"summary": "s", "text": "t"}, {"summary": "s", "toolCalls": []}):
        path = tmp_path / "bad.json"
        path.write_bytes(orjson.dumps({"steps": [bad]}))
        with pytest.raises(ModelSpecError, match="a summary is a string, in an entry without text or toolCalls"):
            read_script(str(path))
