"""MCP servers as the agent sees them, without the SDK (pure but for the environment
read of the timeouts): a server's spec from ACP JSON, the names its tools are offered
under, a `tools/call` result as ACP content, and the error of a server that cannot
serve a call. tools/mcp_servers.py and tools/mcp_session.py share it.

Names: a tool `t` of server `s` is offered as `s__t` (both cut to the characters model
APIs accept, `[A-Za-z0-9_-]`, and to 64 characters with a hash when longer). No
built-in tool has `__` in its name, and the server names of one session are unique
(the params check refuses a name given twice), so names cannot collide; two servers
whose names differ only in characters that are cut get a numbered prefix.

Timeouts (seconds), from the environment: `ACP_BRIDGE_MCP_START_TIMEOUT` (default 30)
for a server to start and list its tools, `ACP_BRIDGE_MCP_CALL_TIMEOUT` (default 300)
for one tool call.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from acp_bridge.errors import ToolError
from acp_bridge.tools.base import JSON, ToolOutcome

log = logging.getLogger("acp_bridge.tools.mcp")

START_TIMEOUT_ENV = "ACP_BRIDGE_MCP_START_TIMEOUT"
CALL_TIMEOUT_ENV = "ACP_BRIDGE_MCP_CALL_TIMEOUT"
DEFAULT_START_TIMEOUT_S = 30.0
DEFAULT_CALL_TIMEOUT_S = 300.0
MAX_NAME = 64  # OpenAI function names: ^[a-zA-Z0-9_-]{1,64}$
SEPARATOR = "__"


MAX_TIMEOUT_S = 86_400.0  # a day: past it a timeout protects nothing


def timeout_problem(raw: str) -> str | None:
    """Why `raw` cannot be one of the MCP timeouts, or None (the agent's start-up
    refuses such a value, naming the variable: acp_bridge.cli.startup)."""
    try:
        value = float(raw)
    except ValueError:
        return f"expected a number of seconds, got {raw!r}"
    if not 0 < value <= MAX_TIMEOUT_S:  # NaN fails this too
        return f"must be more than 0 and at most {MAX_TIMEOUT_S:g} seconds, got {raw}"
    return None


def timeout_from_env(variable: str, default: float) -> float:
    raw = os.environ.get(variable)
    if not raw:
        return default
    if timeout_problem(raw) is not None:  # checked at start-up; a value set since is logged
        log.warning("%s=%r is not a usable number of seconds; using %s", variable, raw, default)
        return default
    return float(raw)


@dataclass(frozen=True)
class McpServerSpec:
    """One MCP server as ACP describes it: `transport` "stdio" (`McpServerStdio`:
    command, args, env), "http" (streamable HTTP) or "sse" (`McpServerHttp`/`Sse`: url,
    headers)."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may hold a token
    transport: str = "stdio"
    url: str = ""
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # may hold a token

    @classmethod
    def from_acp(cls, value: Mapping[str, Any]) -> McpServerSpec:
        """From a checked ACP McpServer object (host/params.py checked its shape)."""
        transport = value.get("type", "stdio")
        if transport != "stdio":
            return cls(value["name"], transport=transport, url=value["url"],
                       headers=tuple((h["name"], h["value"]) for h in value.get("headers", ())))
        return cls(value["name"], value["command"], tuple(value.get("args", ())),
                   tuple((e["name"], e["value"]) for e in value.get("env", ())))


def shown_url(url: str) -> str:
    """`url` without what may be a secret (user:password@, ?query, #fragment), for
    messages and logs."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an unreadable URL)"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def redact(text: str, spec: McpServerSpec) -> str:
    """`text` (an error's words) without the spec's secrets: its URL's credentials and
    query, its header and environment values."""
    if spec.url:
        text = text.replace(spec.url, shown_url(spec.url))
    for _, value in (*spec.headers, *spec.env):
        if len(value) >= 4:  # a short value ("1", "yes") is no secret and would mangle words
            text = text.replace(value, "***")
    return text


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text) or "_"


def fit_name(name: str) -> str:
    if len(name) <= MAX_NAME:
        return name
    import hashlib  # here: OpenSSL's load is ~10 ms the agent's start-up checks need not pay

    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:MAX_NAME - 9]}_{digest}"


def server_prefixes(names: Sequence[str]) -> list[str]:
    """The name prefix of each server, distinct. A `__` inside a server's name is
    folded so that the first `__` of a tool name always ends the prefix."""
    prefixes: list[str] = []
    for name in names:
        base = re.sub(r"_{2,}", "_", _clean(name))[:24]
        prefix, n = base, 1
        while prefix in prefixes:
            n += 1
            prefix = f"{base}{n}"
        prefixes.append(prefix)
    return prefixes


def tool_name(prefix: str, tool: str) -> str:
    """The name the model calls a server's tool by."""
    return fit_name(f"{prefix}{SEPARATOR}{_clean(tool)}")


# ACP ContentBlock fields by type (MCP's blocks are the same shapes, with a few more
# fields ACP does not know, such as `icons`): a result is stored and shown with these.
_BLOCK_FIELDS: dict[str, tuple[str, ...]] = {
    "text": ("text",),
    "image": ("data", "mimeType", "uri"),
    "audio": ("data", "mimeType"),
    "resource_link": ("uri", "name", "title", "description", "mimeType", "size"),
    "resource": ("resource",),
}
_RESOURCE_FIELDS = ("uri", "mimeType", "text", "blob", "_meta")
_ANNOTATION_FIELDS = ("audience", "priority", "lastModified")


def acp_block(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """An MCP content block as an ACP ContentBlock, or None for a type ACP lacks."""
    kind = block.get("type")
    fields = _BLOCK_FIELDS.get(str(kind))
    if fields is None:
        return None
    out: dict[str, Any] = {"type": kind}
    for name in fields:
        if name in block:
            out[name] = block[name]
    if kind == "resource" and isinstance(block.get("resource"), Mapping):
        out["resource"] = {k: v for k, v in block["resource"].items() if k in _RESOURCE_FIELDS}
    annotations = block.get("annotations")
    if isinstance(annotations, Mapping):
        kept = {k: v for k, v in annotations.items() if k in _ANNOTATION_FIELDS}
        if kept:
            out["annotations"] = kept
    if isinstance(block.get("_meta"), Mapping):
        out["_meta"] = block["_meta"]
    return out


def tool_outcome(server: str, tool: str, result: Mapping[str, Any]) -> ToolOutcome:
    """A `tools/call` result (MCP JSON) as the tool's outcome: its blocks as ACP content
    (images and resources kept, so the log holds them and the client shows them)."""
    blocks: list[JSON] = []
    for block in result.get("content") or ():
        converted = acp_block(block) if isinstance(block, Mapping) else None
        if converted is None:
            kind = block.get("type") if isinstance(block, Mapping) else type(block).__name__
            converted = {"type": "text", "text": f"[{kind} content from {server} not shown]"}
        blocks.append(converted)
    structured = result.get("structuredContent")
    if not blocks and structured is not None:
        import orjson

        blocks.append({"type": "text", "text": orjson.dumps(structured).decode()})
    if result.get("isError"):
        if not blocks:
            blocks.append({"type": "text", "text": f"{tool} failed (MCP server {server!r} gave no reason)"})
        return ToolOutcome(blocks, is_error=True, error={"name": "McpToolError", "code": "mcp_tool_error"})
    return ToolOutcome(blocks)


def unavailable(server: str, why: str) -> ToolError:
    """The error a call gets when its server cannot serve it."""
    return ToolError(f"MCP server {server!r} {why}", code="mcp_unavailable", name="McpServerError")


def elicitation_request(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """An MCP server's `elicitation/create` params (as JSON) as ACP's, without the
    session and the call: `form` (MCP's default mode) with its `requestedSchema`, or
    `url` with its `url` and `elicitationId`; MCP's `_meta` and `task` left out. None
    for anything else (the request is declined)."""
    mode, message = params.get("mode", "form"), params.get("message")
    if not isinstance(message, str):
        return None
    if mode == "form" and isinstance(params.get("requestedSchema"), Mapping):
        return {"mode": "form", "message": message, "requestedSchema": dict(params["requestedSchema"])}
    if mode == "url" and isinstance(params.get("url"), str) and isinstance(params.get("elicitationId"), str):
        return {"mode": "url", "message": message, "url": params["url"], "elicitationId": params["elicitationId"]}
    return None
