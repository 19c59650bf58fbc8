"""The wrapped session's lifecycle (acp_bridge.wrap.lifecycle), as a table: every race
the wrapper fixed (the commit log, docs/wrap.md) is a row, from a state and an event to
the state after and what the driver does. The subprocess tests of the same races stay
(tests/test_wrap_cancel*.py, test_wrap_child_death.py, test_wrap_switch.py ...): these
say what is decided, those that it is done. The child's runs (acp_bridge.wrap.child_runs)
are tables too, at the end."""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product

import pytest

from acp_bridge.errors import LifecycleError
from acp_bridge.wrap.child_runs import link_plan, restore_ways, seeds
from acp_bridge.wrap.lifecycle import step
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
    Ending,
    Idle,
    Moving,
    Placed,
    Prompting,
    Restoring,
    Seeding,
    State,
    Stuck,
    Unplaced,
    Waiting,
)
from tests.support import lifecycle_table

A = Act
PLACED = Placed("c1", 3)
S = State("a", PLACED)


def prompting(stage: str = "asked", by: str | None = None) -> State:
    return replace(S, turn=Prompting(stage, by=by))  # type: ignore[arg-type]


def cancelling(stage: str = "asked", by: str = "session/cancel", deadline: float = 10.0) -> State:
    return replace(S, turn=Cancelling(stage, by, deadline))  # type: ignore[arg-type]


MOVING = replace(State("b", Unplaced()), moving=Moving("a", PLACED, kept=("plan", None, False)))


@dataclass(frozen=True)
class Row:
    why: str
    state: State
    event: Event
    after: State
    acts: tuple[Act, ...]


ROWS = [
    # --- cancel and a permission answer (docs/wrap.md "Cancel and a permission answer")
    Row("a cancel read before the editor's permission answer wins: not recorded, the child told cancelled",
        cancelling(), PermissionAnswered(), cancelling(), (A.ANSWER_CANCELLED,)),
    Row("a cancel read in the same read as the answer stopped the wait: the cancel wins",
        prompting(), PermissionAnswered(interrupted=True), prompting(), (A.ANSWER_CANCELLED,)),
    Row("a permission asked after the cancel was read is answered cancelled, the editor not asked",
        cancelling(), ChildRequest(permission=True), cancelling(), (A.ANSWER_CANCELLED,)),
    Row("a permission of the running turn goes to the editor once the calls are durable, its answer recorded",
        prompting(), ChildRequest(permission=True), prompting(), (A.ASK_EDITOR, A.RECORD_PERMISSION)),
    Row("a permission asked while the child is still being reached is the turn's too",
        prompting("starting"), ChildRequest(permission=True), prompting("starting"),
        (A.ASK_EDITOR, A.RECORD_PERMISSION)),
    Row("an answer acted on before any cancel is recorded",
        prompting(), PermissionAnswered(), prompting(), (A.RECORD_PERMISSION,)),
    Row("a permission answered cancelled (no session/cancel) marks the turn cancelled by the answer",
        prompting(), PermissionAnswered(cancelled=True), prompting(by="session/request_permission"),
        (A.RECORD_PERMISSION,)),
    Row("... and the child's stopReason cancelled then ends it cancelled {by: session/request_permission}",
        prompting(by="session/request_permission"), Answered("result_cancelled"),
        replace(S, turn=Ending("cancelled", "session/request_permission")), (A.END_CANCELLED,)),
    Row("a request of a session outside a turn goes to the editor, not recorded",
        S, ChildRequest(permission=True), S, (A.ASK_EDITOR,)),
    # --- the cancel and its grace (docs/wrap.md "The cancel grace")
    Row("the first cancel starts the grace, tells the child, stops the permission requests",
        prompting(), Cancel("session/cancel", 7.5), cancelling(deadline=7.5),
        (A.WAIT_UNTIL_GRACE, A.CANCEL_ASKS, A.TELL_CHILD)),
    Row("a later cancel does not extend the grace, and keeps the first cancel's `by`",
        cancelling(deadline=7.5), Cancel("$/cancel_request", 99.0), cancelling(deadline=7.5),
        (A.CANCEL_ASKS, A.TELL_CHILD)),
    Row("a session/close of the running turn is answered within the same grace",
        prompting(), Cancel("session/close", 7.5), replace(cancelling(by="session/close", deadline=7.5), close_by=7.5),
        (A.WAIT_UNTIL_GRACE, A.CANCEL_ASKS, A.TELL_CHILD)),
    Row("a cancel after a permission answered cancelled keeps that answer's `by`",
        prompting(by="session/request_permission"), Cancel("session/cancel", 7.5),
        cancelling(by="session/request_permission", deadline=7.5), (A.WAIT_UNTIL_GRACE, A.CANCEL_ASKS, A.TELL_CHILD)),
    Row("no turn of the child's runs (between turns): the cancel is declined ($/cancel_request: -32800)",
        S, Cancel("$/cancel_request", 7.5), S, ()),
    Row("a prompt waiting for a move has no turn to cancel yet",
        replace(S, turn=Waiting()), Cancel("session/cancel", 7.5), replace(S, turn=Waiting()), ()),
    Row("a command of the wrapper's has no child turn to cancel",
        replace(S, turn=Commanding()), Cancel("session/cancel", 7.5), replace(S, turn=Commanding()), ()),
    Row("a cancel before the prompt reached the child: the prompt is never sent, the turn cancelled",
        cancelling("opened"), Asking(), replace(S, turn=Ending("cancelled", "session/cancel")), (A.END_CANCELLED,)),
    Row("a cancel while the child is started or the session restored: the turn is recorded once reached",
        cancelling("starting"), Reached(), cancelling("opened"), (A.RECORD_PROMPT,)),
    Row("no answer within the grace: cancelled {forced}, the child session stuck (its traffic dropped)",
        cancelling(), GraceOver(), replace(S, place=Stuck("c1", 3), turn=Ending("forced", "session/cancel")),
        (A.STICK, A.END_FORCED)),
    Row("the child not reached within the grace (a start, initialize or restore that hangs): the prompt "
        "recorded, the turn forced, the child restarted at its next use and the session restored then",
        cancelling("starting"), GraceOver(),
        replace(S, place=Unplaced("c1"), turn=Ending("forced", "session/cancel")),
        (A.RECORD_PROMPT, A.OVERDUE, A.END_FORCED)),
    Row("a restarted child not reached within the grace to be sent the prompt again: not recorded twice",
        cancelling("opened"), GraceOver(),
        replace(S, place=Unplaced("c1"), turn=Ending("forced", "session/cancel")), (A.OVERDUE, A.END_FORCED)),
    Row("a stuck session's late answer puts it in step again: the next prompt goes to the same child session",
        replace(S, place=Stuck("c1", 3)), LateAnswer("c1", ok=True), S, (A.UNSTICK,)),
    Row("a late error answer leaves it stuck (restarted at its next use)",
        replace(S, place=Stuck("c1", 3)), LateAnswer("c1", ok=False), replace(S, place=Stuck("c1", 3)), ()),
    Row("a late answer of a child session a fresh one replaced changes nothing",
        replace(S, place=Placed("c2", 3)), LateAnswer("c1", ok=True), replace(S, place=Placed("c2", 3)), ()),
    Row("a stuck session's close is sent, not waited for (it had its grace)",
        replace(S, place=Stuck("c1", 3)), Close(), replace(S, place=Stuck("c1", 3), closed=True),
        (A.CLOSE_CHILD_NOW, A.FORGET)),
    Row("a close is waited for until its bound", S, Close(), replace(S, closed=True), (A.CLOSE_CHILD, A.FORGET)),
    # --- the child's answer
    Row("an answer ends the turn as the child said", prompting(), Answered("result"),
        replace(S, turn=Ending("answer")), (A.END_ANSWER,)),
    Row("an error answer to a cancelled prompt is the cancel (many agents answer one -32800)",
        cancelling(), Answered("error"), replace(S, turn=Ending("cancelled", "session/cancel")), (A.END_CANCELLED,)),
    Row("an error answer otherwise fails the turn, the child's error relayed",
        prompting(), Answered("error"), replace(S, turn=Ending("failed")), (A.END_FAILED,)),
    Row("stopReason cancelled without the editor's cancel is the child's own answer",
        prompting(), Answered("result_cancelled"), replace(S, turn=Ending("answer")), (A.END_ANSWER,)),
    Row("stopReason cancelled after the editor's cancel: cancelled {by}",
        cancelling(), Answered("result_cancelled"), replace(S, turn=Ending("cancelled", "session/cancel")),
        (A.END_CANCELLED,)),
    Row("the child had the cancel: whatever it answers within the grace (end_turn too) ends the turn cancelled, "
        "its own stop reason kept beside (issue 33: a forwarded cancel answered end_turn)",
        cancelling(), Answered("result"), replace(S, turn=Ending("cancelled", "session/cancel")),
        (A.END_CANCELLED,)),
    Row("... and after a permission answered cancelled (no cancel passed to the child) its answer stands",
        prompting(by="session/request_permission"), Answered("result"),
        replace(S, turn=Ending("answer", "session/request_permission")), (A.END_ANSWER,)),
    Row("the child died running the prompt: its known calls written, interrupted {crash}",
        prompting(), Answered("exited"), replace(S, turn=Ending("crash")), (A.END_CRASH,)),
    Row("the child died before it read a byte of the prompt: the restarted child is sent it again",
        prompting(), Answered("exited_unread", resend=True), prompting("opened"), (A.RESEND,)),
    Row("... sent again, reached again: asked again",
        prompting("opened"), Asking(), prompting(), (A.SEND,)),
    Row("... and when the resends are used up: interrupted {crash}",
        prompting(), Answered("exited_unread"), replace(S, turn=Ending("crash")), (A.END_CRASH,)),
    Row("a restarted child that cannot be reached to be sent it again: interrupted {crash}",
        prompting("opened"), ReachFailed(), replace(S, turn=Ending("crash")), (A.END_CRASH,)),
    Row("a dead child that never read a cancelled prompt: cancelled, not crashed (and no pointless restart)",
        cancelling(), Answered("exited_unread", resend=True), replace(S, turn=Ending("cancelled", "session/cancel")),
        (A.END_CANCELLED,)),
    Row("the first reach failing (the child cannot be started) is the prompt's error: no turn recorded",
        prompting("starting"), ReachFailed(), prompting("starting"), ()),
    # --- the end of our stdin
    Row("stdin ends while the prompt waits on the child: the wait is stopped",
        prompting(), Stop(), prompting(), (A.STOP_WAITING,)),
    Row("... then interrupted {shutdown}, its known calls written",
        prompting(), Interrupted(), replace(S, turn=Ending("shutdown")), (A.END_SHUTDOWN,)),
    Row("stdin ends while the child is first reached: nothing to stop (the host answers the prompt as it ends)",
        prompting("starting"), Stop(), prompting("starting"), ()),
    Row("stdin ends between turns: nothing to stop", S, Stop(), S, ()),
    # --- what the child sends
    Row("a session's updates are recorded, then passed on (log before send)", S, ChildUpdate(), S,
        (A.RECORD, A.FORWARD)),
    Row("the child's replay of a session it loads is kept from the editor (the editor has ours)",
        replace(S, place=Restoring("load", "c0", 3)), ChildUpdate(), replace(S, place=Restoring("load", "c0", 3)),
        (A.DROP,)),
    Row("what a resumed session sends meanwhile passes",
        replace(S, place=Restoring("resume", "c0", 3)), ChildUpdate(),
        replace(S, place=Restoring("resume", "c0", 3)), (A.RECORD, A.FORWARD)),
    Row("the seed's updates are kept from the editor and the log",
        replace(S, place=Seeding("c1", 3)), ChildUpdate(), replace(S, place=Seeding("c1", 3)), (A.DROP,)),
    Row("a request while seeding: kept from the editor (permission cancelled, request refused, notification dropped)",
        replace(S, place=Seeding("c1", 3)), ChildRequest(permission=True), replace(S, place=Seeding("c1", 3)),
        (A.KEEP_FROM_EDITOR,)),
    # --- restore and seed
    Row("a load is tried on the child session it had", State("a", Unplaced("c0")),
        RestoreBegan("load", "c0", 4), State("a", Restoring("load", "c0", 4, last="c0")), ()),
    Row("a refused load leaves the old id to try the next way", State("a", Restoring("load", "c0", 4, last="c0")),
        RestoreRefused(), State("a", Unplaced("c0")), ()),
    Row("a failed fresh session leaves the old id too (the next use tries again, not a stale binding)",
        State("a", Restoring("fresh", None, 4, last="c0")), RestoreRefused(), State("a", Unplaced("c0")), ()),
    Row("a load whose wait was stopped (a cancel's grace, the editor's cancel of the load): the child may "
        "still be loading it, its replay dropped until its restart, the next use a fresh session",
        State("a", Restoring("load", "c0", 4, last="c0")), RestoreAbandoned(), State("a", Stuck("c0", 4)),
        (A.STICK,)),
    Row("a fresh session whose wait was stopped: never ours", State("a", Restoring("fresh", None, 4, last="c0")),
        RestoreAbandoned(), State("a", Unplaced("c0")), ()),
    Row("a grace that ran out on that load keeps it stuck, and the child restarted at its next use",
        replace(cancelling("starting"), place=Stuck("c0", 3)), GraceOver(),
        replace(S, place=Stuck("c0", 3), turn=Ending("forced", "session/cancel")),
        (A.RECORD_PROMPT, A.OVERDUE, A.END_FORCED)),
    Row("the child names the session: placed on its run", State("a", Restoring("fresh", None, 4, last="c0")),
        Bound("c5", 4, "a"), State("a", Placed("c5", 4)), ()),
    Row("a seed runs in a placed session", S, SeedBegan(), replace(S, place=Seeding("c1", 3)), ()),
    Row("... and leaves it placed", replace(S, place=Seeding("c1", 3)), SeedEnded(), S, ()),
    # --- prompts and moves (wrap --agent)
    Row("a prompt during a move waits for it", MOVING, Prompted(), replace(MOVING, turn=Waiting()), (A.AWAIT_MOVE,)),
    Row("a prompt with no move runs at once", S, Prompted(), replace(S, turn=Waiting()), ()),
    Row("a prompt that names a command of the wrapper's runs it, not sent to the child",
        replace(S, turn=Waiting()), Began(own=True), replace(S, turn=Commanding()), (A.RUN_OWN,)),
    Row("a prompt for the child starts its turn by reaching it",
        replace(S, turn=Waiting()), Began(own=False), prompting("starting"), (A.REACH,)),
    Row("a move while a prompt runs is refused (-32001)", prompting(), SwitchAsked("b"), prompting(),
        (A.REFUSE_BUSY,)),
    Row("a move while a prompt waits (for another move) is refused too",
        replace(MOVING, turn=Waiting()), SwitchAsked("a"), replace(MOVING, turn=Waiting()), (A.REFUSE_BUSY,)),
    Row("a second move while one runs is refused (switching)", MOVING, SwitchAsked("a"), MOVING,
        (A.REFUSE_MOVING,)),
    Row("a move to the agent it is in changes nothing", S, SwitchAsked("a"), S, (A.UNCHANGED,)),
    Row("a move: the session is the target's, where it was kept for a failure",
        S, SwitchAsked("b", kept=("plan", None, False)), MOVING, (A.PLACE,)),
    Row("/agent moves from the session's own prompt", replace(S, turn=Commanding()), SwitchAsked("b", in_command=True),
        replace(MOVING, turn=Commanding(), moving=Moving("a", PLACED)), (A.PLACE,)),
    Row("a failed move goes back to where it was, as it was, and wakes the prompt waiting",
        replace(MOVING, place=Restoring("fresh", None, 1)), MoveFailed(), S, (A.GO_BACK, A.WAKE)),
    Row("a move recorded: the source left (its child session closed, stopped if unused), the prompt woken",
        replace(MOVING, place=Placed("c9", 1)), Moved(), State("b", Placed("c9", 1)), (A.LEAVE_SOURCE, A.WAKE)),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.why[:70] for r in ROWS])
def test_each_race_is_a_row(row: Row) -> None:
    after, acts = step(row.state, row.event)
    assert (after, acts) == (row.after, row.acts)


ILLEGAL = [
    ("a second prompt (the host refuses it before)", prompting(), Prompted()),
    ("the prompt sent twice", prompting(), Asking()),
    ("an answer to a prompt not asked", prompting("opened"), Answered("result")),
    ("a grace with no cancel", prompting(), GraceOver()),
    ("a turn that did not start cannot finish", S, Finished()),
    ("a seed in a session not placed", State("a", Unplaced("c0")), SeedBegan()),
    ("a restore inside a restore", State("a", Restoring("load", "c0", 1)), RestoreBegan("resume", "c0", 1)),
    ("a move that did not start", S, Moved()),
    ("a move recorded before the target placed it", MOVING, Moved()),
    ("a prompt beginning during a move", replace(MOVING, turn=Waiting()), Began(own=False)),
    ("closing twice", replace(S, closed=True), Close()),
]


@pytest.mark.parametrize(("why", "state", "event"), ILLEGAL, ids=[i[0] for i in ILLEGAL])
def test_a_pair_with_no_rule_is_a_bug(why: str, state: State, event: Event) -> None:
    with pytest.raises(LifecycleError):
        step(state, event)


def test_every_event_from_every_sample_state_is_ruled_or_refused() -> None:
    """No other exception, the turn ends only with an END act, and a stuck place only
    with STICK: over every sample state of the docs' tables and every sample event."""
    states = [s for _, s in lifecycle_table.TURNS + lifecycle_table.PLACES + lifecycle_table.MOVES]
    events = [e for _, e in lifecycle_table.TURN_EVENTS + lifecycle_table.PLACE_EVENTS + lifecycle_table.MOVE_EVENTS]
    ends = {A.END_ANSWER, A.END_FAILED, A.END_CANCELLED, A.END_FORCED, A.END_CRASH, A.END_SHUTDOWN}
    ruled = 0
    for state, event in product(states, events):
        try:
            after, acts = step(state, event)
        except LifecycleError:
            continue
        ruled += 1
        if isinstance(after.turn, Ending) and not isinstance(state.turn, Ending):
            assert len(ends & set(acts)) == 1, (state, event, acts)
        if isinstance(after.place, Stuck) and not isinstance(state.place, Stuck):
            assert A.STICK in acts, (state, event, acts)
        if state.closed:
            assert after.closed
    assert ruled > 200


def test_the_docs_hold_the_tables_the_lifecycle_makes() -> None:
    """docs/wrap.md's lifecycle tables are what `step` does (regenerate them with
    `python -m tests.support.lifecycle_table --write`)."""
    text = lifecycle_table.DOC.read_text(encoding="utf-8")
    assert lifecycle_table.in_doc(text) == lifecycle_table.tables()


BUSY = [
    ("between turns", S, False),
    ("a prompt waiting for a move", replace(S, turn=Waiting()), False),
    ("a turn", prompting(), True),
    ("a cancelled turn", cancelling(), True),
    ("the child's replay of a load", State("a", Restoring("load", "c0", 3)), True),
    ("a resume", State("a", Restoring("resume", "c0", 3)), False),
    ("a seed", State("a", Seeding("c1", 3)), True),
]


@pytest.mark.parametrize(("why", "state", "busy"), BUSY, ids=[b[0] for b in BUSY])
def test_what_a_restart_would_cut(why: str, state: State, busy: bool) -> None:
    assert state.busy is busy


LINKS = [
    ("never started (wrap --agent), or stopped when unused", dict(running=False, started=False, troubled=False,
                                                                  busy=False), "start"),
    ("it died between turns: restarted at the next prompt", dict(running=False, started=True, troubled=False,
                                                                 busy=False), "restart"),
    ("it runs a turn the wrapper ended: restarted, not waited for", dict(running=True, started=True, troubled=True,
                                                                         busy=False), "restart_now"),
    ("... unless another session's turn runs in it: that is not cut", dict(running=True, started=True, troubled=True,
                                                                           busy=True), "use"),
    ("the usual case", dict(running=True, started=True, troubled=False, busy=True), "use"),
]


@pytest.mark.parametrize(("why", "given", "plan"), LINKS, ids=[link[0] for link in LINKS])
def test_link_plan(why: str, given: dict[str, bool], plan: str) -> None:
    assert link_plan(**given) == plan


WAYS = [
    ("load and resume advertised", {"loadSession": True, "sessionCapabilities": {"resume": {}}}, "c0",
     ["load", "resume", "fresh"]),
    ("load only", {"loadSession": True}, "c0", ["load", "fresh"]),
    ("resume only", {"sessionCapabilities": {"resume": {}}}, "c0", ["resume", "fresh"]),
    ("neither (the SDK echo agent)", {}, "c0", ["fresh"]),
    ("no child session to take again (stuck on this run, or a move)", {"loadSession": True}, None, ["fresh"]),
    ("loadSession not exactly true", {"loadSession": "yes"}, "c0", ["fresh"]),
]


@pytest.mark.parametrize(("why", "caps", "last", "ways"), WAYS, ids=[w[0] for w in WAYS])
def test_restore_ways(why: str, caps: dict[str, object], last: str | None, ways: list[str]) -> None:
    assert restore_ways(caps, last) == ways


@pytest.mark.parametrize(("way", "seed_fresh", "carried", "seeded"), [
    ("fresh", True, False, True), ("fresh", False, True, True), ("fresh", False, False, False),
    ("load", True, True, False), ("resume", True, True, False)])
def test_seeds(way: str, seed_fresh: bool, carried: bool, seeded: bool) -> None:
    assert seeds(way, seed_fresh=seed_fresh, carried=carried) is seeded  # type: ignore[arg-type]


def test_describe_names_every_part() -> None:
    from acp_bridge.wrap.lifecycle import describe

    assert describe(replace(cancelling("opened"), moving=MOVING.moving, closed=True)) == \
        "placed · cancelling/opened (moving) (closed)"
    assert describe(replace(S, turn=Idle())) == "placed · idle"


# --- the values without fields (`Bare`): as the frozen dataclasses they were ---------------


def bare_kinds() -> list[type]:
    from acp_bridge.wrap import signals, state

    return [kind for module in (signals, state) for kind in vars(module).values()
            if isinstance(kind, type) and issubclass(kind, state.Bare) and kind is not state.Bare]


@pytest.mark.parametrize("kind", bare_kinds(), ids=lambda kind: kind.__name__)
def test_a_bare_value_behaves_as_a_frozen_dataclass_without_fields(kind: type) -> None:
    """Each `Bare` kind against the frozen, slotted dataclass without fields it replaced
    (issue 32: the same behaviour, made without dataclass's generated methods)."""
    import copy
    import pickle
    from dataclasses import FrozenInstanceError

    twin_kind: type = dataclass(frozen=True, slots=True)(type(kind.__name__, (), {"__qualname__": kind.__qualname__}))
    other = next(k for k in bare_kinds() if k is not kind)
    for make in (kind, twin_kind):
        value = make()
        assert value == make()
        assert not value != make()  # noqa: SIM202 (`!=` itself is tested)
        assert value != other() and value != twin_kind() if make is kind else value != kind()
        assert value != (), value != None  # noqa: E711 (the comparison itself is tested)
        assert hash(value) == hash(make()) == hash(twin_kind())
        assert repr(value) == f"{kind.__qualname__}()"
        assert make.__match_args__ == ()  # type: ignore[attr-defined]
        assert not hasattr(value, "__dict__")
        # Never assigned to (the dataclass's own refusal of a name that is no field is
        # a TypeError on CPython 3.11, slots and frozen together; ours says it plainly).
        with pytest.raises(FrozenInstanceError if make is kind else (FrozenInstanceError, TypeError)):
            value.x = 1
        with pytest.raises(FrozenInstanceError if make is kind else (FrozenInstanceError, TypeError)):
            del value.x
        assert {value: 1}[make()] == 1
        assert copy.copy(value) == value == copy.deepcopy(value)
    assert pickle.loads(pickle.dumps(kind())) == kind()
    match kind():
        case other():  # type: ignore[misc]
            raise AssertionError("matched another kind")
        case kind():  # type: ignore[misc]
            pass
        case _:
            raise AssertionError("not matched by its own kind")
