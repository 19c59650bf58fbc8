"""Hypothesis strategies for whole session logs (DESIGN.md section 2), built on the
value and event-data strategies of tests/support/strategies.py.

`valid_logs()` draws complete, valid logs covering the whole event vocabulary: several
turns, each a `turn/start`, the prompt, steps with chunks, assistant messages (tool
calls included), `tool/call` (pending or not), `tool/permission` and `tool/result` events, and a `turn/end` of any of the
seven reason kinds, and `wrapped/update`s (what `acp-bridge wrap` records of a
wrapped agent's updates) inside turns and between them. An `interrupted` turn is built as the agent's shutdown would write
it: the turn is cut at a random event and closed by the closers (built here from the
design, not by calling `session.repair`). Every log passes
`check_invariants(events, closed=True)`.

The log is one state machine written as plain functions over `draw`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from hypothesis import strategies as st

from session import Event
from session.events import INTERRUPTED_CODE
from tests.support.logs import Item
from tests.support.strategies import (
    BOOL,
    SHORT,
    TEXT,
    Draw,
    block_kinds,
    call_id_bases,
    cancelled_by,
    chunk_kinds,
    draw_content_block,
    draw_list,
    draw_tool_call_content,
    draw_usage,
    draw_wrapped_update,
    error_codes,
    interrupted_result_text,
    json_objects,
    lines,
    message_shapes,
    models,
    modes,
    names,
    permissions,
    reason_kinds,
    time_steps,
    tool_error_codes,
    tool_error_names,
    tool_kinds,
    uris,
    with_optional,
)

# --- The log state machine -----------------------------------------------------------


@dataclass
class _Call:
    name: str
    step: int
    started: bool = False
    answered: bool = False
    held: bool = False  # its tool/call said pending, and no tool/permission let it run


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
            call = self.calls[data["callId"]]
            call.started, call.held = True, bool(data.get("pending"))
        elif etype == "tool/permission":
            self.calls[data["callId"]].held = False
        elif etype == "tool/result":
            self.calls[data["callId"]].answered = True

    def closers(self, cause: str) -> list[Item]:
        out: list[Item] = []
        for call_id, call in self.calls.items():
            if call.answered:
                continue
            text = interrupted_result_text(call.name, call.started and not call.held)
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
    base = draw(call_id_bases)
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
        kind = draw(block_kinds)
        if kind == "tool-call":
            args = draw(json_objects(json_leaves))
            block = {
                "type": "tool-call",
                "id": _draw_call_id(draw, used_ids),
                "name": draw(names),
                "arguments": orjson.dumps(args).decode(),
            }
            content.append(block)
        else:
            content.append({"type": kind, "text": draw(TEXT)})
    return content


def _draw_tool_events(
    draw: Draw, turn: int, step: int, block: dict[str, Any], json_leaves: int
) -> list[Item]:
    """An optional `tool/call` (mostly present; sometimes `pending`, then sometimes let
    run by a `tool/permission`), then the `tool/result`, for one call."""
    call_id, name = block["id"], block["name"]
    out: list[Item] = []
    if draw(st.integers(0, 3)) > 0:
        call: dict[str, Any] = {
            "turn": turn,
            "step": step,
            "callId": call_id,
            "name": name,
            "arguments": orjson.loads(block["arguments"]),
            "title": draw(SHORT),
            "kind": draw(tool_kinds),
        }
        if draw(BOOL):
            locations = []
            for _ in draw_list(draw, 2):
                line = draw(lines)
                path = draw(uris)
                locations.append({"path": path} if line is None else {"path": path, "line": line})
            call["locations"] = locations
        pending = draw(st.integers(0, 2)) == 0
        if pending:
            call["pending"] = True
        out.append(("tool/call", call))
        if pending and draw(BOOL):
            out.append(("tool/permission", {"turn": turn, "step": step, "callId": call_id,
                                            "permission": draw(permissions)}))
    is_error = draw(BOOL)
    result: dict[str, Any] = {
        "turn": turn,
        "step": step,
        "callId": call_id,
        "content": [{"type": "text", "text": draw(TEXT)} for _ in draw_list(draw, 2)],
        "isError": is_error,
    }
    if is_error and draw(BOOL):
        result["error"] = {"name": draw(tool_error_names), "code": draw(tool_error_codes)}
    if draw(BOOL):
        result["display"] = [draw_tool_call_content(draw, json_leaves) for _ in draw_list(draw, 2)]
    if draw(BOOL):
        result["permission"] = draw(permissions)
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
        chunk = {"type": draw(chunk_kinds), "text": draw(TEXT)}
        items.append(("assistant/chunk", {"turn": turn, "step": step, "chunk": chunk}))
    shape = draw(message_shapes)
    if shape != "none":
        content = _draw_assistant_content(draw, used_ids, json_leaves) if shape == "message" else []
        data: dict[str, Any] = {"turn": turn, "step": step, "content": content}
        if shape == "usage-only" or draw(BOOL):
            data["usage"] = draw_usage(draw)
        items.append(("assistant/message", data))
        calls = [b for b in content if b["type"] == "tool-call"]
        queues = [_draw_tool_events(draw, turn, step, b, json_leaves) for b in calls]
        items.extend(_draw_interleaving(draw, queues))
    items.append(("step/end", {"turn": turn, "step": step}))
    return items


def _draw_reason(draw: Draw, kind: str, steps: int) -> dict[str, Any]:
    if kind == "max_steps":
        if draw(st.integers(0, 3)) == 0:  # a wrapped agent's max_turn_requests: no limit named
            return {"kind": kind, "limit": None}
        return {"kind": kind, "limit": steps if steps else draw(st.integers(1, 100))}
    if kind == "cancelled":
        return {"kind": kind, "by": draw(cancelled_by)}
    if kind == "error":
        # The failing step: the last one started, 0 when it failed before step 1.
        base = {"kind": kind, "step": steps, "message": draw(TEXT)}
        return with_optional(draw, base, code=error_codes, retryable=BOOL)
    return {"kind": kind}


def _message_of(items: list[Item]) -> dict[str, Any]:
    """The data of the last `assistant/message` in `items`."""
    return next(data for etype, data in reversed(items) if etype == "assistant/message")


def draw_turn(draw: Draw, turn: int, max_steps: int = 3, json_leaves: int = 6) -> list[Item]:
    """The items of one complete turn numbered `turn`."""
    kind = draw(reason_kinds)
    base = {"turn": turn, "trigger": {"kind": "prompt"}}
    start = with_optional(draw, base, mode=modes, model=models)
    prompt = [draw_content_block(draw, json_leaves) for _ in range(draw(st.integers(1, 3)))]
    items: list[Item] = [("turn/start", start), ("user/message", {"turn": turn, "content": prompt})]
    used_ids: set[str] = set()
    steps = draw(st.integers(0, max_steps))
    for step in range(1, steps + 1):
        items.extend(_draw_step(draw, turn, step, used_ids, json_leaves))
    # A wrapped agent's updates may come anywhere in the turn, inside steps too.
    for _ in draw_list(draw, 2):
        where = draw(st.integers(1, len(items)))
        update = draw_wrapped_update(draw, json_leaves)
        items.insert(where, ("wrapped/update", {"turn": turn, "update": update}))
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
    if bool(waiting) and draw(BOOL):
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
        items.extend(_draw_between(draw, json_leaves))
        items.extend(draw_turn(draw, turn, max_steps, json_leaves))
    items.extend(_draw_between(draw, json_leaves))
    return items


def _draw_between(draw: Draw, json_leaves: int) -> list[Item]:
    """Rarely, a wrapped agent's updates between turns (they name no turn)."""
    if draw(st.integers(0, 3)) > 0:
        return []
    return [("wrapped/update", {"update": draw_wrapped_update(draw, json_leaves)})
            for _ in range(draw(st.integers(1, 2)))]


@st.composite
def valid_logs(
    draw: Draw, min_turns: int = 1, max_turns: int = 4, max_steps: int = 3, json_leaves: int = 6
) -> list[Event]:
    """A complete valid log: seq from 0, time non-decreasing epoch milliseconds."""
    items = draw(valid_items(min_turns, max_turns, max_steps, json_leaves))
    time = draw(st.integers(0, 2**42))
    events: list[Event] = []
    for seq, (etype, data) in enumerate(items):
        time += draw(time_steps)
        events.append({"type": etype, "seq": seq, "time": time, "data": data})
    return events
