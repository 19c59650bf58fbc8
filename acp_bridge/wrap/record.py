"""`TurnRecorder`: the ACP traffic of one wrapped turn in, session-log items out (docs/wrap.md).

Pure: the proxy feeds it what passes between the editor and the wrapped agent and
appends the `(event type, data)` items it returns, in order; it never does I/O. Every
item sequence it returns keeps the log's invariants, whatever the agent sends.

How the update stream becomes steps (docs/wrap.md, "Recording"):

- a step opens at the first message chunk, thought chunk or tool call of the turn, and
  at the first message or thought chunk after the open step's tool calls all have
  results (the agent went back to its model); a tool call never closes a step;
- an `assistant/message` precedes each new tool call's `tool/call` (the invariants need
  the call's block in a message of the step first): it holds what the step streamed
  since its last message, then the call's block; what comes later goes to the step's
  closing message;
- a `usage_update` in a step is at once an empty-content `assistant/message` hosting
  the usage (DESIGN.md's form for usage without content): the editor sees the update
  when it comes, so its event cannot wait for the step's end (log before send);
- a step closes, with that message, the synthetic results of calls still open (only at
  the turn's end) and `step/end`, when the next step opens and at the turn's end.

What no event holds becomes `wrapped/update` (replayed as it came): plans, mode,
config option, command and session info updates, extension updates, non-text message
chunks, interim tool call updates, updates for a call the turn does not know, a repeated
`tool_call` of a known call, a `usage_update` outside a step, and every update before
`prompt` or after the turn ended (then between turns, naming no turn).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from acp_bridge.host.settlement import TURN_FAILED
from acp_bridge.rpc.protocol import error_object
from session.closers import OpenTurn, Unanswered, Unreported, closers
from session.events import (
    CANCELLED_BY,
    AssistantBlock,
    PermissionRecord,
    Reason,
    ReasonKind,
    Usage,
    reason,
)
from session.items import (
    ChunkKind,
    Item,
    assistant_chunk,
    assistant_message,
    step_end,
    step_start,
    tool_call,
    tool_result,
    turn_start,
    user_message,
    wrapped_update,
)

# ACP StopReason -> turn/end reason kind and fields (DESIGN.md section 5, read
# backwards). A wrapped agent's `max_turn_requests` names no limit, hence `limit: null`;
# `cancelled` follows the editor's `session/cancel`, the one way ACP cancels a turn.
_STOP_REASONS: Final[dict[str, tuple[ReasonKind, dict[str, Any]]]] = {
    "end_turn": ("completed", {}),
    "max_tokens": ("max_tokens", {}),
    "max_turn_requests": ("max_steps", {"limit": None}),
    "refusal": ("refusal", {}),
    "cancelled": ("cancelled", {"by": "session/cancel"}),
}

# JSON-RPC error code -> the `code` word of an `error` reason, when the error's data
# names none. `auth` is the word settlement answers with -32000 again.
_ERROR_WORDS: Final[dict[int, str]] = {
    -32000: "auth",
    -32002: "not_found",
    -32600: "invalid_request",
    -32601: "method_not_found",
    -32602: "invalid_params",
    -32603: "internal_error",
    -32700: "parse_error",
    -32800: "cancelled",
}
OTHER_ERROR: Final = "agent_error"
"""The `code` of an error answer whose JSON-RPC code and data name no known word."""

FINAL_STATUSES: Final = ("completed", "failed")

# Fields of a ToolCall that `tool/call` (and its replay) carries; the rest of the
# announcement is kept in a `wrapped/update` after it.
_CALL_FIELDS: Final = frozenset({"sessionUpdate", "toolCallId", "title", "kind", "status", "rawInput", "locations"})
# Fields of a final ToolCallUpdate that `tool/result` carries (content as its display).
_RESULT_FIELDS: Final = frozenset({"sessionUpdate", "toolCallId", "status", "content"})


@dataclass
class _Call:
    step: int
    name: str
    content: list[Any] | None = None  # the latest ToolCallContent: updates replace it
    permission: PermissionRecord | None = None
    answered: bool = False


@dataclass
class _Step:
    number: int
    pending: list[tuple[ChunkKind, list[str]]] = field(default_factory=list)  # (kind, texts) since the last message
    calls: list[str] = field(default_factory=list)


class TurnRecorder:
    """One turn of a wrapped agent. `prompt` starts it; `answer`, `failed` or
    `cancelled` ends it (the first of them: later ends record nothing); `update` and
    `permission` may come at any time. `agent` is recorded as `turn/start.model` (what
    served the turn), `mode` as its mode."""

    def __init__(self, turn: int, *, agent: str, mode: str | None = None) -> None:
        self.turn = turn
        self.agent = agent
        self.mode = mode
        self._started = False
        self._ended = False
        self._step: _Step | None = None  # the open step
        self._steps = 0
        self._calls: dict[str, _Call] = {}

    @property
    def open(self) -> bool:
        """The turn started and its `turn/end` was not produced yet."""
        return self._started and not self._ended

    def prompt(self, content: list[Any]) -> list[Item]:
        if self._started:
            raise RuntimeError(f"turn {self.turn} was already prompted")
        self._started = True
        return [turn_start(self.turn, trigger={"kind": "prompt"}, mode=self.mode, model=self.agent),
                user_message(self.turn, content)]

    def update(self, update: dict[str, Any]) -> list[Item]:
        """The items for one `session/update` of the wrapped agent (its `update`)."""
        if not isinstance(update, dict) or not isinstance(update.get("sessionUpdate"), str):
            return []  # not a SessionUpdate: nothing the log could hold or a replay show
        if not self.open:
            return [wrapped_update(update)]
        kind = update["sessionUpdate"]
        if kind in ("agent_message_chunk", "agent_thought_chunk"):
            content = update.get("content")
            if isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str):
                return self._chunk("text" if kind == "agent_message_chunk" else "reasoning", content["text"])
        elif kind == "tool_call":
            call_id = update.get("toolCallId")
            if isinstance(call_id, str) and call_id not in self._calls:
                return self._new_call(call_id, update)
            return self._call_update(update)  # a repeated announcement updates the call
        elif kind == "tool_call_update":
            return self._call_update(update)
        elif kind == "usage_update" and self._step is not None:
            # At once, in a message of its own: the editor is shown the update as it
            # comes, so its event must be in the log first (log before send).
            return [assistant_message(self.turn, self._step.number, [], _usage(update))]
        return [wrapped_update(update, self.turn)]

    def permission(self, tool_call: dict[str, Any], outcome: dict[str, Any]) -> list[Item]:
        """The editor's answer (`outcome`) to the agent's permission request about
        `tool_call` (a ToolCallUpdate): it rides on the call's `tool/result`. A call the
        turn does not know yet is recorded now, from the request's `toolCall`."""
        call_id = tool_call.get("toolCallId")
        if not self.open or not isinstance(call_id, str):
            return []
        value = outcome.get("outcome")
        record: PermissionRecord = {"outcome": value if isinstance(value, str) else "unknown"}
        if isinstance(outcome.get("optionId"), str):
            record["optionId"] = outcome["optionId"]
        items = [] if call_id in self._calls else self._new_call(call_id, tool_call)
        call = self._calls[call_id]
        if not call.answered:  # else too late: its result is written
            call.permission = record
        return items

    def answer(self, result: dict[str, Any]) -> list[Item]:
        """The wrapped agent's PromptResponse."""
        if not self._starts_end():
            return []
        stop = result.get("stopReason")
        known = _STOP_REASONS.get(stop) if isinstance(stop, str) else None
        if known is None:  # not an ACP stop reason: the turn cannot be said to have succeeded
            return self._close(reason("error", step=self._steps, code="invalid_answer",
                                      message=f"the wrapped agent answered an unknown stopReason {stop!r}"))
        kind, fields = known
        return self._close(reason(kind, **fields))

    def failed(self, error: dict[str, Any]) -> list[Item]:
        """The wrapped agent's JSON-RPC error answer to the prompt. The reason keeps it
        whole (`agentError`: settlement answers the editor with it again, as it came) and,
        for everything else that reads a reason, its words: `code` (`data.code` if a
        string, else a word for the JSON-RPC code), `message`, `retryable`."""
        if not self._starts_end():
            return []
        sent = error_object(error)
        data = sent.get("data")
        data = data if isinstance(data, dict) else {}
        code = data.get("code")
        if not isinstance(code, str):
            code = _ERROR_WORDS.get(sent["code"], OTHER_ERROR)
        # An agent that settles as we do (a wrapped acp-bridge) starts its message so:
        # the reason's message is what failed, as our own agent records it.
        text = sent["message"].removeprefix(TURN_FAILED) or f"the wrapped agent failed ({sent['code']})"
        fields: dict[str, Any] = {"step": self._steps, "code": code, "message": text}
        if isinstance(data.get("retryable"), bool):
            fields["retryable"] = data["retryable"]
        fields["agentError"] = sent
        return self._close(reason("error", **fields))

    def cancelled(self, by: str, *, forced: bool = False) -> list[Item]:
        """The editor cancelled (`by`: the ACP message that did) and the agent's answer
        says nothing usable; `forced`: it gave none within the cancel grace, and the
        wrapper ended the turn itself."""
        if by not in CANCELLED_BY:
            raise ValueError(f"cancelled by {by!r} is not one of {list(CANCELLED_BY)}")
        if not self._starts_end():
            return []
        return self._close(reason("cancelled", by=by, forced=True) if forced else reason("cancelled", by=by))

    # --- steps ---------------------------------------------------------------------

    def _starts_end(self) -> bool:
        if not self._started:
            raise RuntimeError(f"turn {self.turn} ended before it was prompted")
        return not self._ended

    def _chunk(self, kind: ChunkKind, text: str) -> list[Item]:
        items: list[Item] = []
        step = self._step
        if step is not None and step.calls and all(self._calls[c].answered for c in step.calls):
            items += self._close_step()  # the agent went back to its model
            step = None
        if step is None:
            step = self._open_step(items)
        pending = step.pending
        if pending and pending[-1][0] == kind:
            pending[-1][1].append(text)
        else:
            pending.append((kind, [text]))
        items.append(assistant_chunk(self.turn, step.number, kind, text))
        return items

    def _open_step(self, items: list[Item]) -> _Step:
        self._steps += 1
        self._step = _Step(self._steps)
        items.append(step_start(self.turn, self._steps))
        return self._step

    @staticmethod
    def _streamed(step: _Step) -> list[AssistantBlock]:
        """What the step streamed since its last message, as message content (taken)."""
        content: list[AssistantBlock] = [
            {"type": "text", "text": "".join(texts)} if kind == "text" else {"type": "reasoning", "text": "".join(texts)}
            for kind, texts in step.pending]
        step.pending = []
        return content

    def _close_step(self) -> list[Item]:
        """The agent went back to its model: the open step's calls all have results."""
        step, self._step = self._step, None
        assert step is not None
        content = self._streamed(step)
        message = [assistant_message(self.turn, step.number, content)] if content else []
        return [*message, step_end(self.turn, step.number)]

    def _close(self, end: Reason) -> list[Item]:
        self._ended = True
        step, self._step = self._step, None
        if step is None:
            return closers(OpenTurn(self.turn, None), Unreported(end))
        # The agent ended the turn without a final status for these calls.
        open_calls = [(cid, self._calls[cid]) for cid in step.calls if not self._calls[cid].answered]
        for _, call in open_calls:
            call.answered = True
        unanswered = [Unanswered(cid, call.step, call.name, True, call.permission) for cid, call in open_calls]
        return closers(OpenTurn(self.turn, step.number, unanswered), Unreported(end, self._streamed(step)))

    # --- tool calls ----------------------------------------------------------------

    def _new_call(self, call_id: str, call: dict[str, Any]) -> list[Item]:
        items: list[Item] = []
        step = self._step if self._step is not None else self._open_step(items)
        raw_input = call.get("rawInput")
        arguments = raw_input if raw_input is not None else {}
        given_kind, given_title = call.get("kind"), call.get("title")
        kind = given_kind if isinstance(given_kind, str) else "other"
        title = given_title if isinstance(given_title, str) and given_title else None
        name = title or kind
        block: AssistantBlock = {"type": "tool-call", "id": call_id, "name": name,
                                 "arguments": orjson.dumps(arguments).decode()}
        items.append(assistant_message(self.turn, step.number, [*self._streamed(step), block]))
        locations = call.get("locations")
        items.append(tool_call(self.turn, step.number, call_id, name=name, arguments=arguments,
                               title=title or name, kind=kind,
                               locations=locations if isinstance(locations, list) else None))
        step.calls.append(call_id)
        self._calls[call_id] = record = _Call(step.number, name)
        if isinstance(call.get("content"), list):
            record.content = call["content"]
        if call.get("status") in FINAL_STATUSES:  # announced already done
            items.append(self._result(call_id, call))
        extras = {k: v for k, v in call.items() if k not in _CALL_FIELDS and not (k == "content" and record.answered)}
        if extras:
            items.append(wrapped_update({"sessionUpdate": "tool_call_update", "toolCallId": call_id, **extras}, self.turn))
        return items

    def _call_update(self, update: dict[str, Any]) -> list[Item]:
        call_id = update.get("toolCallId")
        call = self._calls.get(call_id) if isinstance(call_id, str) else None
        if call is None or call.answered:  # unknown here, or done: replayed as it came
            return [wrapped_update(update, self.turn)]
        if isinstance(update.get("content"), list):
            call.content = update["content"]
        if update.get("status") not in FINAL_STATUSES:
            return [wrapped_update(update, self.turn)]
        items = [self._result(update["toolCallId"], update)]
        extras = {k: v for k, v in update.items() if k not in _RESULT_FIELDS}
        if extras:
            items.append(wrapped_update({"sessionUpdate": "tool_call_update", "toolCallId": update["toolCallId"],
                                         **extras}, self.turn))
        return items

    def _result(self, call_id: str, update: dict[str, Any]) -> Item:
        call = self._calls[call_id]
        call.answered = True
        display = call.content or []
        return tool_result(
            self.turn, call.step, call_id,
            content=[c["content"] for c in display if isinstance(c, dict) and c.get("type") == "content"
                     and isinstance(c.get("content"), dict)],
            is_error=update.get("status") == "failed", display=display, permission=call.permission)


def _usage(update: dict[str, Any]) -> Usage:
    """ACP `usage_update` -> `usage`: `used` (the tokens in context) is the step's input,
    as ACP does not split it, and `size` the window, so the replay's `usage_update`
    (used = input + output) shows the same two numbers. Its `cost` is not kept."""
    used, size = update.get("used"), update.get("size")
    usage: Usage = {"inputTokens": used if type(used) is int else 0, "outputTokens": 0}
    if type(size) is int:
        usage["contextWindow"] = size
    return usage
