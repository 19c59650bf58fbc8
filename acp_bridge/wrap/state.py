"""A wrapped session's state: closed sets of frozen values (docs/wrap.md, "The
lifecycle"). What moves it from one to the next is acp_bridge.wrap.lifecycle's `step`.

- `place`: where its session in the child stands on its agent's current run:
  `Unplaced` (none yet, or only on an earlier run: restored at its next use),
  `Restoring` (being loaded, resumed or made fresh), `Seeding` (the wrapper's own seed
  prompt runs in it), `Placed`, `Stuck` (it still runs a turn the wrapper ended);
- `turn`: `Idle`, `Waiting` (a prompt waits for a move to end), `Commanding` (a command
  of the wrapper's runs: no turn of the child's), `Prompting` and `Cancelling` (a turn of
  the child's, at a `Stage`), `Ending` (its end decided, being written);
- `moving`: a move to another agent (`wrap --agent`) that runs, with what to go back to
  if it fails; `agent`: the agent the session is placed in; `close_by`: when a
  `session/close` of a running turn must be answered; `closed`.

Pure: data only.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass
from typing import Any, Literal

Way = Literal["load", "resume", "fresh"]


class Bare:
    """The base of a kind of value without fields (`Idle`, and most of
    acp_bridge.wrap.signals' events): it behaves as a frozen, slotted dataclass without
    fields does (equal to every value of its own class and nothing else, hashed alike,
    shown as `Name()`, matched by `case Name():`, never assigned to), made without
    `dataclass`, whose generated methods cost ~0.3 ms a class at import, on the
    wrapper's start-up path (issue 32; tests/test_wrap_lifecycle.py compares the two).
    Each subclass declares `__slots__ = ()`."""

    __slots__ = ()
    __match_args__ = ()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return True
        return NotImplemented

    def __hash__(self) -> int:
        return hash(())

    def __repr__(self) -> str:
        return f"{self.__class__.__qualname__}()"

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")


@dataclass(frozen=True, slots=True)
class Unplaced:
    """No session in the child's current run; `last`: the child's session id to try
    to load or resume first (the header's, a move's, one of an earlier run)."""

    last: str | None = None


@dataclass(frozen=True, slots=True)
class Restoring:
    """Being given a session in the child's run `generation`: `load` (the child's
    replay of it is kept from the editor, which has ours) or `resume` of `child_sid`,
    or a `fresh` one (`child_sid` None until the child names it)."""

    way: Way
    child_sid: str | None
    generation: int
    last: str | None = None  # the child session id it had before (where a refusal leaves it)


@dataclass(frozen=True, slots=True)
class Seeding:
    """The wrapper's own seed prompt runs in the (fresh) child session: what the child
    sends for it is kept from the editor and the log."""

    child_sid: str
    generation: int


@dataclass(frozen=True, slots=True)
class Placed:
    child_sid: str
    generation: int


@dataclass(frozen=True, slots=True)
class Stuck:
    """The wrapper ended the turn the child session still runs (the cancel grace ran
    out): its traffic is dropped until the child answers that prompt."""

    child_sid: str
    generation: int


Place = Unplaced | Restoring | Seeding | Placed | Stuck

# Where a running turn stands: reaching the child for the first time (the turn not yet
# recorded: a failure is the prompt's error), recorded but not (or no longer) with the
# child (a restart to send it again included), or asked of the child.
Stage = Literal["starting", "opened", "asked"]


class Idle(Bare):
    __slots__ = ()


class Waiting(Bare):
    """A prompt came while the session moves to another agent: it waits for the move."""

    __slots__ = ()


class Commanding(Bare):
    """A command of the wrapper's own runs in the prompt (a turn of its own, not sent
    to the child)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Prompting:
    """A turn of the child's runs. `by`: the editor answered one of its permission
    requests `cancelled` (the turn's cancel then says so), without a cancel."""

    stage: Stage
    by: str | None = None


@dataclass(frozen=True, slots=True)
class Cancelling:
    """The editor cancelled the running turn (`by`: how, the first cancel's); the child
    has until `deadline` to answer it."""

    stage: Stage
    by: str
    deadline: float


End = Literal["answer", "failed", "cancelled", "forced", "crash", "shutdown"]


@dataclass(frozen=True, slots=True)
class Ending:
    """The turn's end is decided (`how`; `by`: the cancel's, if it was cancelled) and
    being written."""

    how: End
    by: str | None = None


Turn = Idle | Waiting | Commanding | Prompting | Cancelling | Ending


@dataclass(frozen=True, slots=True)
class Moving:
    """A move to another agent runs; `source`, `back` and `kept` (the session's mode and
    commands there) are what a failed move goes back to."""

    source: str
    back: Place
    kept: Any = None


@dataclass(frozen=True, slots=True)
class State:
    agent: str
    place: Place = Unplaced()
    turn: Turn = Idle()  # noqa: RUF009 (a Bare value: immutable, as a frozen dataclass)
    moving: Moving | None = None
    close_by: float | None = None
    closed: bool = False

    @property
    def child_sid(self) -> str | None:
        """The child's session id it is bound to (on any run), if any."""
        place = self.place
        if isinstance(place, Unplaced | Restoring):
            return place.child_sid if isinstance(place, Restoring) and place.child_sid else place.last
        return place.child_sid

    def placed_on(self, generation: int) -> str | None:
        """Its child session id, if it is placed (and in step) on the run `generation`."""
        place = self.place
        return place.child_sid if isinstance(place, Placed) and place.generation == generation else None

    def bound_on(self, generation: int) -> str | None:
        """Its child session id on the run `generation` whatever its place there."""
        place = self.place
        if isinstance(place, Unplaced) or place.generation != generation:
            return None
        return place.child_sid

    @property
    def running(self) -> bool:
        """A turn of the child's is open (it may be cancelled)."""
        return isinstance(self.turn, Prompting | Cancelling | Ending)

    @property
    def busy(self) -> bool:
        """Something runs in its child session that a restart of the child would cut: a
        turn, the child's replay of it, the wrapper's seed."""
        place = self.place
        return self.running or isinstance(place, Seeding) or (isinstance(place, Restoring) and place.way == "load")

    @property
    def prompting(self) -> bool:
        """A prompt of the editor runs (or waits for a move)."""
        return not isinstance(self.turn, Idle)


