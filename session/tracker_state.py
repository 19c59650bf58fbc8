"""What the live log (session.log) keeps of its InvariantTracker to go back to: the
state a batch may change, put back when the batch is refused (`TrackerState`), and a
whole copy at each durable point, the tracker a failed write rolls back to
(`copy_tracker`). Apart from the tracker's own module (session.invariants, which
checks events): this is the log's way back, and only the log uses it. A field of the
tracker that feeding an event changes must be put back by `TrackerState` too. Pure.
"""

from __future__ import annotations

from session.invariants import InvariantTracker, OpenCall


def copy_tracker(tracker: InvariantTracker) -> InvariantTracker:
    """A copy that can be fed without touching `tracker` (its own `__deepcopy__`,
    without `copy.deepcopy`'s memo machinery: nothing in it is shared)."""
    return tracker.__deepcopy__({})


class TrackerState:
    """What feeding a batch can change in a tracker, to put it back if the batch is
    refused: the scalar fields, the calls dict (replaced at `turn/start` and
    `turn/end`, added to by `assistant/message`), each open call's flags (set by
    `tool/call`, `tool/permission` and `tool/result`) and the compactions (a dict
    replaced whole by each `context/compaction`)."""

    __slots__ = ("_calls", "_compactions", "_flags", "_scalars")

    def __init__(self, tracker: InvariantTracker) -> None:
        self._scalars = (tracker.next_seq, tracker.turn, tracker.in_turn, tracker.step, tracker.step_open)
        self._calls = tracker.calls
        self._compactions = tracker.compactions  # replaced, never changed in place
        self._flags: list[tuple[str, OpenCall, bool, bool, bool]] = [
            (cid, call, call.started, call.answered, call.held) for cid, call in tracker.calls.items()]

    def restore(self, tracker: InvariantTracker) -> None:
        tracker.next_seq, tracker.turn, tracker.in_turn, tracker.step, tracker.step_open = self._scalars
        calls = self._calls
        calls.clear()
        for cid, call, started, answered, held in self._flags:
            call.started, call.answered, call.held = started, answered, held
            calls[cid] = call
        tracker.calls = calls
        tracker.compactions = self._compactions
