"""Crash repair: close an interrupted final turn instead of dropping it.

A turn can hold a lot of real work (many steps, large tool output), so a log that ends
inside a turn is kept and closed with synthetic events (see shared/seeds 003). Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from session.events import (
    ASSISTANT_MESSAGE,
    INTERRUPTED_CODE,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    Event,
    tool_calls_of,
)


def open_turn_start(events: Sequence[Event]) -> int | None:
    """Index of the `turn/start` of the turn the log ends in, or None if it ends closed."""
    for index in range(len(events) - 1, -1, -1):
        etype = events[index]["type"]
        if etype == TURN_END:
            return None
        if etype == TURN_START:
            return index
    return None


def interrupted_turn_closers(
    events: Sequence[Event],
    *,
    cause: Literal["crash", "shutdown"] = "crash",
    time: int | None = None,
    not_run: Collection[str] = (),
) -> list[Event]:
    """The events that close the open final turn of `events`, or [] if there is none.

    In order: a failed `tool/result` for each unanswered call of the open turn (log
    order, saying whether the call had started), `step/end` if a step is open, then
    `turn/end {kind: "interrupted", cause}`. Seqs continue the log; `time` defaults to
    the last event's time (a crash has no better clock). A `tool/call` is written before
    its permission is asked, so the log alone cannot tell a call waiting for its
    permission from one running; an agent stopping mid-turn knows, and names the calls
    that never ran in `not_run` (crash repair has no such knowledge, and says "may have
    run").
    """
    start = open_turn_start(events)
    if start is None:
        return []
    turn_events = events[start:]
    turn = turn_events[0]["data"]["turn"]
    calls: dict[str, tuple[str, int]] = {}  # callId -> (tool name, step), log order
    started: set[str] = set()
    answered: set[str] = set()
    step, step_open = 0, False
    for event in turn_events:
        etype, data = event["type"], event["data"]
        if etype == STEP_START:
            step, step_open = data["step"], True
        elif etype == STEP_END:
            step_open = False
        elif etype == ASSISTANT_MESSAGE:
            for block in tool_calls_of(data):
                calls.setdefault(block["id"], (block.get("name", "?"), data["step"]))
        elif etype == TOOL_CALL:
            started.add(data["callId"])
        elif etype == TOOL_RESULT:
            answered.add(data["callId"])

    last = events[-1]
    seq, stamp = last["seq"], last["time"] if time is None else time
    closers: list[Event] = []

    def add(etype: str, data: dict[str, Any]) -> None:
        closers.append({"type": etype, "seq": seq + 1 + len(closers), "time": stamp, "data": data})

    for call_id, (name, call_step) in calls.items():
        if call_id in answered:
            continue
        add(
            TOOL_RESULT,
            {
                "turn": turn,
                "step": call_step,
                "callId": call_id,
                "content": [{"type": "text", "text": interrupted_text(
                    name, call_id in started and call_id not in not_run)}],
                "isError": True,
                "error": {"name": "InterruptedError", "code": INTERRUPTED_CODE},
            },
        )
    if step_open:
        add(STEP_END, {"turn": turn, "step": step})
    add(TURN_END, {"turn": turn, "reason": {"kind": "interrupted", "cause": cause}})
    return closers


def interrupted_text(tool_name: str, started: bool) -> str:
    if started:
        return (
            f"The {tool_name} call was interrupted: the agent stopped while it was running. "
            "Its outcome is unknown; it may have run, fully or in part."
        )
    return f"The {tool_name} call was interrupted before it started; it did not run."


@dataclass(frozen=True)
class RepairReport:
    """What `load` repaired. `to_meta()` is the shape reported to clients in `_meta`."""

    torn_bytes: int = 0
    torn_records: int = 0
    kept_aside: str | None = None
    interrupted_turn: int | None = None
    synthetic_results: int = 0
    closers: int = 0

    @property
    def repaired(self) -> bool:
        return bool(self.torn_bytes or self.torn_records or self.closers)

    def to_meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "repaired": self.repaired,
            "tornBytes": self.torn_bytes,
            "tornRecords": self.torn_records,
            "interruptedTurn": self.interrupted_turn,
            "syntheticResults": self.synthetic_results,
            "closers": self.closers,
        }
        if self.kept_aside is not None:
            out["keptAside"] = self.kept_aside
        return out
