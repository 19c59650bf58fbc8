"""The connection side of `acp-bridge chat`: one line reader over stdin, the JSON-RPC
loop with the agent child (its updates printed in the order they arrive), and the
`fs/*` and `terminal/*` methods the chat serves for the agent's tools.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import orjson

from acp_bridge.rpc.protocol import INTERNAL_ERROR, REQUEST_CANCELLED, RESOURCE_NOT_FOUND

AGENT_EXIT_WAIT = 10.0  # seconds the agent gets to exit after its stdin closes
DRAIN_GRACE = 0.5  # seconds a finished command's last output gets to arrive


class LineInput:
    """Lines from a file descriptor; see the module docstring."""

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


# --- the connection to the agent ----------------------------------------------------


class AgentError(Exception):
    """The agent answered a request with an error."""

    def __init__(self, error: Any) -> None:
        err = error if isinstance(error, dict) else {"message": str(error)}
        self.code = err.get("code")
        self.message = str(err.get("message", "error"))
        self.data = err.get("data")
        super().__init__(self.message)


class AgentGone(Exception):
    """The agent exited or stopped reading."""


class HandlerError(Exception):
    """An error answer to one of the agent's requests."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


Notify = Callable[[str, Any], None]
Serve = Callable[[str, dict[str, Any]], Awaitable[Any]]


class AgentConnection:
    """JSON-RPC over the agent's pipes. Notifications are handled in the reader, in
    order (an update is printed before the answer that follows it is seen); each of
    the agent's requests runs in its own task, cancelled by `$/cancel_request`."""

    def __init__(self, process: anyio.abc.Process, on_notification: Notify, on_request: Serve) -> None:
        self._process = process
        self._on_notification = on_notification
        self._on_request = on_request
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[anyio.Event, list[dict[str, Any]]]] = {}
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
                    scope = self._incoming.get(_key(params.get("requestId")))
                    if scope is not None:
                        scope.cancel()
                else:
                    self._on_notification(str(item["method"]), params)
            elif isinstance(item.get("id"), int) and item["id"] in self._pending:
                done, slot = self._pending[item["id"]]
                slot.append(item)
                done.set()

    async def _serve(self, request: dict[str, Any]) -> None:
        key = _key(request["id"])
        params = request.get("params")
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        with anyio.CancelScope() as scope:
            self._incoming[key] = scope
            try:
                reply["result"] = await self._on_request(str(request["method"]),
                                                         params if isinstance(params, dict) else {})
            except HandlerError as exc:
                reply["error"] = {"code": exc.code, "message": exc.message}
            except Exception as exc:
                reply["error"] = {"code": INTERNAL_ERROR, "message": f"{type(exc).__name__}: {exc}"}
            finally:
                self._incoming.pop(key, None)
        if scope.cancelled_caught:
            reply["error"] = {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
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
        request_id = next(self._ids)
        done, slot = anyio.Event(), list[dict[str, Any]]()
        self._pending[request_id] = (done, slot)
        try:
            await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            await done.wait()
        finally:
            self._pending.pop(request_id, None)
        if not slot:
            raise AgentGone("the agent has exited")
        if "error" in slot[0]:
            raise AgentError(slot[0]["error"])
        return slot[0].get("result")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        with contextlib.suppress(AgentGone):
            await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def close(self) -> None:
        """Close the agent's stdin: it finishes what runs and exits."""
        if self._process.stdin is not None:
            with contextlib.suppress(Exception):
                await self._process.stdin.aclose()


def _key(request_id: Any) -> tuple[str, Any]:
    return (type(request_id).__name__, request_id)


# --- the client side: files and terminals -------------------------------------------


def _read_text(path: str, line: int | None, limit: int | None) -> str:
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    if line is None and limit is None:
        return text
    start = max((line or 1) - 1, 0)
    lines = text.splitlines(keepends=True)
    return "".join(lines[start: start + limit if limit is not None else None])


def _write_text(path: str, content: str) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(content)


async def read_text_file(path: str, line: int | None = None, limit: int | None = None, **_: Any) -> dict[str, Any]:
    try:
        return {"content": await anyio.to_thread.run_sync(_read_text, path, line, limit)}
    except FileNotFoundError:
        raise HandlerError(RESOURCE_NOT_FOUND, f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HandlerError(INTERNAL_ERROR, f"cannot read {path}: {exc}") from None


async def write_text_file(path: str, content: str, **_: Any) -> dict[str, Any]:
    try:
        await anyio.to_thread.run_sync(_write_text, path, content)
    except OSError as exc:
        raise HandlerError(INTERNAL_ERROR, f"cannot write {path}: {exc}") from None
    return {}


class _Terminal:
    def __init__(self, process: anyio.abc.Process, limit: int | None) -> None:
        self.process = process
        self.limit = limit
        self.output = bytearray()
        self.truncated = False
        self.status: dict[str, Any] | None = None
        self.exited = anyio.Event()
        self.drained = anyio.Event()
        self.scope = anyio.CancelScope()

    def add(self, chunk: bytes) -> None:
        self.output += chunk
        if self.limit is not None and len(self.output) > self.limit:
            del self.output[: len(self.output) - self.limit]  # keep the end: how it finished
            self.truncated = True

    def text(self) -> str:
        data = bytes(self.output)
        if self.truncated:  # start at a character boundary
            skip = 0
            while skip < min(len(data), 3) and data[skip] & 0xC0 == 0x80:
                skip += 1
            data = data[skip:]
        return data.decode("utf-8", "replace")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


class Terminals:
    """ACP `terminal/*`: commands run here, each in its own process group."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self._items: dict[str, _Terminal] = {}
        self._ids = itertools.count(1)

    async def create(self, command: str, args: list[str] | None = None, cwd: str | None = None,
                     env: list[dict[str, str]] | None = None, outputByteLimit: int | None = None,
                     **_: Any) -> dict[str, Any]:
        environ = dict(os.environ)
        for var in env or []:
            environ[var["name"]] = var["value"]
        try:
            process = await anyio.open_process([command, *(args or [])], cwd=cwd, env=environ,
                                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise HandlerError(INTERNAL_ERROR, f"cannot start {command}: {exc}") from None
        terminal = _Terminal(process, outputByteLimit)
        terminal_id = f"term-{next(self._ids)}"
        self._items[terminal_id] = terminal
        self._tg.start_soon(self._watch, terminal)
        return {"terminalId": terminal_id}

    async def _watch(self, terminal: _Terminal) -> None:
        async def pump() -> None:
            assert terminal.process.stdout is not None
            try:
                async for chunk in terminal.process.stdout:
                    terminal.add(chunk)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            finally:
                terminal.drained.set()

        try:
            with terminal.scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(pump)  # runs on after the exit: background children may write
                    code = await terminal.process.wait()
                    with anyio.move_on_after(DRAIN_GRACE):
                        await terminal.drained.wait()
                    terminal.status = {"exitCode": code, "signal": None} if code >= 0 else \
                        {"exitCode": None, "signal": _signal_name(-code)}
                    terminal.exited.set()
        finally:  # released (killed) before it was seen to exit
            if terminal.status is None:
                terminal.status = {"exitCode": None, "signal": "SIGKILL"}
            terminal.exited.set()

    def _get(self, terminalId: str) -> _Terminal:
        terminal = self._items.get(terminalId)
        if terminal is None:
            raise HandlerError(RESOURCE_NOT_FOUND, f"unknown terminal {terminalId!r}")
        return terminal

    async def output(self, terminalId: str, **_: Any) -> dict[str, Any]:
        terminal = self._get(terminalId)
        result: dict[str, Any] = {"output": terminal.text(), "truncated": terminal.truncated}
        if terminal.status is not None:
            result["exitStatus"] = terminal.status
        return result

    async def wait_for_exit(self, terminalId: str, **_: Any) -> dict[str, Any]:
        terminal = self._get(terminalId)
        await terminal.exited.wait()
        assert terminal.status is not None
        return dict(terminal.status)

    async def kill(self, terminalId: str, **_: Any) -> dict[str, Any]:
        self._get(terminalId).kill()
        return {}

    async def release(self, terminalId: str, **_: Any) -> dict[str, Any]:
        terminal = self._items.pop(terminalId, None)
        if terminal is None:
            raise HandlerError(RESOURCE_NOT_FOUND, f"unknown terminal {terminalId!r}")
        await self._close(terminal)
        return {}

    async def close_all(self) -> None:
        for terminal_id in list(self._items):
            await self._close(self._items.pop(terminal_id))

    @staticmethod
    async def _close(terminal: _Terminal) -> None:
        terminal.kill()
        terminal.scope.cancel()
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await terminal.process.aclose()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


# --- the chat -----------------------------------------------------------------------
