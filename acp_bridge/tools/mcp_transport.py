"""The transport of an MCP server (tools/mcp_session.py): a stdio server spawned behind
the gate, its pipes bridged to the SDK's streams, and stopped the MCP way; or the SDK's
own HTTP transports (streamable HTTP, SSE).

The process: like a local command (tools/local_terminal.py) it runs behind the gate in
its own process group, listed with the process's watchdog (tools/reaper.py) before it
may run, so it dies with the agent however the agent dies (SIGKILL included). The gate
here keeps stdin (the MCP channel): the line that opens it is read by the gate's `read`
(a shell reads a pipe a byte at a time), so the server sees only MCP messages. On
close, as the MCP spec says: stdin is closed, then SIGTERM, then SIGKILL of the group.
Its environment is the SDK's safe default (HOME, PATH, ...), the variables
`$ACP_BRIDGE_PASS_ENV` names, and the `env` the client gave: the agent's own secrets (an
API key) are not handed to third-party servers (tools/environment.py).

Imported only with tools/mcp_session.py (the SDK).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from acp_bridge.tools.environment import passed_environment
from acp_bridge.tools.local_terminal import check_program
from acp_bridge.tools.mcp_spec import McpServerSpec
from acp_bridge.tools.reaper import REAPER

log = logging.getLogger("acp_bridge.tools.mcp")

# The gate of tools/local_terminal.py, keeping stdin: the server reads MCP from it.
GATE = 'IFS= read -r _ || exit 125; exec "$@"'
STOP_GRACE_S = 1.0  # after stdin closes, and again after SIGTERM
STDERR_TAIL = 2000  # characters of the server's stderr kept for error messages


@dataclass
class Link:
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
async def open_transport(spec: McpServerSpec, cwd: Path) -> AsyncIterator[tuple[Link, Any, Any]]:
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
            yield Link(None), reader, writer
    else:
        async with create_mcp_http_client(headers=headers) as client, \
                streamable_http_client(spec.url, http_client=client) as (reader, writer):
            yield Link(None), reader, writer


@asynccontextmanager
async def gated_stdio(spec: McpServerSpec, cwd: Path) -> AsyncIterator[tuple[Link, Any, Any]]:
    """Spawn the server behind the gate and bridge its pipes to the SDK's streams."""
    env = {**get_default_environment(), **passed_environment(os.environ), **dict(spec.env)}
    REAPER.ensure_running()
    if not cwd.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "the session's folder is not a directory", str(cwd))
    check_program(spec.command, cwd, env.get("PATH"))
    process = await anyio.open_process(
        ["/bin/sh", "-c", GATE, "acp-bridge-mcp", spec.command, *spec.args], cwd=cwd, env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    REAPER.watch(process.pid)
    link = Link(process)
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
            if await exited(process, STOP_GRACE_S):
                break
            _kill_group(process.pid, sig)
        _kill_group(process.pid, signal.SIGKILL)  # children it left in its group
        with anyio.move_on_after(STOP_GRACE_S):
            await process.aclose()
    finally:
        REAPER.forget(process.pid)


async def exited(process: anyio.abc.Process, within: float) -> bool:
    with anyio.move_on_after(within):
        while process.returncode is None:
            await anyio.sleep(0.01)
    return process.returncode is not None


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
