"""Settlement (DESIGN.md section 5): every turn/end reason kind -> its exact answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from acp_bridge.errors import TurnFailedError
from acp_bridge.host.engine import TurnEnd
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.host.prompts import answer_of
from acp_bridge.host.settlement import PromptAnswer, Settlement, StopReason, TurnFailed, settle
from session import Event
from session.events import REASON_KINDS, Reason, reason
from tests.support.acp_schema import validate_def


def turn_end(turn: int, why: Mapping[str, Any]) -> Event:
    return {"type": "turn/end", "seq": 9, "time": 0, "data": {"turn": turn, "reason": dict(why)}}


def success(turn: int, stop: StopReason, why: dict[str, Any]) -> PromptAnswer:
    return {"stopReason": stop, "_meta": {"acpBridge": {"turn": turn, "reason": why}}}


def failure(code: int, message: str, turn: int, step: int, err: str | None,
            retryable: bool | None) -> TurnFailed:
    return TurnFailed({"code": code, "message": message,
                       "data": {"turn": turn, "step": step, "code": err, "retryable": retryable}})


CASES: list[tuple[str, Reason, Settlement]] = [
    ("completed", reason("completed"), success(3, "end_turn", {"kind": "completed"})),
    ("max_tokens", reason("max_tokens"), success(3, "max_tokens", {"kind": "max_tokens"})),
    ("max_steps", reason("max_steps", limit=50),
     success(3, "max_turn_requests", {"kind": "max_steps", "limit": 50})),
    ("refusal", reason("refusal"), success(3, "refusal", {"kind": "refusal"})),
    ("cancelled", reason("cancelled", by="session/cancel"),
     success(3, "cancelled", {"kind": "cancelled", "by": "session/cancel"})),
    ("cancelled by $/cancel_request", reason("cancelled", by="$/cancel_request"),
     success(3, "cancelled", {"kind": "cancelled", "by": "$/cancel_request"})),
    # A wrapped agent that had the cancel and answered a stop reason of its own (issue 33):
    # the answer is `cancelled`, its own kept beside in the reason.
    ("cancelled, the agent said end_turn", reason("cancelled", by="session/close", agentStopReason="end_turn"),
     success(3, "cancelled", {"kind": "cancelled", "by": "session/close", "agentStopReason": "end_turn"})),
    ("interrupted crash", reason("interrupted", cause="crash"),
     success(3, "cancelled", {"kind": "interrupted", "cause": "crash"})),
    ("interrupted shutdown", reason("interrupted", cause="shutdown"),
     success(3, "cancelled", {"kind": "interrupted", "cause": "shutdown"})),
    ("error auth", reason("error", step=1, message="bad key", code="auth", retryable=False),
     failure(-32000, "authentication required: bad key", 3, 1, "auth", False)),
    ("error full", reason("error", step=2, message="rate limited", code="rate_limit", retryable=True),
     failure(-32603, "turn failed: rate limited", 3, 2, "rate_limit", True)),
    ("error bare", reason("error", step=0, message="boom"),
     failure(-32603, "turn failed: boom", 3, 0, None, None)),
    # A wrapped agent's own error answer: that error again, whatever its code and data
    # (settlement adds nothing, not even `data`), and whatever the reason's words say.
    ("error of a wrapped agent", reason("error", step=1, message="Internal error", code="auth",
                                        agentError={"code": -32603, "message": "Internal error",
                                                    "data": "no key: set FOO_API_KEY"}),
     TurnFailed({"code": -32603, "message": "Internal error", "data": "no key: set FOO_API_KEY"})),
    ("error of a wrapped agent, no data", reason("error", step=2, message="x", code="not_found",
                                                 agentError={"message": "x", "code": -32002}),
     TurnFailed({"message": "x", "code": -32002})),
    ("error of a wrapped agent, data null", reason("error", step=1, message="y", code="cancelled",
                                                   agentError={"code": -32800, "message": "y", "data": None}),
     TurnFailed({"code": -32800, "message": "y", "data": None})),
]


@pytest.mark.parametrize(("name", "why", "expected"), CASES, ids=[c[0] for c in CASES])
def test_settle(name: str, why: Reason, expected: Settlement) -> None:
    answer = settle(turn_end(3, why))
    assert answer == expected
    if isinstance(answer, TurnFailed):
        # As the host answers it: answer_of raises TurnFailedError, which becomes this
        # error object on the wire, the settled one, member for member, in its order.
        with pytest.raises(TurnFailedError) as raised:
            answer_of(TurnEnd(turn_end(3, why)))
        error = to_rpc_error(raised.value).to_json()
        assert list(error.items()) == list(answer.error.items())
        validate_def("Error", error)
    else:
        validate_def("PromptResponse", answer)


def test_total_over_reason_kinds() -> None:
    covered = {c[1]["kind"] for c in CASES}
    assert covered == set(REASON_KINDS)


def test_answer_does_not_alias_the_event() -> None:
    event = turn_end(1, reason("max_steps", limit=5))
    answer = settle(event)
    assert not isinstance(answer, TurnFailed)
    answer["_meta"]["acpBridge"]["reason"]["limit"] = 6
    assert event["data"]["reason"]["limit"] == 5
    failed = turn_end(1, reason("error", step=1, message="m", agentError={"code": 1, "message": "m", "data": {"a": []}}))
    error = settle(failed)
    assert isinstance(error, TurnFailed)
    error.error["data"]["a"].append(1)
    assert failed["data"]["reason"]["agentError"] == {"code": 1, "message": "m", "data": {"a": []}}


@pytest.mark.parametrize("why", [{"kind": "exploded"}, {}, {"kind": None}])
def test_unknown_kind_is_a_programming_error(why: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="reason kind"):
        settle(turn_end(1, why))


def test_only_turn_end_settles() -> None:
    with pytest.raises(ValueError, match="turn/end"):
        settle({"type": "step/end", "seq": 0, "time": 0, "data": {"turn": 1, "step": 1}})
