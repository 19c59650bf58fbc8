"""A session's turns as a person reads them, for `acp-bridge sessions`: the view model
built from a stored log (with the crash-repair closers of an unrepaired turn applied in
memory), and the wording of its states that both renderings share."""

from __future__ import annotations

from acp_bridge.cli.sessions.text import add_usage, local_time, one_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from acp_bridge.cli.sessions.source import Stored
    from session import Owner
    from session.events import Event
    from session.scan import TornTail


class Tool:
    __slots__ = ("arguments", "call_id", "kind", "name", "result", "result_on_disk", "started",
                 "title")

    def __init__(self, call_id: str, name: str, arguments: Any) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments = arguments  # an object (from tool/call) or JSON text (the block)
        self.title: str | None = None
        self.kind: str | None = None
        self.started = False
        self.result: dict[str, Any] | None = None
        self.result_on_disk = True


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


class Step:
    __slots__ = ("chunk_reasoning", "chunk_text", "has_message", "number", "reasoning", "text",
                 "tools", "usage")

    def __init__(self, number: int) -> None:
        self.number = number
        self.chunk_text = Spool()
        self.chunk_reasoning = Spool()
        self.has_message = False
        self.reasoning: list[str] = []
        self.text: list[str] = []
        self.tools: list[Tool] = []
        self.usage: dict[str, int] = {}

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
    __slots__ = ("end_on_disk", "ended_at", "mode", "model", "number", "prompt", "reason",
                 "started_at", "steps", "usage")

    def __init__(self, number: int, started_at: int, data: dict[str, Any]) -> None:
        self.number = number
        self.started_at = started_at
        self.mode: str | None = data.get("mode")
        self.model: str | None = data.get("model")
        self.prompt: list[Any] = []
        self.steps: list[Step] = []
        self.reason: dict[str, Any] | None = None
        self.ended_at: int | None = None
        self.end_on_disk = True
        self.usage: dict[str, int] = {}

    def close(self) -> None:
        """Let go of the steps' streamed text (a temporary file, past SPOOL)."""
        for step in self.steps:
            step.chunk_text.close()
            step.chunk_reasoning.close()


class States:
    """The wording of a session's turn states, for a view of it whole (`View`) or
    streamed (`walk.Walk`): both know the owner and their last turn."""

    owner: str
    owner_pid: int | None

    @property
    def last(self) -> Turn | None:
        raise NotImplementedError

    def turn_status(self, turn: Turn) -> str:
        """The long form, for a turn's header line."""
        if turn.reason is None:
            who = f" (in process {self.owner_pid})" if self.owner_pid else ""
            return f"running{who}"
        text = reason_text(turn.reason, long=True)
        if not turn.end_on_disk:
            cause = one_line(str(turn.reason.get("cause", "crash")))
            if self.owner == "unknown":
                return f"interrupted ({cause}, or still running; not yet repaired on disk)"
            return f"interrupted ({cause}; not yet repaired on disk)"
        return text

    def status(self) -> tuple[str | None, str]:
        """(machine status, short text) of the last turn, for `list`."""
        turn = self.last
        if turn is None:
            return None, "no turns"
        if turn.reason is None:
            return "running", "running"
        if not turn.end_on_disk:
            if self.owner == "unknown":
                return "open", "open (running or interrupted)"
            return "interrupted", "interrupted (unrepaired)"
        kind = str(turn.reason.get("kind"))
        return kind, reason_text(turn.reason, long=False)


class View(States):
    """A stored session, with the closers of an unrepaired open turn applied in memory."""

    def __init__(self, stored: Stored, owner: Owner) -> None:
        from session import interrupted_turn_closers

        self.stored = stored
        self.owner, self.owner_pid = owner
        events = stored.events
        self.closers: list[Event] = []
        self.running = False
        if events and _ends_open(events):
            if self.owner == "live":
                self.running = True
            else:
                self.closers = interrupted_turn_closers(events)
        on_disk = events[-1]["seq"] + 1 if events else 0  # events may be the last turn only
        self.turns = _build_turns([*events, *self.closers], on_disk=on_disk)
        self.turn_count = stored.earlier_turns + len(self.turns)
        self.usage: dict[str, int] = dict(stored.earlier_usage)
        for turn in self.turns:
            add_usage(self.usage, turn.usage)

    @property
    def last(self) -> Turn | None:
        return self.turns[-1] if self.turns else None


def _ends_open(events: list[Event]) -> bool:
    from session.repair import open_turn_start

    return open_turn_start(events) is not None


def check_stored(stored: Stored) -> None:
    """Refuse, as `load` does, a log that breaks the invariants (SessionCorruptError)."""
    from session import InvariantError, InvariantTracker
    from session.loading import invariant_corruption

    tracker = InvariantTracker(session_id=stored.id)
    try:
        tracker.feed_all(stored.events)
    except InvariantError as exc:  # the same error, word for word, as SessionStore.load
        raise invariant_corruption(stored.id, exc, stored.locate) from None


def _build_turns(events: Iterable[Event], *, on_disk: int) -> list[Turn]:
    builder = TurnBuilder(on_disk=on_disk)
    for event in events:
        builder.feed(event)
    return builder.turns


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
        etype, data = event["type"], event["data"]
        turn, step = self.turn, self._step
        if etype == "turn/start":
            self.count += 1
            self.turn = Turn(int(data.get("turn", self.count)), event["time"], data)
            if not self.keep:
                self.turns.clear()
            self.turns.append(self.turn)
            self._step, self._tools = None, {}
        elif turn is None:
            pass  # outside a turn: the invariant check refuses such logs
        elif etype == "user/message":
            turn.prompt.extend(data.get("content") or [])
        elif etype == "step/start":
            self._step = Step(int(data.get("step", len(turn.steps) + 1)))
            turn.steps.append(self._step)
        elif etype == "turn/end":
            turn.reason = data.get("reason") or {}
            turn.ended_at = event["time"]
            turn.end_on_disk = self._stored(event["seq"])
            self.turn = self._step = None
            return turn
        elif step is None:
            pass
        elif etype == "assistant/chunk":
            chunk = data.get("chunk") or {}
            target = step.chunk_reasoning if chunk.get("type") == "reasoning" else step.chunk_text
            target.write(str(chunk.get("text", "")))
        elif etype == "assistant/message":
            self._message(turn, step, data)
        elif etype == "tool/call":
            tool = _tool_of(self._tools, step, data)
            tool.name = str(data.get("name", tool.name))
            tool.arguments = data.get("arguments", tool.arguments)
            tool.title, tool.kind, tool.started = data.get("title"), data.get("kind"), True
        elif etype == "tool/result":
            tool = _tool_of(self._tools, step, data)
            tool.result = data
            tool.result_on_disk = self._stored(event["seq"])
        return None

    def _message(self, turn: Turn, step: Step, data: dict[str, Any]) -> None:
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


def _tool_of(tools: dict[str, Tool], step: Step, data: dict[str, Any]) -> Tool:
    """The call a tool/call or tool/result names (one without a call block is added)."""
    call_id = str(data.get("callId"))
    tool = tools.get(call_id)
    if tool is None:
        tool = tools[call_id] = Tool(call_id, str(data.get("name", "?")), None)
        step.tools.append(tool)
    return tool


def reason_text(reason: dict[str, Any], *, long: bool) -> str:
    kind = reason.get("kind")
    if kind == "error":
        text = f"error: {one_line(str(reason.get('message', '')))}"
        if long:
            details = [f"step {one_line(str(reason.get('step')))}"]
            if reason.get("code"):
                details.append(f"code {one_line(str(reason['code']))}")
            if reason.get("retryable"):
                details.append("retryable")
            text += f" ({', '.join(details)})"
        return text
    # Every value from the log is shown through one_line: control characters escaped.
    if not long:
        return one_line(str(kind))
    if kind == "cancelled":
        return f"cancelled (by {one_line(str(reason.get('by')))})"
    if kind == "interrupted":
        return f"interrupted ({one_line(str(reason.get('cause')))})"
    if kind == "max_steps":
        return f"max_steps (limit {one_line(str(reason.get('limit')))})"
    if kind == "max_tokens":
        return "max_tokens (the model hit its output limit)"
    return one_line(str(kind))


def turn_duration(turn: Turn) -> str | None:
    if turn.ended_at is None:
        return None
    seconds = max(0, turn.ended_at - turn.started_at) / 1000
    if seconds < 60:
        return f"took {seconds:.1f} s"
    return f"took {int(seconds // 60)} min {int(seconds % 60)} s"


def turn_info(turn: Turn) -> str:
    parts = [f"started {local_time(turn.started_at)}"]
    took = turn_duration(turn)
    if took:
        parts.append(took)
    if turn.mode:
        parts.append(f"mode {one_line(turn.mode)}")
    if turn.model:
        parts.append(f"model {one_line(turn.model)}")
    return " · ".join(parts)


def result_mark(tool: Tool) -> str:
    result = tool.result or {}
    if not result.get("isError"):
        return ""
    error = result.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return f"[error: {one_line(str(code))}]" if code else "[error]"


def tool_diffs(tool: Tool) -> list[tuple[str, str | None, str]]:
    """(path, old text, new text) of the diffs a tool result displays."""
    display = (tool.result or {}).get("display")
    out = []
    for item in display if isinstance(display, list) else []:
        if isinstance(item, dict) and item.get("type") == "diff":
            old = item.get("oldText")
            out.append((str(item.get("path", "")), old if isinstance(old, str) else None,
                        str(item.get("newText", ""))))
    return out


class WrappedAgent:
    """Who recorded a session through `acp-bridge wrap`, from the header's `wrapped` field
    (docs/wrap.md): the command line, the agent's own name and version (its `agentInfo`,
    else the command's file name) and its own session id. Every part is shown with
    control characters escaped: they come from the wrapped agent."""

    __slots__ = ("command", "name", "session_id")

    def __init__(self, command: str, name: str, session_id: str | None) -> None:
        self.command = command
        self.name = name
        self.session_id = session_id


def wrapped_agent(header: Mapping[str, object]) -> WrappedAgent | None:
    """The wrapped agent of a session, or None for a session of acp-bridge's own agent."""
    import shlex

    wrapped = header.get("wrapped")
    if not isinstance(wrapped, dict):
        return None
    argv = wrapped.get("command")
    argv = [str(a) for a in argv] if isinstance(argv, list) else []
    command = one_line(shlex.join(argv)) if argv else "?"
    info = wrapped.get("agentInfo")
    name = ""
    if isinstance(info, dict) and info.get("name"):
        name = one_line(str(info["name"]))
        if info.get("version"):
            name += f" {one_line(str(info['version']))}"
    elif argv:
        name = one_line(argv[0].rsplit("/", 1)[-1])
    sid = wrapped.get("sessionId")
    return WrappedAgent(command, name or "?", one_line(str(sid)) if sid else None)


def view_notes(torn: TornTail | None, running: bool, closers: list[Event]) -> list[str]:
    notes = []
    if torn is not None and not running:
        place = ", ".join(f"{k} {v}" for k, v in torn.where.items())
        notes.append(
            f"{torn.records} damaged record(s) at the end ({place}: {one_line(torn.reason)}) "
            "would be cut (and kept aside) when the session is next loaded."
        )
    if closers:
        turn = closers[-1]["data"]["turn"]
        notes.append(
            f"turn {turn} was cut short and has not been repaired on disk yet; it is shown "
            "as loading will close it. Nothing was written."
        )
    return notes
