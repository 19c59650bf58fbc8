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

The process: like a local command (tools/local_terminal.py) it runs behind the gate in
its own process group, listed with the process's watchdog (tools/reaper.py) before it
may run, so it dies with the agent however the agent dies (SIGKILL included). The gate
here keeps stdin (the MCP channel): the line that opens it is read by the gate's `read`
(a shell reads a pipe a byte at a time), so the server sees only MCP messages. On
close, as the MCP spec says: stdin is closed, then SIGTERM, then SIGKILL of the group.
Its environment is the SDK's safe default (HOME, PATH, ...) plus the `env` the client
gave: the agent's own secrets (an API key) are not handed to third-party servers.

Over HTTP (`http`: streamable HTTP, `sse`) the SDK's own client transports carry the
messages, with the client's headers; there is no process to own, and the owner task
holds the connection until the session stops it.

A server that cannot start, exits, or does not answer in time is a `ToolError` that
names it; a call to a stdio server that exited starts it again first. Messages never
carry the spec's secrets (tools/mcp_spec.py `redact`).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.stdio import get_default_environment
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from acp_bridge import __version__
from acp_bridge.tools.base import ToolError
from acp_bridge.tools.local_terminal import check_program
from acp_bridge.tools.mcp_spec import McpServerSpec, redact, shown_url, unavailable
from acp_bridge.tools.reaper import REAPER

log = logging.getLogger("acp_bridge.tools.mcp")
# The SDK logs its transports' failures itself (tracebacks that may hold a URL with its
# credentials) through Python's last-resort handler, i.e. our stderr: kept quiet. What a
# failure means reaches the log and the client through our own messages, redacted.
logging.getLogger("mcp").addHandler(logging.NullHandler())

# The gate of tools/local_terminal.py, keeping stdin: the server reads MCP from it.
GATE = 'IFS= read -r _ || exit 125; exec "$@"'
STOP_GRACE_S = 1.0  # after stdin closes, and again after SIGTERM
STDERR_TAIL = 2000  # characters of the server's stderr kept for error messages


@dataclass
class _Link:
    """The running process (None over HTTP) and what its pipes said."""

    process: anyio.abc.Process | None
    stdout_closed: anyio.Event = field(default_factory=anyio.Event)
    stderr: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=20))

    def why_gone(self) -> str:
        if self.process is None:
            return "closed the connection"
        code = self.process.returncode
        if code is None:
            said = "closed its output"
        elif code < 0:
            said = f"was killed by signal {signal.Signals(-code).name if -code in signal.valid_signals() else -code}"
        else:
            said = f"exited with code {code}"
        tail = " | ".join(self.stderr)[-STDERR_TAIL:]
        return f"{said}{f' (stderr: {tail})' if tail else ''}"


@asynccontextmanager
async def open_transport(spec: McpServerSpec, cwd: Path) -> AsyncIterator[tuple[_Link, Any, Any]]:
    """The SDK's streams to the server: stdio behind our gate, or the SDK's own HTTP
    transports (streamable HTTP, SSE) with the client's headers."""
    if spec.transport == "stdio":
        async with gated_stdio(spec, cwd) as opened:
            yield opened
        return
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = dict(spec.headers)
    if spec.transport == "sse":
        async with sse_client(spec.url, headers=headers) as (reader, writer):
            yield _Link(None), reader, writer
    else:
        async with create_mcp_http_client(headers=headers) as client, \
                streamable_http_client(spec.url, http_client=client) as (reader, writer):
            yield _Link(None), reader, writer


@asynccontextmanager
async def gated_stdio(spec: McpServerSpec, cwd: Path) -> AsyncIterator[tuple[_Link, Any, Any]]:
    """Spawn the server behind the gate and bridge its pipes to the SDK's streams."""
    env = {**get_default_environment(), **dict(spec.env)}
    REAPER.ensure_running()
    if not cwd.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "the session's folder is not a directory", str(cwd))
    check_program(spec.command, cwd, env.get("PATH"))
    process = await anyio.open_process(
        ["/bin/sh", "-c", GATE, "acp-bridge-mcp", spec.command, *spec.args], cwd=cwd, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    REAPER.watch(process.pid)
    link = _Link(process)
    try:
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        await process.stdin.send(b"\n")  # listed with the reaper: the gate may open
        to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)

        async def read_stdout() -> None:
            assert process.stdout is not None
            buffer = b""
            async with to_session:
                with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                    async for chunk in process.stdout:
                        *lines, buffer = (buffer + chunk).split(b"\n")
                        for line in lines:
                            if line.strip():
                                await to_session.send(_parse(line))
            link.stdout_closed.set()

        async def write_stdin() -> None:
            assert process.stdin is not None
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async with from_session:
                    async for message in from_session:
                        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        await process.stdin.send(data.encode() + b"\n")

        async def read_stderr() -> None:
            assert process.stderr is not None
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                async for chunk in process.stderr:
                    for line in chunk.decode(errors="replace").splitlines():
                        if line.strip():
                            link.stderr.append(line.strip()[-STDERR_TAIL:])
                            log.debug("MCP server %s: %s", spec.name, line)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read_stdout)
            tg.start_soon(write_stdin)
            tg.start_soon(read_stderr)
            try:
                yield link, from_server, to_server
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:  # the session reports it; the connection goes on
        return exc


async def _stop(process: anyio.abc.Process) -> None:
    """Close stdin, then SIGTERM, then SIGKILL the group; reap; unlist it."""
    try:
        if process.stdin is not None:
            with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await process.stdin.aclose()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if await _exited(process, STOP_GRACE_S):
                break
            _kill_group(process.pid, sig)
        _kill_group(process.pid, signal.SIGKILL)  # children it left in its group
        with anyio.move_on_after(STOP_GRACE_S):
            await process.aclose()
    finally:
        REAPER.forget(process.pid)


async def _exited(process: anyio.abc.Process, within: float) -> bool:
    with anyio.move_on_after(within):
        while process.returncode is None:
            await anyio.sleep(0.01)
    return process.returncode is not None


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


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

    def __init__(self, spec: McpServerSpec, cwd: Path, roots: Sequence[Path]) -> None:
        self.spec = spec
        self.cwd = cwd
        self.roots = roots
        self.session: ClientSession | None = None
        self.tools: list[dict[str, Any]] = []
        self.failure: str | None = None  # why it is not (or no longer) running
        self.gone = anyio.Event()
        self.stopped = False  # asked to stop: `gone` soon
        self._scope = anyio.CancelScope()

    async def _list_roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=root.as_uri(), name=root.name)  # type: ignore[arg-type]
                                            for root in self.roots])

    async def run(self, start_timeout: float, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """The owner task (see the module docstring). Never raises but cancellation:
        a failure is kept in `failure`."""
        started = False
        link: _Link | None = None
        try:
            with self._scope:
                async with open_transport(self.spec, self.cwd) as (link, reader, writer), ClientSession(
                        reader, writer, list_roots_callback=self._list_roots,
                        client_info=types.Implementation(name="acp-bridge", version=__version__)) as session:
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
                    await link.stdout_closed.wait()  # over HTTP: until stopped
                    if link.process is not None:
                        await _exited(link.process, STOP_GRACE_S)  # so that we can say how it ended
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
                 start_timeout: float, call_timeout: float) -> None:
        self.spec = spec
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
            conn = _Connection(self.spec, self._cwd, self._roots)
            self._conn = conn
            await self._task_group.start(conn.run, self._start_timeout)
            if conn.failure is None:
                self.tools = conn.tools
        finally:
            self._starting.set()
            self._starting = None

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """`tools/call` as MCP JSON. ToolError naming the server if it cannot answer."""
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
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def close(self) -> None:
        self._closed = True
        conn = self._conn
        if conn is not None:
            conn.stop()
            with anyio.CancelScope(shield=True):
                await conn.gone.wait()
