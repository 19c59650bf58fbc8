"""How the turn runner ends a turn early, kept apart from the runner's main path: the
partial answer of a step cut off (its closers are session.closers'), and the rollback
of the model transcript when a failed write drops events from the log. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from acp_bridge.models import ToolCallChunk
from session import Event
from session.events import TURN_START, AssistantBlock
from session.transcript import Transcript


@dataclass
class StepText:
    """What the model has streamed in the running step."""

    number: int
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    message_written: bool = False


def step_content(step: StepText, calls: list[ToolCallChunk]) -> list[AssistantBlock]:
    """The `assistant/message` content of a step: reasoning, text, then tool calls."""
    content: list[AssistantBlock] = []
    if step.reasoning:
        content.append({"type": "reasoning", "text": "".join(step.reasoning)})
    if step.text:
        content.append({"type": "text", "text": "".join(step.text)})
    content.extend({"type": "tool-call", "id": c.id, "name": c.name, "arguments": c.arguments}
                   for c in calls)
    return content


def partial_answer(step: StepText | None) -> list[AssistantBlock]:
    """What a step cut off streamed that no `assistant/message` holds: the closers write
    it first, so the log keeps the answer the client was shown."""
    if step is None or step.message_written or not (step.text or step.reasoning):
        return []
    return step_content(step, [])


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
