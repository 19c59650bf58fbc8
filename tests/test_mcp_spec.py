"""The SDK-free half of MCP support (acp_bridge/tools/mcp_spec.py): the names tools are
offered under, a `tools/call` result as ACP content, held to the vendored ACP schema;
and the params check of `mcpServers` held to the schema's `McpServer`."""

from __future__ import annotations

import re
from typing import Any

import pytest

from acp_bridge.errors import InvalidParamsError
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.host.params import check_params
from acp_bridge.tools import permissions
from acp_bridge.tools.mcp_spec import (
    McpServerSpec,
    acp_block,
    redact,
    server_prefixes,
    tool_name,
    tool_outcome,
)
from tests.support.acp_schema import validate_def

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what model APIs take as a function name
BUILT_IN = ("read_file", "write_file", "edit_file", "run_command", "list_dir")


def test_prefixes_are_distinct_and_never_hold_the_separator() -> None:
    assert server_prefixes(["time", "a b", "a_b", "x__y", "é"]) == ["time", "a_b", "a_b2", "x_y", "_"]


@pytest.mark.parametrize(("server", "tool"), [("time", "get_current_time"), ("my server", "do/it now"),
                                              ("s" * 80, "t" * 80), ("git", "git__status")])
def test_tool_names_fit_model_apis_and_cannot_be_built_in(server: str, tool: str) -> None:
    (prefix,) = server_prefixes([server])
    name = tool_name(prefix, tool)
    assert NAME.match(name) and name not in BUILT_IN
    assert name.startswith(prefix + "__")


def test_long_names_stay_distinct() -> None:
    (prefix,) = server_prefixes(["s"])
    a, b = tool_name(prefix, "x" * 70 + "a"), tool_name(prefix, "x" * 70 + "b")
    assert a != b and len(a) == len(b) == 64


def test_spec_from_acp_keeps_its_secrets_out_of_its_repr() -> None:
    spec = McpServerSpec.from_acp({"name": "n", "command": "/bin/x", "args": ["-v"],
                                   "env": [{"name": "A", "value": "s3cret"}]})
    assert spec == McpServerSpec("n", "/bin/x", ("-v",), (("A", "s3cret"),))
    web = McpServerSpec.from_acp(HTTP)
    assert (web.transport, web.url, web.headers) == ("http", HTTP["url"], (("Authorization", "Bearer x"),))
    assert "s3cret" not in repr(spec) and "Bearer" not in repr(web)
    assert redact("failed at https://u:pw@h/p?k=v with Bearer x", McpServerSpec.from_acp(
        {**HTTP, "url": "https://u:pw@h/p?k=v"})) == "failed at https://h/p with ***"


MCP_RESULT: dict[str, Any] = {"content": [
    {"type": "text", "text": "hi", "annotations": {"audience": ["user"], "priority": 0.5, "extra": 1}},
    {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
    {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
    {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt", "icons": [{"src": "x"}], "size": 3},
    {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAE=", "mimeType": "application/x"}},
    {"type": "hologram", "data": "?"},
]}


def test_a_result_becomes_acp_content_that_the_schema_accepts() -> None:
    outcome = tool_outcome("srv", "t", MCP_RESULT)
    assert not outcome.is_error and outcome.error is None
    kinds = [b["type"] for b in outcome.content]
    assert kinds == ["text", "image", "audio", "resource_link", "resource", "text"]
    assert outcome.content[0]["annotations"] == {"audience": ["user"], "priority": 0.5}
    assert "icons" not in outcome.content[3]
    assert outcome.content[-1]["text"] == "[hologram content from srv not shown]"
    for block in outcome.content:
        validate_def("ContentBlock", block)
    # As the client is shown them (agent/updates.py wraps each block).
    validate_def("SessionNotification", {"sessionId": "s", "update": {
        "sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed",
        "content": [{"type": "content", "content": b} for b in outcome.content]}})


def test_structured_content_alone_is_shown_as_json_and_errors_say_something() -> None:
    assert tool_outcome("s", "t", {"content": [], "structuredContent": {"a": 1}}).content == [
        {"type": "text", "text": '{"a":1}'}]
    failed = tool_outcome("s", "t", {"content": [], "isError": True})
    assert failed.is_error and failed.content == [{"type": "text", "text": "t failed (MCP server 's' gave no reason)"}]
    assert acp_block({"type": "nope"}) is None


STDIO = {"name": "time", "command": "/usr/bin/mcp-server-time", "args": [], "env": [{"name": "TZ", "value": "UTC"}]}


HTTP = {"type": "http", "name": "web", "url": "https://example.invalid/mcp",
        "headers": [{"name": "Authorization", "value": "Bearer x"}]}


@pytest.mark.parametrize("server", [STDIO, {**STDIO, "_meta": {"x": 1}}, {**STDIO, "command": "uvx"}, HTTP,
                                    {**HTTP, "type": "sse", "url": "http://127.0.0.1:1/sse", "headers": []}])
def test_what_the_schema_accepts_the_params_check_accepts(server: dict[str, Any]) -> None:
    validate_def("McpServer", server)
    check_params("session/new", {"cwd": "/w", "mcpServers": [server]})
    check_params("session/load", {"sessionId": "s", "cwd": "/w", "mcpServers": [server]})
    check_params("session/resume", {"sessionId": "s", "cwd": "/w", "mcpServers": [server]})


@pytest.mark.parametrize("server", [
    {"name": "x", "command": "/x", "args": []},  # env is required
    {"name": "x", "command": "/x", "args": "-v", "env": []},
    {"command": "/x", "args": [], "env": []},
    {"type": "http", "name": "web", "url": "https://example.invalid/mcp"},  # headers are required
    {"type": "sse", "name": "web", "headers": []},
])
def test_what_the_schema_refuses_the_params_check_refuses(server: dict[str, Any]) -> None:
    with pytest.raises(Exception):  # noqa: B017  (the schema validator's own error type)
        validate_def("McpServer", server)
    with pytest.raises(InvalidParamsError) as caught:
        check_params("session/new", {"cwd": "/w", "mcpServers": [server]})
    assert to_rpc_error(caught.value).code == -32602


@pytest.mark.parametrize(("mode", "fresh", "always"), [("ask", "ask", "allow"), ("accept_edits", "ask", "allow"),
                                                      ("read_only", "deny", "deny")])
def test_mcp_tools_ask_like_commands(mode: str, fresh: str, always: str) -> None:
    # kind "other": what an MCP tool does is unknown, so it is never run unasked.
    rule = permissions.always_rule("t__x", "other", {"command": "ls"})  # not a command: the tool's name
    assert rule == ("t__x", None)
    assert permissions.decide(mode, "other", rule, set()) == fresh
    assert permissions.decide(mode, "other", rule, {rule}) == always
    assert permissions.decide(mode, "read", ("read_file", None), set()) == "allow"
    assert permissions.decide(mode, "edit", ("write_file", None), set()) == ("allow" if mode == "accept_edits" else fresh)
