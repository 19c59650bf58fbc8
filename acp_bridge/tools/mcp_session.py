"""One MCP server of a session, connected through the official SDK (`mcp`).

Imported only when a session has MCP servers (tools/mcp_servers.py): the SDK and
pydantic stay off every other path.

Lifetime: each connection is one owner task in the agent's task group
(`McpServer.start`). The task spawns the server, enters the SDK's `ClientSession`,
initializes it and lists its tools, reports that it has started, and then waits until
the server's stdout ends or `close()` asks it to stop. Entering and leaving the SDK's
context managers (which hold anyio task groups) happen in that one task, as anyio's
structured concurrency requires; other tasks (a turn's tool call) only send requests
through the session.

The transport (a stdio server behind the gate in its own process group, stopped the MCP
way; the SDK's HTTP clients) is tools/mcp_transport.py. When the server says its tools
changed (`notifications/tools/list_changed`) the owner task's helper reads the list
again and tells tools/mcp_servers.py, which offers the model the new list.

Over HTTP (`http`: streamable HTTP, `sse`) the SDK's own client transports carry the
messages, with the client's headers; there is no process to own, and the owner task
holds the connection until the session stops it.

A server that cannot start, exits, or does not answer in time is a `ToolError` that
names it; a call to a stdio server that exited starts it again first. Messages never
carry the spec's secrets (tools/mcp_spec.py `redact`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.session import ClientRequestContext, ClientSession, ElicitationFnT
from mcp.shared.exceptions import MCPError

from acp_bridge import __version__
from acp_bridge.errors import ToolError
from acp_bridge.tools.base import Elicit, ElicitationDone
from acp_bridge.tools.mcp_spec import (
    McpServerSpec,
    elicitation_request,
    redact,
    shown_url,
    unavailable,
)
from acp_bridge.tools.mcp_transport import STOP_GRACE_S, Link, exited, open_transport

log = logging.getLogger("acp_bridge.tools.mcp")
URL_IDS_KEPT = 64  # URL elicitations of ended calls whose completion is still passed on
# The SDK logs its transports' failures itself (tracebacks that may hold a URL with its
# credentials) through Python's last-resort handler, i.e. our stderr: kept quiet. What a
# failure means reaches the log and the client through our own messages, redacted.
logging.getLogger("mcp").addHandler(logging.NullHandler())

def _reason(exc: BaseException, command: str = "") -> str:
    """A failure in words: the first leaf of an exception group, with its type."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError) and exc.filename == command:
        return f"command not found: {exc.filename}"
    if isinstance(exc, OSError):
        return f"could not be started: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    if isinstance(exc, MCPError):
        return exc.message
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class _Connection:
    """One run of the server (a restart is a new connection)."""

    def __init__(self, spec: McpServerSpec, cwd: Path, roots: Sequence[Path],
                 on_tools: Callable[[list[dict[str, Any]]], None],
                 elicit: ElicitationFnT | None = None, on_complete: ElicitationDone | None = None) -> None:
        self.spec = spec
        self.elicit = elicit  # the server may ask the person (MCP `elicitation`): its handler
        self.on_complete = on_complete  # its notifications/elicitation/complete
        self.on_tools = on_tools  # told each list read after notifications/tools/list_changed
        self.cwd = cwd
        self.roots = roots
        self.session: ClientSession | None = None
        self.tools: list[dict[str, Any]] = []
        self.failure: str | None = None  # why it is not (or no longer) running
        self.gone = anyio.Event()
        self.stopped = False  # asked to stop: `gone` soon
        self._scope = anyio.CancelScope()
        self._tools_changed = anyio.Event()  # the server said so; not read yet
        self.tools_current = anyio.Event()  # no change said that is not read (or failed to be)
        self.tools_current.set()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ElicitCompleteNotification):
            if self.on_complete is not None:
                self.on_complete(message.params.elicitation_id)
        elif isinstance(message, types.ToolListChangedNotification):
            if self.tools_current.is_set():
                self.tools_current = anyio.Event()
            self._tools_changed.set()

    async def _follow_tools(self, session: ClientSession, timeout: float) -> None:
        """Read the tool list again each time the server says it changed."""
        while True:
            await self._tools_changed.wait()
            self._tools_changed = anyio.Event()
            try:
                with anyio.fail_after(timeout):
                    tools = await _all_tools(session)
            except Exception as exc:  # the old list stays; a call will say what is wrong
                log.warning("MCP server %r: its changed tool list could not be read: %s", self.spec.name,
                            redact(_reason(exc), self.spec))
            else:
                self.tools = tools
                self.on_tools(tools)
            if not self._tools_changed.is_set():
                self.tools_current.set()

    async def _list_roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=root.as_uri(), name=root.name)  # type: ignore[arg-type]
                                            for root in self.roots])

    async def run(self, start_timeout: float, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """The owner task (see the module docstring). Never raises but cancellation:
        a failure is kept in `failure`."""
        started = False
        link: Link | None = None
        try:
            with self._scope:
                async with open_transport(self.spec, self.cwd) as (link, reader, writer), ClientSession(
                        reader, writer, list_roots_callback=self._list_roots, message_handler=self._on_message,
                        elicitation_callback=self.elicit, client_info=types.Implementation(name="acp-bridge", version=__version__)) as session:
                    try:
                        with anyio.fail_after(start_timeout):
                            await session.initialize()
                            self.tools = await _all_tools(session)
                    except TimeoutError:
                        self.failure = f"did not start within {start_timeout:g} s"
                        return
                    self.session = session
                    started = True
                    task_status.started()
                    async with anyio.create_task_group() as follow:
                        follow.start_soon(self._follow_tools, session, start_timeout)
                        await link.stdout_closed.wait()  # over HTTP: until stopped
                        follow.cancel_scope.cancel()
                    if link.process is not None:
                        await exited(link.process, STOP_GRACE_S)  # so that we can say how it ended
                    self.failure = link.why_gone()
        except Exception as exc:
            if link is not None and link.stdout_closed.is_set():
                self.failure = link.why_gone()
            else:
                where = f"at {shown_url(self.spec.url)}: " if self.spec.url else ""
                self.failure = where + redact(_reason(exc, self.spec.command), self.spec)
        finally:
            if self.failure is None and not started:
                self.failure = link.why_gone() if link is not None else "did not start"
            self.session = None
            self.gone.set()
            if not started:
                task_status.started()

    def stop(self) -> None:
        self.stopped = True
        self._scope.cancel()


async def _all_tools(session: ClientSession) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


class McpServer:
    """A server of a session: its current connection, calls, restart, close."""

    def __init__(self, spec: McpServerSpec, *, cwd: Path, roots: Sequence[Path], task_group: anyio.abc.TaskGroup,
                 start_timeout: float, call_timeout: float, on_tools: Callable[[McpServer], None],
                 elicitation: bool = False, on_complete: ElicitationDone | None = None) -> None:
        self.spec = spec
        self._elicitation = elicitation  # advertised to the server: the client shows what it asks
        self._asking: Elicit | None = None  # the running call's way to the person
        # URL elicitations (MCP `notifications/elicitation/complete`, `_completed`): the
        # running call's way to record and tell a completion, the ids of the URL
        # elicitations it had the client shown, and those of the calls that ended (a
        # completion of one of them is told to the client, `on_complete`, unrecorded).
        self._completing: ElicitationDone | None = None
        self._urls: set[str] = set()
        self._urls_before: dict[str, None] = {}  # in order, the last URL_IDS_KEPT
        self._on_complete = on_complete
        self._asked: set[anyio.CancelScope] = set()  # its questions not answered yet
        self.name = spec.name
        self._cwd = cwd
        self._roots = roots
        self._task_group = task_group
        self._start_timeout = start_timeout
        self._call_timeout = call_timeout
        self._conn: _Connection | None = None
        self._starting: anyio.Event | None = None
        self._closed = False
        self.tools: list[dict[str, Any]] = []
        self._on_tools = on_tools  # told when `tools` changed after the first start

    def _new_tools(self, tools: list[dict[str, Any]]) -> None:
        if tools != self.tools:
            self.tools = tools
            self._on_tools(self)

    @property
    def failure(self) -> str | None:
        """Why the server is not running, in words that name it; None while it runs."""
        conn = self._conn
        if conn is None or conn.failure is None:
            return None
        return f"MCP server {self.name!r} {conn.failure}"

    async def start(self) -> None:
        """(Re)start the connection; a failure is kept, never raised."""
        if self._starting is not None:  # another call is starting it: wait for that one
            await self._starting.wait()
            return
        self._starting = anyio.Event()
        try:
            first = self._conn is None
            conn = _Connection(self.spec, self._cwd, self._roots, self._new_tools,
                               self._elicit if self._elicitation else None, self._completed)
            self._conn = conn
            await self._task_group.start(conn.run, self._start_timeout)
            if conn.failure is None:
                if first:
                    self.tools = conn.tools
                else:  # started again: its list may have changed meanwhile
                    self._new_tools(conn.tools)
        finally:
            self._starting.set()
            self._starting = None

    async def _elicit(self, context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        """The server's `elicitation/create`: asked through the running call (its
        `ToolContext.elicit`, which records it). Declined when no call of ours runs
        (nothing to tie it to, and the log has nowhere to record it) or the request is
        not one ACP can show; cancelled if the call ends before the person answers."""
        ask = self._asking
        request = elicitation_request(params.model_dump(by_alias=True, mode="json", exclude_none=True))
        if ask is None or request is None:
            log.info("MCP server %r: an elicitation %s: declined", self.name,
                     "outside a tool call" if ask is None else "that ACP cannot show")
            return types.ElicitResult(action="decline")
        with anyio.CancelScope() as scope:
            self._asked.add(scope)
            try:
                answer = await ask(request)
            finally:
                self._asked.discard(scope)
            if request["mode"] == "url":
                self._urls.add(str(request["elicitationId"]))
            return types.ElicitResult(action=answer["action"], content=answer.get("content"))
        return types.ElicitResult(action="cancel")  # the call ended first

    def _completed(self, elicitation_id: str) -> None:
        """The server's `notifications/elicitation/complete`: for a URL elicitation of
        the running call, recorded on it and told (`ToolContext.completed`); of a call
        that ended, told; of one the client was never shown through us, dropped."""
        told = self._completing if elicitation_id in self._urls else self._on_complete
        if elicitation_id in self._urls or elicitation_id in self._urls_before:
            self._urls.discard(elicitation_id)  # once: a second completion is dropped
            self._urls_before.pop(elicitation_id, None)
            if told is not None:
                told(elicitation_id)
        else:
            log.info("MCP server %r: completion of an elicitation it did not ask through acp-bridge: dropped",
                     self.name)

    async def call(self, tool: str, arguments: dict[str, Any], elicit: Elicit | None = None,
                   completed: ElicitationDone | None = None) -> dict[str, Any]:
        """`tools/call` as MCP JSON, what the server asks meanwhile through `elicit`
        (and says complete, `completed`). ToolError naming the server if it cannot
        answer."""
        self._asking, self._completing = elicit, completed
        try:
            return await self._call(tool, arguments)
        finally:
            self._asking = self._completing = None
            for scope in self._asked:
                scope.cancel()
            for elicitation_id in self._urls:
                self._urls_before[elicitation_id] = None
            self._urls = set()
            while len(self._urls_before) > URL_IDS_KEPT:
                del self._urls_before[next(iter(self._urls_before))]

    async def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        conn = self._conn
        if self._closed:
            raise unavailable(self.name, "was stopped with its session")
        if conn is None or conn.gone.is_set() or conn.stopped:
            before = conn.failure if conn is not None else None
            await self.start()
            conn = self._conn
            assert conn is not None
            if conn.session is None:
                why = conn.failure or "did not start"
                raise unavailable(self.name, f"{why}" + (f" (earlier: {before})" if before else ""))
        session = conn.session
        if session is None:
            raise unavailable(self.name, conn.failure or "is not running")
        try:
            result = await session.call_tool(tool, arguments, read_timeout_seconds=self._call_timeout)
        except MCPError as exc:
            if exc.code == types.REQUEST_TIMEOUT:
                raise ToolError(f"MCP server {self.name!r} did not answer {tool} within {self._call_timeout:g} s",
                                code="mcp_timeout", name="McpServerError") from None
            if exc.code == types.CONNECTION_CLOSED or conn.gone.is_set():
                with anyio.move_on_after(STOP_GRACE_S):
                    await conn.gone.wait()  # so that the message can say how it ended
                conn.stop()  # a closed connection is done with (over HTTP nothing else ends it)
                raise unavailable(self.name, f"{conn.failure or 'closed the connection'} during {tool}; "
                                  "it is started again on the next call") from None
            raise ToolError(f"MCP server {self.name!r}: {tool} failed: {redact(exc.message, self.spec)}",
                            code="mcp_error", name="McpServerError") from None
        except (ValueError, RuntimeError) as exc:  # a result that is not MCP, an unexpected shape
            raise ToolError(f"MCP server {self.name!r} gave a result for {tool} that is not valid MCP: "
                            f"{redact(_reason(exc), self.spec)[:300]}", code="mcp_error",
                            name="McpServerError") from None
        except Exception as exc:  # the transport failed (over HTTP: the server went away)
            raise ToolError(f"MCP server {self.name!r}: {tool} failed: {redact(_reason(exc), self.spec)[:300]}",
                            code="mcp_error", name="McpServerError") from None
        # A call that changed the server's tools (it said so before answering): the
        # model's next step is offered the new list.
        with anyio.move_on_after(self._start_timeout):
            await conn.tools_current.wait()
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def close(self) -> None:
        self._closed = True
        conn = self._conn
        if conn is not None:
            conn.stop()
            with anyio.CancelScope(shield=True):
                await conn.gone.wait()
