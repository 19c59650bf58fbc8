"""Session events -> ACP `session/update`s (DESIGN.md section 5), one mapping for both
the live stream of a turn and the replay of a log by `session/load`.

`updates_for(event, ctx)` returns the `update` objects of the `SessionNotification`s
to send for one event (the caller wraps each with the sessionId). It is pure apart
from `ctx.state`, a small turn-local memory, so a replay over a log and the live
stream of the same events produce the same updates, with these differences, both
decided by `ctx.replay`:

- `user/message` -> `user_message_chunk`s on replay only: live, the client typed the
  prompt and already shows it.
- On replay, `terminal` blocks are dropped from a result's display: the terminal was
  released when the command ended, so a client loading the session (often a new
  process) cannot resolve its id. The display always carries a text copy of the
  output next to the embed, which stands in for it.

One `tool_call_update` is live only, because no event records it: `call_progress` (a
running tool's interim content, such as a terminal embed).

Shapes, checked against the stable `schema.json` (schema-v1.25.0), where both
`ContentChunk.messageId` and the `usage_update` variant are stable, so both are sent
as the protocol defines them rather than under `_meta`:

- chunks: `{sessionUpdate, content, messageId}` with messageId `t{turn}s{step}` for
  text, `t{turn}s{step}-thought` for reasoning and `t{turn}-user` for the prompt:
  unique in a session, the same live and on replay, derivable without a session id;
- `tool/call` -> `tool_call {toolCallId, title, kind, status: "pending", rawInput,
  locations?}`, then, for a call that runs at once, `tool_call_update {toolCallId,
  status: "in_progress"}` (DESIGN.md's table: `pending` means awaiting approval); a
  `pending` one (it asks for permission, or is refused) stays `pending` until its
  `tool/permission` -> `tool_call_update {toolCallId, status: "in_progress", _meta}`
  (the answer let it run) or its result. The permission request's `toolCall` carries
  no status (acp_bridge.agent.client_services);
- `tool/result` -> `tool_call_update {toolCallId, status: "completed" | "failed",
  content, rawOutput: {content, isError, error?}, _meta?}`, or a complete `tool_call`
  if the call was never announced (a synthetic result for a call that never started);
  the permission decision, if any, travels in `_meta.acpBridge.permission`;
- `assistant/message` with usage -> `usage_update {used, size, _meta}`: `used` is
  the step's context, each token once (input + output tokens: the input count holds
  the cached tokens, the output count the reasoning), `size` the usage's
  `contextWindow` (a wrapped agent's own `size`), else the window of the turn's model
  (on replay: of its `turn/start.model`, `UpdateContext.window_of`), else
  DEFAULT_CONTEXT_WINDOW when the model does not say; with a price for the turn's
  model (`UpdateContext.cost`), `cost {amount, currency}`: the session's cumulative
  cost, as ACP defines it (a step of an unpriced model sends none);
- `config/set` of the session's title (`session/title`, a slash command's:
  acp_bridge.host.commands) -> `session_info_update {title}`; other settings nothing
  (their answers and `config_option_update`s said so when they changed);
- `wrapped/update` -> its `update`, as the wrapped agent sent it (`acp-bridge wrap`
  records there every update of the agent but its text chunks: plans, modes, commands,
  tool calls and their updates...), so live and replay send the same object; never a
  `notice`, a compaction's only to a client that asked (acp_bridge.host.advertised);
- `context/compaction` -> `compaction_update` to a client that asked for compaction,
  live and on replay; live only, a notice to one that asked for notices instead;
- a wrapped agent's session (`UpdateContext.wrapped`, docs/wrap.md "Replay"): its
  chunks go without our messageId, with the fields the agent sent (`sent`); its
  `silent` events (the meaning of what the agent sent, for the transcript) send
  nothing, as the editor was sent nothing for them;
- `turn/end` with any reason but `completed` -> one `agent_message_chunk` (messageId
  `t{turn}-end`, `_meta.acpBridge {turn, reason}`) saying in plain text how the turn
  ended and why (`end_notice`: interrupted, cancelled, failed, stopped at a limit or by
  a refusal). A person scrolling a replay in an editor sees no `_meta` and no prompt
  answer, so without it a turn cut off by a crash, a cancel or an error would look
  like an answer that merely stopped. The same update goes out live, before the
  prompt's answer: one mapping, so the conversation tells the same story live and on
  every later load. A completed turn sends nothing: its answer is the story.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from acp_bridge.content import expand_images
from acp_bridge.host.advertised import NEITHER, ClientSupport, compaction_updates, sent_from_log
from session.events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    CONFIG_SET,
    CONTEXT_COMPACTION,
    TITLE_CONFIG,
    TOOL_CALL,
    TOOL_PERMISSION,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    WRAPPED_UPDATE,
    Event,
    Reason,
    ToolCallBlock,
    failed_command,
    tool_calls_of,
)
from session.items import (
    AssistantChunkData,
    AssistantMessageData,
    ToolCallData,
    ToolResultData,
    TurnEndData,
)
from session.typed import typed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from acp_bridge.prices import CostMeter

SessionUpdate = dict[str, Any]
"""One `SessionNotification.update` object (the `SessionUpdate` schema definition)."""

META_KEY: Final = "acpBridge"

DEFAULT_CONTEXT_WINDOW: Final = 128_000
"""`usage_update.size` when the model does not report its window (echo, script): a
common window size, so a client's meter stays meaningful rather than absent."""

# The token fields of `usage` that occupy the context window, each token once, are
# inputTokens and outputTokens (`_assistant_message`): inputTokens is every token of the
# request, those read from or written to a cache included (the provider's prompt_tokens:
# cacheReadTokens and cacheWriteTokens are parts of it, not additions;
# docs/persistence.md, "usage"), and reasoningTokens is part of outputTokens.

# Why an interrupted turn stopped, per `cause` (session.events.INTERRUPT_CAUSES), and
# who cancelled a cancelled one, per `by` (session.events.CANCELLED_BY), in words for
# the person reading the conversation.
_INTERRUPT_WHY: Final = {
    "crash": "the agent stopped unexpectedly (crash) before it finished",
    "shutdown": "the agent was shut down before it finished",
}
_CANCEL_WHY: Final = {
    "session/cancel": "it was stopped before it finished",
    "$/cancel_request": "it was stopped before it finished",
    "session/close": "the session was closed before it finished",
    "session/request_permission": "a permission request was answered \"cancelled\"",
}


@dataclass
class UpdateState:
    """What the mapping remembers between events. Turn-local (cleared at `turn/start`),
    since no update depends on an earlier turn: any consumer that has seen a turn from
    its start maps it identically, whether it streamed it live or replays the log."""

    calls: dict[str, ToolCallBlock] = field(default_factory=dict)
    """callId -> the model's tool-call block, from the turn's `assistant/message`s."""
    announced: set[str] = field(default_factory=set)
    """callIds a `tool_call` update has been produced for."""
    window: int | None = None
    """With `UpdateContext.window_of` (a replay): the window of the turn's model."""


@dataclass(frozen=True)
class UpdateContext:
    """How to map: replay or live, the model's context window, and the mutable state.
    Use one context per stream: one per live session, a fresh one per replay. To
    change the window (a model switch), `dataclasses.replace` it: the state is shared."""

    replay: bool
    context_window: int | None = None
    state: UpdateState = field(default_factory=UpdateState)
    # A replay's: the window of the model a turn ran on, from its `turn/start.model`
    # (a live stream's turns all run on the model of `context_window`).
    window_of: Callable[[str], int | None] | None = None
    # A wrapped agent's session (`acp-bridge wrap`): its chunks carry no messageId of
    # ours, only what the agent sent (`sent`), as the editor was sent them live.
    wrapped: bool = False
    # With a price file (docs/search.md, "Prices"): the session's cumulative cost, for
    # `usage_update.cost`. The one thing that outlives a turn: it must have seen the
    # session from its start (a replay does; a live session is handed the meter its
    # load fed, acp_bridge.agent.engine.KeptOfLog).
    cost: CostMeter | None = None
    # What the client advertised in `initialize` of the updates it must ask for
    # (notices, compaction): nothing of them for a client that did not.
    support: ClientSupport = NEITHER


def updates_for(event: Event, ctx: UpdateContext) -> list[SessionUpdate]:
    """The `session/update` payloads for `event`, in order (often none)."""
    ev = typed(event)
    if ev["type"] == ASSISTANT_CHUNK:  # most events of a log: tested first
        return _assistant_chunk(ev["data"], ctx.wrapped)
    if ev["type"] == TURN_START:
        ctx.state.calls.clear()
        ctx.state.announced.clear()
        model = ev["data"].get("model")
        if ctx.window_of is not None:
            ctx.state.window = ctx.window_of(model) if isinstance(model, str) else ctx.context_window
        if ctx.cost is not None:
            ctx.cost.turn(model)
        return []
    if ev["type"] == USER_MESSAGE:
        if not ctx.replay:
            return []
        msg_id = f"t{ev['data']['turn']}-user"
        # An image the prompt held twice is stored once (acp_bridge.content.compact_images).
        return [_chunk("user_message_chunk", block, msg_id) for block in expand_images(ev["data"]["content"])]
    if ev["type"] == ASSISTANT_MESSAGE:
        return _assistant_message(ev["data"], ctx)
    if ev["type"] == TOOL_CALL:
        return _tool_call(ev["data"], ctx)
    if ev["type"] == TOOL_RESULT:
        return _tool_result(ev["data"], ctx)
    if ev["type"] == TURN_END:
        return _turn_end(ev["data"])
    if ev["type"] == TOOL_PERMISSION:
        meta = {META_KEY: {"permission": ev["data"]["permission"]}}
        return [{"sessionUpdate": "tool_call_update", "toolCallId": ev["data"]["callId"], "status": "in_progress",
                 "_meta": meta}]
    if ev["type"] == WRAPPED_UPDATE:
        update = ev["data"]["update"]
        if not sent_from_log(update, ctx.support):
            return []
        if update.get("sessionUpdate") == "tool_call" and isinstance(update.get("toolCallId"), str):
            ctx.state.announced.add(update["toolCallId"])  # the closers' result updates it
        return [update]
    if ev["type"] == CONTEXT_COMPACTION:
        usage = ev["data"].get("usage")
        if ctx.cost is not None and usage is not None:
            ctx.cost.step(usage)  # the summary call's: the next usage_update's cost holds it
        return compaction_updates(ev["data"], ctx.support, replay=ctx.replay)
    if ev["type"] == CONFIG_SET and ev["data"]["configId"] == TITLE_CONFIG:
        return [{"sessionUpdate": "session_info_update", "title": ev["data"]["value"]}]
    # step/start, step/end, other settings: nothing to show.
    return []


def interrupted_notice(cause: str) -> str:
    """The text shown for a turn that ended `interrupted {cause}`. It starts with a
    blank line: clients that run a turn's message chunks together would otherwise glue
    it to the last word the model streamed."""
    why = _INTERRUPT_WHY.get(cause, "the agent stopped before it finished")
    return f"\n\n[This turn was interrupted: {why}.]"


def end_notice(end: Reason) -> str | None:
    """The text shown for a turn that ended with reason `end` (starting with a blank
    line, as `interrupted_notice`), or None for a completed one."""
    if end["kind"] == "interrupted":
        return interrupted_notice(end["cause"])
    if end["kind"] == "cancelled":
        text = f"This turn was cancelled: {_CANCEL_WHY.get(end['by'], 'it was stopped before it finished')}."
    elif end["kind"] == "error":
        message = (end["message"] or "an error").rstrip(".")
        text = f"The command could not run: {message}." if failed_command(end) else f"This turn failed: {message}."
    elif end["kind"] == "max_tokens":
        text = "This turn stopped: the model reached its output limit."
    elif end["kind"] == "max_steps":
        limit = end["limit"]
        steps = f"{limit} steps" if type(limit) is int else "steps"
        text = f"This turn stopped: it reached the agent's limit of {steps} in one turn."
    elif end["kind"] == "refusal":
        text = "This turn stopped: the model refused to answer."
    else:  # completed
        return None
    return f"\n\n[{text}]"


def call_progress(call_id: str, content: list[Any]) -> SessionUpdate:
    """Live only: a running tool's interim content (ACP ToolCallContent)."""
    return {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "content": content}


def message_id(turn: int, step: int, kind: str) -> str:
    """The messageId of a step's text (`kind` "text") or reasoning chunks."""
    return f"t{turn}s{step}" if kind == "text" else f"t{turn}s{step}-thought"


def _chunk(kind: str, content: Any, msg_id: str) -> SessionUpdate:
    return {"sessionUpdate": kind, "content": content, "messageId": msg_id}


def _assistant_chunk(data: AssistantChunkData, wrapped: bool) -> list[SessionUpdate]:
    chunk = data["chunk"]
    kind = chunk["type"]
    if kind == "text":
        update = "agent_message_chunk"
    elif kind == "reasoning":
        update = "agent_thought_chunk"
    else:  # not in the vocabulary; show nothing rather than fail a whole replay
        return []
    shown: SessionUpdate = {"sessionUpdate": update, "content": {"type": "text", "text": chunk["text"]}}
    sent = data.get("sent")
    if isinstance(sent, dict):  # a wrapped agent's chunk, as it was sent
        return [{**shown, **sent}]
    if not wrapped:
        shown["messageId"] = message_id(data["turn"], data["step"], kind)
    return [shown]


def _assistant_message(data: AssistantMessageData, ctx: UpdateContext) -> list[SessionUpdate]:
    # Its text and reasoning were already streamed as chunks; remember its tool calls
    # so a result for a call that never started can still be titled.
    for block in tool_calls_of(data):
        ctx.state.calls.setdefault(block["id"], block)
    usage = data.get("usage")
    if not isinstance(usage, dict) or data.get("silent"):
        return []
    used = int(usage.get("inputTokens") or 0) + int(usage.get("outputTokens") or 0)
    size = usage.get("contextWindow")
    if type(size) is not int:
        window = ctx.state.window if ctx.window_of is not None else ctx.context_window
        size = window if window is not None else DEFAULT_CONTEXT_WINDOW
    meta = {META_KEY: {"turn": data["turn"], "step": data["step"], "usage": usage}}
    update: SessionUpdate = {"sessionUpdate": "usage_update", "used": used, "size": size, "_meta": meta}
    if ctx.cost is not None and ctx.cost.step(usage) is not None:
        update["cost"] = ctx.cost.amount()  # ACP's Cost: the session's total so far
    return [update]


def _tool_call(data: ToolCallData, ctx: UpdateContext) -> list[SessionUpdate]:
    if data.get("silent"):
        return []
    call_id = data["callId"]
    ctx.state.announced.add(call_id)
    call: SessionUpdate = {
        "sessionUpdate": "tool_call",
        "toolCallId": call_id,
        "title": data["title"],
        "name": data["name"],  # the tool's own (ACP ToolCall.name, v1.22)
        "kind": data["kind"],
        "status": "pending",
        "rawInput": data["arguments"],
    }
    if data.get("locations"):
        call["locations"] = data["locations"]
    if data.get("pending"):
        return [call]  # awaiting approval, or refused: in_progress only once it may run
    # The tool/call event is written just before the call runs, so it is under way.
    running = {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "status": "in_progress"}
    return [call, running]


def _turn_end(data: TurnEndData) -> list[SessionUpdate]:
    end = data["reason"]
    text = end_notice(end)
    if text is None:
        return []
    meta = {META_KEY: {"turn": data["turn"], "reason": end}}
    return [{"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text},
             "messageId": f"t{data['turn']}-end", "_meta": meta}]


def _tool_result(data: ToolResultData, ctx: UpdateContext) -> list[SessionUpdate]:
    if data.get("silent"):
        return []
    call_id = data["callId"]
    is_error = bool(data["isError"])
    raw_output: dict[str, Any] = {"content": data["content"], "isError": is_error}
    if "error" in data:
        raw_output["error"] = data["error"]
    fields: SessionUpdate = {
        "toolCallId": call_id,
        "status": "failed" if is_error else "completed",
        "content": _result_content(data, ctx.replay),
        "rawOutput": raw_output,
    }
    if "permission" in data:
        fields["_meta"] = {META_KEY: {"permission": data["permission"]}}
    if call_id in ctx.state.announced:
        return [{"sessionUpdate": "tool_call_update", **fields}]
    # Never announced: the client has no tool call to update, so create it complete.
    ctx.state.announced.add(call_id)
    block = ctx.state.calls.get(call_id)
    created: SessionUpdate = {
        "sessionUpdate": "tool_call",
        "title": block["name"] if block is not None else "tool call",
        "kind": "other",
        **fields,
    }
    if block is not None:
        created["name"] = block["name"]
    if block is not None:
        created["rawInput"] = _parse_arguments(block.get("arguments", ""))
    return [created]


def _result_content(data: ToolResultData, replay: bool) -> list[Any]:
    """ACP ToolCallContent: the tool's display if it made one, else its result blocks."""
    display = data.get("display")
    if display:
        shown = [b for b in display if not (replay and b.get("type") == "terminal")]
        if shown:
            return shown
    return [{"type": "content", "content": block} for block in data["content"]]


def _parse_arguments(text: str) -> Any:
    # The model's argument text may be invalid JSON (that is why the call failed):
    # then show it as it came.
    try:
        return orjson.loads(text) if text else {}
    except orjson.JSONDecodeError:
        return text
