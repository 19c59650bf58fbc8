"""Events as their readers see them: a tagged union, one TypedDict per event type, built
from the data TypedDicts of session.items, so that a reader's branch on the type
narrows the data to that type's fields and mypy checks every read in it. Pure.

    event = typed(stored)
    if event["type"] == TURN_END:
        event["data"]["reason"]  # a Reason; `event["data"]["content"]` is an error here

The branch must test `event["type"]` itself: mypy does not narrow `event` through a
copy of its type in a local (`etype = event["type"]`).

`Event` (session.events) stays what the log writes and the stores read back: the same
dicts, untyped, so nothing about the stored JSON or its cost changes; `typed` is a view,
the identity at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict

from session.events import Event
from session.items import (
    AssistantChunkData,
    AssistantMessageData,
    CompactionData,
    ConfigSetData,
    StepData,
    ToolCallData,
    ToolPermissionData,
    ToolResultData,
    TurnEndData,
    TurnStartData,
    UserMessageData,
    WrappedUpdateData,
)


class TurnStartEvent(TypedDict):
    type: Literal["turn/start"]
    seq: int
    time: int
    data: TurnStartData


class UserMessageEvent(TypedDict):
    type: Literal["user/message"]
    seq: int
    time: int
    data: UserMessageData


class StepStartEvent(TypedDict):
    type: Literal["step/start"]
    seq: int
    time: int
    data: StepData


class StepEndEvent(TypedDict):
    type: Literal["step/end"]
    seq: int
    time: int
    data: StepData


class AssistantChunkEvent(TypedDict):
    type: Literal["assistant/chunk"]
    seq: int
    time: int
    data: AssistantChunkData


class AssistantMessageEvent(TypedDict):
    type: Literal["assistant/message"]
    seq: int
    time: int
    data: AssistantMessageData


class ToolCallEvent(TypedDict):
    type: Literal["tool/call"]
    seq: int
    time: int
    data: ToolCallData


class ToolPermissionEvent(TypedDict):
    type: Literal["tool/permission"]
    seq: int
    time: int
    data: ToolPermissionData


class ToolResultEvent(TypedDict):
    type: Literal["tool/result"]
    seq: int
    time: int
    data: ToolResultData


class TurnEndEvent(TypedDict):
    type: Literal["turn/end"]
    seq: int
    time: int
    data: TurnEndData


class WrappedUpdateEvent(TypedDict):
    type: Literal["wrapped/update"]
    seq: int
    time: int
    data: WrappedUpdateData


class ConfigSetEvent(TypedDict):
    type: Literal["config/set"]
    seq: int
    time: int
    data: ConfigSetData


class CompactionEvent(TypedDict):
    type: Literal["context/compaction"]
    seq: int
    time: int
    data: CompactionData


AnyEvent = (TurnStartEvent | UserMessageEvent | StepStartEvent | StepEndEvent | AssistantChunkEvent
            | AssistantMessageEvent | ToolCallEvent | ToolPermissionEvent | ToolResultEvent | TurnEndEvent
            | WrappedUpdateEvent | ConfigSetEvent | CompactionEvent)
"""A stamped event, typed by its `type` (tests/test_typed_events.py holds it to
session.events.EVENT_TYPES: one member per type)."""


# The one place an `Event` is taken for an `AnyEvent`, unchecked: every event a reader
# is given was checked before it got there. Read back from a store, each record was
# shape-checked (session.scan: exactly {type, seq, time, data}, a known type, int seq and
# time, dict data) and fed to the invariants (session.invariants: the fields that place
# it, each turn and step and call id, the trigger, content lists, chunk, reason, update,
# config id and value); written live, it came from a constructor of session.items, typed
# by that type's data, and was checked by the same invariants before it was appended.
# A reader that is also handed logs the invariants refused (the search index keeps
# those too: acp_bridge.cli.sessions.facts) reads them with `.get` and tests types, as
# it did before. Checking each field again here would cost every load a second pass
# over every event for nothing (bench/persistence.py).


def typed(event: Event) -> AnyEvent:
    """`event`, typed by its `type`."""
    return event  # type: ignore[return-value]  # checked where it was read or written: see above


def typed_all(events: Sequence[Event]) -> Sequence[AnyEvent]:
    """`events` (the same sequence, not a copy), each typed by its `type`: `typed` for a
    block, without a call per event in the loops that run once per stored event."""
    return events  # type: ignore[return-value]  # as `typed`
