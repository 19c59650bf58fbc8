"""Crash repair: close an interrupted final turn instead of dropping it, and the
report of what a load repaired.

A turn can hold a lot of real work (many steps, large tool output), so a log that ends
inside a turn is kept and closed with synthetic events (see shared/seeds 003): the
closers of session.closers, stamped as the events a load appends. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from session.closers import Interrupted, closers, open_turn
from session.events import TOOL_RESULT, TURN_END, Event
from session.invariants import InvariantTracker
from session.typed import typed


def interrupted_turn_closers(
    tracker: InvariantTracker, *, time: int, cause: Literal["crash", "shutdown"] = "crash"
) -> list[Event]:
    """The events that close the open turn of the log `tracker` stands at the end of, or
    [] if it ends between turns: the `Interrupted` closers (session.closers) as stored
    events, seqs continuing the log, each stamped `time` (the caller gives the last
    event's: a crash has no better clock)."""
    seq = tracker.next_seq
    return [{"type": etype, "seq": seq + index, "time": time, "data": data}  # type: ignore[typeddict-item]
            for index, (etype, data) in enumerate(closers(open_turn(tracker), Interrupted(cause)))]


def report_of(closers: list[Event], *, torn_bytes: int = 0, torn_records: int = 0,
              kept_aside: str | None = None) -> RepairReport:
    """The report of a repair that cut a torn tail (if any) and appended `closers`."""
    return RepairReport(
        torn_bytes=torn_bytes,
        torn_records=torn_records,
        kept_aside=kept_aside,
        interrupted_turn=_turn_ended(closers),
        synthetic_results=sum(1 for c in closers if c["type"] == TOOL_RESULT),
        closers=len(closers),
    )


def _turn_ended(closers: list[Event]) -> int | None:
    """The turn the closers end (the last of them is its `turn/end`), or None."""
    last = typed(closers[-1]) if closers else None
    return last["data"]["turn"] if last is not None and last["type"] == TURN_END else None


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
