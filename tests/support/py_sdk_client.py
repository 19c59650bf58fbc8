"""The official Python SDK client (`agent-client-protocol`, imported as `acp`) as an
`SdkClient`: `acp.spawn_agent_process` starts the agent and connects the SDK's
`ClientSideConnection`, whose client router hands the agent's requests and notifications
to the handlers here (each parsed by the SDK's pydantic models first).

The client's requests go out through the SDK's own JSON-RPC connection, as its typed
methods send them (`acp.utils.request_model`: `Connection.send_request`, then the answer
parsed by the method's response model); it is used directly so that one scenario drives
every SDK, and for the methods 0.12 has no typed call for (`session/delete`, `logout`,
`$/cancel_request`). Every message the agent sends is parsed by the SDK's model of its
definition (the vendored schema's method table names it; the SDK's models carry the same
names) and compared with what it was: a value the model changed is an SDK problem, a
member it does not know is noted (the SDK is generated from schema v1.19).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import acp.schema
import anyio
import anyio.abc
from acp import spawn_agent_process
from acp.connection import StreamDirection, StreamEvent
from acp.exceptions import RequestError
from pydantic import BaseModel, ValidationError

from tests.support.acp_schema import RequestId, method_table
from tests.support.sdk_clients import CANCELS, IN, OUT, Pending, SdkClient, SdkRequestError, compare


def dumped(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


class Handlers:
    """The client side the SDK's router calls: permissions and elicitations answered as the
    driver says, the file system served for real, updates recorded."""

    def __init__(self, driver: PyClient) -> None:
        self.driver = driver

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **kwargs: Any) -> dict[str, Any]:
        kind = self.driver.permissions.pop(0) if self.driver.permissions else "cancelled"
        chosen = [o.option_id for o in options if o.kind == kind]
        self.driver.asked.append(("session/request_permission", {
            "sessionId": session_id, "toolCall": dumped(tool_call), "options": [dumped(o) for o in options]}))
        if chosen:
            return {"outcome": {"outcome": "selected", "optionId": chosen[0]}}
        return {"outcome": {"outcome": "cancelled"}}

    async def read_text_file(self, session_id: str, path: str, line: int | None = None,
                             limit: int | None = None, **kwargs: Any) -> dict[str, Any]:
        self.driver.asked.append(("fs/read_text_file", {"sessionId": session_id, "path": path}))
        lines = Path(path).read_text(encoding="utf-8").splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        return {"content": "".join(lines[start:] if limit is None else lines[start:start + limit])}

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> dict[str, Any]:
        self.driver.asked.append(("fs/write_text_file", {"sessionId": session_id, "path": path}))
        Path(path).write_text(content, encoding="utf-8")
        return {}

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> dict[str, Any]:
        self.driver.asked.append(("elicitation/create", {"message": message, **kwargs}))
        return self.driver.elicitations.pop(0) if self.driver.elicitations else {"action": "decline"}

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        self.driver.asked.append(("elicitation/complete", {"elicitationId": elicitation_id}))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.driver.delivered.append({"sessionId": session_id, "update": dumped(update)})


class PyClient(SdkClient):
    """`async with PyClient(agent_command, cwd=...) as client:` the SDK's client running the
    agent (its stderr to `stderr_file`); closed on the way out."""

    def __init__(self, command: list[str], *, cwd: Path, env: Mapping[str, str] | None = None,
                 stderr_file: Path) -> None:
        super().__init__()
        self.label = f"python {importlib.metadata.version('agent-client-protocol')}"
        self._command = command
        self._cwd = cwd
        self._env = {**os.environ, **(env or {})}
        self._stderr_file = stderr_file
        self._ids: dict[RequestId, str] = {}  # our requests' ids -> their methods
        self._refused_updates = 0  # session/update notifications the SDK's model refuses
        self._armed: dict[str, tuple[str, Pending]] = {}  # session -> its prompt's cancel (`start`)

    async def __aenter__(self) -> PyClient:
        self._stderr = open(self._stderr_file, "ab")  # noqa: SIM115  # closed in __aexit__
        self._spawned = spawn_agent_process(
            lambda _agent: Handlers(self), *self._command, env=self._env, cwd=self._cwd,  # type: ignore[arg-type, return-value]
            transport_kwargs={"stderr": self._stderr.fileno(), "limit": 64 * 1024 * 1024},
            observers=[self._observe], use_unstable_protocol=True)
        self._conn, self._process = await self._spawned.__aenter__()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            if self.exit_code is None:
                with anyio.move_on_after(15):
                    await self.close()
            self._tg.cancel_scope.cancel()
            await self._tg.__aexit__(None, None, None)
            await self._spawned.__aexit__(None, None, None)
        finally:
            self._stderr.close()

    # The SDK's JSON-RPC connection (ClientSideConnection keeps it as `_conn`): what its
    # typed methods send through.
    def _rpc(self) -> Any:
        return self._conn._conn

    def start(self, method: str, params: Mapping[str, Any], *, cancel_at_chunk: str | None = None) -> Pending:
        pending = Pending(method)
        if cancel_at_chunk is not None:
            assert cancel_at_chunk in CANCELS, cancel_at_chunk
            self._armed[params["sessionId"]] = (cancel_at_chunk, pending)

        async def run() -> None:
            # The id the SDK gives this request: it is taken before send_request's first
            # wait, with nothing run in between.
            pending.request_id = self._rpc()._next_request_id
            self._ids[pending.request_id] = method
            sent = anyio.current_time()
            try:
                result = await self._rpc().send_request(method, dict(params))
            except RequestError as exc:
                pending.took = anyio.current_time() - sent
                pending.settle(error=SdkRequestError(exc.code, str(exc), exc.data))
            except Exception as exc:  # the connection is gone: the test sees it as an error
                pending.settle(error=SdkRequestError(None, repr(exc)))
            else:
                pending.took = anyio.current_time() - sent
                pending.settle(result=result)

        self._tg.start_soon(run)
        return pending

    def _cancel_now(self, way: str, pending: Pending, session_id: str) -> None:
        """`cancel_at_chunk`'s cancel, as the chunk is read (SdkClient.start)."""
        if way == "session/cancel":
            self._tg.start_soon(self.notify, "session/cancel", {"sessionId": session_id})
        elif way == "$/cancel_request":
            self._tg.start_soon(self.notify, "$/cancel_request", {"requestId": pending.request_id})
        else:
            pending.close = self.start("session/close", {"sessionId": session_id})

    async def cancel_request(self, pending: Pending) -> None:
        await self.until(lambda: pending.request_id is not None, f"the id of {pending.method}")
        await self.notify("$/cancel_request", {"requestId": pending.request_id})

    async def notify(self, method: str, params: Mapping[str, Any]) -> None:
        await self._rpc().send_notification(method, dict(params))

    async def _write_raw(self, text: str, request_id: RequestId) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(text.encode() + b"\n")
        await self._process.stdin.drain()
        self.traffic.append((OUT, _parsed(text)))

    async def close(self) -> int:
        assert self._process.stdin is not None
        # The SDK hands each notification to its handler in a task of its own: wait for
        # all of them (those its models refuse never come).
        await self.until(lambda: len(self.delivered) + self._refused_updates >= self._raw_updates(),
                         "the SDK to deliver every session/update")
        self._process.stdin.close()
        with anyio.fail_after(30):
            self.exit_code = await self._process.wait()
        return self.exit_code

    def _raw_updates(self) -> int:
        return sum(1 for m in self.received() if isinstance(m, dict) and m.get("method") == "session/update")

    def _observe(self, event: StreamEvent) -> None:
        message = event.message
        if event.direction is StreamDirection.OUTGOING:
            self.traffic.append((OUT, message))
            return
        self.traffic.append((IN, message))
        self._check(message)
        params = message.get("params")
        if message.get("method") == "session/update" and isinstance(params, dict) \
                and params.get("sessionId") in self._armed \
                and (params.get("update") or {}).get("sessionUpdate") == "agent_message_chunk":
            self._cancel_now(*self._armed.pop(params["sessionId"]), params["sessionId"])

    def _check(self, message: dict[str, Any]) -> None:
        """The agent's `message` parsed by the SDK's model of its definition."""
        if "method" in message:
            method, slot, value = message["method"], "params", message.get("params")
        elif "error" in message:
            method, slot, value = "", "error", message["error"]
        else:
            method, slot, value = self._ids.get(message.get("id"), ""), "result", message.get("result")
        if method.startswith("_") or (slot != "error" and not method):
            return
        entry = method_table().get(method) or method_table(unstable=True).get(method)
        name = "Error" if slot == "error" else entry and (entry.params if slot == "params" else entry.result)
        model = getattr(acp.schema, name or "", None)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            self.sdk_unknown.add(f"{method}: the SDK has no model {name}")
            return
        try:
            parsed = model.model_validate(value)
        except ValidationError as exc:
            self.sdk_problems.append(f"{name}: {exc.errors()[:3]}")
            self._refused_updates += method == "session/update"
            return
        changed, unknown = compare(value, dumped(parsed))
        if changed:
            self.sdk_problems.append(f"{name}: the SDK changed {changed}")
        self.sdk_unknown.update(f"{name}.{path}" for path in unknown)


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
