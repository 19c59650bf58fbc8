"""The connection side of `acp-bridge chat`: one line reader over stdin, the JSON-RPC
loop with the agent child (its updates printed in the order they arrive), and the relay
of the child's stderr. The methods
the chat serves for the agent are in client_methods.py; request keys, our request ids,
error codes and error answers are the JSON-RPC core's (acp_bridge.rpc.protocol).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import orjson

from acp_bridge.cli.safe_text import clean
from acp_bridge.rpc.protocol import (
    INTERNAL_ERROR,
    REQUEST_CANCELLED,
    ClientError,
    RpcError,
    error_response,
    is_id,
    is_response,
    own_request_id,
    request_key,
)


class LineInput:
    """Lines from a file descriptor, the chat's only reader of stdin (the "Input" part of
    acp_bridge.cli.chat.main's docstring says why it polls and what a cancelled read keeps)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._eof = False
        self._pollable = True
        self._lock = anyio.Lock()

    async def readline(self) -> str | None:
        """The next line without its newline, or None at end of input."""
        async with self._lock:
            while True:
                end = self._buffer.find(b"\n")
                if end >= 0 or (self._eof and self._buffer):
                    stop = end if end >= 0 else len(self._buffer)
                    line = bytes(self._buffer[:stop])
                    del self._buffer[: stop + 1]
                    return line.decode("utf-8", "replace").rstrip("\r")
                if self._eof:
                    return None
                chunk = await self._read()
                if chunk:
                    self._buffer += chunk
                else:
                    self._eof = True

    async def _read(self) -> bytes:
        while True:
            if self._pollable:
                try:
                    await anyio.wait_readable(self._fd)
                except OSError:  # epoll refuses regular files and /dev/null: they never block
                    self._pollable = False
            try:
                return os.read(self._fd, 65536)
            except BlockingIOError:
                continue
            except OSError:  # the terminal went away
                return b""


async def relay_stderr(process: anyio.abc.Process, above: Callable[[str], bool] | None = None) -> None:
    """The agent's stderr (its log, or a wrapped agent's anything) to ours, a line at a
    time with control characters escaped: it is not the agent's to run on the terminal.
    `above` may take the lines instead (True: it wrote them above the line being edited)."""
    assert process.stderr is not None
    pending = b""
    with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
        async for chunk in process.stderr:
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            if len(pending) > 65536:  # no newline in sight: show what came so far
                lines.append(pending)
                pending = b""
            text = "".join(clean(line.decode("utf-8", "replace")) + "\n" for line in lines)
            if text and not (above is not None and above(text)):
                sys.stderr.write(text)
                sys.stderr.flush()
    if pending:
        sys.stderr.write(clean(pending.decode("utf-8", "replace")) + "\n")
        sys.stderr.flush()


def error_message(exc: ClientError) -> str:
    """What the agent said in its error answer, as the chat shows it."""
    return str(exc.error.get("message", "error"))


class AgentGone(Exception):
    """The agent exited or stopped reading."""


Notify = Callable[[str, Any], None]
Serve = Callable[[str, dict[str, Any]], Awaitable[Any]]


class AgentConnection:
    """JSON-RPC over the agent's pipes. Notifications are handled in the reader, in
    order (an update is printed before the answer that follows it is seen); each of
    the agent's requests runs in its own task, cancelled by `$/cancel_request`. A
    handler fails a request with an RpcError; any other exception answers
    INTERNAL_ERROR. A request of ours that the agent answers with an error raises
    ClientError."""

    def __init__(self, process: anyio.abc.Process, on_notification: Notify, on_request: Serve) -> None:
        self._process = process
        self._on_notification = on_notification
        self._on_request = on_request
        self._ids = itertools.count(1)
        self._pending: dict[tuple[str, Any], tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self._incoming: dict[tuple[str, Any], anyio.CancelScope] = {}
        self._write_lock = anyio.Lock()
        self._gone = False

    async def read_loop(self, tg: anyio.abc.TaskGroup) -> None:
        assert self._process.stdout is not None
        buffer = bytearray()
        try:
            async for chunk in self._process.stdout:
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if line.strip():
                        self._on_line(line, tg)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            self._gone = True
            for done, _ in self._pending.values():
                done.set()

    def _on_line(self, line: bytes, tg: anyio.abc.TaskGroup) -> None:
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            print(f"acp-bridge chat: not JSON from the agent: {line[:200]!r}", file=sys.stderr)
            return
        for item in message if isinstance(message, list) else [message]:
            if not isinstance(item, dict):
                continue
            if "method" in item and "id" in item:
                tg.start_soon(self._serve, item)
            elif "method" in item:
                params = item.get("params")
                if item["method"] == "$/cancel_request" and isinstance(params, dict):
                    scope = self._incoming.get(request_key(params.get("requestId")))
                    if scope is not None:
                        scope.cancel()
                else:
                    self._on_notification(str(item["method"]), params)
            elif is_response(item) and is_id(item["id"]) and request_key(item["id"]) in self._pending:
                done, slot = self._pending[request_key(item["id"])]
                slot.append(item)
                done.set()

    async def _serve(self, request: dict[str, Any]) -> None:
        key = request_key(request["id"])
        params = request.get("params")
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        with anyio.CancelScope() as scope:
            self._incoming[key] = scope
            try:
                reply["result"] = await self._on_request(str(request["method"]),
                                                         params if isinstance(params, dict) else {})
            except RpcError as exc:
                reply = error_response(request["id"], exc)
            except Exception as exc:
                # The exception's own words, not internal_error's: the agent hands them
                # to the model, and the chat shows the tool result.
                reply = error_response(request["id"], RpcError(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))
            finally:
                self._incoming.pop(key, None)
        if scope.cancelled_caught:
            reply = error_response(request["id"], RpcError(REQUEST_CANCELLED, "Request cancelled"))
        with contextlib.suppress(AgentGone):
            await self._send(reply)

    async def _send(self, message: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        try:
            async with self._write_lock:
                await self._process.stdin.send(orjson.dumps(message) + b"\n")
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError) as exc:
            raise AgentGone("the agent stopped reading") from exc

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        if self._gone:
            raise AgentGone("the agent has exited")
        request_id = own_request_id(next(self._ids))
        key = request_key(request_id)
        done, slot = anyio.Event(), list[dict[str, Any]]()
        self._pending[key] = (done, slot)
        try:
            await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            await done.wait()
        finally:
            self._pending.pop(key, None)
        if not slot:
            raise AgentGone("the agent has exited")
        if "error" in slot[0]:
            raise ClientError(method, slot[0]["error"])
        return slot[0].get("result")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        with contextlib.suppress(AgentGone):
            await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def close(self) -> None:
        """Close the agent's stdin: it finishes what runs and exits."""
        if self._process.stdin is not None:
            with contextlib.suppress(Exception):
                await self._process.stdin.aclose()
