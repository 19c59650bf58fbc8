"""A step of a wrapped turn as the agent said it, and the silent items that write it.

Pure; `acp_bridge.wrap.record.TurnRecorder` owns the turn and decides when a step is
written. An agent announces a tool call, then tells its arguments, a better title and
its outcome in later updates (opencode announces `bash {cwd}` and gives the command
later; codex-acp sends output after the final status), so a call is kept as the agent
last described it (`AnnouncedCall.take`) and written as late as the log allows:

- its `assistant/message` block and `tool/call` when the step closes, or earlier when
  the agent asks the editor something while the call is open (a permission, a file,
  a terminal): whatever that request lets run has its call on disk first
  (docs/wrap.md, "Recording"), and the call is then written as known at that point;
- its `tool/result` when the step closes, from its latest content (else its latest
  `rawOutput`: codex-acp gives a command's output only there) and final status.

The calls' items are `silent`: the editor was sent the agent's own updates, which the
log keeps as they came; these items are their meaning, for the transcript.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from session.events import AssistantBlock, PermissionRecord
from session.items import ChunkKind, Item, assistant_message, tool_call, tool_result

FINAL_STATUSES: Final = ("completed", "failed")


@dataclass
class AnnouncedCall:
    """A tool call of the turn, as the agent last described it."""

    step: int
    tool: str | None = None  # the tool's own name (ACP ToolCall.name, v1.22), if the agent gave one
    title: str | None = None
    kind: str | None = None
    raw_input: Any = None  # None: not given
    locations: list[Any] | None = None
    content: list[Any] | None = None  # the latest ToolCallContent: updates replace it
    raw_output: Any = None  # the latest rawOutput (None: not given)
    failed: bool = False
    permission: PermissionRecord | None = None
    answered: bool = False  # a final status came
    written: bool = False  # its `tool/call` (and message block) is in the log

    @property
    def label(self) -> str:
        """What the call is shown as: its title, else its kind."""
        return self.title or self.kind or "tool"

    @property
    def name(self) -> str:
        """The tool's own name, else the label (agents before ACP v1.22 name none)."""
        return self.tool or self.label

    @property
    def arguments(self) -> Any:
        return self.raw_input if self.raw_input is not None else {}

    def take(self, update: Mapping[str, Any], *, content: bool = True) -> None:
        """What `update` (a ToolCall or ToolCallUpdate) says anew; a field left out or
        null says nothing (ACP). `content` False: a permission request's, whose content
        is the question, not the call's."""
        title, kind, locations = update.get("title"), update.get("kind"), update.get("locations")
        tool = update.get("name")
        if isinstance(tool, str) and tool:
            self.tool = tool
        if isinstance(title, str) and title:
            self.title = title
        if isinstance(kind, str) and kind:
            self.kind = kind
        if update.get("rawInput") is not None:
            self.raw_input = update["rawInput"]
        if isinstance(locations, list):
            self.locations = locations
        if content and isinstance(update.get("content"), list):
            self.content = update["content"]
        if content and update.get("rawOutput") is not None:
            self.raw_output = update["rawOutput"]
        if update.get("status") in FINAL_STATUSES:
            self.answered, self.failed = True, update["status"] == "failed"


@dataclass
class Step:
    """The open step of a wrapped turn."""

    number: int
    # What the step said and the log does not hold yet, in order: (kind, texts) runs,
    # and the ids of its calls.
    said: list[tuple[ChunkKind, list[str]] | str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # every call of the step, in order

    def say(self, kind: ChunkKind, text: str) -> None:
        self.texts_for(kind).append(text)

    def texts_for(self, kind: ChunkKind) -> list[str]:
        """Where the step's next text of `kind` goes: the run it said last, if of that
        kind, else a new one."""
        last = self.said[-1] if self.said else None
        if isinstance(last, tuple) and last[0] == kind:
            return last[1]
        texts: list[str] = []
        self.said.append((kind, texts))
        return texts


def step_items(turn: int, step: Step, calls: Mapping[str, AnnouncedCall], *, results: bool) -> list[Item]:
    """What `step` said that the log does not hold yet, all silent: one message (its
    text and the blocks of its calls in the order said), the `tool/call` of each call
    not written yet; with `results` (the step closes), the result of each call with a
    final status, and the step forgets its calls. Each thing is written once: a step
    written early (`results` False) and written again at its close writes only what
    came in between."""
    content: list[AssistantBlock] = []
    for part in step.said:
        if isinstance(part, str):
            call = calls[part]
            content.append({"type": "tool-call", "id": part, "name": call.name,
                            "arguments": orjson.dumps(call.arguments).decode()})
        elif part[0] == "text":
            content.append({"type": "text", "text": "".join(part[1])})
        else:
            content.append({"type": "reasoning", "text": "".join(part[1])})
    step.said = []
    # Not `silent`: a message without usage sends nothing on replay anyway.
    items: list[Item] = [assistant_message(turn, step.number, content)] if content else []
    for call_id in step.calls:
        call = calls[call_id]
        if not call.written:
            call.written = True
            items.append(tool_call(turn, step.number, call_id, name=call.name, arguments=call.arguments,
                                   title=call.label, kind=call.kind or "other", locations=call.locations,
                                   silent=True))
    if not results:
        return items
    for call_id in step.calls:
        call = calls[call_id]
        if call.answered:
            display = call.content or []
            items.append(tool_result(turn, step.number, call_id, content=result_content(call), is_error=call.failed,
                                     display=display, permission=call.permission, silent=True))
    step.calls = []
    return items


# The members of a `rawOutput` object that agents put a command's output in, in order of
# preference: codex-acp's `formatted_output` (what its model is shown), `aggregated_output`
# and `stdout`; qwen-code's `output`.
OUTPUT_MEMBERS: Final = ("formatted_output", "aggregated_output", "output", "stdout")


def result_content(call: AnnouncedCall) -> list[Any]:
    """The content blocks of a call's result: those of its latest ToolCallContent; when
    it gave no content at all (a diff or a terminal is content: what it showed), its
    `rawOutput` (codex-acp puts a command's output only there): a
    string as it is; an object's `content` blocks if it has them (acp-bridge's own
    `{content, isError}`), else its output member (`OUTPUT_MEMBERS`), else the object as
    JSON text; nothing for an empty output."""
    blocks = [c["content"] for c in call.content or [] if isinstance(c, dict) and c.get("type") == "content"
              and isinstance(c.get("content"), dict)]
    raw = call.raw_output
    if call.content or raw is None:
        return blocks
    if isinstance(raw, dict):
        if isinstance(raw.get("content"), list):
            return [c for c in raw["content"] if isinstance(c, dict) and isinstance(c.get("type"), str)]
        text = next((raw[m] for m in OUTPUT_MEMBERS if isinstance(raw.get(m), str)), None)
        if text is None:
            text = orjson.dumps(raw, option=orjson.OPT_INDENT_2).decode()
    else:
        text = raw if isinstance(raw, str) else orjson.dumps(raw).decode()
    return [{"type": "text", "text": text}] if text else []
