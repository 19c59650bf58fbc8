"""A wrapped agent's answer to a prompt, read as the end of its turn (docs/wrap.md).

Pure: what `TurnRecorder` (acp_bridge/wrap/record.py) closes a turn with, made from
what the agent answered. A PromptResponse gives the `turn/end` reason (its ACP
StopReason, read backwards) and the turn's usage (ACP's `usage`, or gemini-cli's
`_meta.quota`); a JSON-RPC error answer gives an `error` reason that keeps the error
whole for settlement (acp_bridge.host.settlement) and names it in our words. A turn's
usage may also come in its updates' `_meta.usage`, summed (`added_usage`).
"""

from __future__ import annotations

from typing import Any, Final

from acp_bridge.host.settlement import TURN_FAILED, USAGE_FIELDS
from acp_bridge.rpc.protocol import error_object
from session.events import Reason, ReasonKind, Usage, reason

__all__ = ["OTHER_ERROR", "acp_usage", "added_usage", "answer_end", "error_end", "quota_usage"]

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


def answer_end(result: dict[str, Any], step: int) -> tuple[Reason, Usage | None]:
    """The reason and the usage of the wrapped agent's PromptResponse `result`, for a
    turn of `step` steps so far: an answer that is not an ACP stop reason is an error
    (the turn cannot be said to have succeeded)."""
    stop = result.get("stopReason")
    known = _STOP_REASONS.get(stop) if isinstance(stop, str) else None
    usage = acp_usage(result.get("usage")) or quota_usage(result.get("_meta"))
    if known is None:
        return reason("error", step=step, code="invalid_answer",
                      message=f"the wrapped agent answered an unknown stopReason {stop!r}"), usage
    kind, fields = known
    return reason(kind, **fields), usage


def error_end(error: dict[str, Any], step: int) -> Reason:
    """The reason of the wrapped agent's JSON-RPC error answer to the prompt, for a turn
    of `step` steps so far. The reason keeps it whole (`agentError`: settlement answers
    the editor with it again, as it came) and, for everything else that reads a reason,
    its words: `code` (`data.code` if a string, else a word for the JSON-RPC code),
    `message`, `retryable`."""
    sent = error_object(error)
    data = sent.get("data")
    data = data if isinstance(data, dict) else {}
    code = data.get("code")
    if not isinstance(code, str):
        code = _ERROR_WORDS.get(sent["code"], OTHER_ERROR)
    # An agent that settles as we do (a wrapped acp-bridge) starts its message so:
    # the reason's message is what failed, as our own agent records it.
    text = sent["message"].removeprefix(TURN_FAILED) or f"the wrapped agent failed ({sent['code']})"
    fields: dict[str, Any] = {"step": step, "code": code, "message": text}
    if isinstance(data.get("retryable"), bool):
        fields["retryable"] = data["retryable"]
    fields["agentError"] = sent
    return reason("error", **fields)


def added_usage(total: Usage | None, meta: Any) -> Usage | None:
    """`total` (the usage of a turn's updates so far) with the `usage` of an update's
    `_meta` added, count by count; `total` as it was if that holds none."""
    usage = acp_usage(meta.get("usage")) if isinstance(meta, dict) else None
    if usage is None:
        return total
    summed: dict[str, Any] = {**(total or {})}
    for name, value in usage.items():
        summed[name] = summed.get(name, 0) + value
    return summed  # type: ignore[return-value]


def quota_usage(meta: Any) -> Usage | None:
    """gemini-cli's count of the turn's tokens in its prompt answer's `_meta` (`quota.
    token_count: {input_tokens, output_tokens}`: it sends no ACP `usage`), or None."""
    quota = meta.get("quota") if isinstance(meta, dict) else None
    count = quota.get("token_count") if isinstance(quota, dict) else None
    if not isinstance(count, dict):
        return None
    return acp_usage({"inputTokens": count.get("input_tokens"), "outputTokens": count.get("output_tokens")})


def acp_usage(value: Any) -> Usage | None:
    """ACP's Usage (`inputTokens`, `outputTokens`, `cachedReadTokens`, ...) as ours, or
    None if `value` holds none of its counts."""
    if not isinstance(value, dict):
        return None
    usage: dict[str, int] = {}
    for theirs, ours in USAGE_FIELDS:
        count = value.get(theirs)
        if type(count) is int and count >= 0:
            usage[ours] = count
    if not usage:
        return None
    usage.setdefault("inputTokens", 0)
    usage.setdefault("outputTokens", 0)
    return usage  # type: ignore[return-value]
