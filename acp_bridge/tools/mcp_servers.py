"""MCP servers as tools (DESIGN.md section 4): the servers a client passes in
`session/new`, `session/load` or `session/resume`, and their tools offered to the model
next to the built-in ones, under names that cannot collide (tools/mcp_spec.py).

This module imports no `mcp`: `McpTool` runs through the same path as a built-in tool
(planned, `tool/call` durable, permission, `tool/result`), and `McpServers` starts and
stops a session's servers. The connections themselves (tools/mcp_session.py, the
official SDK) are imported by `McpServers.start`, so a session without MCP servers
never loads the SDK.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.to_thread

from acp_bridge.errors import ToolError
from acp_bridge.tools.base import (
    JSON,
    ElicitationDone,
    ToolContext,
    ToolKind,
    ToolOutcome,
    ToolPlan,
)
from acp_bridge.tools.mcp_spec import (
    CALL_TIMEOUT_ENV,
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_START_TIMEOUT_S,
    START_TIMEOUT_ENV,
    McpServerSpec,
    fit_name,
    server_prefixes,
    timeout_from_env,
    tool_name,
    tool_outcome,
)

if TYPE_CHECKING:
    from acp_bridge.tools.mcp_session import McpServer

log = logging.getLogger("acp_bridge.tools.mcp")


class McpTool:
    """A tool of an MCP server, as the runner sees any tool (acp_bridge.tools.base.Tool)."""

    # An MCP tool's effects are unknown to us (its annotations are hints the spec calls
    # untrusted), so it asks for permission like a command (tools/permissions.py).
    kind: ToolKind = "other"

    def __init__(self, server: McpServer, remote: Mapping[str, Any], name: str) -> None:
        self.server = server
        self.remote_name: str = remote["name"]
        self.name = name
        self.title = str(remote.get("title") or remote["name"])
        self.description = str(remote.get("description") or self.title)
        schema = remote.get("inputSchema")
        self.parameters: Mapping[str, JSON] = schema if isinstance(schema, Mapping) else {"type": "object"}

    async def plan(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolPlan:
        return ToolPlan(title=f"{self.server.name}: {self.title}", kind=self.kind)

    async def run(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolOutcome:
        result = await self.server.call(self.remote_name, dict(arguments), elicit=ctx.elicit, completed=ctx.completed)
        return tool_outcome(self.server.name, self.remote_name, result)


class McpUnavailable:
    """Stands for the tools of a server that did not start: not offered to the model,
    it answers a call of any `prefix__...` name (agent/tool_calls.py `holds_prefix`)
    with an error that names the server and why, not a bare `unknown_tool`."""

    kind: ToolKind = "other"
    holds_prefix = True

    def __init__(self, prefix: str, failure: str) -> None:
        self.name = f"{prefix}__"
        self.failure = failure
        self.description = failure
        self.parameters: Mapping[str, JSON] = {"type": "object"}

    async def plan(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolPlan:
        raise ToolError(f"{self.failure}; its tools are not available in this session", code="mcp_unavailable",
                        name="McpServerError")

    async def run(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolOutcome:
        await self.plan(arguments, ctx)
        raise AssertionError("unreachable: plan() refuses every call")


class McpServers:
    """The MCP servers of one session: started together, their tools, stopped together.
    Each connection is owned by a task of `task_group` (tools/mcp_session.py)."""

    def __init__(self, specs: Sequence[McpServerSpec], *, cwd: Path, roots: Sequence[Path],
                 task_group: anyio.abc.TaskGroup, elicitation: bool = False,
                 on_complete: ElicitationDone | None = None) -> None:
        self.specs = tuple(specs)
        self._elicitation = elicitation  # the client shows what a server asks: servers may ask
        self._on_complete = on_complete  # a URL elicitation completed after its call: the client told
        self._cwd = cwd
        self._roots = tuple(roots)
        self._task_group = task_group
        self.servers: list[McpServer] = []
        self.tools: list[McpTool | McpUnavailable] = []
        self.missing: str | None = None  # why no server could be started at all
        self._prefixes = server_prefixes([s.name for s in self.specs])
        # Told when `tools` changed after start (a server's notifications/tools/list_changed).
        self.on_change: Callable[[], None] | None = None

    @classmethod
    def from_acp(cls, servers: Sequence[Mapping[str, Any]], *, cwd: Path, roots: Sequence[Path],
                 task_group: anyio.abc.TaskGroup, elicitation: bool = False,
                 on_complete: ElicitationDone | None = None) -> McpServers:
        return cls([McpServerSpec.from_acp(s) for s in servers], cwd=cwd, roots=roots, task_group=task_group,
                   elicitation=elicitation, on_complete=on_complete)

    async def start(self) -> None:
        """Start every server at once and wait until each has listed its tools or
        failed (a failure is kept on the server and named in its tools' errors; the
        session goes on without its tools)."""
        try:
            # The SDK takes a second or more to import (pydantic models): in a worker
            # thread, so that the other sessions' turns stream on meanwhile.
            await anyio.to_thread.run_sync(importlib.import_module, "acp_bridge.tools.mcp_session")
            from acp_bridge.tools.mcp_session import McpServer
        except ImportError as exc:  # a dependency, but an environment may lack it
            self.missing = (f"cannot be started: the MCP SDK is not installed (no module {exc.name!r}); "
                            "install it: pip install mcp")
            log.warning("%d MCP server(s) not started: %s", len(self.specs), self.missing)
            self.tools = [McpUnavailable(prefix, f"MCP server {spec.name!r} {self.missing}")
                          for prefix, spec in zip(self._prefixes, self.specs, strict=True)]
            return
        start_timeout = timeout_from_env(START_TIMEOUT_ENV, DEFAULT_START_TIMEOUT_S)
        call_timeout = timeout_from_env(CALL_TIMEOUT_ENV, DEFAULT_CALL_TIMEOUT_S)
        self.servers = [McpServer(spec, cwd=self._cwd, roots=self._roots, task_group=self._task_group,
                                  start_timeout=start_timeout, call_timeout=call_timeout,
                                  on_tools=self._tools_changed, elicitation=self._elicitation,
                                  on_complete=self._on_complete)
                        for spec in self.specs]
        async with anyio.create_task_group() as tg:
            for server in self.servers:
                tg.start_soon(server.start)
        for server in self.servers:
            if server.failure is not None:
                log.warning("%s", server.failure)
        self._offer()

    def _tools_changed(self, server: McpServer) -> None:
        log.info("MCP server %r changed its tools: %s", server.name, [t["name"] for t in server.tools])
        self._offer()
        if self.on_change is not None:
            self.on_change()

    def _offer(self) -> None:
        """`tools` from each server's current list (a server that did not start: its stand-in)."""
        self.tools = []
        for prefix, server in zip(self._prefixes, self.servers, strict=True):
            if not server.tools and server.failure is not None:
                self.tools.append(McpUnavailable(prefix, server.failure))
            names: set[str] = set()
            for remote in server.tools:
                name = tool_name(prefix, remote["name"])
                if name in names:  # two remote names that differ only in cut characters
                    name = fit_name(f"{name}_{len(names)}")
                names.add(name)
                self.tools.append(McpTool(server, remote, name))

    def status(self) -> list[dict[str, Any]]:
        """For the client (`_meta.acpBridge.mcpServers`): each server's tools or failure."""
        if self.missing is not None:
            return [{"name": s.name, "tools": [], "error": f"MCP server {s.name!r} {self.missing}"}
                    for s in self.specs]
        out: list[dict[str, Any]] = []
        for server in self.servers:
            entry: dict[str, Any] = {"name": server.name,
                                     "tools": [t.name for t in self.tools
                                               if isinstance(t, McpTool) and t.server is server]}
            if server.failure is not None:
                entry["error"] = server.failure
            out.append(entry)
        return out

    async def close(self) -> None:
        """Stop every server (shielded: a closing session always stops its servers)."""
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for server in self.servers:
                    tg.start_soon(server.close)

