"""Whether a value read back is a `turn/end` reason (session.events, `Reason`): the
run-time check of its kind and that kind's fields (`reason_problem`, which the
invariant checker applies to every `turn/end`), and a reason typed from outside a
checked log (`checked_reason`). Apart from the vocabulary, which nearly everything
imports: only the invariant checker and the readers of a reason from outside a
checked log ask this. Pure.
"""

from __future__ import annotations

from typing import cast

from session.events import CANCELLED_BY, INTERRUPT_CAUSES, JSON, REASON_FIELDS, Reason


def reason_problem(value: JSON) -> str | None:
    """Why `value` is not a valid reason, or None. Used by the invariant checker."""
    if not isinstance(value, dict):
        return "reason is not an object"
    kind = value.get("kind")
    if kind not in REASON_FIELDS:
        return f"unknown reason kind {kind!r}"
    required, optional = REASON_FIELDS[kind]
    keys = set(value) - {"kind"}
    if required - keys:
        return f"reason {kind!r} lacks {sorted(required - keys)}"
    if keys - required - optional:
        return f"reason {kind!r} has unexpected {sorted(keys - required - optional)}"
    if kind == "cancelled" and value["by"] not in CANCELLED_BY:
        return f"cancelled by {value['by']!r} is not one of {list(CANCELLED_BY)}"
    if kind == "cancelled" and "forced" in value and value["forced"] is not True:
        return f"cancelled forced {value['forced']!r} is not true (absent when the agent complied)"
    if kind == "cancelled" and "agentStopReason" in value and not (
            isinstance(value["agentStopReason"], str) and value["agentStopReason"]):
        return f"cancelled agentStopReason {value['agentStopReason']!r} is not a non-empty string"
    if kind == "interrupted" and value["cause"] not in INTERRUPT_CAUSES:
        return f"interrupted cause {value['cause']!r} is not one of {list(INTERRUPT_CAUSES)}"
    if "agentError" in value:
        return _agent_error_problem(value["agentError"])
    return None


def checked_reason(value: JSON) -> Reason | None:
    """`value` typed as the reason it is, or None if it is none (`reason_problem`): for
    a reason read from outside a checked log (the search index keeps those of logs the
    invariants refused)."""
    return cast("Reason", value) if reason_problem(value) is None else None


def _agent_error_problem(error: JSON) -> str | None:
    """Why `error` cannot be answered again as a JSON-RPC error object, or None."""
    if not isinstance(error, dict):
        return "agentError is not an object"
    if type(error.get("code")) is not int or not isinstance(error.get("message"), str):
        return "agentError needs an integer code and a string message"
    if set(error) - {"code", "message", "data"}:
        return f"agentError has unexpected {sorted(set(error) - {'code', 'message', 'data'})}"
    return None
