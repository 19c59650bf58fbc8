"""How the turn runner ends a turn early, kept apart from the runner's main path: the
events that close an open turn (a cancel, a failed step, a failed write of the log),
the partial answer of a step cut off, and the rollback of the model transcript when
a failed write drops events from the log. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from acp_bridge.models import ToolCallChunk
from session import Event, InvariantTracker
from session.events import ASSISTANT_MESSAGE, STEP_END, TOOL_RESULT, TURN_END, TURN_START, Reason
from session.transcript import Transcript

Item = tuple[str, dict[str, Any]]


@dataclass
class StepText:
    """What the model has streamed in the running step."""

    number: int
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    message_written: bool = False


def step_content(step: StepText, calls: list[ToolCallChunk]) -> list[dict[str, Any]]:
    """The `assistant/message` content of a step: reasoning, text, then tool calls."""
    content: list[dict[str, Any]] = []
    if step.reasoning:
        content.append({"type": "reasoning", "text": "".join(step.reasoning)})
    if step.text:
        content.append({"type": "text", "text": "".join(step.text)})
    content.extend({"type": "tool-call", "id": c.id, "name": c.name, "arguments": c.arguments}
                   for c in calls)
    return content


def closing_items(tracker: InvariantTracker, step: StepText | None, end: Reason, verb: str, *,
                  ran: Callable[[str], bool]) -> list[Item]:
    """The events that close the open turn with `end`: the partial answer of an
    unfinished step (if `step` has one), a failed result per unanswered call ("The tool
    call {verb} (while it was running)" if `ran(call_id)` says its tool was started,
    "(before it ran)" otherwise), the step's end, the turn's end."""
    turn = tracker.turn
    items: list[Item] = []
    if tracker.step_open:
        if step is not None and not step.message_written and (step.text or step.reasoning):
            items.append((ASSISTANT_MESSAGE, {"turn": turn, "step": tracker.step,
                                              "content": step_content(step, [])}))
        for call_id in tracker.unanswered():
            how = "while it was running" if ran(call_id) else "before it ran"
            code = "cancelled" if end["kind"] == "cancelled" else end["kind"]
            items.append((TOOL_RESULT, {
                "turn": turn, "step": tracker.calls[call_id].step, "callId": call_id,
                "content": [{"type": "text", "text": f"The tool call {verb} ({how})."}],
                "isError": True, "error": {"name": "Cancelled" if code == "cancelled" else "Error",
                                           "code": code}}))
        items.append((STEP_END, {"turn": turn, "step": tracker.step}))
    items.append((TURN_END, {"turn": turn, "reason": end}))
    return items


class TranscriptMarks:
    """(seq, transcript length after it) for the events of the running turn fed to the
    transcript, so a failed write that drops events from the log drops what they added
    to the transcript too: the model is never shown what the log does not hold."""

    def __init__(self) -> None:
        self._marks: list[tuple[int, int]] = []

    def feed(self, transcript: Transcript, event: Event) -> None:
        if event["type"] == TURN_START:
            self._marks.clear()
        transcript.feed(event)
        self._marks.append((event["seq"], len(transcript.messages)))

    def rewind(self, transcript: Transcript, cut: int) -> None:
        """Forget what events from seq `cut` on added."""
        marks = self._marks
        first = next((i for i, (seq, _) in enumerate(marks) if seq >= cut), None)
        if first is None:
            return
        if first >= 2:
            keep = marks[first - 1][1]
        else:  # the turn's prompt is dropped: keep what came before it (after any trim)
            keep = marks[1][1] - 1 if len(marks) > 1 else marks[0][1]
        transcript.truncate(keep)
        del marks[first:]
