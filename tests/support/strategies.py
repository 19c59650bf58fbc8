"""Hypothesis strategies for session logs (DESIGN.md section 2).

`valid_logs()` draws complete, valid logs covering the whole event vocabulary: several
turns, each a `turn/start`, the prompt, steps with chunks, assistant messages (tool
calls included), `tool/call` and `tool/result` events, and a `turn/end` of any of the
seven reason kinds. An `interrupted` turn is built as the agent's shutdown would write
it: the turn is cut at a random event and closed by the closers (built here from the
design, not by calling `session.repair`). Every log passes
`check_invariants(events, closed=True)`.

The free-form slots (ACP blocks' `_meta`, tool arguments, display content) carry
arbitrary JSON drawn from a small set of value strategies: no NaN or infinities, ints
within 64 bits (signed or unsigned, as orjson reads them), strings of any unicode except lone surrogates (which are not UTF-8).

The log is one state machine written as plain functions over `draw` (strategies are
built once, at import: building them per draw costs more than drawing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import orjson
from hypothesis import strategies as st

from session import Event
from session.events import CANCELLED_BY, INTERRUPTED_CODE, REASON_KINDS

Item = tuple[str, dict[str, Any]]
Draw = st.DrawFn

# --- JSON values -------------------------------------------------------------------

# Pieces that stress encoders: newlines, quotes, backslashes, NUL and other controls,
# emoji (with ZWJ), astral characters, the JS line separators, a combining mark, a BOM.
SPECIAL_PIECES = (
    "\n",
    "\r\n",
    "\t",
    '"',
    "'",
    "\\",
    "\x00",
    "\x1f",
    "\x7f",
    "😀",
    "👩‍💻",
    "\U0001d54f",  # an astral letter
    "\u2028",
    "\u2029",
    "e\u0301",
    "\ufeff",
    "</script>",
    '{"a": 1}',
)

# Any unicode scalar value: lone surrogates cannot be encoded as UTF-8 (the store
# refuses them as non-JSON data), so they are not valid event data.
characters = st.characters(exclude_categories=["Cs"])


@cache
def texts(max_pieces: int = 5) -> st.SearchStrategy[str]:
    """Arbitrary unicode text, with the awkward pieces mixed in often."""
    piece = st.one_of(st.text(characters, max_size=12), st.sampled_from(SPECIAL_PIECES))
    return st.lists(piece, max_size=max_pieces).map("".join)


json_scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    texts(3),
)


@cache
def json_values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value (nested lists and objects of the scalars above)."""
    return st.recursive(
        json_scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(texts(2), children, max_size=3),
        ),
        max_leaves=max_leaves,
    )


@cache
def json_objects(max_leaves: int = 8) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(texts(2), json_values(max_leaves), max_size=4)


# --- ACP blocks and event data pieces -----------------------------------------------

_TEXT = texts()
_SHORT = texts(2)
_BOOL = st.booleans()
_uris = st.one_of(
    st.sampled_from(["file:///w/a.py", "file:///w/dir/b%20c.txt", "https://example.com/x?y=1"]),
    _SHORT.map(lambda t: "file:///w/" + t),
)
_mime_types = st.sampled_from(["text/plain", "text/x-python", "application/json", "image/png"])
_names = st.one_of(st.sampled_from(["read_file", "write_file", "run", "search"]), _SHORT)
_hex = st.binary(max_size=12).map(bytes.hex)
_tokens = st.integers(0, 2**31)
_sizes = st.integers(0, 2**40)
_content_kinds = st.sampled_from(["text", "text", "text", "resource_link", "resource", "image"])
_display_kinds = st.sampled_from(["content", "diff", "terminal"])
_chunk_kinds = st.sampled_from(["text", "reasoning"])
_block_kinds = st.sampled_from(["text", "reasoning", "tool-call"])
_call_id_bases = st.one_of(st.sampled_from(["c1", "c2", "call_0", "toolu_01", "1"]), _SHORT)
# Mostly a message; sometimes only usage (a step cut off with usage but no content);
# rarely nothing (a step cut off before the model produced anything).
_message_shapes = st.sampled_from(["message"] * 6 + ["usage-only", "none"])
_modes = st.sampled_from(["ask", "code", "architect"])
_models = st.sampled_from(["claude-sonnet", "gpt-x", "local/qwen"])
_reason_kinds = st.sampled_from(REASON_KINDS)
_cancelled_by = st.sampled_from(CANCELLED_BY)
_error_codes = st.sampled_from(["rate_limit", "overloaded", "500"])
_tool_kinds = st.sampled_from(
    [
        "read",
        "edit",
        "delete",
        "move",
        "search",
        "execute",
        "think",
        "fetch",
        "switch_mode",
        "other",
    ]
)
_tool_error_names = st.sampled_from(["ToolError", "PermissionError", "OSError"])
# Error codes of ordinary failed results: never INTERRUPTED_CODE, which marks the
# closers' synthetic results.
_tool_error_codes = st.one_of(
    st.sampled_from(["tool_error", "permission_denied", "not_found", "timeout", "cancelled"]),
    _SHORT.filter(lambda c: c != INTERRUPTED_CODE),
)
_permissions = st.one_of(
    st.sampled_from(["allow", "allow_always", "reject"]).map(
        lambda o: {"outcome": "selected", "optionId": o}
    ),
    st.just({"outcome": "cancelled"}),
)
_lines = st.none() | st.integers(0, 10_000)
_time_steps = st.sampled_from([0, 0, 1, 7, 250, 60_000])


def _with_optional(
    draw: Draw, base: dict[str, Any], **optional: st.SearchStrategy[Any]
) -> dict[str, Any]:
    """`base` plus each optional field, drawn or left out."""
    out = dict(base)
    for key, strategy in optional.items():
        if draw(_BOOL):
            out[key] = draw(strategy)
    return out


def draw_content_block(draw: Draw, json_leaves: int = 6) -> dict[str, Any]:
    """An ACP ContentBlock: text (mostly), resource_link, embedded resource or image."""
    kind = draw(_content_kinds)
    meta = json_objects(json_leaves)
    if kind == "text":
        return _with_optional(draw, {"type": "text", "text": draw(_TEXT)}, _meta=meta)
    if kind == "resource_link":
        base = {"type": "resource_link", "uri": draw(_uris), "name": draw(_SHORT)}
        return _with_optional(
            draw,
            base,
            mimeType=_mime_types,
            title=_SHORT,
            description=_TEXT,
            size=_sizes,
            _meta=meta,
        )
    if kind == "resource":
        if draw(_BOOL):
            contents: dict[str, Any] = {"uri": draw(_uris), "text": draw(_TEXT)}
        else:
            contents = {"uri": draw(_uris), "blob": draw(_hex)}
        contents = _with_optional(draw, contents, mimeType=_mime_types)
        return _with_optional(draw, {"type": "resource", "resource": contents}, _meta=meta)
    return {"type": "image", "data": draw(_hex), "mimeType": "image/png"}


@st.composite
def acp_content_blocks(draw: Draw, json_leaves: int = 6) -> dict[str, Any]:
    return draw_content_block(draw, json_leaves)


def draw_usage(draw: Draw) -> dict[str, Any]:
    base = {"inputTokens": draw(_tokens), "outputTokens": draw(_tokens)}
    return _with_optional(
        draw, base, cacheReadTokens=_tokens, cacheWriteTokens=_tokens, reasoningTokens=_tokens
    )


def draw_tool_call_content(draw: Draw, json_leaves: int) -> dict[str, Any]:
    """An ACP ToolCallContent (the `display` of a result)."""
    kind = draw(_display_kinds)
    if kind == "content":
        return {"type": "content", "content": draw_content_block(draw, json_leaves)}
    if kind == "diff":
        base = {"type": "diff", "path": draw(_uris), "newText": draw(_TEXT)}
        return _with_optional(draw, base, oldText=_TEXT)
    return {"type": "terminal", "terminalId": draw(_SHORT)}


def draw_list(draw: Draw, max_size: int) -> range:
    return range(draw(st.integers(0, max_size)))


def interrupted_result_text(name: str, started: bool) -> str:
    if started:
        return f"The {name} call was interrupted while running; its outcome is unknown."
    return f"The {name} call was interrupted before it started."


# --- The log state machine -----------------------------------------------------------


@dataclass
class _Call:
    name: str
    step: int
    started: bool = False
    answered: bool = False


@dataclass
class TurnModel:
    """Where a turn stands, to close it the way the shutdown closers do."""

    turn: int
    step: int = 0
    step_open: bool = False
    calls: dict[str, _Call] = field(default_factory=dict)

    def feed(self, etype: str, data: dict[str, Any]) -> None:
        if etype == "step/start":
            self.step, self.step_open = data["step"], True
        elif etype == "step/end":
            self.step_open = False
        elif etype == "assistant/message":
            for block in data["content"]:
                if block["type"] == "tool-call":
                    self.calls[block["id"]] = _Call(block["name"], data["step"])
        elif etype == "tool/call":
            self.calls[data["callId"]].started = True
        elif etype == "tool/result":
            self.calls[data["callId"]].answered = True

    def closers(self, cause: str) -> list[Item]:
        out: list[Item] = []
        for call_id, call in self.calls.items():
            if call.answered:
                continue
            text = interrupted_result_text(call.name, call.started)
            result = {
                "turn": self.turn,
                "step": call.step,
                "callId": call_id,
                "content": [{"type": "text", "text": text}],
                "isError": True,
                "error": {"name": "InterruptedError", "code": INTERRUPTED_CODE},
            }
            out.append(("tool/result", result))
        if self.step_open:
            out.append(("step/end", {"turn": self.turn, "step": self.step}))
        reason = {"kind": "interrupted", "cause": cause}
        out.append(("turn/end", {"turn": self.turn, "reason": reason}))
        return out


def _draw_call_id(draw: Draw, used: set[str]) -> str:
    """A tool-call id unique within the turn (ids repeat across turns, as they may)."""
    base = draw(_call_id_bases)
    call_id, n = base, 0
    while call_id in used:
        n += 1
        call_id = f"{base}#{n}"
    used.add(call_id)
    return call_id


def _draw_assistant_content(
    draw: Draw, used_ids: set[str], json_leaves: int
) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(_block_kinds)
        if kind == "tool-call":
            args = draw(json_objects(json_leaves))
            block = {
                "type": "tool-call",
                "id": _draw_call_id(draw, used_ids),
                "name": draw(_names),
                "arguments": orjson.dumps(args).decode(),
            }
            content.append(block)
        else:
            content.append({"type": kind, "text": draw(_TEXT)})
    return content


def _draw_tool_events(
    draw: Draw, turn: int, step: int, block: dict[str, Any], json_leaves: int
) -> list[Item]:
    """An optional `tool/call` (mostly present), then the `tool/result`, for one call."""
    call_id, name = block["id"], block["name"]
    out: list[Item] = []
    if draw(st.integers(0, 3)) > 0:
        call: dict[str, Any] = {
            "turn": turn,
            "step": step,
            "callId": call_id,
            "name": name,
            "arguments": orjson.loads(block["arguments"]),
            "title": draw(_SHORT),
            "kind": draw(_tool_kinds),
        }
        if draw(_BOOL):
            locations = []
            for _ in draw_list(draw, 2):
                line = draw(_lines)
                path = draw(_uris)
                locations.append({"path": path} if line is None else {"path": path, "line": line})
            call["locations"] = locations
        out.append(("tool/call", call))
    is_error = draw(_BOOL)
    result: dict[str, Any] = {
        "turn": turn,
        "step": step,
        "callId": call_id,
        "content": [{"type": "text", "text": draw(_TEXT)} for _ in draw_list(draw, 2)],
        "isError": is_error,
    }
    if is_error and draw(_BOOL):
        result["error"] = {"name": draw(_tool_error_names), "code": draw(_tool_error_codes)}
    if draw(_BOOL):
        result["display"] = [draw_tool_call_content(draw, json_leaves) for _ in draw_list(draw, 2)]
    if draw(_BOOL):
        result["permission"] = draw(_permissions)
    out.append(("tool/result", result))
    return out


def _draw_interleaving(draw: Draw, queues: list[list[Item]]) -> list[Item]:
    """Merge per-call event lists, keeping each list's order (tools run in parallel)."""
    pending = [list(q) for q in queues if q]
    out: list[Item] = []
    while pending:
        index = draw(st.integers(0, len(pending) - 1)) if len(pending) > 1 else 0
        out.append(pending[index].pop(0))
        if not pending[index]:
            pending.pop(index)
    return out


def _draw_step(
    draw: Draw, turn: int, step: int, used_ids: set[str], json_leaves: int
) -> list[Item]:
    items: list[Item] = [("step/start", {"turn": turn, "step": step})]
    for _ in draw_list(draw, 3):
        chunk = {"type": draw(_chunk_kinds), "text": draw(_TEXT)}
        items.append(("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk}))
    shape = draw(_message_shapes)
    if shape != "none":
        content = _draw_assistant_content(draw, used_ids, json_leaves) if shape == "message" else []
        data: dict[str, Any] = {"turn": turn, "step": step, "content": content}
        if shape == "usage-only" or draw(_BOOL):
            data["usage"] = draw_usage(draw)
        items.append(("assistant/message", data))
        calls = [b for b in content if b["type"] == "tool-call"]
        queues = [_draw_tool_events(draw, turn, step, b, json_leaves) for b in calls]
        items.extend(_draw_interleaving(draw, queues))
    items.append(("step/end", {"turn": turn, "step": step}))
    return items


def _draw_reason(draw: Draw, kind: str, steps: int) -> dict[str, Any]:
    if kind == "max_steps":
        return {"kind": kind, "limit": steps if steps else draw(st.integers(1, 100))}
    if kind == "cancelled":
        return {"kind": kind, "by": draw(_cancelled_by)}
    if kind == "error":
        # The failing step: the last one started, 0 when it failed before step 1.
        base = {"kind": kind, "step": steps, "message": draw(_TEXT)}
        return _with_optional(draw, base, code=_error_codes, retryable=_BOOL)
    return {"kind": kind}


def _message_of(items: list[Item]) -> dict[str, Any]:
    """The data of the last `assistant/message` in `items`."""
    return next(data for etype, data in reversed(items) if etype == "assistant/message")


def draw_turn(draw: Draw, turn: int, max_steps: int = 3, json_leaves: int = 6) -> list[Item]:
    """The items of one complete turn numbered `turn`."""
    kind = draw(_reason_kinds)
    base = {"turn": turn, "trigger": {"kind": "prompt"}}
    start = _with_optional(draw, base, mode=_modes, model=_models)
    prompt = [draw_content_block(draw, json_leaves) for _ in range(draw(st.integers(1, 3)))]
    items: list[Item] = [("turn/start", start), ("user/message", {"turn": turn, "content": prompt})]
    used_ids: set[str] = set()
    steps = draw(st.integers(0, max_steps))
    for step in range(1, steps + 1):
        items.extend(_draw_step(draw, turn, step, used_ids, json_leaves))
    if kind != "interrupted":
        items.append(("turn/end", {"turn": turn, "reason": _draw_reason(draw, kind, steps)}))
        return items
    # The agent stopped mid-turn: keep a prefix (at least the turn/start) and close it.
    # Half the time the cut falls where tool calls wait for results (the closers then
    # write synthetic results), which a uniform cut would rarely hit.
    waiting = [
        k
        for k in range(2, len(items) + 1)
        if items[k - 1][0] in ("assistant/message", "tool/call")
        and any(b["type"] == "tool-call" for b in _message_of(items[:k])["content"])
    ]
    if bool(waiting) and draw(_BOOL):
        cut = draw(st.sampled_from(waiting))
    else:
        cut = draw(st.integers(1, len(items)))
    model = TurnModel(turn)
    for etype, data in items[:cut]:
        model.feed(etype, data)
    return items[:cut] + model.closers("shutdown")


@st.composite
def valid_items(
    draw: Draw, min_turns: int = 1, max_turns: int = 4, max_steps: int = 3, json_leaves: int = 6
) -> list[Item]:
    """(type, data) items of a complete valid log, as a runner would append them."""
    items: list[Item] = []
    for turn in range(1, draw(st.integers(min_turns, max_turns)) + 1):
        items.extend(draw_turn(draw, turn, max_steps, json_leaves))
    return items


@st.composite
def valid_logs(
    draw: Draw, min_turns: int = 1, max_turns: int = 4, max_steps: int = 3, json_leaves: int = 6
) -> list[Event]:
    """A complete valid log: seq from 0, time non-decreasing epoch milliseconds."""
    items = draw(valid_items(min_turns, max_turns, max_steps, json_leaves))
    time = draw(st.integers(0, 2**42))
    events: list[Event] = []
    for seq, (etype, data) in enumerate(items):
        time += draw(_time_steps)
        events.append({"type": etype, "seq": seq, "time": time, "data": data})
    return events
