"""The session event vocabulary (DESIGN.md section 2).

Events are plain dicts typed as TypedDicts: they go to and from JSON many times per
turn, and a dict is what orjson reads and writes fastest. The data shape of each event
type, and its constructor, are in session.items. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, NotRequired, TypedDict, cast

SESSION_FORMAT_VERSION: Final = 0
"""Stamped into every header. Pre-release: shapes change without a bump; any stored
log at another version is refused (no migration)."""

# Event type names, fixed by the contract.
TURN_START: Final = "turn/start"
USER_MESSAGE: Final = "user/message"
STEP_START: Final = "step/start"
STEP_END: Final = "step/end"
ASSISTANT_CHUNK: Final = "assistant/chunk"
ASSISTANT_MESSAGE: Final = "assistant/message"
TOOL_CALL: Final = "tool/call"
TOOL_RESULT: Final = "tool/result"
TURN_END: Final = "turn/end"
# An addition to the contract's table (docs/persistence.md, "The event vocabulary"):
# an ACP update of a wrapped agent that no event above records, kept to be replayed.
WRAPPED_UPDATE: Final = "wrapped/update"
# Another addition: a session setting the client changed (the model, the thought
# level), recorded when it changes, so a load carries it on before any turn used it.
CONFIG_SET: Final = "config/set"
# The `config/set` of a session's title (a slash command's: acp_bridge.host.commands),
# which is no ACP config option; shown as `session_info_update`, live and on load.
TITLE_CONFIG: Final = "session/title"
# Another: the client's answer that lets a `pending` tool call run, durable before it
# runs, so a log tells a call that waited for its permission from one that may have run.
TOOL_PERMISSION: Final = "tool/permission"
# Another (DESIGN.md section 2, ACP v1.25): a compaction of the model's context, one
# change of it per event (its status, its summary so far); from a completed one on, the
# history before `replaces.toTurn + 1` is, for later model calls, its summary.
CONTEXT_COMPACTION: Final = "context/compaction"

EVENT_TYPES: Final = frozenset(
    {
        TURN_START,
        USER_MESSAGE,
        STEP_START,
        STEP_END,
        ASSISTANT_CHUNK,
        ASSISTANT_MESSAGE,
        TOOL_CALL,
        TOOL_RESULT,
        TURN_END,
        WRAPPED_UPDATE,
        CONFIG_SET,
        TOOL_PERMISSION,
        CONTEXT_COMPACTION,
    }
)

EventType = Literal[
    "turn/start",
    "user/message",
    "step/start",
    "step/end",
    "assistant/chunk",
    "assistant/message",
    "tool/call",
    "tool/result",
    "turn/end",
    "wrapped/update",
    "config/set",
    "tool/permission",
    "context/compaction",
]

# The seven turn/end reason kinds: a closed set, one total mapping per consumer.
REASON_KINDS: Final = (
    "completed",
    "max_tokens",
    "max_steps",
    "refusal",
    "cancelled",
    "error",
    "interrupted",
)
ReasonKind = Literal[
    "completed", "max_tokens", "max_steps", "refusal", "cancelled", "error", "interrupted"
]
# Each names the ACP message through which the client ended the turn; the last one is
# a permission request the client answered `cancelled`.
CANCELLED_BY: Final = ("session/cancel", "session/close", "$/cancel_request", "session/request_permission")
CancelledBy = Literal["session/cancel", "session/close", "$/cancel_request", "session/request_permission"]
INTERRUPT_CAUSES: Final = ("crash", "shutdown")
# The `error` code of a slash command's turn that could not do what it says (`/mode nope`,
# `/title` without a title): the command's answer, not a failure of the model's turn
# (docs/protocol.md, "Slash commands"; `failed_command`).
COMMAND_FAILED: Final = "command_failed"
InterruptCause = Literal["crash", "shutdown"]

# A compaction's status (ACP's CompactionStatus): `in_progress` until one of the three
# that end it. ACP leaves the set open: a wrapped agent's own status (any other string)
# is kept as it came, and does not end the compaction.
COMPACTION_ENDED: Final = frozenset({"completed", "failed", "cancelled"})

# The error code that marks a synthetic result written by crash/shutdown repair.
INTERRUPTED_CODE: Final = "interrupted"

JSON = Any
"""A JSON value as orjson reads it; the ACP blocks inside events are kept verbatim."""


class Event(TypedDict):
    type: EventType
    seq: int
    time: int
    data: dict[str, JSON]


class WrappedInfo(TypedDict):
    """The header of a session recorded by `acp-bridge wrap`: the wrapped agent's command,
    its own session id, what it said about itself in `initialize` (`agentInfo`), and
    `seeded`: the agent's session had the conversation only by the wrapper's seed (an
    emulated fork), so a fresh one is seeded again."""

    command: list[str]
    sessionId: NotRequired[str]
    agentInfo: NotRequired[dict[str, JSON]]
    seeded: NotRequired[bool]


class ForkedFrom(TypedDict):
    """The header of a fork (`SessionStore.fork`): the session it was copied from and
    the last turn of it the fork holds (0: none, only what came before turn 1)."""

    sessionId: str
    turn: int


class ParentInfo(TypedDict):
    """The header of a subagent's session (a child session its parent's agent announced:
    ACP's unstable `subagent_update`, recorded by `acp-bridge wrap`): the parent, one of
    ours."""

    sessionId: str


class ImportedInfo(TypedDict):
    """The header of a session imported from another agent's own transcript
    (`acp-bridge import`, docs/import.md): the agent, its version as the file says, the
    file read and the agent's own session id (the import's key)."""

    agent: str
    file: str
    sessionId: str
    version: NotRequired[str]


class Header(TypedDict):
    type: Literal["session"]
    version: int
    id: str
    createdAt: int
    cwd: str
    additionalDirectories: NotRequired[list[str]]
    title: NotRequired[str]
    wrapped: NotRequired[WrappedInfo]
    forkedFrom: NotRequired[ForkedFrom]
    parent: NotRequired[ParentInfo]
    imported: NotRequired[ImportedInfo]


class Usage(TypedDict):
    # A model call's tokens as its provider counted them. inputTokens is every token of
    # the request, cached ones included (OpenAI's prompt_tokens): cacheReadTokens and
    # cacheWriteTokens say how many of them the cache served or took, reasoningTokens
    # how many of outputTokens were reasoning. A wrapped agent's are as it reported them.
    inputTokens: int
    outputTokens: int
    cacheReadTokens: NotRequired[int]
    cacheWriteTokens: NotRequired[int]
    reasoningTokens: NotRequired[int]
    # The model's context window, where the agent reports it with the usage (a wrapped
    # agent's ACP `usage_update.size`; ours once a provider's refusal said its window),
    # so a replay shows the window the agent showed.
    contextWindow: NotRequired[int]


class Replaces(TypedDict):
    """The turns a compaction's summary stands for: every turn up to `toTurn` (the
    summarizer read those from `fromTurn` on as they were, the earlier ones through
    the summary of an earlier compaction). Empty when `fromTurn` is `toTurn + 1` (a
    wrapped agent compacted inside the first turn: nothing of our log is replaced)."""

    fromTurn: int
    toTurn: int


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class ReasoningBlock(TypedDict):
    type: Literal["reasoning"]
    text: str


class ToolCallBlock(TypedDict):
    type: Literal["tool-call"]
    id: str
    name: str
    arguments: str  # JSON text, as the model produced it


AssistantBlock = TextBlock | ReasoningBlock | ToolCallBlock


class ToolError(TypedDict):
    name: str
    code: str


class PermissionRule(TypedDict):
    """An "always allow" rule: every call of tool `name`, or only its exact `command`."""

    name: str
    command: NotRequired[str]


class PermissionRecord(TypedDict):
    """A decision about a tool call. Without `by`: the client's answer to a permission
    request (the person's, as the client asked them): `selected` (with `optionId`),
    `cancelled`, or, when it gave no usable answer, `error` (it answered with a
    JSON-RPC error: its `code` and `message`) or `invalid` (an answer that is not one
    of the options offered: `message` says what came). With `by`, a decision the agent
    made without asking, recorded on the call's `tool/call`: `by: "rule"`, an "always
    allow" answer given earlier in the session (`outcome: "selected"`, `optionId:
    "allow_always"`, `rule` which one); `by: "mode"`, the session's `mode` let it run
    (`outcome: "allowed"`: `accept_edits` and an edit) or refused it (`outcome:
    "refused"`: `read_only`)."""

    outcome: str
    optionId: NotRequired[str]
    code: NotRequired[int]
    message: NotRequired[str]
    by: NotRequired[Literal["rule", "mode"]]
    rule: NotRequired[PermissionRule]
    mode: NotRequired[str]


class AgentError(TypedDict):
    """A wrapped agent's JSON-RPC error answer to the prompt, as it sent it (its member
    order kept, members JSON-RPC does not define dropped): the `error` reason keeps it
    so that the prompt is answered, from the log, with that error again."""

    code: int
    message: str
    data: NotRequired[JSON]  # any JSON value, null included; absent: it sent none


# `turn/end.reason`: `kind` plus the fields of that kind (DESIGN.md section 2), one
# TypedDict per kind so that a reader's `if reason["kind"] == "error":` narrows to the
# fields that kind has. `REASON_FIELDS` below is the same table for `reason()` and the
# checks at run time (session.reason_checks; tests/test_typed_events.py holds the two
# equal).


class CompletedReason(TypedDict):
    kind: Literal["completed"]


class MaxTokensReason(TypedDict):
    kind: Literal["max_tokens"]


class MaxStepsReason(TypedDict):
    kind: Literal["max_steps"]
    limit: int | None  # None: a wrapped agent hit a step limit it does not name


class RefusalReason(TypedDict):
    kind: Literal["refusal"]


class CancelledReason(TypedDict):
    kind: Literal["cancelled"]
    by: CancelledBy
    # Only ever `true`: a wrapped agent did not answer the cancelled prompt within the
    # cancel grace, and `acp-bridge wrap` ended the turn itself.
    forced: NotRequired[Literal[True]]
    # A wrapped agent answered the cancelled prompt with a stop reason of its own (it had
    # finished, or did not honour the cancel): that reason, as it sent it.
    agentStopReason: NotRequired[str]


class ErrorReason(TypedDict):
    kind: Literal["error"]
    step: int
    message: str
    code: NotRequired[str]
    retryable: NotRequired[bool]
    agentError: NotRequired[AgentError]


class InterruptedReason(TypedDict):
    kind: Literal["interrupted"]
    cause: InterruptCause


Reason = (CompletedReason | MaxTokensReason | MaxStepsReason | RefusalReason | CancelledReason
          | ErrorReason | InterruptedReason)
"""`turn/end.reason`: one of the seven kinds, each with its own fields."""


def failed_command(value: object) -> bool:
    """Whether a `turn/end` reason (as the log or an index holds it) is a slash command
    that could not run (`COMMAND_FAILED`)."""
    return isinstance(value, dict) and value.get("kind") == "error" and value.get("code") == COMMAND_FAILED


def reason(kind: ReasonKind, **fields: JSON) -> Reason:
    """Build a `turn/end` reason, checking that its fields belong to its kind."""
    allowed = REASON_FIELDS[kind]
    extra = set(fields) - allowed[0] - allowed[1]
    missing = allowed[0] - set(fields)
    if extra or missing:
        raise ValueError(f"reason {kind!r}: missing {sorted(missing)}, unexpected {sorted(extra)}")
    out: dict[str, JSON] = {"kind": kind, **fields}
    return out  # type: ignore[return-value]


# kind -> (required fields, optional fields)
REASON_FIELDS: Final[dict[str, tuple[frozenset[str], frozenset[str]]]] = {
    "completed": (frozenset(), frozenset()),
    "max_tokens": (frozenset(), frozenset()),
    "max_steps": (frozenset({"limit"}), frozenset()),
    "refusal": (frozenset(), frozenset()),
    "cancelled": (frozenset({"by"}), frozenset({"forced", "agentStopReason"})),
    "error": (frozenset({"step", "message"}), frozenset({"code", "retryable", "agentError"})),
    "interrupted": (frozenset({"cause"}), frozenset()),
}


def tool_calls_of(message_data: Mapping[str, JSON]) -> list[ToolCallBlock]:
    """The tool-call blocks of an `assistant/message` event's data, in order."""
    blocks = message_data.get("content", ())
    calls = [b for b in blocks if type(b) is dict and b.get("type") == "tool-call"]
    return cast("list[ToolCallBlock]", calls)


def is_synthetic_result(data: Mapping[str, JSON]) -> bool:
    """A `tool/result` written by the interrupted-turn closers, not by a tool."""
    error = data.get("error")
    return (
        bool(data.get("isError"))
        and isinstance(error, dict)
        and error.get("code") == INTERRUPTED_CODE
    )
