"""The `(event type, data)` items that producers hand to the log: one constructor per
event type, its data typed by that type's TypedDict. Pure.

`SessionLog.extend` takes items, stamps them with seq and time and checks them against
the invariants; these constructors only build them. Each writes its keys in one fixed
order, the order the log's JSON holds them in (recorded logs and snapshots compare the
bytes), and leaves an optional field out rather than writing null. No checks here: the
chunk constructor runs once per streamed chunk, and the invariants check at append.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NotRequired, TypedDict

from session.events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    CONFIG_SET,
    CONTEXT_COMPACTION,
    JSON,
    STEP_END,
    STEP_START,
    TOOL_CALL,
    TOOL_PERMISSION,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    WRAPPED_UPDATE,
    AssistantBlock,
    EventType,
    PermissionRecord,
    Reason,
    Replaces,
    ToolError,
    Usage,
    WrappedInfo,
)

Item = tuple[EventType, Mapping[str, JSON]]
"""An event before the log stamps it: its type and its data (one of the TypedDicts below)."""

ChunkKind = Literal["text", "reasoning"]


class TurnStartData(TypedDict):
    turn: int
    trigger: dict[str, JSON]
    mode: NotRequired[str]
    model: NotRequired[str]
    thoughtLevel: NotRequired[str]  # the reasoning effort, for a model that takes one
    agent: NotRequired[str]  # `wrap --agent NAME=...`: the name of the wrapped agent that ran the turn
    native: NotRequired[JSON]  # an imported session's: what of the native record has no place (docs/import.md)


class UserMessageData(TypedDict):
    turn: int
    content: list[JSON]  # ACP ContentBlocks, as the client sent them


class StepData(TypedDict):
    """`step/start` and `step/end`."""

    turn: int
    step: int


class Chunk(TypedDict):
    type: ChunkKind
    text: str


class AssistantChunkData(TypedDict):
    turn: int
    step: int
    chunk: Chunk
    # A wrapped agent's chunk: the fields of its ACP update that `chunk` does not hold
    # (its messageId, _meta; its content when that is more than a text block), so the
    # replay sends back exactly what the editor was sent (docs/wrap.md, "Recording").
    sent: NotRequired[dict[str, JSON]]


class AssistantMessageData(TypedDict):
    turn: int
    step: int
    content: list[AssistantBlock]
    usage: NotRequired[Usage]
    silent: NotRequired[bool]  # see ToolCallData.silent
    native: NotRequired[JSON]  # an imported session's: what of the native record has no place (docs/import.md)
    model: NotRequired[str]  # an imported step's model, where it is not its turn's


class ToolCallData(TypedDict):
    turn: int
    step: int
    callId: str
    name: str
    arguments: JSON  # parsed, or the model's text where it is not JSON
    title: str
    kind: str
    locations: NotRequired[list[JSON]]
    # The call does not start with this event: it waits for the client's permission
    # (a `tool/permission` lets it run) or is refused before it runs (its failed
    # `tool/result` follows). Absent: the call runs right after its `tool/call`.
    pending: NotRequired[bool]
    # A decision the agent made without asking (`by` "rule" or "mode"): who let the call
    # run, or refused it. A call the client was asked about has its answer on its
    # `tool/permission` and `tool/result` instead; a read has none (reading never asks).
    permission: NotRequired[PermissionRecord]
    # True: the editor was sent no update for this event (a wrapped agent's turn keeps
    # what it sent as `wrapped/update`s and chunks; this event is its meaning, for the
    # transcript), so a replay sends none either. Also on `assistant/message` and
    # `tool/result`.
    silent: NotRequired[bool]
    native: NotRequired[JSON]  # an imported session's: what of the native record has no place (docs/import.md)


class ToolResultData(TypedDict):
    turn: int
    step: int
    callId: str
    content: list[JSON]
    isError: bool
    error: NotRequired[ToolError]
    display: NotRequired[list[JSON]]
    permission: NotRequired[PermissionRecord]
    silent: NotRequired[bool]  # see ToolCallData.silent
    # What an MCP server asked the person during the call (`elicitation/create`) and
    # what came back, in order: [{request: {mode, message, requestedSchema | url,
    # elicitationId}, answer: {action, content?}, completed?: true}] (docs/protocol.md, "MCP servers").
    elicitations: NotRequired[list[JSON]]
    native: NotRequired[JSON]  # an imported session's: what of the native record has no place (docs/import.md)


class ToolPermissionData(TypedDict):
    """`tool/permission`: the client's answer (`permission`) lets the `pending` call
    `callId` run; written durably before it runs."""

    turn: int
    step: int
    callId: str
    permission: PermissionRecord


class TurnEndData(TypedDict):
    turn: int
    reason: Reason
    native: NotRequired[JSON]  # an imported session's: what of the native record has no place (docs/import.md)


class WrappedUpdateData(TypedDict):
    """`wrapped/update`: `update` is an ACP SessionUpdate as the wrapped agent sent it
    (without its sessionId). `turn` names the open turn; it is absent between turns."""

    update: dict[str, JSON]
    turn: NotRequired[int]


class ConfigSetData(TypedDict):
    """`config/set`: the session config option `configId` now has `value`. `turn`
    names the open turn; it is absent between turns."""

    configId: str
    value: str
    turn: NotRequired[int]
    # `wrap --agent`: the session moved to the wrapped agent `value` (configId `agent`),
    # recorded as the header records the first one: its command and its own session id.
    wrapped: NotRequired[WrappedInfo]


class CompactionData(TypedDict):
    """`context/compaction` (DESIGN.md section 2): one change of the compaction
    `compactionId` (unique in the session) of the model's context, standing in the step
    whose model call needed it. Each event is the compaction as it stands after it: its
    `status`, its `summary` so far (ACP ContentBlocks; `[]`: none yet, or none), the
    turns it `replaces`, why it failed (`error`). Once `completed`, the history before
    `replaces.toTurn + 1` is, for later model calls, the summary (session.transcript);
    the turns themselves stay in the log and in every replay."""

    turn: int
    step: int
    compactionId: str
    replaces: Replaces
    summary: list[JSON]
    status: str
    error: NotRequired[str]
    usage: NotRequired[Usage]  # the summary's own model call (our agent's)
    # A wrapped agent's `compaction_update`, as it sent it (replayed as it came: docs/wrap.md).
    sent: NotRequired[dict[str, JSON]]
    # As ToolCallData.silent: the editor was sent nothing for it (the wrapper closed a
    # compaction its agent left unfinished).
    silent: NotRequired[bool]


def turn_start(
    turn: int, *, trigger: dict[str, JSON], mode: str | None = None, model: str | None = None,
    thought_level: str | None = None, agent: str | None = None,
) -> tuple[Literal["turn/start"], TurnStartData]:
    data: TurnStartData = {"turn": turn, "trigger": trigger}
    if mode is not None:
        data["mode"] = mode
    if model is not None:
        data["model"] = model
    if thought_level is not None:
        data["thoughtLevel"] = thought_level
    if agent is not None:
        data["agent"] = agent
    return (TURN_START, data)


def user_message(turn: int, content: list[JSON]) -> tuple[Literal["user/message"], UserMessageData]:
    return (USER_MESSAGE, {"turn": turn, "content": content})


def step_start(turn: int, step: int) -> tuple[Literal["step/start"], StepData]:
    return (STEP_START, {"turn": turn, "step": step})


def step_end(turn: int, step: int) -> tuple[Literal["step/end"], StepData]:
    return (STEP_END, {"turn": turn, "step": step})


def assistant_chunk(
    turn: int, step: int, kind: ChunkKind, text: str, sent: dict[str, JSON] | None = None
) -> tuple[Literal["assistant/chunk"], AssistantChunkData]:
    """`sent` is left out when there is none."""
    if sent:
        return (ASSISTANT_CHUNK, {"turn": turn, "step": step, "chunk": {"type": kind, "text": text}, "sent": sent})
    return (ASSISTANT_CHUNK, {"turn": turn, "step": step, "chunk": {"type": kind, "text": text}})


def assistant_message(
    turn: int, step: int, content: list[AssistantBlock], usage: Usage | None = None, *, silent: bool = False
) -> tuple[Literal["assistant/message"], AssistantMessageData]:
    data: AssistantMessageData = {"turn": turn, "step": step, "content": content}
    if usage is not None:
        data["usage"] = usage
    if silent:
        data["silent"] = True
    return (ASSISTANT_MESSAGE, data)


def tool_call(
    turn: int, step: int, call_id: str, *, name: str, arguments: JSON, title: str, kind: str,
    locations: list[JSON] | None = None, pending: bool = False, silent: bool = False,
    permission: PermissionRecord | None = None,
) -> tuple[Literal["tool/call"], ToolCallData]:
    """`locations` is left out when there are none, `pending` when it is false,
    `permission` (a decision made without asking) when there is none."""
    data: ToolCallData = {"turn": turn, "step": step, "callId": call_id, "name": name,
                          "arguments": arguments, "title": title, "kind": kind}
    if locations:
        data["locations"] = locations
    if pending:
        data["pending"] = True
    if silent:
        data["silent"] = True
    if permission is not None:
        data["permission"] = permission
    return (TOOL_CALL, data)


def tool_permission(
    turn: int, step: int, call_id: str, permission: PermissionRecord
) -> tuple[Literal["tool/permission"], ToolPermissionData]:
    return (TOOL_PERMISSION, {"turn": turn, "step": step, "callId": call_id, "permission": permission})


def tool_result(
    turn: int, step: int, call_id: str, *, content: list[JSON], is_error: bool,
    error: ToolError | None = None, display: list[JSON] | None = None,
    permission: PermissionRecord | None = None, silent: bool = False, elicitations: list[JSON] | None = None,
) -> tuple[Literal["tool/result"], ToolResultData]:
    """`display` and `elicitations` are left out when there are none (an empty one says
    nothing either)."""
    data: ToolResultData = {"turn": turn, "step": step, "callId": call_id, "content": content,
                            "isError": is_error}
    if error is not None:
        data["error"] = error
    if display:
        data["display"] = display
    if permission is not None:
        data["permission"] = permission
    if silent:
        data["silent"] = True
    if elicitations:
        data["elicitations"] = elicitations
    return (TOOL_RESULT, data)


def turn_end(turn: int, reason: Reason) -> tuple[Literal["turn/end"], TurnEndData]:
    return (TURN_END, {"turn": turn, "reason": reason})


def wrapped_update(
    update: dict[str, JSON], turn: int | None = None
) -> tuple[Literal["wrapped/update"], WrappedUpdateData]:
    """Inside `turn`, or between turns (None)."""
    data: WrappedUpdateData = {"update": update}
    if turn is not None:
        data["turn"] = turn
    return (WRAPPED_UPDATE, data)


def config_set(
    config_id: str, value: str, turn: int | None = None, *, wrapped: WrappedInfo | None = None
) -> tuple[Literal["config/set"], ConfigSetData]:
    """Inside `turn` (one a failed write left open), or between turns (None)."""
    data: ConfigSetData = {"configId": config_id, "value": value}
    if turn is not None:
        data["turn"] = turn
    if wrapped is not None:
        data["wrapped"] = wrapped
    return (CONFIG_SET, data)


def context_compaction(
    turn: int, step: int, compaction_id: str, *, replaces: Replaces, summary: list[JSON], status: str,
    error: str | None = None, usage: Usage | None = None, sent: dict[str, JSON] | None = None,
    silent: bool = False,
) -> tuple[Literal["context/compaction"], CompactionData]:
    """`error`, `usage` and `sent` are left out when there are none, `silent` when it is false."""
    data: CompactionData = {"turn": turn, "step": step, "compactionId": compaction_id, "replaces": replaces,
                            "summary": summary, "status": status}
    if error is not None:
        data["error"] = error
    if usage is not None:
        data["usage"] = usage
    if sent is not None:
        data["sent"] = sent
    if silent:
        data["silent"] = True
    return (CONTEXT_COMPACTION, data)
