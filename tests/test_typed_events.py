"""The typed view of events (session.typed) and the reason kinds (session.events).

The union has one member per event type of the vocabulary, each typed by the data its
constructor in session.items builds; each reason kind's TypedDict has the fields the
run-time check (session.reason_checks, `reason_problem`) admits. The last tests are
for mypy as much as for pytest (mypy checks tests/, strictly): `assert_type` is
checked statically, and each `type: ignore[...]` is a read mypy must refuse, since an
ignore that silences nothing fails the strict run (warn_unused_ignores).
"""

from __future__ import annotations

import inspect
import typing
from typing import Any, Literal, NotRequired, assert_type, get_args, get_origin, get_type_hints

import pytest

from session import events, items
from session import typed as typed_module
from session.events import (
    EVENT_TYPES,
    REASON_KINDS,
    AgentError,
    Event,
    Reason,
    ToolCallBlock,
    reason,
)
from session.invariants import check_invariants
from session.items import Item, ToolResultData, TurnEndData
from session.reason_checks import checked_reason, reason_problem
from session.typed import AnyEvent, typed, typed_all

MEMBERS: list[type] = list(get_args(AnyEvent))


def tag_of(member: type) -> str:
    (tag,) = get_args(get_type_hints(member)["type"])
    return str(tag)


def test_one_member_per_event_type() -> None:
    tags = [tag_of(member) for member in MEMBERS]
    assert sorted(tags) == sorted(EVENT_TYPES)
    assert sorted(get_args(events.EventType)) == sorted(EVENT_TYPES)


def test_every_member_is_a_stamped_event() -> None:
    for member in MEMBERS:
        hints = get_type_hints(member)
        assert set(hints) == set(get_type_hints(Event)), member
        assert hints["seq"] is int and hints["time"] is int, member


# Each event type's constructor in session.items, with arguments that make one.
CONSTRUCTED: list[tuple[str, Any, tuple[Any, ...], dict[str, Any]]] = [
    ("turn/start", items.turn_start, (1,), {"trigger": {"kind": "prompt"}}),
    ("user/message", items.user_message, (1, [{"type": "text", "text": "hi"}]), {}),
    ("step/start", items.step_start, (1, 1), {}),
    ("step/end", items.step_end, (1, 1), {}),
    ("assistant/chunk", items.assistant_chunk, (1, 1, "text", "hi"), {}),
    ("assistant/message", items.assistant_message, (1, 1, [{"type": "text", "text": "hi"}]), {}),
    ("tool/call", items.tool_call, (1, 1, "c1"), {"name": "read", "arguments": {}, "title": "t", "kind": "read"}),
    ("tool/permission", items.tool_permission, (1, 1, "c1", {"outcome": "selected", "optionId": "allow"}), {}),
    ("tool/result", items.tool_result, (1, 1, "c1"), {"content": [], "is_error": False}),
    ("turn/end", items.turn_end, (1, {"kind": "completed"}), {}),
    ("wrapped/update", items.wrapped_update, ({"sessionUpdate": "plan", "entries": []},), {}),
    ("config/set", items.config_set, ("model", "echo"), {}),
    ("context/compaction", items.context_compaction, (2, 1, "k1"),
     {"replaces": {"fromTurn": 1, "toTurn": 1}, "summary": [], "status": "in_progress"}),
]


def test_the_table_names_every_event_type_once() -> None:
    assert sorted(etype for etype, *_ in CONSTRUCTED) == sorted(EVENT_TYPES)


@pytest.mark.parametrize(("etype", "make", "args", "kwargs"), CONSTRUCTED, ids=[c[0] for c in CONSTRUCTED])
def test_a_member_holds_the_data_its_constructor_builds(
        etype: str, make: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    made_type, data = make(*args, **kwargs)
    assert made_type == etype
    returned = get_type_hints(make, globalns=vars(items))["return"]
    tag, data_type = get_args(returned)
    assert get_args(tag) == (etype,)
    (member,) = [m for m in MEMBERS if tag_of(m) == etype]
    assert get_type_hints(member)["data"] is data_type
    # And what it builds holds the keys its TypedDict requires, and no others.
    hints = get_type_hints(data_type, include_extras=True)
    required = {k for k, v in hints.items() if get_origin(v) is not NotRequired}
    assert required <= set(data) <= set(hints)


def test_typed_is_a_view_not_a_copy() -> None:
    event: Event = {"type": "turn/end", "seq": 3, "time": 5, "data": {"turn": 1, "reason": {"kind": "completed"}}}
    block: list[Event] = [event]
    assert typed_all(block) is block
    assert typed(event) is event


# --- the reason kinds ---------------------------------------------------------------

REASON_TYPES: list[type] = list(get_args(Reason))


def fields_of(kind_type: type) -> tuple[frozenset[str], frozenset[str]]:
    hints = get_type_hints(kind_type, include_extras=True)
    hints.pop("kind")
    optional = frozenset(k for k, v in hints.items() if get_origin(v) is NotRequired)
    return frozenset(hints) - optional, optional


# A valid value of every reason field, whatever its kind.
SAMPLES: dict[str, Any] = {"limit": 3, "by": "session/cancel", "forced": True, "step": 1, "message": "m",
                           "code": "c", "retryable": True, "agentError": {"code": 1, "message": "m"},
                           "cause": "crash", "agentStopReason": "end_turn"}


@pytest.mark.parametrize("kind_type", REASON_TYPES, ids=lambda t: t.__name__)
def test_a_reason_kind_has_the_fields_the_check_admits(kind_type: type) -> None:
    """The TypedDict of a kind and the run-time check (`reason_problem`, which the
    invariants and `reason()` use) agree: its required fields are needed, its optional
    ones allowed, no other field is."""
    (kind,) = get_args(get_type_hints(kind_type)["kind"])
    required, optional = fields_of(kind_type)
    whole = {"kind": kind, **{name: SAMPLES[name] for name in required | optional}}
    assert reason_problem(whole) is None
    assert reason_problem({"kind": kind, **{name: SAMPLES[name] for name in required}}) is None
    assert reason(kind, **{name: SAMPLES[name] for name in required}) == {"kind": kind, **{
        name: SAMPLES[name] for name in required}}
    for name in required:
        assert "lacks" in str(reason_problem({k: v for k, v in whole.items() if k != name}))
    for name in set(SAMPLES) - required - optional:
        assert "unexpected" in str(reason_problem({**whole, name: SAMPLES[name]}))


def test_one_typeddict_per_reason_kind() -> None:
    kinds = [get_args(get_type_hints(t)["kind"])[0] for t in REASON_TYPES]
    assert sorted(kinds) == sorted(REASON_KINDS)
    assert sorted(get_args(events.ReasonKind)) == sorted(REASON_KINDS)
    assert set(get_args(events.CancelledBy)) == set(events.CANCELLED_BY)
    assert set(get_args(events.InterruptCause)) == set(events.INTERRUPT_CAUSES)


CHECKED: list[tuple[Any, bool]] = [
    ({"kind": "completed"}, True),
    ({"kind": "cancelled", "by": "session/cancel", "forced": True}, True),
    ({"kind": "error", "step": 2, "message": "boom", "agentError": {"code": -32000, "message": "no"}}, True),
    ({"kind": "interrupted", "cause": "crash"}, True),
    ({}, False),
    ({"kind": "exploded"}, False),
    ({"kind": "error", "step": 2}, False),  # no message
    ({"kind": "cancelled", "by": "someone"}, False),
    ({"kind": "cancelled", "by": "session/cancel", "forced": False}, False),
    ({"kind": "cancelled", "by": "session/cancel", "agentStopReason": "end_turn"}, True),
    ({"kind": "cancelled", "by": "session/cancel", "agentStopReason": ""}, False),
    ({"kind": "cancelled", "by": "session/cancel", "agentStopReason": 3}, False),
    ("completed", False),
]


@pytest.mark.parametrize(("value", "valid"), CHECKED)
def test_checked_reason_admits_what_the_invariants_admit(value: Any, valid: bool) -> None:
    assert (checked_reason(value) is value) is valid
    assert (reason_problem(value) is None) is valid


# --- what mypy makes of them (checked by the strict run over tests/) -----------------

def a_log() -> list[Event]:
    made: list[Item] = [
        items.turn_start(1, trigger={"kind": "prompt"}),
        items.user_message(1, [{"type": "text", "text": "hi"}]),
        items.step_start(1, 1),
        items.assistant_message(1, 1, [{"type": "tool-call", "id": "c1", "name": "read", "arguments": "{}"}]),
        items.tool_call(1, 1, "c1", name="read", arguments={}, title="read", kind="read"),
        items.tool_result(1, 1, "c1", content=[], is_error=False),
        items.step_end(1, 1),
        items.turn_end(1, reason("error", step=1, message="boom", code="tool_failed")),
    ]
    events_: list[Event] = [{"type": etype, "seq": seq, "time": 0, "data": dict(data)}
                            for seq, (etype, data) in enumerate(made)]
    check_invariants(events_, closed=True)
    return events_


def test_a_branch_on_the_type_narrows_the_data() -> None:
    seen = []
    for event in typed_all(a_log()):
        if event["type"] == "turn/end":
            end = event["data"]
            assert_type(end, TurnEndData)
            assert_type(end["reason"], Reason)
            if end["reason"]["kind"] == "error":  # and the reason's kind narrows its fields
                assert_type(end["reason"]["message"], str)
                assert_type(end["reason"].get("agentError"), AgentError | None)
                seen.append(end["reason"]["message"])
            with pytest.raises(KeyError):
                end["content"]  # type: ignore[typeddict-item]  # a turn/end has no content
        elif event["type"] == "tool/result":
            assert_type(event["data"], ToolResultData)
            assert_type(event["data"]["isError"], bool)
            with pytest.raises(KeyError):
                event["data"]["reason"]  # type: ignore[typeddict-item]  # a result has no reason
            seen.append(event["data"]["callId"])
        elif event["type"] == "assistant/message":
            block = event["data"]["content"][0]
            if block["type"] == "tool-call":
                assert_type(block, ToolCallBlock)
                seen.append(block["name"])
    assert seen == ["read", "c1", "boom"]


def test_an_unnarrowed_event_has_only_the_common_fields() -> None:
    event: AnyEvent = typed(a_log()[0])
    assert_type(event["seq"], int)
    assert event["data"]["turn"] == 1  # mypy lets a NotRequired key (wrapped/update's turn) be read
    with pytest.raises(KeyError):
        event["data"]["reason"]  # type: ignore[typeddict-item]  # no event but turn/end has one


def test_a_reason_is_narrowed_by_its_kind() -> None:
    why: Reason = reason("cancelled", by="session/close")
    if why["kind"] == "cancelled":
        assert_type(why["by"], Literal["session/cancel", "session/close", "$/cancel_request",
                                       "session/request_permission"])
        assert why["by"] == "session/close"
    never: Reason = reason("completed")
    with pytest.raises(KeyError):
        never["by"]  # type: ignore[typeddict-item]  # not every kind has `by`


def test_the_module_says_where_its_one_cast_is() -> None:
    source = inspect.getsource(typed_module)
    assert source.count("type: ignore[return-value]") == 2  # typed() and typed_all(), nowhere else
    assert "cast(" not in source
    assert typing.get_type_hints(typed)["return"] == AnyEvent
