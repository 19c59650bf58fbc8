"""The ACP params the host and the engines act on, typed once (acp_bridge.host.params),
agree with the vendored schema's definitions of the same name and with the params
checks (`SPECS`): the same fields, each required or not alike; and the prompt's answer
(acp_bridge.host.settlement) says only what ACP's `PromptResponse` and `StopReason` do.
"""

from __future__ import annotations

from typing import Any, NotRequired, get_args, get_origin, get_type_hints

import pytest

from acp_bridge.errors import InvalidParamsError
from acp_bridge.host import params, settlement
from acp_bridge.host.params import (
    SPECS,
    CancelNotification,
    LoadSessionRequest,
    NewSessionRequest,
    PromptRequest,
    ResumeSessionRequest,
    SetSessionConfigOptionRequest,
    SetSessionModeRequest,
    checked,
)
from tests.support.acp_schema import defs

# TypedDict, its method (params.SPECS and `checked`)
TYPED: list[tuple[type, str]] = [
    (NewSessionRequest, "session/new"),
    (LoadSessionRequest, "session/load"),
    (ResumeSessionRequest, "session/resume"),
    (PromptRequest, "session/prompt"),
    (CancelNotification, "session/cancel"),
    (SetSessionModeRequest, "session/set_mode"),
    (SetSessionConfigOptionRequest, "session/set_config_option"),
]


def fields(typed: type) -> dict[str, bool]:
    """name -> required, of a TypedDict."""
    hints = get_type_hints(typed, vars(params), include_extras=True)
    return {name: get_origin(hint) is not NotRequired for name, hint in hints.items()}


def schema_fields(definition: dict[str, Any]) -> dict[str, bool]:
    """name -> required, of a schema object definition: its own members and those every
    one of its `anyOf` branches has (`SetSessionConfigOptionRequest.value`)."""
    out = {name: name in definition.get("required", ()) for name in definition.get("properties", {})}
    branches = definition.get("anyOf", [])
    for branch in branches:
        for name in branch.get("properties", {}):
            everywhere = all(name in b.get("required", ()) for b in branches)
            out[name] = out.get(name, False) or everywhere
    return out


@pytest.mark.parametrize(("typed", "method"), TYPED, ids=[t.__name__ for t, _ in TYPED])
def test_a_request_type_is_its_schema_definition(typed: type, method: str) -> None:
    assert fields(typed) == schema_fields(defs()[typed.__name__])


@pytest.mark.parametrize(("typed", "method"), TYPED, ids=[t.__name__ for t, _ in TYPED])
def test_a_request_type_is_what_its_check_checks(typed: type, method: str) -> None:
    declared = fields(typed)
    spec = {name: required for name, (_, required) in SPECS[method].items()}
    assert {name: declared[name] for name in spec} == spec
    # `_meta` is checked for every method (check_params); `type` goes with the value.
    assert set(declared) - set(spec) <= {"_meta", "type"}


def test_checked_types_what_the_check_passed() -> None:
    request = checked("session/cancel", {"sessionId": "s1", "extra": 1})
    assert request["sessionId"] == "s1"
    with pytest.raises(InvalidParamsError):
        checked("session/set_mode", {"sessionId": "s1"})


def test_the_stop_reasons_are_acps() -> None:
    consts = {branch["const"] for branch in defs()["StopReason"]["oneOf"]}
    assert set(get_args(settlement.StopReason)) == consts
    assert set(settlement.STOP_REASONS.values()) <= consts


def test_the_settled_answer_is_a_prompt_response() -> None:
    response = schema_fields(defs()["PromptResponse"])
    answer = fields(settlement.PromptAnswer)
    assert set(answer) <= set(response)
    assert all(answer[name] for name, required in response.items() if required)
