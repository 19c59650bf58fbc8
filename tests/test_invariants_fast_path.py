"""The `assistant/chunk` fast path of InvariantTracker.feed / feed_all decides exactly
as the general check does: a table of chunk events (valid and broken in every way the
fast path looks at), each fed to a tracker standing inside an open step, compared with
the general check alone (`_feed_checked`): same acceptance, same error, same state."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import orjson
import pytest

from session import InvariantError, InvariantTracker
from session.invariants import OpenCall
from session.scan import parse_events


class Sub(dict[str, Any]):
    """A dict subclass: never taken by the fast path, still valid for the general check."""


def open_step(**state: Any) -> InvariantTracker:
    """A tracker inside turn 2, step 3, at seq 10 (or as `state` says)."""
    tracker = InvariantTracker(session_id="s", next_seq=10, turn=2, in_turn=True, step=3, step_open=True,
                               calls={"c1": OpenCall(step=3, name="read_file")})
    for key, value in state.items():
        setattr(tracker, key, value)
    return tracker


def chunk(**top: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "assistant/chunk", "seq": 10, "time": 1_700_000_000_000,
                             "data": {"turn": 2, "step": 3, "chunk": {"type": "text", "text": "hi "}}}
    event.update(top)
    return event


def with_data(**data: Any) -> dict[str, Any]:
    event = chunk()
    event["data"] = {**event["data"], **data}
    return event


def with_chunk(value: Any) -> dict[str, Any]:
    return with_data(chunk=value)


def without(key: str) -> dict[str, Any]:
    event = chunk()
    del event[key]
    return event


# name, tracker, event
CASES: list[tuple[str, Callable[[], InvariantTracker], Callable[[], Any]]] = [
    ("valid text chunk", open_step, chunk),
    ("valid reasoning chunk", open_step, lambda: with_chunk({"type": "reasoning", "text": "hmm"})),
    ("empty text", open_step, lambda: with_chunk({"type": "text", "text": ""})),
    ("chunk with extra keys", open_step, lambda: with_chunk({"type": "text", "text": "a", "x": 1})),
    ("data with extra keys", open_step, lambda: with_data(extra=True)),
    ("time zero", open_step, lambda: chunk(time=0)),
    ("seq behind", open_step, lambda: chunk(seq=9)),
    ("seq ahead", open_step, lambda: chunk(seq=11)),
    ("seq as bool", lambda: open_step(next_seq=1), lambda: chunk(seq=True)),
    ("seq as float", open_step, lambda: chunk(seq=10.0)),
    ("seq as string", open_step, lambda: chunk(seq="10")),
    ("negative time", open_step, lambda: chunk(time=-1)),
    ("time as float", open_step, lambda: chunk(time=1.5)),
    ("time as bool", open_step, lambda: chunk(time=True)),
    ("time null", open_step, lambda: chunk(time=None)),
    ("missing seq", open_step, lambda: without("seq")),
    ("missing time", open_step, lambda: without("time")),
    ("missing data", open_step, lambda: without("data")),
    ("missing type", open_step, lambda: without("type")),
    ("extra top-level key", open_step, lambda: chunk(extra=1)),
    ("five keys, one missing", open_step, lambda: {**without("time"), "tme": 1, "x": 2}),
    ("unknown type", open_step, lambda: chunk(type="assistant/chunkk")),
    ("data not an object", open_step, lambda: chunk(data=[1, 2])),
    ("data null", open_step, lambda: chunk(data=None)),
    ("wrong turn", open_step, lambda: with_data(turn=1)),
    ("turn as string", open_step, lambda: with_data(turn="2")),
    ("turn as float (equal)", open_step, lambda: with_data(turn=2.0)),
    ("missing turn", open_step, lambda: chunk(data={"step": 3, "chunk": {"type": "text", "text": "a"}})),
    ("wrong step", open_step, lambda: with_data(step=2)),
    ("step as bool", lambda: open_step(step=1), lambda: with_data(step=True, turn=2)),
    ("missing step", open_step, lambda: chunk(data={"turn": 2, "chunk": {"type": "text", "text": "a"}})),
    ("step closed", lambda: open_step(step_open=False), chunk),
    ("no turn open", lambda: open_step(in_turn=False, step_open=False), chunk),
    ("inconsistent state: step open outside a turn", lambda: open_step(in_turn=False), chunk),
    ("chunk not an object", open_step, lambda: with_chunk("hi")),
    ("chunk missing", open_step, lambda: chunk(data={"turn": 2, "step": 3})),
    ("chunk of type tool-call", open_step, lambda: with_chunk({"type": "tool-call", "text": "a"})),
    ("chunk type missing", open_step, lambda: with_chunk({"text": "a"})),
    ("chunk text not a string", open_step, lambda: with_chunk({"type": "text", "text": 5})),
    ("chunk text missing", open_step, lambda: with_chunk({"type": "text"})),
    ("event is a dict subclass", open_step, lambda: Sub(chunk())),
    ("data is a dict subclass", open_step, lambda: chunk(data=Sub(chunk()["data"]))),
    ("chunk is a dict subclass", open_step, lambda: with_chunk(Sub({"type": "text", "text": "a"}))),
    ("text is a str subclass", open_step, lambda: with_chunk({"type": "text", "text": type("S", (str,), {})("a")})),
    ("event is a list", open_step, lambda: [("type", "assistant/chunk")]),
    ("event is None", open_step, lambda: None),
    ("a step/end instead", open_step, lambda: chunk(type="step/end", data={"turn": 2, "step": 3})),
]


def outcome(feed: Callable[[Any], None], tracker: InvariantTracker, event: Any) -> tuple[Any, dict[str, Any]]:
    try:
        feed(event)
    except InvariantError as exc:
        result: Any = ("error", str(exc), exc.details)
    except Exception as exc:  # a non-dict event: the general check fails as it fails
        result = ("raised", type(exc).__name__, str(exc))
    else:
        result = "accepted"
    return result, asdict(tracker)


@pytest.mark.parametrize(("name", "make_tracker", "make_event"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("entry", ["feed", "feed_all"])
def test_fast_path_decides_as_the_general_check(
    name: str, make_tracker: Callable[[], InvariantTracker], make_event: Callable[[], Any], entry: str
) -> None:
    reference = make_tracker()
    expected = outcome(reference._feed_checked, reference, make_event())
    tracker = make_tracker()
    if entry == "feed":
        got = outcome(tracker.feed, tracker, make_event())
    else:
        got = outcome(lambda e: tracker.feed_all([e]), tracker, make_event())
    assert got == expected


def _stored_shape(event: Any) -> bool:
    """What the scan lets through (exactly a dict of the four keys, an event type, int
    seq and time, a dict of data): the only events feed_stored is given."""
    return type(event) is dict and parse_events([orjson.dumps(event)]) == [event] \
        and type(event["data"]) is dict


STORED_CASES = [case for case in CASES if _stored_shape(case[2]())]


def _feed_one_stored(tracker: InvariantTracker, event: Any) -> None:
    tracker.feed_stored([event])


@pytest.mark.parametrize(("name", "make_tracker", "make_event"), STORED_CASES,
                         ids=[c[0] for c in STORED_CASES])
def test_feed_stored_decides_as_the_general_check(
    name: str, make_tracker: Callable[[], InvariantTracker], make_event: Callable[[], Any]
) -> None:
    reference = make_tracker()
    expected = outcome(reference._feed_checked, reference, make_event())
    tracker = make_tracker()
    assert outcome(lambda e: tracker.feed_stored([e]), tracker, make_event()) == expected


def test_the_stored_table_covers_both_outcomes() -> None:
    results = set()
    for _, make_tracker, make_event in STORED_CASES:
        tracker = make_tracker()
        feed: Callable[[Any], None] = functools.partial(_feed_one_stored, tracker)
        results.add(outcome(feed, tracker, make_event())[0] == "accepted")
    assert results == {True, False} and len(STORED_CASES) >= 20


def test_the_table_covers_both_outcomes() -> None:
    results = set()
    for _, make_tracker, make_event in CASES:
        tracker = make_tracker()
        results.add(outcome(tracker.feed, tracker, make_event())[0] == "accepted")
    assert results == {True, False}


def test_feed_all_stops_at_the_first_error_with_the_events_before_it_fed() -> None:
    tracker = open_step()
    events: list[Any] = [chunk(seq=10), chunk(seq=11), chunk(seq=13), chunk(seq=12)]
    with pytest.raises(InvariantError) as err:
        tracker.feed_all(events)
    assert "seq must be 12" in str(err.value)
    assert err.value.details["seq"] == 13
    assert tracker.next_seq == 12


def test_feed_stored_stops_at_the_first_error_with_the_events_before_it_fed() -> None:
    tracker = open_step()
    events: list[Any] = [chunk(seq=10), chunk(seq=11), chunk(seq=13), chunk(seq=12)]
    with pytest.raises(InvariantError) as err:
        tracker.feed_stored(events)
    assert "seq must be 12" in str(err.value) and tracker.next_seq == 12


def test_a_long_step_through_feed_all_equals_feed_one_by_one() -> None:
    start: list[Any] = [
        {"type": "turn/start", "seq": 0, "time": 1, "data": {"turn": 1, "trigger": {"kind": "prompt"}}},
        {"type": "user/message", "seq": 1, "time": 1, "data": {"turn": 1, "content": []}},
        {"type": "step/start", "seq": 2, "time": 1, "data": {"turn": 1, "step": 1}},
    ]
    chunks: list[Any] = [{"type": "assistant/chunk", "seq": 3 + i, "time": 2,
               "data": {"turn": 1, "step": 1, "chunk": {"type": "text", "text": f"w{i} "}}} for i in range(1000)]
    end: list[Any] = [
        {"type": "step/end", "seq": 1003, "time": 3, "data": {"turn": 1, "step": 1}},
        {"type": "turn/end", "seq": 1004, "time": 3, "data": {"turn": 1, "reason": {"kind": "completed"}}},
    ]
    one_by_one = InvariantTracker(session_id="s")
    for event in [*start, *chunks, *end]:
        one_by_one.feed(event)
    at_once = InvariantTracker(session_id="s")
    at_once.feed_all([*start, *chunks, *end])
    assert asdict(at_once) == asdict(one_by_one)
    assert at_once.next_seq == 1005 and not at_once.in_turn
    stored = InvariantTracker(session_id="s")
    for block in range(0, 1005, 97):  # blocks cut anywhere, as a load reads them
        stored.feed_stored([*start, *chunks, *end][block : block + 97])
    assert asdict(stored) == asdict(one_by_one)


def test_deepcopy_is_independent() -> None:
    tracker = open_step()
    twin = copy.deepcopy(tracker)
    assert asdict(twin) == asdict(tracker) and twin.calls["c1"] is not tracker.calls["c1"]
    twin.feed(chunk())  # type: ignore[arg-type]
    twin.calls["c1"].started = True
    assert tracker.next_seq == 10 and not tracker.calls["c1"].started
