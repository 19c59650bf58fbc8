"""Checking the params of incoming requests against the ACP v1 definitions.

A small declarative checker rather than a JSON Schema validator at run time: it is
fast, imports nothing, and its errors name the offending field (`-32602` with
`data.field`). Unknown fields are allowed, as the protocol's extensibility asks. The
e2e tests hold these specs to the official schema.

Since schema v1.25.0 ("reject malformed values receivers act on") a receiver refuses a
malformed value instead of putting a default in its place (tests/support/acp/SOURCE.txt
lists the fields): `null` for an optional field counts as absent only where the schema
allows null, and the requests a client serves its agent (`fs/*`, `terminal/*`) are
checked here too, for the client side (`check_client_params`, which its owner hands to
acp_bridge.client: that layer may not import this one).

Beside the checks, the params the host and the engines act on as TypedDicts, written
once here after the vendored schema's definitions of the same name
(tests/support/acp/schema.json; tests/test_acp_types.py holds them to it and to
`SPECS`), and `checked`, which types what `check_params` passed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Literal, NotRequired, TypedDict, overload

from acp_bridge.errors import ClientParamsError, InvalidParamsError

Check = Callable[[Any, str], None]  # raises InvalidParamsError naming the field


def _type(name: str, test: Callable[[Any], bool]) -> Check:
    def check(value: Any, field: str) -> None:
        if not test(value):
            raise InvalidParamsError(
                f"invalid params: {field} must be {name}, not {_describe(value)}",
                field=field,
                expected=name,
            )

    return check


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


STRING = _type("a string", lambda v: isinstance(v, str))
OBJECT = _type("an object", lambda v: isinstance(v, dict))
ARRAY = _type("an array", lambda v: isinstance(v, list))
UINT16 = _type("an integer 0..65535", lambda v: type(v) is int and 0 <= v <= 65535)
OPT_STRING = _type("a string or null", lambda v: v is None or isinstance(v, str))
OPT_OBJECT = _type("an object or null", lambda v: v is None or isinstance(v, dict))
OPT_UINT32 = _type("an integer 0..4294967295 or null",
                   lambda v: v is None or (type(v) is int and 0 <= v <= 0xFFFF_FFFF))
OPT_UINT64 = _type("an integer 0..18446744073709551615 or null",
                   lambda v: v is None or (type(v) is int and 0 <= v <= 0xFFFF_FFFF_FFFF_FFFF))


def absolute_path(value: Any, field: str) -> None:
    STRING(value, field)
    if not os.path.isabs(value) or "\x00" in value:
        raise InvalidParamsError(f"invalid params: {field} must be an absolute path", field=field)


def array_of(item: Check) -> Check:
    def check(value: Any, field: str) -> None:
        ARRAY(value, field)
        for index, element in enumerate(value):
            item(element, f"{field}[{index}]")

    return check


_BLOCK_FIELDS: dict[str, dict[str, Check]] = {
    "text": {"text": STRING},
    "image": {"data": STRING, "mimeType": STRING},
    "audio": {"data": STRING, "mimeType": STRING},
    "resource_link": {"uri": STRING, "name": STRING},
    "resource": {"resource": OBJECT},
}


def content_block(value: Any, field: str) -> None:
    """An ACP ContentBlock: a known `type` and that type's required fields."""
    OBJECT(value, field)
    kind = value.get("type")
    if kind not in _BLOCK_FIELDS:
        raise InvalidParamsError(
            f"invalid params: {field}.type must be one of {', '.join(_BLOCK_FIELDS)}",
            field=f"{field}.type",
        )
    for name, check in _BLOCK_FIELDS[kind].items():
        if name not in value:
            raise InvalidParamsError(f"invalid params: {field}.{name} is required", field=f"{field}.{name}")
        check(value[name], f"{field}.{name}")
    if kind == "resource":
        resource = value["resource"]
        STRING(resource.get("uri"), f"{field}.resource.uri")
        if not isinstance(resource.get("text"), str) and not isinstance(resource.get("blob"), str):
            raise InvalidParamsError(
                f"invalid params: {field}.resource needs text or blob", field=f"{field}.resource"
            )


MAX_DEPTH = 64  # the log stores JSON up to 255 levels; no real prompt nests this deep


def _too_deep(value: Any, limit: int) -> bool:
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def prompt_blocks(value: Any, field: str) -> None:
    array_of(content_block)(value, field)
    if not value:
        raise InvalidParamsError(f"invalid params: {field} must not be empty", field=field)
    if _too_deep(value, MAX_DEPTH):
        raise InvalidParamsError(f"invalid params: {field} nests deeper than {MAX_DEPTH} levels", field=field)


def _fields(value: Any, field: str, spec: Mapping[str, tuple[Check, bool]]) -> None:
    OBJECT(value, field)
    for name, (check, required) in spec.items():
        if name not in value:
            if required:
                raise InvalidParamsError(f"invalid params: {field}.{name} is required", field=f"{field}.{name}")
            continue
        check(value[name], f"{field}.{name}")


def _pairs(value: Any, field: str) -> None:
    """`env` / `headers`: [{name, value}] of strings."""
    array_of(lambda item, where: _fields(item, where, {"name": (STRING, True), "value": (STRING, True)}))(
        value, field)


MCP_TRANSPORTS = ("stdio", "http", "sse")  # what agentCapabilities.mcpCapabilities says


def _http_url(value: Any, field: str) -> None:
    STRING(value, field)
    if not value.startswith(("http://", "https://")):
        raise InvalidParamsError(f"invalid params: {field} must be an http:// or https:// URL", field=field)


def mcp_server(value: Any, field: str) -> None:
    """An ACP McpServer: stdio (no `type`), `http` (streamable HTTP) or `sse`, each refused
    unless listed in MCP_TRANSPORTS. A stdio `command` should be an absolute path (ACP);
    a bare name is looked up on PATH, as editors' MCP settings commonly say `npx`."""
    OBJECT(value, field)
    kind = value.get("type", "stdio")
    if kind not in ("stdio", "http", "sse"):
        raise InvalidParamsError(f"invalid params: {field}.type must be http, sse or absent (stdio)",
                             field=f"{field}.type")
    if kind not in MCP_TRANSPORTS:
        raise InvalidParamsError(f"invalid params: {field}: MCP servers over {kind} are not supported "
                             f"(agentCapabilities.mcpCapabilities.{kind} is false)", field=f"{field}.type")
    if kind != "stdio":
        _fields(value, field, {"name": (STRING, True), "url": (_http_url, True), "headers": (_pairs, True)})
        required: tuple[str, ...] = ("name",)
    else:
        _fields(value, field, {"name": (STRING, True), "command": (STRING, True),
                               "args": (array_of(STRING), True), "env": (_pairs, True)})
        required = ("name", "command")
    for name in required:
        if not value[name].strip() or "\x00" in value[name]:
            raise InvalidParamsError(f"invalid params: {field}.{name} must be a non-empty string",
                                 field=f"{field}.{name}")


def mcp_servers(value: Any, field: str) -> None:
    array_of(mcp_server)(value, field)
    seen: set[str] = set()
    for index, server in enumerate(value):
        if server["name"] in seen:
            raise InvalidParamsError(f"invalid params: {field}[{index}].name {server['name']!r} is used twice",
                                 field=f"{field}[{index}].name")
        seen.add(server["name"])


# method -> {field: (check, required)}. An optional field's check says whether it takes
# null: only where the schema's type does (or, `clientCapabilities`, where the schema
# still puts its default in place of a malformed value).
SPECS: dict[str, dict[str, tuple[Check, bool]]] = {
    "initialize": {"protocolVersion": (UINT16, True), "clientCapabilities": (OPT_OBJECT, False),
                   "clientInfo": (OPT_OBJECT, False)},
    "authenticate": {"methodId": (STRING, True)},
    "session/new": {"cwd": (absolute_path, True), "mcpServers": (mcp_servers, True),
                    "additionalDirectories": (array_of(absolute_path), False)},
    "session/load": {"sessionId": (STRING, True), "cwd": (absolute_path, True),
                     "mcpServers": (mcp_servers, True), "additionalDirectories": (array_of(absolute_path), False)},
    "session/resume": {"sessionId": (STRING, True), "cwd": (absolute_path, True),
                       "mcpServers": (mcp_servers, False), "additionalDirectories": (array_of(absolute_path), False)},
    "session/fork": {"sessionId": (STRING, True), "cwd": (absolute_path, True),
                     "mcpServers": (mcp_servers, False), "additionalDirectories": (array_of(absolute_path), False)},
    "session/list": {"cwd": (OPT_STRING, False), "cursor": (OPT_STRING, False)},
    "session/close": {"sessionId": (STRING, True)},
    "session/delete": {"sessionId": (STRING, True)},
    "session/set_mode": {"sessionId": (STRING, True), "modeId": (STRING, True)},
    "session/set_config_option": {"sessionId": (STRING, True), "configId": (STRING, True),
                                  "value": (_type("a string or a boolean",
                                                  lambda v: isinstance(v, str | bool)), True)},
    "session/prompt": {"sessionId": (STRING, True), "prompt": (prompt_blocks, True)},
    "session/cancel": {"sessionId": (STRING, True)},
}

# What an agent asks of its client (`check_client_params`): the fields the client acts
# on, each checked when present. Which must be there is the handler's signature
# (acp_bridge.client.methods binds the params to it, and says which one is missing as it
# always has); `sessionId` is not acted on by a client of ours.
_TERMINAL = {"terminalId": (STRING, False)}
CLIENT_SPECS: dict[str, dict[str, tuple[Check, bool]]] = {
    "fs/read_text_file": {"path": (STRING, False), "line": (OPT_UINT32, False), "limit": (OPT_UINT32, False)},
    "fs/write_text_file": {"path": (STRING, False), "content": (STRING, False)},
    "terminal/create": {"command": (STRING, False), "args": (array_of(STRING), False), "env": (_pairs, False),
                        "cwd": (OPT_STRING, False), "outputByteLimit": (OPT_UINT64, False)},
    "terminal/output": _TERMINAL, "terminal/wait_for_exit": _TERMINAL,
    "terminal/kill": _TERMINAL, "terminal/release": _TERMINAL,
}


ContentBlock = dict[str, Any]  # checked by `content_block`
McpServer = dict[str, Any]  # checked by `mcp_server`
Meta = dict[str, Any] | None


class NewSessionRequest(TypedDict):
    cwd: str
    mcpServers: list[McpServer]
    additionalDirectories: NotRequired[list[str]]
    _meta: NotRequired[Meta]


class LoadSessionRequest(TypedDict):
    sessionId: str
    cwd: str
    mcpServers: list[McpServer]
    additionalDirectories: NotRequired[list[str]]
    _meta: NotRequired[Meta]


class ResumeSessionRequest(TypedDict):
    sessionId: str
    cwd: str
    mcpServers: NotRequired[list[McpServer]]
    additionalDirectories: NotRequired[list[str]]
    _meta: NotRequired[Meta]


class PromptRequest(TypedDict):
    sessionId: str
    prompt: list[ContentBlock]
    _meta: NotRequired[Meta]


class CancelNotification(TypedDict):
    sessionId: str
    _meta: NotRequired[Meta]


class SetSessionModeRequest(TypedDict):
    sessionId: str
    modeId: str
    _meta: NotRequired[Meta]


class SetSessionConfigOptionRequest(TypedDict):
    sessionId: str
    configId: str
    value: str | bool
    type: NotRequired[str]  # "boolean" with a boolean value; absent with a value id
    _meta: NotRequired[Meta]


@overload
def checked(method: Literal["session/new"], params: Mapping[str, Any]) -> NewSessionRequest: ...
@overload
def checked(method: Literal["session/load"], params: Mapping[str, Any]) -> LoadSessionRequest: ...
@overload
def checked(method: Literal["session/resume"], params: Mapping[str, Any]) -> ResumeSessionRequest: ...
@overload
def checked(method: Literal["session/prompt"], params: Mapping[str, Any]) -> PromptRequest: ...
@overload
def checked(method: Literal["session/cancel"], params: Mapping[str, Any]) -> CancelNotification: ...
@overload
def checked(method: Literal["session/set_mode"], params: Mapping[str, Any]) -> SetSessionModeRequest: ...
@overload
def checked(method: Literal["session/set_config_option"],
            params: Mapping[str, Any]) -> SetSessionConfigOptionRequest: ...
def checked(method: str, params: Mapping[str, Any]) -> Mapping[str, Any]:
    """`params` of `method`, checked (`check_params`: InvalidParamsError naming the field)
    and typed as that method's request: the check just made is what the type says."""
    check_params(method, params)
    return params


def check_params(method: str, params: Mapping[str, Any]) -> None:
    """Raise InvalidParamsError (-32602) naming the first field of `params` that breaks `method`'s
    definition. `_meta` must be an object or null wherever it appears."""
    _check(SPECS.get(method, {}), params)


def check_client_params(method: str, params: Mapping[str, Any]) -> None:
    """`check_params` for a request an agent sends its client (`CLIENT_SPECS`): raise
    ClientParamsError (-32602 with the words naming the field and no `data`, as a client
    answers its agent)."""
    try:
        _check(CLIENT_SPECS.get(method, {}), params)
    except InvalidParamsError as exc:
        raise ClientParamsError(f"{exc.message} ({method})") from None


def _check(spec: Mapping[str, tuple[Check, bool]], params: Mapping[str, Any]) -> None:
    for name, (check, required) in spec.items():
        if name not in params:
            if required:
                raise InvalidParamsError(f"invalid params: {name} is required", field=name)
            continue
        check(params[name], name)
    OPT_OBJECT(params.get("_meta"), "_meta")
