"""A session's turns as a person reads them, for `acp-bridge sessions`: the view
model built from a log and the text helpers shared by its renderings."""

from __future__ import annotations

from acp_bridge.cli.sessions.main import (
    SHOW_LINE_CHARS,
    SHOW_LINES,
)
from acp_bridge.cli.sessions.store import (
    _Stored,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from session.events import Event




# --- the view: a session's turns as a person reads them ---------------------------------


class _Tool:
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


class _Step:
    __slots__ = ("chunk_reasoning", "chunk_text", "has_message", "number", "reasoning", "text",
                 "tools", "usage")

    def __init__(self, number: int) -> None:
        self.number = number
        self.chunk_text: list[str] = []
        self.chunk_reasoning: list[str] = []
        self.has_message = False
        self.reasoning: list[str] = []
        self.text: list[str] = []
        self.tools: list[_Tool] = []
        self.usage: dict[str, int] = {}

    @property
    def partial(self) -> bool:
        """Streamed text with no `assistant/message` after it (cut short)."""
        return not self.has_message and bool(self.chunk_text or self.chunk_reasoning)

    def shown_reasoning(self) -> str:
        return "".join(self.reasoning if self.has_message else self.chunk_reasoning).strip()

    def shown_text(self) -> str:
        return "".join(self.text if self.has_message else self.chunk_text).strip()


class _Turn:
    __slots__ = ("end_on_disk", "ended_at", "mode", "model", "number", "prompt", "reason",
                 "started_at", "steps", "usage")

    def __init__(self, number: int, started_at: int, data: dict[str, Any]) -> None:
        self.number = number
        self.started_at = started_at
        self.mode: str | None = data.get("mode")
        self.model: str | None = data.get("model")
        self.prompt: list[Any] = []
        self.steps: list[_Step] = []
        self.reason: dict[str, Any] | None = None
        self.ended_at: int | None = None
        self.end_on_disk = True
        self.usage: dict[str, int] = {}


class _View:
    """A stored session, with the closers of an unrepaired open turn applied in memory."""

    def __init__(self, stored: _Stored, owner: tuple[str, int | None]) -> None:
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
            _add_usage(self.usage, turn.usage)

    @property
    def last(self) -> _Turn | None:
        return self.turns[-1] if self.turns else None

    def turn_status(self, turn: _Turn) -> str:
        """The long form, for a turn's header line."""
        if turn.reason is None:
            who = f" (in process {self.owner_pid})" if self.owner_pid else ""
            return f"running{who}"
        text = _reason_text(turn.reason, long=True)
        if not turn.end_on_disk:
            cause = turn.reason.get("cause", "crash")
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
        return kind, _reason_text(turn.reason, long=False)


def _ends_open(events: list[Event]) -> bool:
    from session.repair import open_turn_start

    return open_turn_start(events) is not None


def _check(stored: _Stored) -> None:
    """Refuse, as `load` does, a log that breaks the invariants (SessionCorruptError)."""
    from session import InvariantError, InvariantTracker
    from session.loading import invariant_corruption

    tracker = InvariantTracker(session_id=stored.id)
    try:
        tracker.feed_all(stored.events)
    except InvariantError as exc:  # the same error, word for word, as SessionStore.load
        raise invariant_corruption(stored.id, exc, stored.locate) from None


def _build_turns(events: Iterable[Event], *, on_disk: int) -> list[_Turn]:
    turns: list[_Turn] = []
    turn: _Turn | None = None
    step: _Step | None = None
    tools: dict[str, _Tool] = {}
    for event in events:
        etype, data = event["type"], event["data"]
        if etype == "turn/start":
            turn = _Turn(int(data.get("turn", len(turns) + 1)), event["time"], data)
            turns.append(turn)
            step, tools = None, {}
        elif turn is None:
            continue  # outside a turn: the invariant check refuses such logs
        elif etype == "user/message":
            turn.prompt.extend(data.get("content") or [])
        elif etype == "step/start":
            step = _Step(int(data.get("step", len(turn.steps) + 1)))
            turn.steps.append(step)
        elif etype == "turn/end":
            turn.reason = data.get("reason") or {}
            turn.ended_at = event["time"]
            turn.end_on_disk = event["seq"] < on_disk
        elif step is None:
            continue
        elif etype == "assistant/chunk":
            chunk = data.get("chunk") or {}
            target = step.chunk_reasoning if chunk.get("type") == "reasoning" else step.chunk_text
            target.append(str(chunk.get("text", "")))
        elif etype == "assistant/message":
            step.has_message = True
            for block in data.get("content") or []:
                kind = block.get("type")
                if kind == "text":
                    step.text.append(str(block.get("text", "")))
                elif kind == "reasoning":
                    step.reasoning.append(str(block.get("text", "")))
                elif kind == "tool-call":
                    call = _Tool(str(block.get("id")), str(block.get("name")),
                                 block.get("arguments"))
                    tools[call.call_id] = call
                    step.tools.append(call)
            usage = data.get("usage")
            if isinstance(usage, dict):
                _add_usage(step.usage, usage)
                _add_usage(turn.usage, usage)
        elif etype == "tool/call":
            tool = _tool_of(tools, step, data)
            tool.name = str(data.get("name", tool.name))
            tool.arguments = data.get("arguments", tool.arguments)
            tool.title, tool.kind, tool.started = data.get("title"), data.get("kind"), True
        elif etype == "tool/result":
            tool = _tool_of(tools, step, data)
            tool.result = data
            tool.result_on_disk = event["seq"] < on_disk
    return turns


def _tool_of(tools: dict[str, _Tool], step: _Step, data: dict[str, Any]) -> _Tool:
    """The call a tool/call or tool/result names (one without a call block is added)."""
    call_id = str(data.get("callId"))
    tool = tools.get(call_id)
    if tool is None:
        tool = tools[call_id] = _Tool(call_id, str(data.get("name", "?")), None)
        step.tools.append(tool)
    return tool


_USAGE_KEYS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens",
               "reasoningTokens")


def _add_usage(total: dict[str, int], usage: dict[str, Any]) -> None:
    for key in _USAGE_KEYS:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total[key] = total.get(key, 0) + value


def _tokens(usage: dict[str, int]) -> str:
    text = f"{usage.get('inputTokens', 0):,} in / {usage.get('outputTokens', 0):,} out"
    extra = [
        f"{usage[key]:,} {label}"
        for key, label in (("cacheReadTokens", "cache read"), ("cacheWriteTokens", "cache write"),
                           ("reasoningTokens", "reasoning"))
        if usage.get(key)
    ]
    return text + (f" ({', '.join(extra)})" if extra else "")


def _tokens_json(usage: dict[str, int]) -> dict[str, int]:
    out = {"inputTokens": usage.get("inputTokens", 0), "outputTokens": usage.get("outputTokens", 0)}
    out.update({k: v for k, v in usage.items() if k not in out and v})
    return out


def _reason_text(reason: dict[str, Any], *, long: bool) -> str:
    kind = reason.get("kind")
    if kind == "error":
        text = f"error: {_one_line(str(reason.get('message', '')))}"
        if long:
            details = [f"step {reason.get('step')}"]
            if reason.get("code"):
                details.append(f"code {reason['code']}")
            if reason.get("retryable"):
                details.append("retryable")
            text += f" ({', '.join(details)})"
        return text
    if not long:
        return str(kind)
    if kind == "cancelled":
        return f"cancelled (by {reason.get('by')})"
    if kind == "interrupted":
        return f"interrupted ({reason.get('cause')})"
    if kind == "max_steps":
        return f"max_steps (limit {reason.get('limit')})"
    if kind == "max_tokens":
        return "max_tokens (the model hit its output limit)"
    return str(kind)


# --- text helpers -------------------------------------------------------------------------

_CONTROL: dict[int, str] | None = None


def _clean(text: str) -> str:
    """Text from the log with control characters made visible (tabs and newlines kept)."""
    global _CONTROL
    if _CONTROL is None:
        codes = [*range(0x20), 0x7F, *range(0x80, 0xA0)]
        _CONTROL = {c: f"\\x{c:02x}" for c in codes if c not in (0x09, 0x0A)}
    return text.replace("\r\n", "\n").translate(_CONTROL)


def _one_line(text: str) -> str:
    return " ".join(_clean(text).split())


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _local(ms: int | None, *, seconds: bool = True) -> str:
    import time

    if ms is None:
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M",
                         time.localtime(ms / 1000))


def _iso(ms: int) -> str:
    import time

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(ms / 1000))
    return stamp[:-2] + ":" + stamp[-2:] if stamp[-5:-4] in "+-" else stamp


def _duration(turn: _Turn) -> str | None:
    if turn.ended_at is None:
        return None
    seconds = max(0, turn.ended_at - turn.started_at) / 1000
    if seconds < 60:
        return f"took {seconds:.1f} s"
    return f"took {int(seconds // 60)} min {int(seconds % 60)} s"


def _turn_info(turn: _Turn) -> str:
    parts = [f"started {_local(turn.started_at)}"]
    took = _duration(turn)
    if took:
        parts.append(took)
    if turn.mode:
        parts.append(f"mode {_one_line(turn.mode)}")
    if turn.model:
        parts.append(f"model {_one_line(turn.model)}")
    return " · ".join(parts)


def _json_text(value: Any) -> str:
    """Compact JSON of tool arguments (the model's JSON text is re-encoded if it parses)."""
    import orjson

    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return _clean(value)
    try:
        return _clean(orjson.dumps(value).decode())
    except TypeError:
        return _clean(repr(value))


def _block_text(block: Any) -> str:
    """A content block (ACP or a tool result's) as text; non-text blocks as a [tag]."""
    if not isinstance(block, dict):
        return _clean(str(block))
    kind = block.get("type")
    if kind == "text":
        return _clean(str(block.get("text", "")))
    if kind in ("image", "audio"):
        return _tag(kind, block.get("mimeType"))
    if kind == "resource_link":
        return _tag("link", block.get("name") or block.get("title"), block.get("uri"))
    if kind == "resource":
        resource = block.get("resource") or {}
        head = _tag("resource", resource.get("uri"))
        if isinstance(resource.get("text"), str):
            return head + "\n" + _clean(resource["text"])
        return head
    return _tag(kind)


def _tag(*words: Any) -> str:
    return "[" + " ".join(_one_line(str(w)) for w in words if w) + "]"


def _blocks_text(blocks: Any) -> str:
    if not isinstance(blocks, list):
        return ""
    return "\n".join(_block_text(b) for b in blocks)


def _permission_text(permission: Any) -> str | None:
    if not isinstance(permission, dict):
        return None
    if permission.get("outcome") == "selected" and permission.get("optionId"):
        return _one_line(str(permission["optionId"]))
    return _one_line(str(permission.get("outcome")))


def _result_mark(tool: _Tool) -> str:
    result = tool.result or {}
    if not result.get("isError"):
        return ""
    error = result.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return f"[error: {_one_line(str(code))}]" if code else "[error]"


def _diffs(tool: _Tool) -> list[tuple[str, str | None, str]]:
    """(path, old text, new text) of the diffs a tool result displays."""
    display = (tool.result or {}).get("display")
    out = []
    for item in display if isinstance(display, list) else []:
        if isinstance(item, dict) and item.get("type") == "diff":
            old = item.get("oldText")
            out.append((str(item.get("path", "")), old if isinstance(old, str) else None,
                        str(item.get("newText", ""))))
    return out


def _unified(path: str, old: str | None, new: str) -> list[str]:
    import difflib

    lines = difflib.unified_diff(
        (old or "").splitlines(), new.splitlines(),
        fromfile="/dev/null" if old is None else path, tofile=path, lineterm="",
    )
    return [_clean(line) for line in lines]


def _diff_summary(path: str, old: str | None, new: str) -> str:
    lines = _unified(path, old, new)[2:]
    added = sum(1 for line in lines if line.startswith("+"))
    removed = sum(1 for line in lines if line.startswith("-"))
    what = "new file" if old is None else "diff"
    return f"{what} {_one_line(path)} (+{added} -{removed} lines)"


def _head(text: str, full: bool) -> list[str]:
    lines = text.rstrip("\n").split("\n") if text.strip() else ["(empty)"]
    if full:
        return lines
    shown = [_cut(line, SHOW_LINE_CHARS) for line in lines[:SHOW_LINES]]
    if len(lines) > SHOW_LINES:
        shown.append(f"… ({len(lines) - SHOW_LINES} more lines; --full shows all)")
    return shown


def _indent(lines: Iterable[str], pad: str) -> list[str]:
    return [pad + line if line else pad.rstrip() for line in lines]


def _notes(view: _View) -> list[str]:
    notes = []
    torn = view.stored.torn
    if torn is not None and not view.running:
        place = ", ".join(f"{k} {v}" for k, v in torn.where.items())
        notes.append(
            f"{torn.records} damaged record(s) at the end ({place}: {_one_line(torn.reason)}) "
            "would be cut (and kept aside) when the session is next loaded."
        )
    if view.closers:
        turn = view.closers[-1]["data"]["turn"]
        notes.append(
            f"turn {turn} was cut short and has not been repaired on disk yet; it is shown "
            "as loading will close it. Nothing was written."
        )
    return notes
