"""`acp-bridge snapshot fake-agent LOG`: a recorded session served back as an ACP agent
over stdio, for client developers to test against (docs/snapshots.md, "A fake agent").

Made for sessions recorded by `acp-bridge wrap` (a third-party agent's turns, with its
plans, modes and interim tool updates in `wrapped/update`), it serves any session log:
each `session/prompt` of a session is answered from the recorded turn of the same
number. The turn's events become `session/update`s through the agent's own mapping
(acp_bridge.agent.updates, as the live agent streamed them); a recorded tool result
that carried a permission decision is preceded by a `session/request_permission` to the
client (with our four options; the recorded decision is replayed whatever the answer);
the answer is settled from the recorded `turn/end` (acp_bridge.agent.settlement). A
turn the client cancelled (`session/cancel`) streams what it had, then waits for the
client's `session/cancel`; an interrupted one is answered at once (`cancelled`, as the
agent's crash or shutdown was). Updates the recording holds between turns are sent before
the answer of the turn they followed (those before the first turn: before the first
turn's own). The prompt is checked against the recorded one as `replay:` checks it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from acp_bridge import __version__
from acp_bridge.agent import permissions
from acp_bridge.agent.settlement import TurnFailed, settle
from acp_bridge.agent.updates import UpdateContext, updates_for
from acp_bridge.models.recording import ReadLog
from acp_bridge.models.replay import CHECK_ENV, RECORD_AGAIN, same_up_to_cwd
from acp_bridge.rpc.connection import Connection
from acp_bridge.rpc.protocol import INTERNAL_ERROR, INVALID_PARAMS, ClientError, RpcError
from session import Event
from session.events import (
    TOOL_CALL,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    WRAPPED_UPDATE,
)


@dataclass
class _Session:
    cwd: str
    turn: int = 0
    cancelled: anyio.Event = field(default_factory=anyio.Event)
    ctx: UpdateContext = field(default_factory=lambda: UpdateContext(replay=False))


class FakeAgent:
    def __init__(self, log: ReadLog, source: str, *, check: bool = True) -> None:
        self.source = source
        self.header = log.header
        self.check = check
        self.turns: dict[int, list[Event]] = {}
        self.between: dict[int, list[Event]] = {}  # after turn N (0: before the first)
        turn = 0
        for event in log.events:
            if event["type"] == TURN_START:
                turn = event["data"]["turn"]
                self.turns[turn] = []
            if turn in self.turns and (not self.turns[turn] or self.turns[turn][-1]["type"] != TURN_END):
                self.turns[turn].append(event)
            else:
                self.between.setdefault(turn, []).append(event)
        self.sessions: dict[str, _Session] = {}
        self.conn: Connection | None = None
        first = self.turns.get(1, [])
        self.mode: str | None = first[0]["data"].get("mode") if first else None

    def methods(self) -> dict[str, Callable[..., Awaitable[Any]]]:
        return {"initialize": self.initialize, "session/new": self.new_session,
                "session/prompt": self.prompt, "session/cancel": self.cancel}

    async def initialize(self, protocolVersion: int, **_: Any) -> dict[str, Any]:
        wrapped: dict[str, Any] = dict(self.header.get("wrapped") or {})
        info = wrapped.get("agentInfo") or {"name": "acp-bridge-fake-agent", "version": __version__}
        return {"protocolVersion": 1, "authMethods": [], "agentInfo": info,
                "agentCapabilities": {"loadSession": False,
                                      "promptCapabilities": {"image": False, "audio": False,
                                                             "embeddedContext": True}},
                "_meta": {"acpBridge": {"fakeAgent": {"turns": len(self.turns)}}}}

    async def new_session(self, cwd: str, mcpServers: list[Any] | None = None, **_: Any) -> dict[str, Any]:
        sid = str(uuid.uuid4())
        self.sessions[sid] = _Session(cwd)
        answer: dict[str, Any] = {"sessionId": sid}
        if self.mode is not None:  # the recorded mode, so a wrapper records it again
            answer["modes"] = {"currentModeId": self.mode,
                               "availableModes": [{"id": self.mode, "name": self.mode}]}
        return answer

    async def cancel(self, sessionId: str, **_: Any) -> None:
        session = self.sessions.get(sessionId)
        if session is not None:
            session.cancelled.set()

    async def prompt(self, sessionId: str, prompt: list[Any], **_: Any) -> dict[str, Any]:
        session = self.sessions.get(sessionId)
        if session is None:
            raise RpcError(INVALID_PARAMS, f"unknown session {sessionId}", {"field": "sessionId"})
        session.turn += 1
        session.cancelled = anyio.Event()
        number = session.turn
        events = self.turns.get(number)
        if events is None or events[-1]["type"] != TURN_END:
            raise self._failed(number, "replay_overrun", f"the recording has no turn {number} "
                               f"({len(self.turns)} turns)")
        recorded = next((e["data"]["content"] for e in events if e["type"] == USER_MESSAGE), None)
        if self.check and not same_up_to_cwd(recorded, prompt, self.header["cwd"], session.cwd):
            raise self._failed(number, "replay_mismatch", "the prompt differs from the recorded one")
        pending = list(self.between.get(0, [])) if number == 1 else []
        stream = [*pending, *events[:-1], *self.between.get(number, [])]
        merged: set[int] = set()  # wrapped/updates sent with the result before them
        for index, event in enumerate(stream):
            if index in merged:
                continue
            if event["type"] == TOOL_RESULT and "permission" in event["data"]:
                await self._ask(sessionId, event)
            extra = _extra_fields(event, stream[index + 1] if index + 1 < len(stream) else None)
            if extra is not None:
                merged.add(index + 1)
            self._send(sessionId, session.ctx, event, extra)
        end = events[-1]
        reason = end["data"]["reason"]
        if reason["kind"] == "cancelled" and reason.get("by") != "session/request_permission":
            # The client ended it (session/cancel; $/cancel_request ends this handler
            # itself): it is answered when the client does so again. A turn the agent's
            # crash or shutdown cut off, or a cancelled permission ended, is answered now.
            await session.cancelled.wait()
        answer = settle(end)
        if isinstance(answer, TurnFailed):
            raise RpcError(answer.code, answer.message, dict(answer.data))
        return dict(answer)

    def _send(self, sid: str, ctx: UpdateContext, event: Event, extra: dict[str, Any] | None = None) -> None:
        assert self.conn is not None
        updates = updates_for(event, ctx)
        if event["type"] == TOOL_CALL and self.header.get("wrapped"):
            # A wrapped agent's own `in_progress` (if it sent one) is a wrapped/update
            # of the log: the mapping's is not added to it.
            updates = updates[:1]
        if extra is not None:
            updates = [{**update, **extra} for update in updates]
        for update in updates:
            self.conn.notify_update(sid, update)

    async def _ask(self, sid: str, event: Event) -> None:
        assert self.conn is not None
        call = event["data"]["callId"]
        # The recorded decision is replayed whatever the client says.
        with contextlib.suppress(ClientError):
            await self.conn.request("session/request_permission", {
                "sessionId": sid, "toolCall": {"toolCallId": call}, "options": list(permissions.OPTIONS)})

    def _failed(self, turn: int, code: str, why: str) -> RpcError:
        return RpcError(INTERNAL_ERROR, f"fake agent: turn {turn}: {why}; {RECORD_AGAIN}",
                        {"code": code, "recording": self.source})


def _extra_fields(event: Event, following: Event | None) -> dict[str, Any] | None:
    """The fields `acp-bridge wrap` kept aside of a wrapped agent's final tool call update
    (rawOutput, _meta, ...: a `wrapped/update` right after its `tool/result`), to send
    with the result again as one update; None if `event` has none."""
    if event["type"] != TOOL_RESULT or following is None or following["type"] != WRAPPED_UPDATE:
        return None
    update = following["data"].get("update")
    if not (isinstance(update, dict) and update.get("sessionUpdate") == "tool_call_update"
            and update.get("toolCallId") == event["data"]["callId"] and "status" not in update):
        return None
    return {k: v for k, v in update.items() if k not in ("sessionUpdate", "toolCallId")}


def serve(source: str) -> int:
    """Serve the recording `source` (a log file or a stored session id) on stdio."""
    import sys

    from acp_bridge.models import ModelSpecError
    from acp_bridge.models.recording import read_log
    from acp_bridge.rpc.transport import FdLineReader, FdWriter

    try:
        log = read_log(source)
    except ModelSpecError as exc:
        print(f"acp-bridge snapshot fake-agent: {exc}", file=sys.stderr)
        return 2
    agent = FakeAgent(log, source, check=os.environ.get(CHECK_ENV, "strict") != "loose")
    reader, writer = FdLineReader(sys.stdin.fileno()), FdWriter(sys.stdout.fileno())
    agent.conn = Connection(reader, writer, agent.methods())
    try:
        anyio.run(agent.conn.serve)
    finally:
        reader.close()
        writer.close()
    return 0
