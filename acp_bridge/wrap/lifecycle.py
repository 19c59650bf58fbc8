"""A wrapped session's lifecycle, as data (docs/wrap.md, "The lifecycle").

Pure: no I/O, no tasks, no clock (the driver passes the times in). Everything the
wrapper decides about a session while two tasks (the prompt's, the child reader's) and
the editor's reader act on it is decided here, by one function:

    step(state, event) -> Step(state, acts)

over the states of acp_bridge.wrap.state and the events and acts of
acp_bridge.wrap.signals. The driver (acp_bridge.wrap.turns for a prompt,
acp_bridge.wrap.upstream for what the child sends, acp_bridge.wrap.driver for the child's
runs, acp_bridge.wrap.moves for a move) performs the acts, in order. A pair the table
has no rule for is a bug of the driver's: `LifecycleError`.

The rules for the child's process (start, restart, which way to restore, whether to
seed) are pure functions beside it: acp_bridge.wrap.child_runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Final, NamedTuple

from acp_bridge.errors import LifecycleError
from acp_bridge.wrap.signals import (
    Act,
    Answered,
    Asking,
    Began,
    Bound,
    Cancel,
    ChildRequest,
    ChildUpdate,
    Close,
    Event,
    Finished,
    GraceOver,
    Interrupted,
    LateAnswer,
    Moved,
    MoveFailed,
    PermissionAnswered,
    Prompted,
    Reached,
    ReachFailed,
    RestoreAbandoned,
    RestoreBegan,
    RestoreRefused,
    SeedBegan,
    SeedEnded,
    Stop,
    SwitchAsked,
)
from acp_bridge.wrap.state import (
    Cancelling,
    Commanding,
    End,
    Ending,
    Idle,
    Moving,
    Place,
    Placed,
    Prompting,
    Restoring,
    Seeding,
    State,
    Stuck,
    Turn,
    Unplaced,
    Waiting,
)


class Step(NamedTuple):
    state: State
    acts: tuple[Act, ...]


A = Act
NOTHING: Final[tuple[Act, ...]] = ()
_RECORD_AND_FORWARD: Final = (A.RECORD, A.FORWARD)
_DROP: Final = (A.DROP,)
_ENDS: Final[Mapping[End, Act]] = {"answer": A.END_ANSWER, "failed": A.END_FAILED, "cancelled": A.END_CANCELLED,
                                    "forced": A.END_FORCED, "crash": A.END_CRASH, "shutdown": A.END_SHUTDOWN}
PERMISSION_CANCEL: Final = "session/request_permission"  # the `by` of a turn its permission answer cancelled
CLOSE_CANCEL: Final = "session/close"


def _illegal(state: State, event: Event) -> LifecycleError:
    return LifecycleError(f"wrapped session: no rule for {type(event).__name__} in {describe(state)}")


def describe(state: State) -> str:
    """The state's kind, as the table in docs/wrap.md names it."""
    turn = state.turn
    turn_kind = type(turn).__name__.lower() + (f"/{turn.stage}" if isinstance(turn, Prompting | Cancelling) else "")
    moving = " (moving)" if state.moving is not None else ""
    closed = " (closed)" if state.closed else ""
    return f"{type(state.place).__name__.lower()} · {turn_kind}{moving}{closed}"


def _end(state: State, how: End, *before: Act, place: Place | None = None) -> Step:
    ending = Ending(how, _cancelled_by(state.turn))
    return Step(replace(state, turn=ending, place=place or state.place), (*before, _ENDS[how]))


def _cancelled_by(turn: Turn) -> str | None:
    if isinstance(turn, Cancelling):
        return turn.by
    return turn.by if isinstance(turn, Prompting) else None


# --- the rules: one per event, by state ----------------------------------------------

def _prompted(s: State, e: Prompted) -> Step:
    if not isinstance(s.turn, Idle):
        raise _illegal(s, e)  # the host lets one prompt run at a time
    return Step(replace(s, turn=Waiting()), (A.AWAIT_MOVE,) if s.moving is not None else NOTHING)


def _began(s: State, e: Began) -> Step:
    if not isinstance(s.turn, Waiting) or s.moving is not None:
        raise _illegal(s, e)
    if e.own:
        return Step(replace(s, turn=Commanding()), (A.RUN_OWN,))
    return Step(replace(s, turn=Prompting("starting")), (A.REACH,))


def _reached(s: State, e: Reached) -> Step:
    turn = s.turn
    if not isinstance(turn, Prompting | Cancelling) or turn.stage == "asked":
        raise _illegal(s, e)
    if turn.stage == "opened":  # reached again, to send the prompt again (`Asking` decides)
        return Step(s, NOTHING)
    return Step(replace(s, turn=replace(turn, stage="opened")), (A.RECORD_PROMPT,))


def _reach_failed(s: State, e: ReachFailed) -> Step:
    turn = s.turn
    if not isinstance(turn, Prompting | Cancelling) or turn.stage == "asked":
        raise _illegal(s, e)
    if turn.stage == "starting":  # no turn recorded yet: the prompt's error (then `Finished`)
        return Step(s, NOTHING)
    return _end(s, "crash")


def _asking(s: State, e: Asking) -> Step:
    turn = s.turn
    if not isinstance(turn, Prompting | Cancelling) or turn.stage != "opened":
        raise _illegal(s, e)
    if _cancelled_by(turn) is not None:  # cancelled before the child had it: never sent
        return _end(s, "cancelled")
    return Step(replace(s, turn=replace(turn, stage="asked")), (A.SEND,))


def _answered(s: State, e: Answered) -> Step:
    turn = s.turn
    if not isinstance(turn, Prompting | Cancelling) or turn.stage != "asked":
        raise _illegal(s, e)
    cancelled = _cancelled_by(turn) is not None
    answer = e.answer
    if answer == "exited_unread":
        if cancelled:  # it never ran: the editor's cancel ends it
            return _end(s, "cancelled")
        if e.resend:  # it died before it read the prompt: the restarted child gets it
            return Step(replace(s, turn=replace(turn, stage="opened")), (A.RESEND,))
        return _end(s, "crash")
    if answer == "exited":
        return _end(s, "crash")
    if isinstance(turn, Cancelling):
        # The child has the editor's cancel (told when it came: the prompt was asked):
        # the prompt is answered `cancelled` whatever it answers now, an error (many
        # answer a cancelled prompt -32800) or a stop reason of its own (recorded beside).
        return _end(s, "cancelled")
    if answer == "error":
        return _end(s, "cancelled" if cancelled else "failed")
    if answer == "result_cancelled" and cancelled:
        return _end(s, "cancelled")
    return _end(s, "answer")


def _grace_over(s: State, e: GraceOver) -> Step:
    turn = s.turn
    if not isinstance(turn, Cancelling):
        raise _illegal(s, e)
    if turn.stage == "asked":  # the child runs on: its session is stuck until it answers
        place = s.place
        stuck = Stuck(place.child_sid, place.generation) if isinstance(place, Placed) else place
        return _end(s, "forced", A.STICK, place=stuck)
    # It was not reached in time (a start, an `initialize`, a restore that hangs): the
    # child is restarted at its next use, and the session restored again then.
    before = (A.RECORD_PROMPT,) if turn.stage == "starting" else NOTHING
    place = s.place if isinstance(s.place, Stuck) else Unplaced(s.child_sid)
    return _end(s, "forced", *before, A.OVERDUE, place=place)


def _interrupted(s: State, e: Interrupted) -> Step:
    if not isinstance(s.turn, Prompting | Cancelling) or s.turn.stage == "starting":
        raise _illegal(s, e)
    return _end(s, "shutdown")


def _finished(s: State, e: Finished) -> Step:
    if isinstance(s.turn, Idle):
        raise _illegal(s, e)
    return Step(replace(s, turn=Idle()), NOTHING)


def _cancel(s: State, e: Cancel) -> Step:
    turn = s.turn
    close_by = s.close_by
    if isinstance(turn, Prompting):
        deadline = e.deadline
        turn = Cancelling(turn.stage, turn.by or e.by, deadline)
        acts: tuple[Act, ...] = (A.WAIT_UNTIL_GRACE, A.CANCEL_ASKS, A.TELL_CHILD)
    elif isinstance(turn, Cancelling):  # the grace is the first cancel's
        deadline, acts = turn.deadline, (A.CANCEL_ASKS, A.TELL_CHILD)
    elif isinstance(turn, Ending):  # its end is being written: nothing more to stop
        return Step(s, (A.TELL_CHILD,))
    else:
        return Step(s, NOTHING)  # no turn of the child's runs: nothing to cancel
    if e.by == CLOSE_CANCEL:
        close_by = deadline
    return Step(replace(s, turn=turn, close_by=close_by), acts)


def _stop(s: State, e: Stop) -> Step:
    turn = s.turn
    waits = isinstance(turn, Prompting | Cancelling) and turn.stage != "starting"
    return Step(s, (A.STOP_WAITING,) if waits else NOTHING)


def _close(s: State, e: Close) -> Step:
    if s.closed:
        raise _illegal(s, e)
    acts = (A.CLOSE_CHILD_NOW if isinstance(s.place, Stuck) else A.CLOSE_CHILD, A.FORGET)
    return Step(replace(s, closed=True), acts)


def _child_update(s: State, e: ChildUpdate) -> Step:
    place = s.place
    if isinstance(place, Seeding) or (isinstance(place, Restoring) and place.way == "load"):
        return Step(s, _DROP)  # its replay of what we replayed, or its answer to the seed
    return Step(s, _RECORD_AND_FORWARD)


def _child_request(s: State, e: ChildRequest) -> Step:
    if isinstance(s.place, Seeding):
        return Step(s, (A.KEEP_FROM_EDITOR,))
    turn = s.turn
    if e.permission and isinstance(turn, Cancelling):  # asked after the cancel was read
        return Step(s, (A.ANSWER_CANCELLED,))
    if e.permission and isinstance(turn, Prompting | Ending):
        return Step(s, (A.ASK_EDITOR, A.RECORD_PERMISSION))
    return Step(s, (A.ASK_EDITOR,))


def _permission_answered(s: State, e: PermissionAnswered) -> Step:
    turn = s.turn
    if isinstance(turn, Cancelling) or e.interrupted:
        # The editor's cancel was read before its answer was acted on: the cancel wins,
        # the answer is not recorded, the child is told `cancelled`.
        return Step(s, (A.ANSWER_CANCELLED,))
    if e.cancelled and isinstance(turn, Prompting) and turn.by is None:
        # The editor ended the turn through its answer: the turn's cancel says so.
        return Step(replace(s, turn=replace(turn, by=PERMISSION_CANCEL)), (A.RECORD_PERMISSION,))
    return Step(s, (A.RECORD_PERMISSION,))


def _late_answer(s: State, e: LateAnswer) -> Step:
    place = s.place
    if isinstance(place, Stuck) and place.child_sid == e.child_sid and e.ok:
        return Step(replace(s, place=Placed(place.child_sid, place.generation)), (A.UNSTICK,))
    return Step(s, NOTHING)


def _restore_began(s: State, e: RestoreBegan) -> Step:
    if isinstance(s.place, Restoring | Seeding):
        raise _illegal(s, e)
    return Step(replace(s, place=Restoring(e.way, e.child_sid, e.generation, last=s.child_sid)), NOTHING)


def _restore_refused(s: State, e: RestoreRefused) -> Step:
    place = s.place
    if not isinstance(place, Restoring):
        raise _illegal(s, e)
    return Step(replace(s, place=Unplaced(place.last)), NOTHING)


def _restore_abandoned(s: State, e: RestoreAbandoned) -> Step:
    place = s.place
    if not isinstance(place, Restoring):
        raise _illegal(s, e)
    if place.child_sid is None:  # a fresh one it may still make: never ours
        return Step(replace(s, place=Unplaced(place.last)), NOTHING)
    # It may still be loading or resuming it: what it sends of it is dropped until it is
    # restarted (it never answers now), and the next use gives the session a fresh one.
    return Step(replace(s, place=Stuck(place.child_sid, place.generation)), (A.STICK,))


def _bound(s: State, e: Bound) -> Step:
    return Step(replace(s, agent=e.agent, place=Placed(e.child_sid, e.generation)), NOTHING)


def _seed_began(s: State, e: SeedBegan) -> Step:
    place = s.place
    if not isinstance(place, Placed):
        raise _illegal(s, e)
    return Step(replace(s, place=Seeding(place.child_sid, place.generation)), NOTHING)


def _seed_ended(s: State, e: SeedEnded) -> Step:
    place = s.place
    if not isinstance(place, Seeding):
        raise _illegal(s, e)
    return Step(replace(s, place=Placed(place.child_sid, place.generation)), NOTHING)


def _switch_asked(s: State, e: SwitchAsked) -> Step:
    if s.closed:
        raise _illegal(s, e)
    if not isinstance(s.turn, Commanding if e.in_command else Idle):
        return Step(s, (A.REFUSE_BUSY,))
    if s.moving is not None:
        return Step(s, (A.REFUSE_MOVING,))
    if e.target == s.agent:
        return Step(s, (A.UNCHANGED,))
    moving = Moving(s.agent, s.place, e.kept)
    return Step(replace(s, agent=e.target, place=Unplaced(), moving=moving), (A.PLACE,))


def _moved(s: State, e: Moved) -> Step:
    if s.moving is None or not isinstance(s.place, Placed):
        raise _illegal(s, e)
    return Step(replace(s, moving=None), (A.LEAVE_SOURCE, A.WAKE))


def _move_failed(s: State, e: MoveFailed) -> Step:
    moving = s.moving
    if moving is None:
        raise _illegal(s, e)
    return Step(replace(s, agent=moving.source, place=moving.back, moving=None), (A.GO_BACK, A.WAKE))


_RULES: Final[dict[type[Any], Callable[[State, Any], Step]]] = {
    Prompted: _prompted, Began: _began, Reached: _reached, ReachFailed: _reach_failed, Asking: _asking,
    Answered: _answered, GraceOver: _grace_over, Interrupted: _interrupted, Finished: _finished,
    Cancel: _cancel, Stop: _stop, Close: _close, ChildUpdate: _child_update, ChildRequest: _child_request,
    PermissionAnswered: _permission_answered, LateAnswer: _late_answer, RestoreBegan: _restore_began,
    RestoreRefused: _restore_refused, RestoreAbandoned: _restore_abandoned, Bound: _bound, SeedBegan: _seed_began, SeedEnded: _seed_ended,
    SwitchAsked: _switch_asked, Moved: _moved, MoveFailed: _move_failed,
}


def step(state: State, event: Event) -> Step:
    """The state after `event`, and what the driver does for it (LifecycleError: no
    rule takes `event` in `state`, a bug of the driver's)."""
    return _RULES[type(event)](state, event)
