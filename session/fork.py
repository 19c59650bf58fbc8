"""Forking a stored session: which of its records a fork holds (`plan_fork`), and the
new header that says where it came from (`fork_header`). `SessionStore.fork` runs
both and has the backend copy the records (`Backend.copy`, one atomic publication).

The original is read as stored now (`Backend.read_stream`), without its owner lock: a
session open in another agent, or in this process, can be forked, and its owner is
never disturbed. One pass, checked as a load checks it (the torn-tail rule, the
invariants), holding nothing but the invariant tracker. What the fork holds:

- with a turn asked (`at_turn` N): every record before the `turn/start` of turn N+1,
  the session as it stood when turn N+1 began (0: what came before turn 1);
- without: every record, up to the end of the log;
- a last turn that has not ended is left out while the session's owner runs it (its
  `running` check: the owner lock is held), and otherwise (a crash left it open) kept
  and closed by the repair closers, as the original's next load would close it; the
  original is not repaired by a fork.

A torn tail is never copied. The original is never written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from session.backends.base import StoredStream
from session.errors import ForkTurnError, InvariantError
from session.events import SESSION_FORMAT_VERSION, TURN_START, Event, Header, WrappedInfo
from session.invariants import InvariantTracker
from session.loading import invariant_corruption
from session.repair import RepairReport, interrupted_turn_closers, report_of
from session.scan import TailSplitter
from session.titles import first_prompt_title, set_title, titled
from session.typed import typed_all


@dataclass(frozen=True)
class ForkPlan:
    """What a fork of `source` holds: its first `upto` records and `closers` (the
    repair of an interrupted last turn, seqs from `upto`), up to turn `turn`."""

    source: Header
    upto: int
    turn: int
    closers: list[Event]
    title: str | None  # the fork's title (session_title) from the records it holds
    whole: bool  # the fork holds every turn of the original that has ended (or was repaired)

    @property
    def events(self) -> int:
        return self.upto + len(self.closers)

    @property
    def report(self) -> RepairReport:
        """What the fork repaired of the original (as its load would have: the original
        is not repaired by a fork)."""
        return report_of(self.closers)


def plan_fork(stream: StoredStream, at_turn: int | None, running: Callable[[], bool]) -> ForkPlan:
    """Read `stream` (closed by the caller) and decide. Raises SessionCorruptError for
    damage a load would refuse, ForkTurnError for a turn the fork cannot end at."""
    sid = stream.header["id"]
    splitter = TailSplitter(sid, stream.locate)
    tracker = InvariantTracker(session_id=sid)
    count = 0  # records read and checked
    last_start = 0  # the index of the last turn/start read
    title: tuple[int, str] | None = None  # the first prompt's: where, what
    named: list[tuple[int, str]] = []  # every `/title`: where, what
    last_time = 0
    cut: int | None = None  # where turn `at_turn + 1` starts
    for block in stream.blocks():
        events = splitter.feed(block)
        if at_turn is not None:
            stop = next((i for i, e in enumerate(typed_all(events))
                         if e["type"] == TURN_START and e["data"]["turn"] > at_turn), None)
            if stop is not None:
                events, cut = events[:stop], count + stop
        try:
            tracker.feed_stored(events)
        except InvariantError as exc:
            raise invariant_corruption(sid, exc, stream.locate) from None
        for index, event in enumerate(events):
            if event["type"] == TURN_START:
                last_start = count + index
            elif (value := set_title(event)) is not None:
                named.append((count + index, value))
            elif title is None and (value := first_prompt_title(event)) is not None:
                title = (count + index, value)
        if events:
            last_time = events[-1]["time"]
        count += len(events)
        if cut is not None:
            break
    if cut is None:
        splitter.finish()  # a torn tail: not copied
    closers: list[Event] = []
    upto, turn = count, tracker.turn
    if tracker.in_turn:
        if running():
            upto, turn = last_start, tracker.turn - 1
            if at_turn is not None and at_turn > turn:
                raise ForkTurnError(
                    f"turn {at_turn} of session {sid} is still running: fork at an earlier turn (0..{turn}) "
                    "or once it has ended", session_id=sid, turn=at_turn, turns=turn)
        else:
            closers = interrupted_turn_closers(tracker, time=last_time)
    if at_turn is not None and at_turn > turn:
        raise ForkTurnError(f"session {sid} has {turn} turn(s): a fork can be made at turn 0..{turn}, "
                            f"not {at_turn}", session_id=sid, turn=at_turn, turns=turn)
    held = [value for index, value in named if index < upto]  # the `/title`s the fork holds
    prompt = title[1] if title is not None and title[0] < upto else None
    return ForkPlan(stream.header, upto, turn, closers,
                    titled(held[-1] if held else None, stream.header, prompt), whole=cut is None)


def fork_header(plan: ForkPlan, session_id: str, *, created: int, cwd: str,
                additional_directories: list[str] | None, wrapped: WrappedInfo | None) -> Header:
    """The fork's header: new id, time and roots (the fork request's, as `session/new`
    takes them), the original's title if it was given one, `forkedFrom`, and `wrapped`:
    the one given, else the original's without its wrapped agent's session id (that
    session is the original's: a fork must never go on in it)."""
    source = plan.source
    header: Header = {"type": "session", "version": SESSION_FORMAT_VERSION, "id": session_id,
                      "createdAt": created, "cwd": cwd}
    if additional_directories:
        header["additionalDirectories"] = list(additional_directories)
    if "title" in source:
        header["title"] = source["title"]
    if wrapped is None and "wrapped" in source:
        wrapped = {k: v for k, v in source["wrapped"].items() if k != "sessionId"}  # type: ignore[assignment]
    if wrapped is not None:
        header["wrapped"] = wrapped
    header["forkedFrom"] = {"sessionId": source["id"], "turn": plan.turn}
    return header
