"""The closers of an unfinished turn (session/closers.py) as one table: every kind of
ending, over the open turns that tell them apart, and the exact items each gets. The
wordings here are the contract: crash repair's, the turn runner's and the wrapper's
results are written by these closers and nowhere else."""

from __future__ import annotations

from typing import Any

import pytest

from session import check_invariants, reason
from session.closers import (
    EndedEarly,
    Ending,
    Interrupted,
    OpenTurn,
    Unanswered,
    Unended,
    Unreported,
    closers,
    open_turn,
)
from session.events import PermissionRecord, Reason
from session.items import Item
from tests.support.logs import Script, events_of

READ = Unanswered("a", 2, "read_file", started=True)
ASKED = Unanswered("b", 2, "write_file", started=False)  # its tool/call pending, no grant: waiting
UNSTARTED = Unanswered("c", 2, "run", started=False)
ALLOWED: PermissionRecord = {"outcome": "selected", "optionId": "allow-once"}
ANSWERED = Unanswered("d", 2, "Edit a.txt", started=True, permission=ALLOWED)
IN_STEP = OpenTurn(3, 2, [READ, ASKED, UNSTARTED])
PARTIAL: list[Any] = [{"type": "reasoning", "text": "hm"}, {"type": "text", "text": "so far"}]

CANCEL = reason("cancelled", by="session/cancel")
FAILED = reason("error", step=2, message="RuntimeError: boom", code="internal")
STORE = reason("error", step=2, message="disk full", code="store_io", retryable=True)
SHUTDOWN = reason("interrupted", cause="shutdown")
DONE = reason("completed")


def failed(call_id: str, step: int, text: str, name: str, code: str, **more: Any) -> Item:
    return ("tool/result", {"turn": 3, "step": step, "callId": call_id,
                            "content": [{"type": "text", "text": text}], "isError": True,
                            "error": {"name": name, "code": code}, **more})


def crash_text(tool: str, ran: bool) -> str:
    if ran:
        return (f"The {tool} call was interrupted: the agent stopped while it was running. "
                "Its outcome is unknown; it may have run, fully or in part.")
    return f"The {tool} call was interrupted before it started; it did not run."


def interrupted(call: Unanswered, ran: bool) -> Item:
    return failed(call.call_id, call.step, crash_text(call.name, ran), "InterruptedError", "interrupted")


STEP_END: Item = ("step/end", {"turn": 3, "step": 2})


def end(why: Reason) -> Item:
    return ("turn/end", {"turn": 3, "reason": why})


COMPACTING = OpenTurn(3, 2, [READ], [Unended("t3s2-compaction", (1, 2))])


def compaction(status: str, error: str | None = None) -> Item:
    """The `context/compaction` that ends COMPACTING's compaction: no summary (it was
    not finished), the turns it was to replace."""
    data: dict[str, Any] = {"turn": 3, "step": 2, "compactionId": "t3s2-compaction",
                            "replaces": {"fromTurn": 1, "toTurn": 2}, "summary": [], "status": status}
    if error is not None:
        data["error"] = error
    return ("context/compaction", data)


CASES: list[tuple[str, OpenTurn | None, Ending, list[Item]]] = [
    ("no open turn", None, Interrupted(), []),
    ("crash between steps", OpenTurn(3, None), Interrupted(), [end({"kind": "interrupted", "cause": "crash"})]),
    ("crash in a step without calls", OpenTurn(3, 2), Interrupted(),
     [STEP_END, end({"kind": "interrupted", "cause": "crash"})]),
    ("crash: a call that may have run, one waiting for its permission, one not written",
     IN_STEP, Interrupted(),
     [interrupted(READ, True), interrupted(ASKED, False), interrupted(UNSTARTED, False), STEP_END,
      end({"kind": "interrupted", "cause": "crash"})]),
    ("shutdown says the same as a crash", IN_STEP, Interrupted("shutdown"),
     [interrupted(READ, True), interrupted(ASKED, False), interrupted(UNSTARTED, False), STEP_END,
      end({"kind": "interrupted", "cause": "shutdown"})]),
    ("cancelled, with the partial answer first", IN_STEP, EndedEarly(CANCEL, "was cancelled", PARTIAL),
     [("assistant/message", {"turn": 3, "step": 2, "content": PARTIAL}),
      failed("a", 2, "The tool call was cancelled (while it was running).", "Cancelled", "cancelled"),
      failed("b", 2, "The tool call was cancelled (before it ran).", "Cancelled", "cancelled"),
      failed("c", 2, "The tool call was cancelled (before it ran).", "Cancelled", "cancelled"),
      STEP_END, end(CANCEL)]),
    ("a failed step", OpenTurn(3, 2, [READ]), EndedEarly(FAILED, "was not completed because the turn failed"),
     [failed("a", 2, "The tool call was not completed because the turn failed (while it was running).",
             "Error", "error"), STEP_END, end(FAILED)]),
    ("a failed write", OpenTurn(3, 2, [UNSTARTED]),
     EndedEarly(STORE, "was not completed: the log could not be written"),
     [failed("c", 2, "The tool call was not completed: the log could not be written (before it ran).",
             "Error", "error"), STEP_END, end(STORE)]),
    ("a turn a failed write left open, found at the next prompt", OpenTurn(3, 2, [READ]),
     EndedEarly(SHUTDOWN, "was interrupted"),
     [failed("a", 2, "The tool call was interrupted (while it was running).", "Error", "interrupted"),
      STEP_END, end(SHUTDOWN)]),
    ("the runner between steps: nothing to flush", OpenTurn(3, None), EndedEarly(CANCEL, "was cancelled", PARTIAL),
     [end(CANCEL)]),
    ("a wrapped agent's answer without the calls' outcome", OpenTurn(3, 2, [READ, ANSWERED]),
     Unreported(DONE, PARTIAL[1:]),
     [("assistant/message", {"turn": 3, "step": 2, "content": PARTIAL[1:]}),
      failed("a", 2, "The agent ended the turn without reporting this tool call's outcome.",
             "Unfinished", "unfinished"),
      failed("d", 2, "The agent ended the turn without reporting this tool call's outcome.",
             "Unfinished", "unfinished", permission=ALLOWED),
      STEP_END, end(DONE)]),
    ("a wrapped turn cancelled", OpenTurn(3, 2, [ANSWERED]), Unreported(CANCEL),
     [failed("d", 2, "The tool call was cancelled before the agent reported its outcome.",
             "Cancelled", "cancelled", permission=ALLOWED), STEP_END, end(CANCEL)]),
    ("a wrapped turn ended before any step", OpenTurn(3, None), Unreported(FAILED), [end(FAILED)]),
    # A compaction left in progress ends, after the calls' results, before its step.
    ("crash during a compaction", COMPACTING, Interrupted(),
     [interrupted(READ, True), compaction("failed", "The agent stopped (crash) before the compaction finished."),
      STEP_END, end({"kind": "interrupted", "cause": "crash"})]),
    ("shutdown during a compaction", COMPACTING, Interrupted("shutdown"),
     [interrupted(READ, True), compaction("failed", "The agent stopped (shutdown) before the compaction finished."),
      STEP_END, end(SHUTDOWN)]),
    ("a compaction cancelled with its turn", COMPACTING, EndedEarly(CANCEL, "was cancelled"),
     [failed("a", 2, "The tool call was cancelled (while it was running).", "Cancelled", "cancelled"),
      compaction("cancelled"), STEP_END, end(CANCEL)]),
    ("a compaction of a turn that failed", COMPACTING, EndedEarly(FAILED, "was not completed because the turn failed"),
     [failed("a", 2, "The tool call was not completed because the turn failed (while it was running).", "Error",
             "error"),
      compaction("failed", "The compaction was not completed because the turn failed."), STEP_END, end(FAILED)]),
    ("a wrapped agent's compaction it did not finish", OpenTurn(3, 2, (), [Unended("t3s2-compaction", (1, 2))]),
     Unreported(DONE),
     [compaction("failed", "The agent ended the turn without finishing the compaction."), STEP_END, end(DONE)]),
    ("a wrapped agent's compaction of a cancelled turn", OpenTurn(3, 2, (), [Unended("t3s2-compaction", (1, 2))]),
     Unreported(CANCEL), [compaction("cancelled"), STEP_END, end(CANCEL)]),
]


@pytest.mark.parametrize(("name", "turn", "ending", "expected"), CASES, ids=[c[0] for c in CASES])
def test_closers(name: str, turn: OpenTurn | None, ending: Ending, expected: list[Item]) -> None:
    assert closers(turn, ending) == expected


def test_open_turn_is_what_the_tracker_knows() -> None:
    script = Script().text_turn().start_turn().start_step().message("m", calls=("x", "y", "w", "g", "z"))
    script.call("x").result("x").call("y").call("w", pending=True).call("g", pending=True).grant("g")
    tracker = check_invariants(events_of(script))
    # y ran at once, w waits for its permission, g was let run, z was never written.
    assert open_turn(tracker) == OpenTurn(2, 1, [Unanswered("y", 1, "read_file", True),
                                                  Unanswered("w", 1, "read_file", False),
                                                  Unanswered("g", 1, "read_file", True),
                                                  Unanswered("z", 1, "read_file", False)])
    assert open_turn(check_invariants(events_of(Script().text_turn()))) is None



def test_open_turn_knows_the_compactions_that_have_not_ended() -> None:
    script = Script().text_turn().text_turn().start_turn().start_step()
    script.compaction("done", "completed").compaction("open", to_turn=1).compaction("other", "_queued", from_turn=2)
    tracker = check_invariants(events_of(script))
    # A status of the agent's own (ACP leaves the set open) does not end one.
    assert open_turn(tracker) == OpenTurn(3, 1, [], (Unended("open", (1, 1)), Unended("other", (2, 2))))
