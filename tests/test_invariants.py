"""The invariant checker, as a table: each row is a log and the violation it must
report (or None for a valid log)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from session import Event, InvariantError, check_invariants, reason
from session.events import REASON_KINDS
from session.reason_checks import reason_problem
from tests.support.logs import Item, Script, events_of


def synthetic(call_id: str, step: int, turn: int = 1) -> Item:
    return (
        "tool/result",
        {"turn": turn, "step": step, "callId": call_id, "content": [], "isError": True,
         "error": {"name": "InterruptedError", "code": "interrupted"}},
    )


def wrapped(turn: int | None = None, update: Any = None) -> Item:
    """A `wrapped/update` item: inside turn `turn`, or between turns when None."""
    data: dict[str, Any] = {"update": update if update is not None else
                            {"sessionUpdate": "plan", "entries": []}}
    if turn is not None:
        data["turn"] = turn
    return ("wrapped/update", data)


def changed(script: Script, index: int, **changes: Any) -> list[Event]:
    """The events of `script` with event `index` changed (or given extra keys)."""
    events: list[Any] = list(events_of(script))
    events[index] = {**events[index], **changes}
    return events


CASES: list[tuple[str, Callable[[], list[Event]], str | None]] = [
    ("empty log", lambda: [], None),
    ("text turn", lambda: events_of(Script().text_turn()), None),
    ("tool turn then text", lambda: events_of(Script().tool_turn().text_turn()), None),
    ("open turn is valid", lambda: events_of(Script().start_turn().start_step()), None),
    (
        "event before any turn",
        lambda: events_of(Script().start_step()),
        "outside any turn",
    ),
    (
        "nested turn",
        lambda: events_of(Script().start_turn().start_turn()),
        "still open (no nested turns)",
    ),
    (
        "turn numbers skip",
        lambda: events_of(Script().text_turn().add("turn/start", {"turn": 3, "trigger": {"kind": "prompt"}})),
        "turn must be 2",
    ),
    (
        "first turn is not 1",
        lambda: events_of(Script(first_turn=2).text_turn()),
        "turn must be 1",
    ),
    (
        "event names another turn",
        lambda: events_of(Script().start_turn().add("step/start", {"turn": 2, "step": 1})),
        "the open turn is 1",
    ),
    (
        "nested step",
        lambda: events_of(Script().start_turn().start_step().start_step()),
        "still open (no nested steps)",
    ),
    (
        "steps skip",
        lambda: events_of(Script().start_turn().add("step/start", {"turn": 1, "step": 2})),
        "step must be 1",
    ),
    (
        "chunk outside a step",
        lambda: events_of(Script().start_turn().chunk("x")),
        "the open step is none",
    ),
    (
        "chunk names the wrong step",
        lambda: events_of(Script().start_turn().start_step().add(
            "assistant/chunk", {"turn": 1, "step": 2, "chunk": {"type": "text", "text": "x"}})),
        "the open step is 1",
    ),
    (
        "unknown chunk type",
        lambda: events_of(Script().start_turn().start_step().chunk("x", kind="image")),
        "chunk must be",
    ),
    (
        "user message inside a step",
        lambda: events_of(Script().start_turn().start_step().add(
            "user/message", {"turn": 1, "content": []})),
        "cannot sit inside a step",
    ),
    (
        "turn ends with a step open",
        lambda: events_of(Script().start_turn().start_step().end_turn()),
        "step 1 is still open",
    ),
    (
        "step ends with a call unanswered",
        lambda: events_of(Script().start_turn().start_step().message("m", calls=("c",)).end_step()),
        "tool calls without results",
    ),
    (
        "result for an unknown call",
        lambda: events_of(Script().start_turn().start_step().message("m").result("nope")),
        "is not a tool call of step 1",
    ),
    (
        "result answers a call of another step",
        lambda: events_of(
            Script().start_turn().start_step().message("m", calls=("c",)).call("c").result("c")
            .end_step().start_step().result("c")
        ),
        "is not a tool call of step 2",
    ),
    (
        "two results for one call",
        lambda: events_of(
            Script().start_turn().start_step().message("m", calls=("c",)).result("c").result("c")
        ),
        "already has a result",
    ),
    (
        "tool/call recorded twice",
        lambda: events_of(
            Script().start_turn().start_step().message("m", calls=("c",)).call("c").call("c")
        ),
        "already recorded",
    ),
    (
        "duplicate call id in a turn",
        lambda: events_of(
            Script().start_turn().start_step().message("m", calls=("c",)).result("c").end_step()
            .start_step().message("again", calls=("c",))
        ),
        "not unique in the turn",
    ),
    (
        "synthetic result after its step ended is allowed",
        lambda: events_of(
            Script().start_turn().start_step().message("m", calls=("c",))
            .add(*synthetic("c", 1)).end_step().end_turn("interrupted", cause="crash")
        ),
        None,
    ),
    (
        "synthetic result must name its call's step",
        lambda: events_of(
            Script().start_turn().start_step().message("m", calls=("c",))
            .add(*synthetic("c", 2))
        ),
        "the call was made in step 1",
    ),
    (
        "wrapped update before any turn, between turns and after the last",
        lambda: events_of(Script().add(*wrapped()).text_turn().add(*wrapped()).add(*wrapped())
                          .text_turn().add(*wrapped())),
        None,
    ),
    (
        "wrapped update inside a turn: before a step, inside one, between steps",
        lambda: events_of(
            Script().start_turn().add(*wrapped(1)).start_step().chunk("a").add(*wrapped(1))
            .message("m", calls=("c",)).add(*wrapped(1)).call("c").add(*wrapped(1)).result("c")
            .end_step().add(*wrapped(1)).end_turn()
        ),
        None,
    ),
    (
        "wrapped update inside a turn must name it",
        lambda: events_of(Script().start_turn().add(*wrapped())),
        "names turn None, the open turn is 1",
    ),
    (
        "wrapped update names another turn",
        lambda: events_of(Script().start_turn().add(*wrapped(2))),
        "names turn 2, the open turn is 1",
    ),
    (
        "wrapped update between turns names none",
        lambda: events_of(Script().text_turn().add(*wrapped(1))),
        "between turns it names no turn",
    ),
    (
        "wrapped update without an update object",
        lambda: events_of(Script().add("wrapped/update", {"update": "plan"})),
        "must be an ACP SessionUpdate",
    ),
    (
        "wrapped update without a sessionUpdate",
        lambda: events_of(Script().start_turn().add(*wrapped(1, {"entries": []}))),
        "must be an ACP SessionUpdate",
    ),
    (
        "seq gap",
        lambda: changed(Script().text_turn(), 2, seq=9),
        "seq must be 2",
    ),
    (
        "negative time",
        lambda: changed(Script().text_turn(), 1, time=-1),
        "time must be",
    ),
    (
        "unknown event type",
        lambda: changed(Script().text_turn(), 1, type="usage"),
        "unknown event type",
    ),
    (
        "extra top-level key",
        lambda: changed(Script().text_turn(), 1, x=1),
        "exactly {type, seq, time, data}",
    ),
    (
        "unknown reason kind",
        lambda: events_of(Script().start_turn().end_turn("exploded")),
        "unknown reason kind",
    ),
    (
        "error reason without its step",
        lambda: events_of(Script().start_turn().end_turn("error", message="boom")),
        "lacks ['step']",
    ),
    (
        "cancelled by an unknown method",
        lambda: events_of(Script().start_turn().end_turn("cancelled", by="user")),
        "cancelled by 'user'",
    ),
    (
        "a wrapped agent's error that cannot be answered again",
        lambda: events_of(Script().start_turn().end_turn(
            "error", step=0, message="m", agentError={"code": "x", "message": "m"})),
        "agentError needs an integer code and a string message",
    ),
    (
        "a wrapped agent's error with members JSON-RPC does not define",
        lambda: events_of(Script().start_turn().end_turn(
            "error", step=0, message="m", agentError={"code": 1, "message": "m", "stack": "s"})),
        "agentError has unexpected ['stack']",
    ),
    (
        "a wrapped agent's error that is not an object",
        lambda: events_of(Script().start_turn().end_turn("error", step=0, message="m", agentError=[1])),
        "agentError is not an object",
    ),
    (
        "agentError on a reason that is not an error",
        lambda: events_of(Script().start_turn().end_turn(
            "cancelled", by="session/cancel", agentError={"code": 1, "message": "m"})),
        "has unexpected ['agentError']",
    ),
    (
        "a pending call let run by its permission, then answered",
        lambda: events_of(Script().start_turn().start_step().message("m", calls=("c",)).call("c", pending=True)
                          .grant("c").result("c").end_step().end_turn()),
        None,
    ),
    (
        "a pending call refused without a permission",
        lambda: events_of(Script().start_turn().start_step().message("m", calls=("c",)).call("c", pending=True)
                          .result("c", error=True).end_step().end_turn()),
        None,
    ),
    (
        "a permission for a call that did not wait for one",
        lambda: events_of(Script().start_turn().start_step().message("m", calls=("c",)).call("c").grant("c")),
        "is not waiting for a permission",
    ),
    (
        "a permission given twice",
        lambda: events_of(Script().start_turn().start_step().message("m", calls=("c",)).call("c", pending=True)
                          .grant("c").grant("c")),
        "is not waiting for a permission",
    ),
    (
        "a permission before its tool/call",
        lambda: events_of(Script().start_turn().start_step().message("m", calls=("c",)).grant("c")),
        "is not waiting for a permission",
    ),
    (
        "a permission after its result",
        lambda: events_of(Script().start_turn().start_step().message("m", calls=("c",)).call("c", pending=True)
                          .result("c", error=True).grant("c")),
        "is not waiting for a permission",
    ),
    (
        "a permission for a call of another step",
        lambda: events_of(Script().start_turn().start_step().message("m", calls=("c",)).call("c", pending=True)
                          .result("c").end_step().start_step().grant("c")),
        "is not a tool call of step 2",
    ),
    (
        "a permission without an outcome",
        lambda: changed(Script().start_turn().start_step().message("m", calls=("c",)).call("c", pending=True)
                        .grant("c"), -1, data={"turn": 1, "step": 1, "callId": "c", "permission": {}}),
        "permission must be an object with an outcome",
    ),
    (
        "pending that is not true",
        lambda: changed(Script().start_turn().start_step().message("m", calls=("c",)).call("c"), -1,
                        data={**events_of(Script().start_turn().start_step().message("m", calls=("c",))
                                          .call("c"))[-1]["data"], "pending": False}),
        "pending must be true when present",
    ),
    # context/compaction: in the open step of a turn, replacing turns before it, ended
    # before its step ends.
    ("a compaction, in progress then completed", lambda: events_of(Script().text_turn().compacted_turn("s")), None),
    ("a compaction that failed, then the step goes on",
     lambda: events_of(Script().text_turn().start_turn().start_step().compaction().compaction(
         status="failed", error="the model failed").message("m").end_step().end_turn()), None),
    ("a compaction that ends at once (only completed is reported)",
     lambda: events_of(Script().text_turn().start_turn().start_step().compaction(status="completed")
                       .end_step().end_turn()), None),
    ("a wrapped agent's compaction inside the first turn replaces nothing",
     lambda: events_of(Script().start_turn().start_step().compaction(to_turn=0, status="completed")
                       .end_step().end_turn()), None),
    ("a compaction updated again after it ended",
     lambda: events_of(Script().text_turn().start_turn().start_step().compaction(status="completed")
                       .compaction(status="completed", summary=[{"type": "text", "text": "s"}])
                       .end_step().end_turn()), None),
    ("a compaction between turns",
     lambda: events_of(Script().text_turn().add("context/compaction", {
         "turn": 1, "step": 1, "compactionId": "k", "replaces": {"fromTurn": 1, "toTurn": 1}, "summary": [],
         "status": "completed"})), "outside any turn"),
    ("a compaction between steps",
     lambda: events_of(Script().text_turn().start_turn().start_step().end_step().compaction()),
     "names step 1, the open step is none"),
    ("a compaction in progress when its step ends",
     lambda: events_of(Script().text_turn().start_turn().start_step().compaction("k9").end_step()),
     "compactions that have not ended: ['k9']"),
    ("a compaction with a status of its own does not end",
     lambda: events_of(Script().text_turn().start_turn().start_step().compaction(status="_paused").end_step()),
     "compactions that have not ended"),
    ("a compaction of the open turn",
     lambda: events_of(Script().text_turn().start_turn().start_step().compaction(to_turn=2)),
     "replaces turns before the open turn 2"),
    ("a compaction of turns out of order",
     lambda: events_of(Script().text_turn().text_turn().start_turn().start_step().compaction(
         from_turn=3, to_turn=1)), "in order"),
    ("a compaction that changes the turns it replaces",
     lambda: events_of(Script().text_turn().text_turn().start_turn().start_step().compaction()
                       .compaction(status="completed", to_turn=1)), "compaction 'k1' replaces turns 1 to 2"),
    ("a compaction without an id",
     lambda: events_of(Script().text_turn().start_turn().start_step().compaction("")),
     "compactionId and status must be non-empty strings"),
    ("a compaction whose summary is no list",
     lambda: changed(Script().text_turn().start_turn().start_step().compaction(), -1, data={
         "turn": 2, "step": 1, "compactionId": "k", "replaces": {"fromTurn": 1, "toTurn": 1},
         "summary": "text", "status": "in_progress"}), "summary must be a list"),
    ("a compaction whose range is no pair of integers",
     lambda: changed(Script().text_turn().start_turn().start_step().compaction(), -1, data={
         "turn": 2, "step": 1, "compactionId": "k", "replaces": {"fromTurn": 1}, "summary": [],
         "status": "in_progress"}), "replaces must be {fromTurn, toTurn}"),
    ("a compaction whose error is no string",
     lambda: events_of(Script().text_turn().start_turn().start_step().compaction(status="failed", error=3)),
     "error must be a string"),
]


@pytest.mark.parametrize(("name", "build", "problem"), CASES, ids=[c[0] for c in CASES])
def test_invariants(name: str, build: Callable[[], list[Event]], problem: str | None) -> None:
    events = build()
    if problem is None:
        check_invariants(events)
    else:
        with pytest.raises(InvariantError) as err:
            check_invariants(events)
        assert problem in str(err.value), str(err.value)


def test_closed_requires_the_log_to_end_outside_a_turn() -> None:
    events = events_of(Script().text_turn().start_turn())
    check_invariants(events)
    with pytest.raises(InvariantError, match="ends inside turn 2"):
        check_invariants(events, closed=True)


REASONS: list[tuple[str, dict[str, Any]]] = [
    ("completed", {}),
    ("max_tokens", {}),
    ("max_steps", {"limit": 50}),
    ("max_steps", {"limit": None}),  # a wrapped agent's max_turn_requests names no limit
    ("refusal", {}),
    ("cancelled", {"by": "session/cancel"}),
    ("cancelled", {"by": "session/close"}),
    ("cancelled", {"by": "$/cancel_request"}),
    ("cancelled", {"by": "session/cancel", "forced": True}),  # the wrapper ended it (cancel grace)
    ("error", {"step": 0, "message": "no model"}),
    ("error", {"step": 2, "message": "boom", "code": "rate_limit", "retryable": True}),
    ("error", {"step": 1, "message": "x", "code": "not_found",
               "agentError": {"message": "x", "code": -32002, "data": None}}),  # a wrapped agent's, as sent
    ("interrupted", {"cause": "crash"}),
    ("interrupted", {"cause": "shutdown"}),
]


@pytest.mark.parametrize(("kind", "fields"), REASONS)
def test_every_reason_kind_is_valid(kind: Any, fields: dict[str, Any]) -> None:
    made = reason(kind, **fields)
    assert made == {"kind": kind, **fields}
    assert reason_problem(made) is None
    check_invariants(events_of(Script().start_turn().end_turn(kind, **fields)), closed=True)


def test_reason_kinds_are_the_closed_set_of_seven() -> None:
    assert REASON_KINDS == (
        "completed", "max_tokens", "max_steps", "refusal", "cancelled", "error", "interrupted"
    )
    assert {k for k, _ in REASONS} == set(REASON_KINDS)
    with pytest.raises(ValueError, match="missing"):
        reason("max_steps")
    with pytest.raises(ValueError, match="unexpected"):
        reason("completed", limit=3)


@pytest.mark.parametrize("forced", [False, None, 1, "yes"])
def test_forced_is_only_ever_true(forced: Any) -> None:
    # Absent when the agent complied: a stored `forced: false` would be a second spelling.
    assert reason_problem({"kind": "cancelled", "by": "session/cancel", "forced": forced}) == (
        f"cancelled forced {forced!r} is not true (absent when the agent complied)")
    assert reason_problem({"kind": "completed", "forced": True}) == "reason 'completed' has unexpected ['forced']"
