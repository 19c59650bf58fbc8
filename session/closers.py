"""The events that close an unfinished turn, for every way one ends: crash repair and
the agent stopping (`Interrupted`), the turn runner's cancel, failed step or failed
write (`EndedEarly`), and a wrapped agent's turn ended without a final status for
every call (`Unreported`). Pure.

Every ending closes the same frame, in this order: the partial answer of the open step
(what it streamed that no `assistant/message` holds yet), a failed `tool/result` for
each call left unanswered (log order), a `context/compaction` that ends each compaction
left in progress (`failed`, or `cancelled` when the client cancelled), the step's
`step/end`, the `turn/end`. What an ending says is the rest: the reason, how a call
left open is answered, and why a compaction left open ended.

The open turn comes as an `OpenTurn`: the turn, its open step, its unanswered calls.
The log's InvariantTracker knows all of that (`open_turn`): crash repair,
`SessionLog.close_interrupted` and the runner read it there. The wrapper's TurnRecorder
builds its own: it is pure and owns no log (the proxy appends what it returns), so the
turn's state it keeps from the ACP update stream is what it has, and that state holds
what no tracker does: the editor's permission answer riding on a call still open, and
the text streamed since the step's last message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from session.events import INTERRUPTED_CODE, AssistantBlock, PermissionRecord, Reason, ToolError
from session.invariants import InvariantTracker
from session.items import (
    Item,
    assistant_message,
    context_compaction,
    step_end,
    tool_result,
    turn_end,
)


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A tool call of the open turn without a result."""

    call_id: str
    step: int  # the step it was asked in
    name: str  # its tool
    started: bool  # its tool may have run: its `tool/call` was written, and not held back
    permission: PermissionRecord | None = None  # the editor's answer, if it gave one


@dataclass(frozen=True, slots=True)
class Unended:
    """A compaction of the open step that has not ended."""

    compaction_id: str
    replaces: tuple[int, int]  # fromTurn, toTurn


@dataclass(frozen=True, slots=True)
class OpenTurn:
    turn: int
    step: int | None  # the open step; None between steps
    calls: Sequence[Unanswered] = ()  # in log order
    compactions: Sequence[Unended] = ()  # of the open step (a step ends only once they have), in log order


def open_turn(tracker: InvariantTracker) -> OpenTurn | None:
    """The open turn of the log `tracker` stands in, or None if it stands between turns."""
    if not tracker.in_turn:
        return None
    calls = [Unanswered(cid, call.step, call.name, call.may_have_run)
             for cid, call in tracker.calls.items() if not call.answered]
    compactions = tuple(Unended(cid, compaction.replaces)
                        for cid, compaction in tracker.compactions.items() if not compaction.ended)
    return OpenTurn(tracker.turn, tracker.step if tracker.step_open else None, calls, compactions)


@dataclass(frozen=True)
class Interrupted:
    """Crash repair (`crash`), or the agent stopping mid-turn (`shutdown`). A call "may
    have run" once its `tool/call` is written, unless that said `pending` and no
    `tool/permission` let it run since: the log tells a call waiting for its permission
    (or refused) from one running, after a kill -9 as after a clean stop."""

    cause: Literal["crash", "shutdown"] = "crash"

    partial: ClassVar[Sequence[AssistantBlock]] = ()  # what the step streamed is in its chunks

    @property
    def reason(self) -> Reason:
        return {"kind": "interrupted", "cause": self.cause}

    def answer(self, call: Unanswered) -> tuple[str, ToolError]:
        return interrupted_text(call.name, call.started), {"name": "InterruptedError", "code": INTERRUPTED_CODE}

    def compaction_end(self) -> tuple[str, str | None]:
        return "failed", f"The agent stopped ({self.cause}) before the compaction finished."


@dataclass(frozen=True)
class EndedEarly:
    """The turn runner ends the turn with `reason` (a cancel, a failed step, a failed
    write): "The tool call {verb} (while it was running)." where the log says its tool
    may have run (`Unanswered.started`), "(before it ran)." otherwise; `partial` is the
    unfinished step's answer so far."""

    reason: Reason
    verb: str
    partial: Sequence[AssistantBlock] = ()

    def answer(self, call: Unanswered) -> tuple[str, ToolError]:
        how = "while it was running" if call.started else "before it ran"
        kind = self.reason["kind"]
        return (f"The tool call {self.verb} ({how}).",
                {"name": "Cancelled" if kind == "cancelled" else "Error", "code": kind})

    def compaction_end(self) -> tuple[str, str | None]:
        if self.reason["kind"] == "cancelled":
            return "cancelled", None
        return "failed", f"The compaction {self.verb}."


@dataclass(frozen=True)
class Unreported:
    """A wrapped agent ended the turn (`reason`) without a final status for some calls,
    as our own agent closes a call it will not finish; never crash repair's
    `interrupted` code. `partial` is what the step streamed since its last message."""

    reason: Reason
    partial: Sequence[AssistantBlock] = ()

    def answer(self, call: Unanswered) -> tuple[str, ToolError]:
        if self.reason.get("kind") == "cancelled":
            return ("The tool call was cancelled before the agent reported its outcome.",
                    {"name": "Cancelled", "code": "cancelled"})
        return ("The agent ended the turn without reporting this tool call's outcome.",
                {"name": "Unfinished", "code": "unfinished"})

    def compaction_end(self) -> tuple[str, str | None]:
        if self.reason.get("kind") == "cancelled":
            return "cancelled", None
        return "failed", "The agent ended the turn without finishing the compaction."


Ending = Interrupted | EndedEarly | Unreported


def closers(turn: OpenTurn | None, ending: Ending) -> list[Item]:
    """The items that close `turn` as `ending` says ([] if no turn is open)."""
    if turn is None:
        return []
    number, step = turn.turn, turn.step
    items: list[Item] = []
    if step is not None and ending.partial:
        items.append(assistant_message(number, step, list(ending.partial)))
    for call in turn.calls:  # all of the open step: a step ends only once its calls have results
        text, error = ending.answer(call)
        items.append(tool_result(number, call.step, call.call_id, content=[{"type": "text", "text": text}],
                                 is_error=True, error=error, permission=call.permission))
    if step is not None and turn.compactions:
        status, why = ending.compaction_end()
        for compaction in turn.compactions:  # never the summary it was writing: it ended unfinished
            first, last = compaction.replaces
            items.append(context_compaction(number, step, compaction.compaction_id,
                                            replaces={"fromTurn": first, "toTurn": last}, summary=[],
                                            status=status, error=why))
    if step is not None:
        items.append(step_end(number, step))
    items.append(turn_end(number, ending.reason))
    return items


def interrupted_text(tool_name: str, started: bool) -> str:
    if started:
        return (
            f"The {tool_name} call was interrupted: the agent stopped while it was running. "
            "Its outcome is unknown; it may have run, fully or in part."
        )
    return f"The {tool_name} call was interrupted before it started; it did not run."
