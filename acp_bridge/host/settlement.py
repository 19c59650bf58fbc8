"""The `session/prompt` answer: a pure, total function of the turn's persisted
`turn/end` (DESIGN.md section 5).

Deriving the answer from the durable event, never from in-memory state, is what makes
a prompt's answer and a later `session/load` tell the same story. Success answers carry
`_meta.acpBridge = {turn, reason}` (the persisted reason verbatim); failed turns become
JSON-RPC errors: a wrapped agent's own error answer again, as it sent it, or ours, whose
`data` says which turn and step failed and whether a retry may help. A slash command
that could not run (`error` with code `command_failed`) is no failed turn: it is answered
`end_turn`, its reason in `_meta`, the editor told what was wrong by the turn's end
notice (acp_bridge.host.updates.end_notice). The answer's
`usage` (ACP's `PromptResponse.usage`, unstable in schema-v1.25.0) is the sum of the
turn's `assistant/message` usage as the log recorded it (`turn_usage`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypedDict

import orjson

from acp_bridge.rpc.protocol import AUTH_REQUIRED, INTERNAL_ERROR
from session.events import (
    ASSISTANT_MESSAGE,
    CONTEXT_COMPACTION,
    REASON_KINDS,
    TURN_END,
    Event,
    failed_command,
)
from session.typed import typed

StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]
"""ACP's `StopReason` (tests/test_acp_types.py holds it to the vendored schema)."""

# turn/end reason kind -> ACP StopReason, for the kinds that are success answers.
STOP_REASONS: Final[dict[str, StopReason]] = {
    "completed": "end_turn",
    "max_tokens": "max_tokens",
    "max_steps": "max_turn_requests",
    "refusal": "refusal",
    "cancelled": "cancelled",
    # The turn was cut short by the agent stopping (or a crash): from the client's
    # side its work ended without completing, which ACP can only say as cancelled.
    "interrupted": "cancelled",
}

TURN_FAILED: Final = "turn failed: "  # the message of an error answer starts so

# ACP's `Usage` member -> ours (session.events.Usage), both ways: a wrapped agent's usage
# is recorded in ours (acp_bridge.wrap.record), a turn's is answered in ACP's.
USAGE_FIELDS: Final = (("inputTokens", "inputTokens"), ("outputTokens", "outputTokens"),
                       ("cachedReadTokens", "cacheReadTokens"), ("cachedWriteTokens", "cacheWriteTokens"),
                       ("thoughtTokens", "reasoningTokens"))
# The members of ours that take room in the context: `totalTokens`, as `usage_update.used`
# counts them (acp_bridge.host.updates). Reasoning is inside the output tokens.
_TOTAL_FIELDS: Final = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")


class PromptAnswer(TypedDict):
    """A `PromptResponse` result, as settled (`answer_of` adds the turn's `usage`)."""

    stopReason: StopReason
    _meta: dict[str, Any]


class TurnErrorData(TypedDict):
    turn: int
    step: int
    code: str | None
    retryable: bool | None


@dataclass(frozen=True)
class TurnFailed:
    """A JSON-RPC error answer to `session/prompt`: the error object as it goes out
    (`code`, `message`, and `data` if it has one)."""

    error: dict[str, Any]

    @property
    def code(self) -> int:
        code: int = self.error["code"]
        return code

    @property
    def message(self) -> str:
        message: str = self.error["message"]
        return message


Settlement = PromptAnswer | TurnFailed


def settle(turn_end: Event) -> Settlement:
    """The answer to the `session/prompt` whose turn ended with `turn_end`.

    An `error` that holds the wrapped agent's own error answer (`agentError`) is that
    error again, as the agent sent it (acp_bridge.wrap.record): the editor is answered
    what the agent said, and the log holds it. Any other `error` is ours: -32000 for
    `auth`, else -32603 `turn failed: ...`, with `data {turn, step, code, retryable}`.

    Raises ValueError for anything that is not a `turn/end` with a known reason kind:
    that is a programming error, since the log's invariants admit no other kind.
    """
    end = typed(turn_end)
    if end["type"] != TURN_END:
        raise ValueError(f"settle() needs a {TURN_END} event, got {end['type']!r}")
    turn = end["data"]["turn"]
    reason = end["data"]["reason"]
    if reason.get("kind") not in REASON_KINDS:  # held by the invariants: no such log is read
        raise ValueError(f"turn {turn}: unknown turn/end reason kind {reason.get('kind')!r}")
    if reason["kind"] == "error" and not failed_command(reason):
        if "agentError" in reason:
            # A copy (JSON in, JSON out): the answer never aliases the event.
            return TurnFailed(orjson.loads(orjson.dumps(reason["agentError"])))
        data: TurnErrorData = {
            "turn": turn,
            "step": reason["step"],
            "code": reason.get("code"),
            "retryable": reason.get("retryable"),
        }
        if reason.get("code") == "auth":
            code, message = AUTH_REQUIRED, f"authentication required: {reason['message']}"
        else:
            code, message = INTERNAL_ERROR, f"{TURN_FAILED}{reason['message']}"
        return TurnFailed({"code": code, "message": message, "data": dict(data)})
    stop = "end_turn" if reason["kind"] == "error" else STOP_REASONS[reason["kind"]]  # a command's answer
    return {"stopReason": stop, "_meta": {"acpBridge": {"turn": turn, "reason": dict(reason)}}}


def turn_usage(events: Iterable[Event], turn: int) -> dict[str, int] | None:
    """The `usage` of the prompt answer of `turn`: the sum of its `assistant/message`
    usage in `events` (the log's, as it recorded them), and of its compactions' summary
    calls, in ACP's `Usage` members; None if the turn recorded none (`echo`; an agent
    that reports none)."""
    totals: dict[str, int] = {}
    for event in events:
        ev = typed(event)
        if ev["type"] not in (ASSISTANT_MESSAGE, CONTEXT_COMPACTION) or ev["data"]["turn"] != turn:
            continue
        usage = ev["data"].get("usage")
        if not isinstance(usage, dict):
            continue
        for name, count in usage.items():
            if type(count) is int and name != "contextWindow":
                totals[name] = totals.get(name, 0) + count
    if not totals:
        return None
    answer = {"totalTokens": sum(totals.get(name, 0) for name in _TOTAL_FIELDS)}
    for theirs, ours in USAGE_FIELDS:
        if ours in totals or ours in ("inputTokens", "outputTokens"):
            answer[theirs] = totals.get(ours, 0)
    return answer
