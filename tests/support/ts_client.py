"""The official TypeScript SDK client (`@agentclientprotocol/sdk`) as an `SdkClient`: the
Node script tests/support/ts_client/client.mjs on an installed copy of the package, driven
over its stdio (its ops and events are described there).

`$ACP_BRIDGE_TEST_TS_SDK` names the installed package folders (`.../node_modules/
@agentclientprotocol/sdk`), separated by the path separator (`:`); `.ci/run` installs the
current 2.x and the previous major, pinned, and sets it. Without it the suites skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from tests.support.acp_schema import RequestId
from tests.support.sdk_clients import CANCELS, IN, OUT, Pending, SdkClient, SdkRequestError

ENV = "ACP_BRIDGE_TEST_TS_SDK"
CLIENT_JS = Path(__file__).resolve().parent / "ts_client" / "client.mjs"
PACKAGE = "@agentclientprotocol/sdk"


def sdk_folders() -> list[Path]:
    """The installed SDK packages `$ACP_BRIDGE_TEST_TS_SDK` names (ValueError for a folder
    that is not one)."""
    folders = [Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p]
    for folder in folders:
        if sdk_version(folder) is None:
            raise ValueError(f"${ENV}: {folder} is not an installed {PACKAGE}")
    return folders


def sdk_version(folder: Path) -> str | None:
    try:
        package = json.loads((folder / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return str(package["version"]) if package.get("name") == PACKAGE else None


class TsClient(SdkClient):
    """`async with TsClient(sdk_folder, agent_command, cwd=...) as client:` the Node client
    running the agent; closed (and the agent with it) on the way out."""

    def __init__(self, sdk: Path, command: list[str], *, cwd: Path, env: Mapping[str, str] | None = None) -> None:
        super().__init__()
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not on PATH (the TypeScript SDK client runs on Node.js)")
        self.label = f"typescript {sdk_version(sdk)}"
        self._config = {"sdk": str(sdk), "command": command, "cwd": str(cwd), "env": dict(env or {})}
        self._argv = [node, str(CLIENT_JS), json.dumps(self._config)]
        self._pending: dict[str, Pending] = {}
        self._tags = 0
        self._ready = anyio.Event()
        self._exited = anyio.Event()
        self.stderr = bytearray()

    async def __aenter__(self) -> TsClient:
        self._proc = await anyio.open_process(self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._read)
        self._tg.start_soon(self._read_stderr)
        with anyio.fail_after(30):
            await self._ready.wait()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if not self._exited.is_set():
            with anyio.move_on_after(15):
                await self.close()
        if self._proc.returncode is None:
            self._proc.kill()
        await self._proc.wait()
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        await self._proc.aclose()

    async def _send(self, op: dict[str, Any]) -> None:
        assert self._proc.stdin is not None
        await self._proc.stdin.send(json.dumps(op).encode() + b"\n")

    def start(self, method: str, params: Mapping[str, Any], *, cancel_at_chunk: str | None = None) -> Pending:
        pending = self._new(method)
        op = {"op": "request", "tag": pending.tag, "method": method, "params": dict(params)}
        if cancel_at_chunk is not None:
            assert cancel_at_chunk in CANCELS, cancel_at_chunk
            op["cancelAtChunk"] = cancel_at_chunk
            if cancel_at_chunk == "session/close":
                pending.close = self._new("session/close")
                op["closeTag"] = pending.close.tag
        self._tg.start_soon(self._send, op)
        return pending

    def _new(self, method: str) -> Pending:
        self._tags += 1
        pending = self._pending[f"t{self._tags}"] = Pending(method, f"t{self._tags}")
        return pending

    async def cancel_request(self, pending: Pending) -> None:
        await self._send({"op": "cancel", "tag": pending.tag})

    async def notify(self, method: str, params: Mapping[str, Any]) -> None:
        await self._send({"op": "notify", "method": method, "params": dict(params)})

    async def _write_raw(self, text: str, request_id: RequestId) -> None:
        await self._send({"op": "raw", "text": text, **({} if request_id is None else {"id": request_id})})

    async def answer_with(self, *, permissions: list[str] | None = None,
                          elicitations: list[dict[str, Any]] | None = None) -> None:
        await super().answer_with(permissions=permissions, elicitations=elicitations)
        await self._send({"op": "policy", "permissions": self.permissions, "elicitations": self.elicitations})

    async def close(self) -> int:
        await self._send({"op": "close"})
        with anyio.fail_after(30):
            await self._exited.wait()
        assert self.exit_code is not None
        return self.exit_code

    async def _read(self) -> None:
        assert self._proc.stdout is not None
        buffer = b""
        async for chunk in self._proc.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self._event(json.loads(line))
        for pending in self._pending.values():  # the client is gone: nothing more will come
            if not pending.done.is_set():
                pending.settle(error=SdkRequestError(None, "the TypeScript client exited"))
        self._exited.set()

    async def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        async for chunk in self._proc.stderr:
            self.stderr += chunk
            del self.stderr[:-65536]

    def _event(self, event: dict[str, Any]) -> None:
        kind = event["ev"]
        if kind in (IN, OUT):
            try:
                message: Any = json.loads(event["text"])
            except ValueError:
                message = event["text"]
            self.traffic.append((kind, message))
            check = event.get("check")
            if check is not None:
                if not check["ok"]:
                    self.sdk_problems.append(f"{check.get('def')}: {check.get('issues') or check.get('changed')}")
                self.sdk_unknown.update(f"{check.get('def')}.{path}" for path in check.get("unknown", ()))
        elif kind == "update":
            self.delivered.append(event["params"])
        elif kind == "asked":
            self.asked.append((event["method"], event["params"]))
        elif kind in ("result", "error"):
            pending = self._pending.pop(event["tag"])
            pending.took = event["ms"] / 1000
            if kind == "result":
                pending.settle(result=event["result"])
            else:
                error = event["error"]
                pending.settle(error=SdkRequestError(error["code"], error["message"], error.get("data")))
        elif kind == "ready":
            self._ready.set()
        elif kind == "exit":
            self.exit_code = event["code"]
        elif kind == "fatal":
            self.sdk_problems.append(f"the client failed: {event['message']}")
