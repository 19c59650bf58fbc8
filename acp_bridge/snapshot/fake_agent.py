"""`acp-bridge snapshot fake-agent LOG`: a recorded session served back as an ACP agent
over stdio, for client developers to test against (docs/snapshots.md, "A fake agent").

Made for sessions recorded by `acp-bridge wrap` (a third-party agent's turns, with its
plans, modes and interim tool updates in `wrapped/update`), it serves any session log:
each `session/prompt` of a session is answered from the recorded turn of the same
number. The turn's events become `session/update`s through the agent's own mapping
(acp_bridge.agent.updates, as the live agent streamed them); a recorded tool result
that carried a permission decision is preceded by a `session/request_permission` to the
client (with the recorded call and the recorded agent's option where the log has it,
acp_bridge.snapshot.fake_recording; the recorded decision is replayed whatever the
answer); the answer is settled from the recorded `turn/end` (acp_bridge.agent.settlement).
A turn the client cancelled (`session/cancel`) streams what it had, then waits for the
client's `session/cancel`; an interrupted one is answered at once (`cancelled`, as the
agent's crash or shutdown was). Updates the recording holds between turns go out right
after the answer of the turn they followed (those before the first turn: after the
`session/new` answer). The prompt is checked against the recorded one as `replay:`
checks it.

`session/load` replays the recorded turns (all of them for the recorded session's id or
the wrapped agent's, or `_meta.acpBridge.fakeAgent.turns` of them; for a session this
process opened, the turns it was served), and the session goes on from there.
`session/set_mode` and `session/set_config_option` take the modes and options the
recording shows. Other methods are answered -32601 naming what is served.
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
from acp_bridge.agent.params import check_params
from acp_bridge.agent.settlement import TurnFailed, settle
from acp_bridge.agent.updates import UpdateContext, updates_for
from acp_bridge.models.recording import ReadLog
from acp_bridge.models.replay import CHECK_ENV, RECORD_AGAIN, same_up_to_cwd
from acp_bridge.rpc.connection import Connection
from acp_bridge.rpc.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
    ClientError,
    RpcError,
    invalid_params,
)
from acp_bridge.snapshot.fake_recording import FakeRecording, permission_request, read_fake
from session import Event
from session.events import TOOL_CALL, TOOL_RESULT, TURN_END, USER_MESSAGE, WRAPPED_UPDATE


@dataclass
class _Session:
    cwd: str
    mode: str | None
    options: list[dict[str, Any]]
    turn: int = 0
    running: bool = False
    cancelled: anyio.Event = field(default_factory=anyio.Event)
    ctx: UpdateContext = field(default_factory=lambda: UpdateContext(replay=False))


class FakeAgent:
    def __init__(self, log: ReadLog, source: str, *, check: bool = True) -> None:
        self.recording: FakeRecording = read_fake(log, source)
        self.source = source
        self.header = log.header
        self.check = check
        self.turns = self.recording.turns
        self.between = self.recording.between
        self.sessions: dict[str, _Session] = {}
        self.conn: Connection | None = None

    def methods(self) -> dict[str, Callable[..., Awaitable[Any]]]:
        table: dict[str, Callable[..., Awaitable[Any]]] = {
            "initialize": self.initialize, "session/new": self.new_session, "session/load": self.load_session,
            "session/prompt": self.prompt, "session/cancel": self.cancel, "session/set_mode": self.set_mode,
            "session/set_config_option": self.set_config_option, "session/close": self.close_session}
        return {name: _checked(name, fn) for name, fn in table.items()}

    async def unknown(self, method: str, params: Any, is_request: bool) -> Any:
        """A method the fake agent does not serve: -32601 for a request, saying what it
        serves; a notification is ignored."""
        if not is_request:
            return None
        served = sorted(self.methods())
        raise RpcError(METHOD_NOT_FOUND, f"method not found: {method} (the fake agent serves {', '.join(served)})",
                       {"method": method})

    def _conn(self) -> Connection:
        assert self.conn is not None
        return self.conn

    async def initialize(self, protocolVersion: int, **_: Any) -> dict[str, Any]:
        wrapped: dict[str, Any] = dict(self.header.get("wrapped") or {})
        info = wrapped.get("agentInfo") or {"name": "acp-bridge-fake-agent", "version": __version__}
        return {"protocolVersion": 1, "authMethods": [], "agentInfo": info,
                "agentCapabilities": {"loadSession": True,
                                      "promptCapabilities": {"image": False, "audio": False,
                                                             "embeddedContext": True}},
                "_meta": {"acpBridge": {"fakeAgent": {"turns": len(self.turns)}}}}

    def _open(self, sid: str, cwd: str) -> _Session:
        session = _Session(cwd, self.recording.first_mode, [dict(o) for o in self.recording.options])
        self.sessions[sid] = session
        return session

    def _state(self, session: _Session) -> dict[str, Any]:
        state = self.recording.mode_state(session.mode)
        return {**state, "configOptions": session.options} if session.options else state

    async def new_session(self, cwd: str, mcpServers: list[Any] | None = None, **_: Any) -> dict[str, Any]:
        sid = str(uuid.uuid4())
        session = self._open(sid, cwd)
        # What the recorded agent sent before its first turn follows the answer.
        self._send_all(sid, session.ctx, self.between.get(0, []), after_answer=True)
        return {"sessionId": sid, **self._state(session)}

    async def load_session(self, sessionId: str, cwd: str, mcpServers: list[Any] | None = None,
                           _meta: dict[str, Any] | None = None, **_: Any) -> dict[str, Any]:
        asked = _turns_asked(_meta, len(self.turns))
        session = self.sessions.get(sessionId)
        if session is not None and session.running:
            raise RpcError(INVALID_PARAMS, f"session {sessionId} has a prompt running", {"field": "sessionId"})
        if session is None:
            wrapped: dict[str, Any] = dict(self.header.get("wrapped") or {})
            recorded = {self.header["id"], wrapped.get("sessionId")}
            if sessionId not in recorded:
                raise RpcError(RESOURCE_NOT_FOUND, f"session {sessionId} not found: the fake agent serves the "
                               f"recorded session {self.header['id']} and the sessions it opened",
                               {"code": "session_not_found", "sessionId": sessionId})
            session = self._open(sessionId, cwd)
            session.turn = asked
        session.cwd = cwd
        ctx = UpdateContext(replay=True)
        self._send_all(sessionId, ctx, self.between.get(0, []))
        for number in range(1, session.turn + 1):
            self._send_all(sessionId, ctx, [*self.turns[number], *self.between.get(number, [])])
        return self._state(session)

    async def close_session(self, sessionId: str, **_: Any) -> dict[str, Any]:
        session = self.sessions.pop(self._session_id(sessionId), None)
        if session is not None:
            session.cancelled.set()
        return {}

    async def set_mode(self, sessionId: str, modeId: str, **_: Any) -> dict[str, Any]:
        session = self.sessions[self._session_id(sessionId)]
        self._set_mode(sessionId, session, modeId, "modeId")
        return {}

    def _set_mode(self, sid: str, session: _Session, mode: str, field_name: str) -> None:
        modes = self.recording.mode_ids()
        if mode not in modes:
            raise invalid_params(f"unknown mode {mode!r}: the recording has {', '.join(modes) or 'none'}",
                                 field=field_name)
        session.mode = mode
        for option in session.options:
            if option.get("id") == "mode":
                option["currentValue"] = mode
        if not self.recording.wrapped:  # as our agent does (a wrapped agent's own are recorded)
            self._conn().notify_update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": mode})
            self._options_changed(sid, session)

    def _options_changed(self, sid: str, session: _Session) -> None:
        if session.options and not self.recording.wrapped:
            self._conn().notify_update(sid, {"sessionUpdate": "config_option_update",
                                             "configOptions": session.options})

    async def set_config_option(self, sessionId: str, configId: str, value: Any = None,
                                **_: Any) -> dict[str, Any]:
        session = self.sessions[self._session_id(sessionId)]
        option = next((o for o in session.options if o.get("id") == configId), None)
        if option is None:
            ids = [str(o.get("id")) for o in session.options]
            raise invalid_params(f"unknown config option {configId!r}: the recording has {', '.join(ids) or 'none'}",
                                 field="configId")
        values = [choice.get("value") for choice in option.get("options", []) if isinstance(choice, dict)]
        if values and value not in values:
            raise invalid_params(f"unknown value {value!r} for {configId}: use one of "
                                 f"{', '.join(map(str, values))}", field="value")
        if configId == "mode":
            self._set_mode(sessionId, session, value, "value")
        else:
            option["currentValue"] = value
            self._options_changed(sessionId, session)
        return {"configOptions": session.options}

    async def cancel(self, sessionId: str, **_: Any) -> None:
        session = self.sessions.get(sessionId)
        if session is not None:
            session.cancelled.set()

    def _session_id(self, sid: str) -> str:
        if sid not in self.sessions:
            raise RpcError(RESOURCE_NOT_FOUND, f"session {sid} is not open in the fake agent: use session/new "
                           "or session/load", {"code": "session_not_found", "sessionId": sid})
        return sid

    async def prompt(self, sessionId: str, prompt: list[Any], **_: Any) -> dict[str, Any]:
        session = self.sessions[self._session_id(sessionId)]
        if session.running:
            raise RpcError(INVALID_PARAMS, f"session {sessionId} has a prompt running", {"field": "sessionId"})
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
        session.running = True
        try:
            return await self._turn(sessionId, session, events, number)
        finally:
            session.running = False

    async def _turn(self, sid: str, session: _Session, events: list[Event], number: int) -> dict[str, Any]:
        stream = events[:-1]
        merged: set[int] = set()  # wrapped/updates sent with the result before them
        for index, event in enumerate(stream):
            if index in merged:
                continue
            if event["type"] == TOOL_RESULT and "permission" in event["data"]:
                await self._ask(sid, event)
            extra = _extra_fields(event, stream[index + 1] if index + 1 < len(stream) else None)
            if extra is not None:
                merged.add(index + 1)
            self._send(sid, session.ctx, event, extra)
        end = events[-1]
        reason = end["data"]["reason"]
        if reason["kind"] == "cancelled" and reason.get("by") != "session/request_permission":
            # The client ended it (session/cancel; $/cancel_request ends this handler
            # itself): it is answered when the client does so again. A turn the agent's
            # crash or shutdown cut off, or a cancelled permission ended, is answered now.
            await session.cancelled.wait()
        # What the recorded agent sent after this turn follows its answer.
        self._send_all(sid, session.ctx, self.between.get(number, []), after_answer=True)
        answer = settle(end)
        if isinstance(answer, TurnFailed):
            raise RpcError(answer.code, answer.message, dict(answer.data))
        return dict(answer)

    def _updates(self, ctx: UpdateContext, event: Event, extra: dict[str, Any] | None = None) -> list[Any]:
        updates = updates_for(event, ctx)
        if event["type"] == TOOL_CALL and self.header.get("wrapped"):
            # A wrapped agent's own `in_progress` (if it sent one) is a wrapped/update
            # of the log: the mapping's is not added to it.
            updates = updates[:1]
        if extra is not None:
            updates = [{**update, **extra} for update in updates]
        return updates

    def _send(self, sid: str, ctx: UpdateContext, event: Event, extra: dict[str, Any] | None = None) -> None:
        for update in self._updates(ctx, event, extra):
            self._conn().notify_update(sid, update)

    def _send_all(self, sid: str, ctx: UpdateContext, events: list[Event], *, after_answer: bool = False) -> None:
        for event in events:
            for update in self._updates(ctx, event):
                if after_answer:
                    self._conn().send_after_answer({"jsonrpc": "2.0", "method": "session/update",
                                                    "params": {"sessionId": sid, "update": update}})
                else:
                    self._conn().notify_update(sid, update)

    async def _ask(self, sid: str, event: Event) -> None:
        # The recorded decision is replayed whatever the client says.
        with contextlib.suppress(ClientError):
            await self._conn().request("session/request_permission",
                                       permission_request(self.recording, sid, event["data"]))

    def _failed(self, turn: int, code: str, why: str) -> RpcError:
        return RpcError(INTERNAL_ERROR, f"fake agent: turn {turn}: {why}; {RECORD_AGAIN}",
                        {"code": code, "recording": self.source})


def _checked(method: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handler(**params: Any) -> Any:
        check_params(method, params)  # the agent's own checks: -32602 naming the field
        return await fn(**params)

    return handler


def _turns_asked(meta: Any, recorded: int) -> int:
    """How many recorded turns a `session/load` replays: `_meta.acpBridge.fakeAgent.turns`
    if given (0 to all), else all."""
    asked = ((meta or {}).get("acpBridge") or {}).get("fakeAgent", {}).get("turns") if isinstance(meta, dict) else None
    if asked is None:
        return recorded
    if type(asked) is not int or not 0 <= asked <= recorded:
        raise invalid_params(f"_meta.acpBridge.fakeAgent.turns must be an integer from 0 to {recorded} "
                             "(the recorded turns)", field="_meta")
    return asked


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
    agent.conn = Connection(reader, writer, agent.methods(), fallback=agent.unknown)
    try:
        anyio.run(agent.conn.serve)
    finally:
        reader.close()
        writer.close()
    return 0
