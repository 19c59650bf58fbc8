"""A session's turns as built from its events, for `acp-bridge sessions`: the turn, its
steps and tool calls (`Turn`, `Step`, `Tool`), a step's streamed text kept aside as it
comes (`Spool`), and `TurnBuilder`, which builds them one event at a time. A wrapped
agent's notices (`wrapped/update`s of kind `notice`, recorded for the transcript and
never replayed: docs/wrap.md) are kept where they came: in the turn before its first
step, else in the step that was open."""

from __future__ import annotations

from acp_bridge.cli.sessions.text import add_usage
from session.typed import typed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from session.events import Event, Reason
    from session.items import (
        AssistantMessageData,
        CompactionData,
        ToolCallData,
        ToolPermissionData,
        ToolResultData,
        TurnStartData,
    )


class Tool:
    __slots__ = ("arguments", "call_id", "kind", "name", "permission", "result", "result_on_disk", "started",
                 "title")

    def __init__(self, call_id: str, name: str, arguments: Any) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments = arguments  # an object (from tool/call) or JSON text (the block)
        self.title: str | None = None
        self.kind: str | None = None
        self.started = False
        self.result: ToolResultData | None = None
        self.result_on_disk = True
        # The decision about it, whoever made it, as last recorded: the agent's without
        # asking (`tool/call`), the client's answer that let it run (`tool/permission`,
        # there even when the call was cut off before its result), its result's.
        self.permission: Any = None


SPOOL = 4 << 20  # characters of streamed text kept in memory; more go to a temporary file


class Spool:
    """A step's streamed text, as it comes: in memory up to SPOOL characters, beyond in
    an unlinked temporary file. A model may stream tens of MB in one step, and the
    `assistant/message` after it (which has the same text) nearly always makes it
    unneeded: only a step cut short shows it. `close` lets it go."""

    __slots__ = ("_file", "size")

    def __init__(self) -> None:
        self._file: Any = None
        self.size = 0

    def write(self, text: str) -> None:
        if self._file is None:
            import tempfile

            self._file = tempfile.SpooledTemporaryFile(  # noqa: SIM115 (closed by close())
                SPOOL, mode="w+", encoding="utf-8", errors="surrogatepass")
        self._file.write(text)
        self.size += len(text)

    def value(self) -> str:
        if self._file is None:
            return ""
        self._file.seek(0)
        return str(self._file.read())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self.size = 0


class Compaction:
    """A compaction of the model's context in a step, as its last event has it."""

    __slots__ = ("error", "from_turn", "status", "summary", "to_turn")

    def __init__(self, data: CompactionData) -> None:
        replaces = data.get("replaces") or {}
        self.from_turn, self.to_turn = replaces.get("fromTurn"), replaces.get("toTurn")
        self.status = str(data.get("status"))
        self.summary: list[Any] = data.get("summary") or []
        error = data.get("error")
        self.error = error if isinstance(error, str) else None


class Step:
    __slots__ = ("chunk_reasoning", "chunk_text", "compactions", "has_message", "notices", "number", "reasoning",
                 "text", "tools", "usage")

    def __init__(self, number: int) -> None:
        self.number = number
        self.chunk_text = Spool()
        self.chunk_reasoning = Spool()
        self.has_message = False
        self.reasoning: list[str] = []
        self.text: list[str] = []
        self.tools: list[Tool] = []
        self.usage: dict[str, int] = {}
        self.compactions: dict[str, Compaction] = {}  # by id, in the order they began
        self.notices: list[dict[str, Any]] = []  # a wrapped agent's, as it sent them

    @property
    def partial(self) -> bool:
        """Streamed text with no `assistant/message` after it (cut short)."""
        return not self.has_message and bool(self.chunk_text.size or self.chunk_reasoning.size)

    # Unstripped (the renderings strip as they print: text.Lines); a one-part message
    # is its own string, not a copy.
    def shown_reasoning(self) -> str:
        return "".join(self.reasoning) if self.has_message else self.chunk_reasoning.value()

    def shown_text(self) -> str:
        return "".join(self.text) if self.has_message else self.chunk_text.value()


class Turn:
    __slots__ = ("agent", "end_on_disk", "ended_at", "mode", "model", "notices", "number", "prompt", "reason",
                 "started_at", "steps", "trigger", "usage")

    def __init__(self, number: int, started_at: int, data: TurnStartData) -> None:
        self.number = number
        self.started_at = started_at
        self.mode: str | None = data.get("mode")
        self.model: str | None = data.get("model")
        self.agent: str | None = data.get("agent")  # `wrap --agent`: the agent's name
        trigger = data.get("trigger")
        # What started it: "prompt", or "command" (a slash command's turn; `command` its name).
        self.trigger: dict[str, Any] = dict(trigger) if isinstance(trigger, dict) else {"kind": "prompt"}
        self.prompt: list[Any] = []
        self.steps: list[Step] = []
        self.reason: Reason | None = None
        self.ended_at: int | None = None
        self.end_on_disk = True
        self.usage: dict[str, int] = {}
        self.notices: list[dict[str, Any]] = []  # a wrapped agent's before the first step

    @property
    def command(self) -> str | None:
        """The slash command this turn ran, or None for a prompt's turn."""
        if self.trigger.get("kind") != "command":
            return None
        return str(self.trigger.get("name") or "?")

    def close(self) -> None:
        """Let go of the steps' streamed text (a temporary file, past SPOOL)."""
        for step in self.steps:
            step.chunk_text.close()
            step.chunk_reasoning.close()


class TurnBuilder:
    """Turns built one event at a time (`show` and `export` stream a log through one):
    `feed` returns a turn when its `turn/end` completes it. Events of seq `on_disk` and
    later are the in-memory closers of an unrepaired turn. Streamed chunks are let go
    once the step's `assistant/message` is in: a turn costs its text, not its events."""

    def __init__(self, *, on_disk: int | None = None, keep: bool = True) -> None:
        self.on_disk = on_disk  # None: every event so far is on disk
        self.keep = keep  # keep every turn in `turns` (else only the current one)
        self.turns: list[Turn] = []
        self.turn: Turn | None = None
        self.count = 0
        self._step: Step | None = None
        self._tools: dict[str, Tool] = {}

    def _stored(self, seq: int) -> bool:
        return self.on_disk is None or seq < self.on_disk

    def feed(self, event: Event) -> Turn | None:
        # Defensive reads (`.get`, types tested) all the same: the search index builds
        # turns of logs the invariants refused too (acp_bridge.cli.sessions.facts).
        ev = typed(event)
        turn, step = self.turn, self._step
        if ev["type"] == "assistant/chunk":  # most events of a log: tested first
            if step is not None:  # (a step is open only inside a turn)
                chunk = ev["data"].get("chunk") or {}
                target = step.chunk_reasoning if chunk.get("type") == "reasoning" else step.chunk_text
                target.write(str(chunk.get("text", "")))
        elif ev["type"] == "turn/start":
            self.count += 1
            self.turn = Turn(int(ev["data"].get("turn", self.count)), ev["time"], ev["data"])
            if not self.keep:
                self.turns.clear()
            self.turns.append(self.turn)
            self._step, self._tools = None, {}
        elif turn is None:
            pass  # outside a turn: the invariant check refuses such logs
        elif ev["type"] == "user/message":
            turn.prompt.extend(ev["data"].get("content") or [])
        elif ev["type"] == "step/start":
            self._step = Step(int(ev["data"].get("step", len(turn.steps) + 1)))
            turn.steps.append(self._step)
        elif ev["type"] == "turn/end":
            turn.reason = ev["data"].get("reason") or {}
            turn.ended_at = ev["time"]
            turn.end_on_disk = self._stored(ev["seq"])
            self.turn = self._step = None
            return turn
        elif ev["type"] == "wrapped/update":
            update = ev["data"].get("update")
            if isinstance(update, dict) and update.get("sessionUpdate") == "notice":
                (turn.notices if step is None else step.notices).append(update)
        elif step is None:
            pass
        elif ev["type"] == "assistant/message":
            self._message(turn, step, ev["data"])
        elif ev["type"] == "tool/call":
            call = ev["data"]
            tool = _tool_of(self._tools, step, call)
            tool.name = str(call.get("name", tool.name))
            tool.arguments = call.get("arguments", tool.arguments)
            tool.title, tool.kind, tool.started = call.get("title"), call.get("kind"), True
            tool.permission = call.get("permission", tool.permission)
        elif ev["type"] == "tool/permission":
            tool = _tool_of(self._tools, step, ev["data"])
            tool.permission = ev["data"].get("permission", tool.permission)
        elif ev["type"] == "tool/result":
            tool = _tool_of(self._tools, step, ev["data"])
            tool.result = ev["data"]
            tool.result_on_disk = self._stored(ev["seq"])
            tool.permission = ev["data"].get("permission", tool.permission)
        elif ev["type"] == "context/compaction":
            data = ev["data"]
            step.compactions[str(data.get("compactionId"))] = Compaction(data)
            usage = data.get("usage")
            if isinstance(usage, dict):  # the summary's own model call
                add_usage(step.usage, usage)
                add_usage(turn.usage, usage)
        return None

    def _message(self, turn: Turn, step: Step, data: AssistantMessageData) -> None:
        step.has_message = True
        step.chunk_text.close()  # the message has their text
        step.chunk_reasoning.close()
        for block in data.get("content") or []:
            kind = block.get("type")
            if kind == "text":
                step.text.append(str(block.get("text", "")))
            elif kind == "reasoning":
                step.reasoning.append(str(block.get("text", "")))
            elif kind == "tool-call":
                call = Tool(str(block.get("id")), str(block.get("name")), block.get("arguments"))
                self._tools[call.call_id] = call
                step.tools.append(call)
        usage = data.get("usage")
        if isinstance(usage, dict):
            add_usage(step.usage, usage)
            add_usage(turn.usage, usage)


def _tool_of(tools: dict[str, Tool], step: Step, data: ToolCallData | ToolPermissionData | ToolResultData) -> Tool:
    """The call a tool/call, tool/permission or tool/result names (one without a call
    block is added)."""
    call_id = str(data.get("callId"))
    tool = tools.get(call_id)
    if tool is None:
        tool = tools[call_id] = Tool(call_id, str(data.get("name", "?")), None)
        step.tools.append(tool)
    return tool
