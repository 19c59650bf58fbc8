"""The wrapped session's lifecycle as tables, made by running `lifecycle.step` over
representative states and every kind of event (docs/wrap.md, "The lifecycle", holds
what this prints; tests/test_wrap_lifecycle.py checks the two are the same).

    python -m tests.support.lifecycle_table            # print the tables
    python -m tests.support.lifecycle_table --write    # rewrite them in docs/wrap.md
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from acp_bridge.errors import LifecycleError
from acp_bridge.wrap.lifecycle import step
from acp_bridge.wrap.signals import (
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

DOC = Path(__file__).resolve().parents[2] / "docs" / "wrap.md"
BEGIN = "<!-- lifecycle tables: made by `python -m tests.support.lifecycle_table --write` -->"
END = "<!-- end of the lifecycle tables -->"

PLACED = Placed("c1", 1)
BASE = State("a", PLACED)

# The turn's states, in a session placed in its child (the place does not change them).
TURNS: list[tuple[str, State]] = [
    ("idle", BASE),
    ("waiting", replace(BASE, turn=Waiting())),
    ("commanding", replace(BASE, turn=Commanding())),
    *[(f"prompting/{stage}", replace(BASE, turn=Prompting(stage))) for stage in ("starting", "opened", "asked")],
    ("prompting/asked (permission cancelled)", replace(BASE, turn=Prompting("asked", by="session/request_permission"))),
    *[(f"cancelling/{stage}", replace(BASE, turn=Cancelling(stage, "session/cancel", 10.0)))
      for stage in ("starting", "opened", "asked")],
    ("ending", replace(BASE, turn=Ending("answer"))),
]
TURN_EVENTS: list[tuple[str, Event]] = [
    ("Prompted", Prompted()), ("Began(own)", Began(own=True)), ("Began", Began(own=False)),
    ("Reached", Reached()), ("ReachFailed", ReachFailed()), ("Asking", Asking()),
    ("Answered(result)", Answered("result")), ("Answered(result_cancelled)", Answered("result_cancelled")),
    ("Answered(error)", Answered("error")), ("Answered(exited)", Answered("exited")),
    ("Answered(exited_unread, resend)", Answered("exited_unread", resend=True)),
    ("Answered(exited_unread)", Answered("exited_unread")), ("GraceOver", GraceOver()),
    ("Cancel", Cancel("session/cancel", 5.0)), ("Cancel(close)", Cancel("session/close", 5.0)),
    ("Stop", Stop()), ("Interrupted", Interrupted()), ("Finished", Finished()),
    ("ChildRequest(permission)", ChildRequest(permission=True)),
    ("PermissionAnswered", PermissionAnswered()), ("PermissionAnswered(cancelled)", PermissionAnswered(cancelled=True)),
    ("PermissionAnswered(interrupted)", PermissionAnswered(interrupted=True)),
]

# The place's states, between turns.
PLACES: list[tuple[str, State]] = [
    ("unplaced", State("a", Unplaced("c0"))),
    ("restoring/load", State("a", Restoring("load", "c0", 1, last="c0"))),
    ("restoring/resume", State("a", Restoring("resume", "c0", 1, last="c0"))),
    ("restoring/fresh", State("a", Restoring("fresh", None, 1, last="c0"))),
    ("seeding", State("a", Seeding("c1", 1))),
    ("placed", BASE),
    ("stuck", State("a", Stuck("c1", 1))),
]
PLACE_EVENTS: list[tuple[str, Event]] = [
    ("RestoreBegan", RestoreBegan("load", "c0", 1)), ("RestoreRefused", RestoreRefused()),
    ("RestoreAbandoned", RestoreAbandoned()),
    ("Bound", Bound("c1", 1, "a")), ("SeedBegan", SeedBegan()), ("SeedEnded", SeedEnded()),
    ("LateAnswer", LateAnswer("c1", ok=True)), ("LateAnswer(error)", LateAnswer("c1", ok=False)),
    ("ChildUpdate", ChildUpdate()), ("ChildRequest", ChildRequest()),
    ("ChildRequest(permission)", ChildRequest(permission=True)), ("Close", Close()),
]

# A move between agents.
MOVING = replace(State("b", Unplaced()), moving=Moving("a", PLACED))
MOVES: list[tuple[str, State]] = [
    ("idle in a", BASE),
    ("commanding in a", replace(BASE, turn=Commanding())),
    ("prompting in a", replace(BASE, turn=Prompting("asked"))),
    ("moving to b", MOVING),
    ("moving to b, placed", replace(MOVING, place=Placed("c9", 1))),
]
MOVE_EVENTS: list[tuple[str, Event]] = [
    ("SwitchAsked(b)", SwitchAsked("b")), ("SwitchAsked(a)", SwitchAsked("a")),
    ("SwitchAsked(b, in_command)", SwitchAsked("b", in_command=True)), ("Prompted", Prompted()),
    ("Moved", Moved()), ("MoveFailed", MoveFailed()),
]


def turn_kind(state: State) -> str:
    turn = state.turn
    name = type(turn).__name__.lower()
    if isinstance(turn, Prompting | Cancelling):
        name += f"/{turn.stage}"
    if isinstance(turn, Prompting) and turn.by is not None:
        name += " (permission cancelled)"
    if isinstance(turn, Ending):
        name += f" {turn.how}"
    return name


def place_kind(state: State) -> str:
    place = state.place
    name = type(place).__name__.lower()
    return f"{name}/{place.way}" if isinstance(place, Restoring) else name


def move_kind(state: State) -> str:
    where = f"moving to {state.agent}" if state.moving is not None else f"{turn_kind(state)} in {state.agent}"
    return where + (", placed" if state.moving is not None and isinstance(state.place, Placed) else "")


def rows(states: list[tuple[str, State]], events: list[tuple[str, Event]],
         kind: object) -> Iterator[tuple[str, str, str, str]]:
    """(from, event, to, acts) for every pair the lifecycle has a rule for that changes
    the state's kind or does something."""
    assert callable(kind)
    for label, state in states:
        for name, event in events:
            try:
                after, acts = step(state, event)
            except LifecycleError:
                continue
            to = kind(after)
            if to == kind(state) and not acts:
                continue
            extra = ""
            if after.place != state.place and kind is turn_kind:
                extra = f", {place_kind(after)}"
            if after.close_by != state.close_by:
                extra += ", close_by set"
            yield label, name, to + extra, ", ".join(a.name for a in acts) or "-"


def table(title: str, note: str, body: Iterator[tuple[str, str, str, str]]) -> str:
    lines = [f"**{title}** ({note})", "", "| from | event | to | acts |", "|---|---|---|---|"]
    lines += [f"| {a} | `{b}` | {c} | {d} |" for a, b, c, d in body]
    return "\n".join(lines)


def tables() -> str:
    return "\n\n".join([
        table("The turn", "the session placed in its child", rows(TURNS, TURN_EVENTS, turn_kind)),
        table("The place", "between turns", rows(PLACES, PLACE_EVENTS, place_kind)),
        table("A move", "`wrap --agent`, agents a and b", rows(MOVES, MOVE_EVENTS, move_kind)),
    ])


def in_doc(text: str) -> str:
    """The tables as docs/wrap.md holds them (between the markers)."""
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip()


def main(argv: list[str]) -> int:
    made = tables()
    if "--write" not in argv:
        print(made)
        return 0
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:start] + "\n\n" + made + "\n\n" + text[end:], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
