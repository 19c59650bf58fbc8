"""What a client of an agent serves it: `fs/*` and `terminal/*` as thin adapters over the
local implementations the agent itself uses without a client (acp_bridge.tools.local,
acp_bridge.tools.local_terminal), and the dispatch of the agent's requests to them and
to the client's permission question (`acp-bridge chat` asks it at the keyboard; the
snapshot driver serves `terminal/*` from here too). Files are written atomically and
commands run in their own process groups, the same way whichever side runs them.

A failure is a domain error (acp_bridge.errors: `ClientServiceError` and its kinds,
`MethodNotFoundError`), answered by the connection's owner through the one conversion
(acp_bridge.host.errors.to_rpc_error, handed to the connection).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from acp_bridge.errors import (
    ClientParamsError,
    ClientResourceNotFoundError,
    ClientServiceError,
    MethodNotFoundError,
    ToolError,
)
from acp_bridge.rpc.protocol import is_bug
from acp_bridge.tools.base import ExitStatus
from acp_bridge.tools.local import read_text, write_text
from acp_bridge.tools.local_terminal import LocalTerminal, start_terminal

Handler = Callable[..., Awaitable[Any]]
# The params check of the agent's requests, handed in by the owner (acp_bridge.host.params.
# check_client_params: this layer may not import the host); raises ClientParamsError.
ParamsCheck = Callable[[str, Mapping[str, Any]], None]

# --- fs/* ----------------------------------------------------------------------------


async def read_text_file(path: str, line: int | None = None, limit: int | None = None, **_: Any) -> dict[str, Any]:
    try:
        return {"content": await anyio.to_thread.run_sync(read_text, Path(path), line, limit)}
    except ToolError as exc:
        if exc.code == "not_found":
            raise ClientResourceNotFoundError(exc.message) from None
        raise ClientServiceError(f"cannot read {path}: {exc.message}") from None
    except OSError as exc:
        raise ClientServiceError(f"cannot read {path}: {exc}") from None


async def write_text_file(path: str, content: str, **_: Any) -> dict[str, Any]:
    try:
        await anyio.to_thread.run_sync(write_text, Path(path), content)
    except OSError as exc:
        raise ClientServiceError(f"cannot write {path}: {exc}") from None
    return {}


# --- terminal/* ------------------------------------------------------------------------


def exit_status_json(status: ExitStatus) -> dict[str, Any]:
    return {"exitCode": status.exit_code, "signal": status.signal}


class Terminals:
    """ACP `terminal/*`: commands run here, each a `LocalTerminal` under an owner task in
    the client's task group (so none outlives the client)."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self._items: dict[str, LocalTerminal] = {}
        self._ids = itertools.count(1)

    async def create(self, command: str, args: list[str] | None = None, cwd: str | None = None,
                     env: list[dict[str, str]] | None = None, outputByteLimit: int | None = None,
                     **_: Any) -> dict[str, Any]:
        environ = {var["name"]: var["value"] for var in env or []}
        try:
            terminal = await start_terminal(self._tg, [command, *(args or [])],
                                            cwd=None if cwd is None else Path(cwd),
                                            output_byte_limit=outputByteLimit, env=environ)
        except OSError as exc:
            raise ClientServiceError(f"cannot start {command}: {exc}") from None
        terminal_id = f"term-{next(self._ids)}"
        self._items[terminal_id] = terminal
        return {"terminalId": terminal_id}

    def _get(self, terminalId: str) -> LocalTerminal:
        terminal = self._items.get(terminalId)
        if terminal is None:
            raise ClientResourceNotFoundError(f"unknown terminal {terminalId!r}")
        return terminal

    async def output(self, terminalId: str, **_: Any) -> dict[str, Any]:
        output = await self._get(terminalId).output()
        result: dict[str, Any] = {"output": output.output, "truncated": output.truncated}
        if output.exit_status is not None:
            result["exitStatus"] = exit_status_json(output.exit_status)
        return result

    async def wait_for_exit(self, terminalId: str, **_: Any) -> dict[str, Any]:
        return exit_status_json(await self._get(terminalId).wait_for_exit())

    async def kill(self, terminalId: str, **_: Any) -> dict[str, Any]:
        await self._get(terminalId).kill()
        return {}

    async def release(self, terminalId: str, **_: Any) -> dict[str, Any]:
        terminal = self._items.pop(terminalId, None)
        if terminal is None:
            raise ClientResourceNotFoundError(f"unknown terminal {terminalId!r}")
        await terminal.release()
        return {}

    async def close_all(self) -> None:
        for terminal_id in list(self._items):
            await self._items.pop(terminal_id).release()


# --- dispatch ----------------------------------------------------------------------------


class ClientMethods:
    """The agent's requests to the client, each to its handler with its params checked
    (`check`: ACP's definition of the method, a malformed value refused rather than
    taken for a default, as schema v1.25 has it) and bound to the handler's signature;
    `ask_permission` is the client's question."""

    def __init__(self, tg: anyio.abc.TaskGroup, ask_permission: Handler, *, check: ParamsCheck) -> None:
        self._check = check
        self.terminals = terminals = Terminals(tg)
        self._handlers: dict[str, Handler] = {
            "session/request_permission": ask_permission,
            "fs/read_text_file": read_text_file, "fs/write_text_file": write_text_file,
            "terminal/create": terminals.create, "terminal/output": terminals.output,
            "terminal/wait_for_exit": terminals.wait_for_exit, "terminal/kill": terminals.kill,
            "terminal/release": terminals.release,
        }

    async def serve(self, method: str, params: dict[str, Any]) -> Any:
        handler = self._handlers.get(method)
        if handler is None:
            raise MethodNotFoundError(f"method not found: {method}")
        self._check(method, params)
        try:
            inspect.signature(handler).bind(**params)
        except TypeError as exc:
            raise ClientParamsError(f"invalid params for {method}: {exc}") from None
        try:
            return await handler(**params)
        except (ClientServiceError, MethodNotFoundError):
            raise
        except Exception as exc:
            # Any other failure is answered in the exception's own words (the agent
            # hands them to the model, and the tool result shows them), not as an
            # internal error; its traceback is logged if it says our code is wrong.
            raise ClientServiceError(f"{type(exc).__name__}: {exc}", bug=is_bug(exc)) from exc
