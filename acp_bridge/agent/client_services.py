"""ClientServices over ACP: the client's `fs/*` and `terminal/*` methods when it
advertises them, the local machine otherwise, and `session/request_permission`.

Capability gating lives here and only here: a method the client did not advertise in
`initialize` is never called.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from acp_bridge.errors import ToolError
from acp_bridge.rpc.connection import Connection
from acp_bridge.rpc.protocol import ClientError
from acp_bridge.tools import permissions
from acp_bridge.tools.base import (
    ExitStatus,
    NotTextError,
    PermissionOutcome,
    PermissionRequest,
    Terminal,
    TerminalOutput,
)
from acp_bridge.tools.local import LocalServices

log = logging.getLogger("acp_bridge.agent.client_services")


def _client_failed(method: str, exc: ClientError) -> ToolError:
    message = exc.error.get("message", "error") if isinstance(exc.error, dict) else str(exc.error)
    return ToolError(f"the client could not {method}: {message}", code="client_error", name="ClientError")


class AcpClientServices:
    def __init__(
        self, conn: Connection, session_id: str, capabilities: Mapping[str, Any], local: LocalServices
    ) -> None:
        self._conn = conn
        self._sid = session_id
        fs_caps = capabilities.get("fs")
        fs: Mapping[str, Any] = fs_caps if isinstance(fs_caps, dict) else {}
        self.can_read = fs.get("readTextFile") is True
        self.can_write = fs.get("writeTextFile") is True
        self.can_terminal = capabilities.get("terminal") is True
        elicitation = capabilities.get("elicitation")
        # The elicitation modes the client can show (ACP: `{}` advertises one, null does not).
        self.elicitation_modes = frozenset(
            mode for mode in ("form", "url")
            if isinstance(elicitation, dict) and isinstance(elicitation.get(mode), dict))
        self._local = local

    async def read_text_file(self, path: Path, line: int | None = None, limit: int | None = None) -> str:
        if not self.can_read:
            return await self._local.read_text_file(path, line, limit)
        params: dict[str, Any] = {"sessionId": self._sid, "path": str(path)}
        if line is not None:
            params["line"] = line
        if limit is not None:
            params["limit"] = limit
        try:
            result = await self._conn.request("fs/read_text_file", params)
        except ClientError as exc:
            raise _client_failed(f"read {path}", exc) from None
        if not isinstance(result, dict) or not isinstance(result.get("content"), str):
            raise ToolError(f"the client's answer to fs/read_text_file for {path} has no text content",
                            code="client_error", name="ClientError")
        text = str(result["content"])
        if "\ufffd" in text or "\0" in text:
            await self._vouch(path, line, limit, text)
        return text

    async def _vouch(self, path: Path, line: int | None, limit: int | None, text: str) -> None:
        """Accept the client's text with a U+FFFD or a NUL in it only if the file here
        says the same. A client that decoded a file that is not UTF-8 hands back U+FFFD
        where its bytes were: edited and written back, the file would lose those bytes.
        Only the file itself tells a real U+FFFD from a replacement; when it cannot be
        read here, or the client's copy differs from it, the text is refused."""
        try:
            here: str | None = await self._local.read_text_file(path, line, limit)
        except NotTextError:
            raise  # the file's own verdict, with its size
        except (ToolError, OSError):
            here = None
        if here != text:
            binary = "\0" in text
            raise NotTextError(path, size=None, binary=binary,
                               detail="" if binary else "the client's copy has U+FFFD replacement characters")

    async def write_text_file(self, path: Path, content: str) -> None:
        if not self.can_write:
            await self._local.write_text_file(path, content)
            return
        try:
            result = await self._conn.request("fs/write_text_file",
                                              {"sessionId": self._sid, "path": str(path), "content": content})
        except ClientError as exc:
            raise _client_failed(f"write {path}", exc) from None
        if result is not None and not isinstance(result, dict):
            raise ToolError(f"the client's answer to fs/write_text_file for {path} is not an object",
                            code="client_error", name="ClientError")

    async def create_terminal(
        self, command: str, *, cwd: Path, output_byte_limit: int, env: Mapping[str, str] | None = None
    ) -> Terminal:
        if not self.can_terminal:
            return await self._local.create_terminal(command, cwd=cwd, output_byte_limit=output_byte_limit,
                                                     env=env)
        params: dict[str, Any] = {"sessionId": self._sid, "command": "/bin/sh", "args": ["-c", command],
                                  "cwd": str(cwd), "outputByteLimit": output_byte_limit}
        if env:
            params["env"] = [{"name": k, "value": v} for k, v in env.items()]
        try:
            result = await self._conn.request("terminal/create", params)
        except ClientError as exc:
            raise _client_failed(f"run {command!r}", exc) from None
        terminal_id = result.get("terminalId") if isinstance(result, dict) else None
        if not isinstance(terminal_id, str):
            raise ToolError("the client's answer to terminal/create has no terminalId",
                            code="client_error", name="ClientError")
        return ClientTerminal(self._conn, self._sid, terminal_id)

    async def request_permission(self, request: PermissionRequest) -> PermissionOutcome:
        # No `status`: the call is `pending` (awaiting approval) from its tool/call on
        # (host/updates.py) until the answer lets it run.
        tool_call: dict[str, Any] = {"toolCallId": request.call_id, "title": request.title,
                                     "kind": request.kind, "rawInput": request.raw_input}
        if request.name is not None:
            tool_call["name"] = request.name
        if request.locations:
            tool_call["locations"] = list(request.locations)
        if request.content:
            tool_call["content"] = list(request.content)
        offered = [dict(o) for o in request.options] or [dict(o) for o in permissions.OPTIONS]
        try:
            result = await self._conn.request("session/request_permission", {
                "sessionId": self._sid, "toolCall": tool_call, "options": offered})
        except ClientError as exc:
            log.warning("permission request failed: %s", exc)
            code = exc.error.get("code")
            message = exc.error.get("message")
            return PermissionOutcome("error", code=code if type(code) is int else None,
                                     message=message if isinstance(message, str) else str(exc))
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if isinstance(outcome, dict) and outcome.get("outcome") == "cancelled":
            return PermissionOutcome("cancelled")
        if isinstance(outcome, dict) and outcome.get("outcome") == "selected":
            option = outcome.get("optionId")
            if isinstance(option, str) and option in {o["optionId"] for o in offered}:
                return PermissionOutcome("selected", option)
        shown = orjson.dumps(result).decode()[:200]  # parsed JSON: it dumps
        log.warning("unusable permission answer %s: the call does not run", shown)
        return PermissionOutcome("invalid", message=f"the client's answer {shown} is not one of the options offered")


    async def elicit(self, call_id: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """ACP `elicitation/create`, tied to the session and the tool call. A mode the
        client did not advertise is declined without asking it (MCP's answer for what
        the user cannot be shown); an error answer, or one that is not an ACP answer,
        is a cancel (nobody chose), its reason logged."""
        mode = request.get("mode")
        if mode not in self.elicitation_modes:
            log.info("elicitation of %s mode declined: the client does not advertise it", mode)
            return {"action": "decline"}
        try:
            result = await self._conn.request("elicitation/create",
                                              {"sessionId": self._sid, "toolCallId": call_id, **request})
        except ClientError as exc:
            log.warning("elicitation request failed: %s", exc)
            return {"action": "cancel"}
        answer = elicitation_answer(result)
        if answer is None:
            log.warning("unusable elicitation answer %s: cancelled", orjson.dumps(result).decode()[:200])
            return {"action": "cancel"}
        return answer


    def elicitation_complete(self, elicitation_id: str) -> None:
        """ACP `elicitation/complete` (a notification, no session: the id names it), to a
        client that shows URL elicitations; others were never shown one."""
        if "url" in self.elicitation_modes:
            self._conn.notify("elicitation/complete", {"elicitationId": elicitation_id})


def elicitation_answer(result: Any) -> dict[str, Any] | None:
    """The client's `elicitation/create` answer as MCP takes it back (`action`, and the
    `content` of an accept: string, number, boolean or list-of-strings values); None
    for anything else."""
    if not isinstance(result, dict) or result.get("action") not in ("accept", "decline", "cancel"):
        return None
    if result["action"] != "accept":
        return {"action": result["action"]}
    content = result.get("content")
    if content is None:
        return {"action": "accept"}
    if not isinstance(content, dict) or not all(_elicited_value(v) for v in content.values()):
        return None
    return {"action": "accept", "content": content}


def _elicited_value(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value)
    return isinstance(value, (str, int, float, bool))


class ClientTerminal:
    """A terminal that lives in the client (ACP `terminal/*`)."""

    def __init__(self, conn: Connection, session_id: str, terminal_id: str) -> None:
        self._conn = conn
        self._params = {"sessionId": session_id, "terminalId": terminal_id}
        self._id = terminal_id

    @property
    def terminal_id(self) -> str | None:
        return self._id

    async def _call(self, method: str) -> dict[str, Any]:
        try:
            result = await self._conn.request(method, self._params)
        except ClientError as exc:
            raise _client_failed(method, exc) from None
        if result is not None and not isinstance(result, dict):
            raise ToolError(f"the client's answer to {method} is not an object",
                            code="client_error", name="ClientError")
        return result or {}

    async def wait_for_exit(self) -> ExitStatus:
        result = await self._call("terminal/wait_for_exit")
        return _exit(result)

    async def output(self) -> TerminalOutput:
        result = await self._call("terminal/output")
        status = result.get("exitStatus")
        output, truncated = result.get("output"), result.get("truncated", False)
        if not isinstance(output, str) or not isinstance(truncated, bool):
            raise ToolError("the client's answer to terminal/output lacks a text output",
                            code="client_error", name="ClientError")
        return TerminalOutput(output=output, truncated=truncated,
                              exit_status=_exit(status) if isinstance(status, dict) else None)

    async def kill(self) -> None:
        await self._call("terminal/kill")

    async def release(self) -> None:
        await self._call("terminal/release")


def _exit(result: Mapping[str, Any]) -> ExitStatus:
    code = result.get("exitCode")
    sig = result.get("signal")
    return ExitStatus(code if type(code) is int else None, sig if isinstance(sig, str) else None)
