"""The schema helper itself: the method table read from x-method / x-side, and what
validate_agent_message accepts and refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.acp_schema import (
    MethodDefs,
    RequestId,
    SchemaViolation,
    defs,
    extended_by_unstable,
    method_table,
    schema_path,
    validate_agent_message,
)


def test_unstable_schema_is_the_same_release() -> None:
    """The unstable file extends the stable one: what we check against both."""
    assert extended_by_unstable("PromptResponse") and "usage" in defs(unstable=True)["PromptResponse"]["properties"]
    assert "usage" not in defs()["PromptResponse"]["properties"]
    assert not extended_by_unstable("SessionNotification")
    assert method_table(unstable=True)["session/fork"].result == "ForkSessionResponse"
    assert "session/fork" not in method_table()


@pytest.mark.parametrize("unstable", [False, True], ids=["stable", "unstable"])
def test_meta_files_name_the_annotated_methods(unstable: bool) -> None:
    """meta.json and meta.unstable.json (one of them rebuilt, SOURCE.txt) list, side by side,
    exactly the methods the schema's `x-method` / `x-side` annotations give."""
    meta_file = schema_path(unstable=unstable).with_name("meta.unstable.json" if unstable else "meta.json")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    assert meta["version"] == 1
    sides = {"agent": "agentMethods", "client": "clientMethods", "protocol": "protocolMethods"}
    annotated: dict[str, set[str]] = {key: set() for key in sides.values()}
    for definition in defs(unstable=unstable).values():
        if "x-method" in definition:
            annotated[sides[definition["x-side"]]].add(definition["x-method"])
    assert {key: set(meta[key].values()) for key in sides.values()} == annotated
    assert set().union(*annotated.values()) == set(method_table(unstable=unstable))


def test_vendored_release_is_1_25() -> None:
    """What v1.25 made stable is in the stable file; what it left unstable is not."""
    stable, unstable = defs(), defs(unstable=True)
    assert "name" in stable["ToolCall"]["properties"] and "name" in stable["ToolCallUpdate"]["properties"]
    assert {"notices", "compaction"} <= set(stable["ClientSessionCapabilities"]["properties"])
    assert {"Notice", "CompactionUpdate", "CompactionSummaryChunk"} <= set(stable)
    assert "SubagentUpdate" in unstable and "SubagentUpdate" not in stable
    # 1.24 made MCP-over-ACP request-scoped: mcp/connect is gone, mcp/message both ways.
    assert "mcp/connect" not in method_table(unstable=True)
    assert method_table(unstable=True)["mcp/message"].result == "MessageMcpResponse"


def test_method_table_from_annotations() -> None:
    table = method_table()
    assert table["session/prompt"] == MethodDefs(
        "session/prompt", "agent", "PromptRequest", "PromptResponse"
    )
    assert table["initialize"] == MethodDefs("initialize", "agent", "InitializeRequest", "InitializeResponse")
    assert table["session/update"] == MethodDefs("session/update", "client", "SessionNotification")
    assert table["session/cancel"] == MethodDefs("session/cancel", "agent", "CancelNotification")
    assert table["$/cancel_request"].side == "protocol"
    assert table["session/request_permission"].params == "RequestPermissionRequest"
    assert table["fs/read_text_file"].result == "ReadTextFileResponse"
    assert table["terminal/create"] == MethodDefs(
        "terminal/create", "client", "CreateTerminalRequest", "CreateTerminalResponse"
    )
    # Every method the design advertises is in the schema (docs/protocol.md).
    for method in ("authenticate", "session/new", "session/load", "session/resume",
                   "session/list", "session/close", "session/delete", "session/set_mode",
                   "session/set_config_option"):
        entry = table[method]
        assert entry.side == "agent" and entry.params and entry.result, entry


def msg(**fields: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", **fields}


UPDATE = {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
                                       "content": {"type": "text", "text": "hi"}}}
PERMISSION = {
    "sessionId": "s",
    "toolCall": {"toolCallId": "c1", "title": "Edit a"},
    "options": [{"optionId": "allow_once", "name": "Allow", "kind": "allow_once"}],
}

ACCEPTED: list[tuple[str, dict[str, Any], str]] = [
    ("prompt result", msg(id=1, result={"stopReason": "end_turn"}), "PromptResponse"),
    ("new session result", msg(id="n", result={"sessionId": "s"}), "NewSessionResponse"),
    ("error", msg(id=1, error={"code": -32603, "message": "turn failed: x", "data": {}}), "error"),
    ("parse error", msg(id=None, error={"code": -32700, "message": "Parse error"}), "error"),
    ("update", msg(method="session/update", params=UPDATE), "SessionNotification"),
    ("permission", msg(id=0, method="session/request_permission", params=PERMISSION),
     "RequestPermissionRequest"),
    ("read", msg(id=1, method="fs/read_text_file", params={"sessionId": "s", "path": "/a"}),
     "ReadTextFileRequest"),
    ("terminal", msg(id=2, method="terminal/create", params={"sessionId": "s", "command": "ls"}),
     "CreateTerminalRequest"),
    ("cancel own request", msg(method="$/cancel_request", params={"requestId": 3}),
     "CancelRequestNotification"),
    ("extension", msg(id=4, method="_acp_bridge/x", params={}), "extension"),
    # Unstable in the vendored release: checked against schema.unstable.json too.
    ("prompt result with usage", msg(id=1, result={"stopReason": "end_turn", "usage": {
        "totalTokens": 7, "inputTokens": 5, "outputTokens": 2, "thoughtTokens": 1}}), "PromptResponse"),
    ("stable methods new to us", msg(id="out", result={}), "LogoutResponse"),
    ("elicitation", msg(id=6, method="elicitation/create", params={
        "sessionId": "s", "toolCallId": "c1", "mode": "form", "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}),
     "CreateElicitationRequest"),
    ("commands", msg(method="session/update", params={"sessionId": "s", "update": {
        "sessionUpdate": "available_commands_update", "availableCommands": [
            {"name": "title", "description": "Rename", "input": {"hint": "the new title"}}]}}),
     "SessionNotification"),
    # Stable since v1.22 / v1.25.
    ("tool call with its name", msg(method="session/update", params={"sessionId": "s", "update": {
        "sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read a", "name": "read_file"}}),
     "SessionNotification"),
    ("notice", msg(method="session/update", params={"sessionId": "s", "update": {
        "sessionUpdate": "notice", "severity": "warning", "title": "Restarted"}}),
     "SessionNotification"),
    ("compaction", msg(method="session/update", params={"sessionId": "s", "update": {
        "sessionUpdate": "compaction_update", "compactionId": "k1", "status": "completed"}}),
     "SessionNotification"),
]
PENDING: dict[RequestId, str] = {1: "session/prompt", "n": "session/new", "out": "logout"}


@pytest.mark.parametrize(("name", "message", "checked_as"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted(name: str, message: dict[str, Any], checked_as: str) -> None:
    assert validate_agent_message(message, PENDING) == checked_as


REFUSED: list[tuple[str, dict[str, Any]]] = [
    ("no jsonrpc", {"id": 1, "result": {"stopReason": "end_turn"}}),
    ("wrong version", {"jsonrpc": "1.0", "id": 1, "result": {"stopReason": "end_turn"}}),
    ("bool id", msg(id=True, result={})),
    ("float id", msg(id=1.5, result={})),
    ("bad stop reason", msg(id=1, result={"stopReason": "error"})),
    ("unknown id", msg(id=99, result={"stopReason": "end_turn"})),
    ("result and error", msg(id=1, result={}, error={"code": 1, "message": "x"})),
    ("error code not int", msg(id=1, error={"code": "x", "message": "x"})),
    ("error without message", msg(id=1, error={"code": -32603})),
    ("bad update", msg(method="session/update", params={"sessionId": "s", "update": {}})),
    ("agent-side method sent by agent", msg(id=5, method="session/prompt", params={})),
    ("notification sent as request", msg(id=5, method="session/update", params=UPDATE)),
    ("request sent as notification", msg(method="fs/read_text_file",
                                         params={"sessionId": "s", "path": "/a"})),
    ("unknown method", msg(method="nope", params={})),
    ("stray member", msg(method="session/update", params=UPDATE, extra=1)),
    # A shape only the unstable schema defines is still checked.
    ("usage without its totals", msg(id=1, result={"stopReason": "end_turn", "usage": {"inputTokens": 5}})),
    ("usage of negative tokens", msg(id=1, result={"stopReason": "end_turn", "usage": {
        "totalTokens": -1, "inputTokens": 0, "outputTokens": 0}})),
    ("tool call name not a string", msg(method="session/update", params={"sessionId": "s", "update": {
        "sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read a", "name": 7}})),
    ("notice without a title", msg(method="session/update", params={"sessionId": "s", "update": {
        "sessionUpdate": "notice", "severity": "warning"}})),
    ("elicitation without a scope", msg(id=6, method="elicitation/create", params={
        "mode": "form", "message": "?", "requestedSchema": {"type": "object"}})),
]


@pytest.mark.parametrize(("name", "message"), REFUSED, ids=[r[0] for r in REFUSED])
def test_refused(name: str, message: dict[str, Any]) -> None:
    with pytest.raises(SchemaViolation):
        validate_agent_message(message, PENDING)
