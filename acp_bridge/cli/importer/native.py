"""The import core, pure: what a reader of an agent's native transcript hands over,
and the session events it becomes (docs/import.md).

A reader (one module per format) walks the native records in order and tells a
`Builder` what each one is: a prompt, an assistant message's text, thinking, tool calls
and usage, a tool's result, a record kept raw. The builder holds the seeds' vocabulary
(docs/persistence.md): one turn per user prompt, one step per assistant message (the
records of one message, however many the agent wrote, are one step: its usage counted
once), each tool call with its result in the step that asked for it. `NativeSession.turns`
are the finished turns, each its items with the native time of each; `store.py` stamps
their seqs and writes them. Anything of a native record that has no place in the
vocabulary is kept beside the event it belongs to, under `native`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from session.events import JSON, AssistantBlock, Usage
from session.items import (
    Item,
    assistant_chunk,
    assistant_message,
    step_end,
    step_start,
    tool_call,
    tool_result,
    turn_end,
    turn_start,
    user_message,
)

MISSING_RESULT = "missing"
"""The `tool/result.error.code` of a call whose result the native file does not hold
(the agent was stopped before it ran, or the file ends there)."""


@dataclass(frozen=True)
class Source:
    """Where a session came from: the header's `imported` field."""

    agent: str  # claude-code, codex, gemini, qwen, opencode
    version: str | None  # the agent's, as its file says
    file: str  # the native file (or folder) read
    session_id: str  # the agent's own session id: the import's key
    cwd: str
    created: int  # epoch ms of the first record

    def header_field(self) -> dict[str, JSON]:
        out: dict[str, JSON] = {"agent": self.agent, "file": self.file, "sessionId": self.session_id}
        if self.version is not None:
            out["version"] = self.version
        return out


def from_first(session: NativeSession, agent: str, shown: str, file: str, first: Mapping[str, Any]) -> NativeSession:
    """`session` named by the fields its records gave first (`sessionId`, `version`,
    `cwd`, `created`), as Claude Code's and qwen-code's JSONL give them on every record;
    without a session id it is not imported, said."""
    if "sessionId" in first:
        session.source = Source(agent, first.get("version"), file, first["sessionId"], first.get("cwd", ""),
                                first.get("created", 0))
    else:
        session.problems.append(f"{file}: no {shown} session id in any record; not imported")
    return session


@dataclass
class _Call:
    id: str
    name: str
    title: str
    kind: str
    arguments: JSON
    time: int
    native: dict[str, JSON] | None = None
    result: tuple[int, list[JSON], bool, dict[str, JSON] | None] | None = None  # time, content, error, native


@dataclass
class _Step:
    time: int
    key: str | None
    model: str | None
    blocks: list[AssistantBlock] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    usage: Usage | None = None
    native: list[JSON] = field(default_factory=list)
    last: int = 0


@dataclass
class _Turn:
    number: int
    time: int
    content: list[JSON]
    native: list[JSON]
    steps: list[_Step] = field(default_factory=list)
    last: int = 0


@dataclass(frozen=True)
class Turn:
    """A finished turn: its items, each with its native time (epoch ms)."""

    number: int
    items: list[tuple[int, Item]]


@dataclass
class NativeSession:
    """What a reader made of one native transcript."""

    source: Source | None = None
    title: str | None = None
    turns: list[Turn] = field(default_factory=list)
    unknown: dict[str, int] = field(default_factory=dict)  # record types kept raw, counted
    problems: list[str] = field(default_factory=list)  # one line each: what could not be read


class Builder:
    """The native records, in order, into turns (see the module's docstring)."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.session = NativeSession()
        self._turn: _Turn | None = None
        self._kept: list[JSON] = []  # raw records waiting for the turn they belong to
        self._calls: dict[str, _Call] = {}  # the open turn's calls by id
        self.last_time = 0

    # What a reader tells it, record by record.

    def prompt(self, time: int, content: list[JSON], native: JSON = None) -> None:
        """A user's prompt: the turn before ends, a new one starts."""
        self._close_turn()
        kept = [*self._kept, native] if native is not None else list(self._kept)
        self._kept = []
        self._turn = _Turn(len(self.session.turns) + 1, time, content, kept, last=time)
        self._tick(time)

    def step(self, time: int, *, key: str | None = None, model: str | None = None,
             native: JSON = None) -> None:
        """An assistant message begins (or goes on: the same `key`, a message the agent
        wrote in several records)."""
        turn = self._open_turn(time)
        current = turn.steps[-1] if turn.steps else None
        if current is None or key is None or current.key != key:
            current = _Step(time, key, model)
            turn.steps.append(current)
        if model is not None and current.model is None:
            current.model = model
        if native is not None:
            current.native.append(native)
        self._flush()
        self._tick(time)

    def text(self, kind: Literal["text", "reasoning"], text: str) -> None:
        """Text or thinking ("reasoning") of the open message: one block with the text
        of the same kind right before it."""
        step = self._open_step()
        self._flush()
        if not text:
            return
        last = step.blocks[-1] if step.blocks else None
        if last is not None and last["type"] != "tool-call" and last["type"] == kind:
            last["text"] += text
        elif kind == "reasoning":
            step.blocks.append({"type": "reasoning", "text": text})
        else:
            step.blocks.append({"type": "text", "text": text})

    def call(self, call_id: str, name: str, arguments: JSON, *, title: str | None = None,
             kind: str = "other", native: JSON = None) -> None:
        """A tool call of the open message."""
        step = self._open_step()
        self._flush()
        if call_id in self._calls:  # a record repeated: the call is known
            return
        text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        step.blocks.append({"type": "tool-call", "id": call_id, "name": name, "arguments": text})
        call = _Call(call_id, name, title or name, kind, arguments, step.last,
                     native if isinstance(native, dict) else None)
        step.calls.append(call)
        self._calls[call_id] = call

    def usage(self, usage: Usage) -> None:
        """The open message's usage, as the agent recorded it: counted once (a later
        record of the same message replaces it)."""
        self._open_step().usage = usage
        self._flush()

    def result(self, time: int, call_id: str, content: list[JSON], *, is_error: bool,
               native: JSON = None) -> None:
        """A tool's result, for a call of the open turn."""
        self._flush()
        call = self._calls.get(call_id)
        if call is None or call.result is not None:
            self.keep({"orphanResult": call_id, "record": native})
            return
        call.result = (time, content, is_error, native if isinstance(native, dict) else None)
        self._tick(time)

    def keep(self, record: JSON) -> None:
        """A record (or the part of one) with no place in the vocabulary: kept raw on
        the turn it belongs to: the next prompt's when a prompt comes next (what an
        agent writes before a prompt is that turn's preamble), else the open turn's;
        after the last turn, on its `turn/end` (`finish`)."""
        self._kept.append(record)

    def unknown(self, kind: str, record: JSON) -> None:
        """A record of a type the reader does not know: kept raw and counted."""
        self.session.unknown[kind] = self.session.unknown.get(kind, 0) + 1
        self.keep(record)

    def problem(self, line: str) -> None:
        self.session.problems.append(line)

    def finish(self) -> NativeSession:
        self._close_turn()
        if self._kept and self.session.turns:  # after the last turn: on its turn/end
            time, (kind, data) = self.session.turns[-1].items[-1]
            self.session.turns[-1].items[-1] = (time, (kind, {**data, "native": self._kept}))
            self._kept = []
        return self.session

    # Inside.

    def _flush(self) -> None:
        """The records kept so far belong to the open turn: something of it follows."""
        if self._kept and self._turn is not None:
            self._turn.native.extend(self._kept)
            self._kept = []

    def _tick(self, time: int) -> None:
        self.last_time = max(self.last_time, time)
        if self._turn is not None:
            self._turn.last = max(self._turn.last, time)
            if self._turn.steps:
                self._turn.steps[-1].last = max(self._turn.steps[-1].last, time)

    def _open_turn(self, time: int) -> _Turn:
        if self._turn is None:  # an answer before any prompt: a turn of its own
            self.prompt(time, [])
        assert self._turn is not None
        return self._turn

    def _open_step(self) -> _Step:
        turn = self._open_turn(self.last_time)
        if not turn.steps:
            self.step(turn.last)
        return turn.steps[-1]

    def _close_turn(self) -> None:
        turn, self._turn, self._calls = self._turn, None, {}
        if turn is not None:
            self.session.turns.append(Turn(turn.number, render(turn, self.agent)))


def render(turn: _Turn, agent: str) -> list[tuple[int, Item]]:
    """One turn's items in the vocabulary's order, each with its time."""
    n = turn.number
    model = next((s.model for s in turn.steps if s.model), None)
    start = turn_start(n, trigger={"kind": "prompt", "imported": agent}, model=model)
    if turn.native:
        start = (start[0], {**start[1], "native": turn.native})
    items: list[tuple[int, Item]] = [(turn.time, start), (turn.time, user_message(n, turn.content))]
    for number, step in enumerate(turn.steps, 1):
        items.append((step.time, step_start(n, number)))
        for block in step.blocks:
            if block["type"] != "tool-call":
                items.append((step.time, assistant_chunk(n, number, block["type"], block["text"])))
        message = assistant_message(n, number, step.blocks, step.usage)
        extra: dict[str, Any] = {}
        if step.model is not None and step.model != model:
            extra["model"] = step.model
        if step.native:
            extra["native"] = step.native
        items.append((step.last, (message[0], {**message[1], **extra})))
        for call in step.calls:
            made = tool_call(n, number, call.id, name=call.name, arguments=call.arguments, title=call.title,
                             kind=call.kind)
            items.append((call.time, made if call.native is None else (made[0], {**made[1], "native": call.native})))
            if call.result is None:
                done = tool_result(n, number, call.id, content=[{"type": "text", "text": "(no result recorded)"}],
                                   is_error=True, error={"name": call.name, "code": MISSING_RESULT})
                when = step.last
            else:
                when, content, is_error, native = call.result
                done = tool_result(n, number, call.id, content=content, is_error=is_error)
                if native is not None:
                    done = (done[0], {**done[1], "native": native})
            items.append((when, done))
        items.append((step.last, step_end(n, number)))
    items.append((turn.last, turn_end(n, {"kind": "completed"})))
    return items


def text_blocks(text: str) -> list[JSON]:
    """A text as ACP content blocks (none for an empty one)."""
    return [{"type": "text", "text": text}] if text else []
