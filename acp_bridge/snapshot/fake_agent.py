"""`acp-bridge snapshot fake-agent LOG`: a recorded session served back as an ACP agent
over stdio, for client developers to test against (docs/snapshots.md, "A fake agent").

Made for sessions recorded by `acp-bridge wrap` (a third-party agent's turns, with its
plans, modes and interim tool updates in `wrapped/update`), it serves any session log:
each `session/prompt` of a session is answered from the recorded turn of the same
number. The turn's events become `session/update`s through the agent's own mapping
(acp_bridge.host.updates, as the live agent streamed them); a recorded permission
decision (a `tool/permission` that let the call run, else the call's `tool/result` that
carried it) is preceded by a `session/request_permission` to the client (with the recorded call and the recorded agent's option where the log has it,
acp_bridge.snapshot.fake_recording; the recorded decision is replayed whatever the
answer); the answer is settled from the recorded `turn/end` (acp_bridge.host.settlement).
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from acp_bridge import __version__
from acp_bridge.errors import InvalidParamsError, MethodNotFoundError, ReplayError
from acp_bridge.host.advertised import NEITHER, client_support
from acp_bridge.host.engine import OpenAnswer, Send, TurnEnd
from acp_bridge.host.host import Engine, Host
from acp_bridge.host.updates import UpdateContext, updates_for
from acp_bridge.models.recording import ReadLog
from acp_bridge.models.replay import CHECK_ENV, RECORD_AGAIN, same_up_to_cwd
from acp_bridge.rpc.connection import Fallback
from acp_bridge.rpc.protocol import ClientError, Handler
from acp_bridge.snapshot.fake_recording import FakeRecording, permission_request, read_fake
from session import Event, SessionLog, SessionNotFoundError
from session.events import (
    TOOL_CALL,
    TOOL_PERMISSION,
    TOOL_RESULT,
    TURN_END,
    USER_MESSAGE,
    WRAPPED_UPDATE,
)


@dataclass(eq=False)
class FakeSession:
    """One session the fake agent serves: the host's `Turns` of it (no log: the
    recording is the log)."""

    agent: FakeAgent
    sid: str
    cwd: str
    mode: str | None
    options: list[dict[str, Any]]
    turn: int = 0
    cancelled: anyio.Event = field(default_factory=anyio.Event)
    ctx: UpdateContext = field(default_factory=lambda: UpdateContext(replay=False))

    def __post_init__(self) -> None:
        # A wrapped agent's recording is sent as the agent sent it (UpdateContext.wrapped).
        self.ctx = UpdateContext(replay=False, wrapped=self.agent.recording.wrapped, support=self.agent.support)

    @property
    def log(self) -> SessionLog | None:
        return None

    async def prompt(self, prompt: list[Any], params: Mapping[str, Any]) -> TurnEnd:
        agent = self.agent
        self.turn += 1
        self.cancelled = anyio.Event()
        number = self.turn
        events = agent.turns.get(number)
        if events is None or events[-1]["type"] != TURN_END:
            raise agent.failed(number, "replay_overrun", f"the recording has no turn {number} "
                               f"({len(agent.turns)} turns)")
        recorded = next((e["data"]["content"] for e in events if e["type"] == USER_MESSAGE), None)
        if agent.check and not same_up_to_cwd(recorded, prompt, agent.header["cwd"], self.cwd):
            raise agent.failed(number, "replay_mismatch", "the prompt differs from the recorded one")
        stream = events[:-1]
        merged: set[int] = set()  # wrapped/updates sent with the result before them
        asked: set[str] = set()  # calls whose permission was asked
        # A wrapped agent's call whose outcome the log writes when its step closes
        # (silent): its permission is asked before the update that gave its final status.
        to_ask = {e["data"]["callId"]: e for e in stream if e["type"] == TOOL_RESULT
                  and "permission" in e["data"] and e["data"].get("silent")}
        for index, event in enumerate(stream):
            if index in merged:
                continue
            final = _final_of(event)
            if final is not None and final in to_ask:
                asked.add(final)
                await agent.ask(self.sid, to_ask.pop(final))
            data = event["data"]
            if event["type"] == TOOL_PERMISSION or (event["type"] == TOOL_RESULT and "permission" in data
                                                     and not data.get("silent") and data["callId"] not in asked):
                asked.add(data["callId"])
                await agent.ask(self.sid, event)
            extra = _extra_fields(event, stream[index + 1] if index + 1 < len(stream) else None)
            if extra is not None:
                merged.add(index + 1)
            agent.send(self.sid, self.ctx, event, extra)
        end = events[-1]
        reason = end["data"]["reason"]
        if reason["kind"] == "cancelled" and reason.get("by") != "session/request_permission":
            # The client ended it (session/cancel; $/cancel_request ends this handler
            # itself): it is answered when the client does so again. A turn the agent's
            # crash or shutdown cut off, or a cancelled permission ended, is answered now.
            await self.cancelled.wait()
        # What the recorded agent sent after this turn follows its answer.
        agent.send_all(self.sid, self.ctx, agent.between.get(number, []), after_answer=True)
        return TurnEnd(end, shown=False)

    def cancel(self, by: str, params: Mapping[str, Any] | None) -> bool:
        if by == "$/cancel_request":
            return False  # the request's task is cancelled: -32800, as a recorded agent's would be
        self.cancelled.set()
        return True

    def stop(self) -> None:
        pass

    async def close(self, *, stopping: bool) -> None:
        self.cancelled.set()


class FakeAgent(Engine[FakeSession]):
    label = "the fake agent"

    def __init__(self, log: ReadLog, source: str, *, check: bool = True) -> None:
        self.recording: FakeRecording = read_fake(log, source)
        self.source = source
        self.header = log.header
        self.check = check
        self.turns = self.recording.turns
        self.between = self.recording.between
        self.support = NEITHER  # until `initialize` says what the client asked for

    # --- the engine ------------------------------------------------------------------

    def methods(self) -> dict[str, Handler]:
        return {"initialize": self.initialize, "session/set_mode": self.set_mode,
                "session/set_config_option": self.set_config_option}

    def fallback(self) -> Fallback:
        return self.unknown

    async def unknown(self, method: str, params: Any, is_request: bool) -> Any:
        """A method the fake agent does not serve: -32601 for a request, saying what it
        serves; a notification is ignored."""
        if not is_request:
            return None
        served = sorted(m for m in self.host.methods() if not m.startswith("$/"))
        raise MethodNotFoundError(f"method not found: {method} (the fake agent serves {', '.join(served)})",
                                  method=method)

    async def initialize(self, protocolVersion: int, clientCapabilities: Any = None, **_: Any) -> dict[str, Any]:
        self.support = client_support(clientCapabilities)  # what it is sent of compaction and notices
        wrapped: dict[str, Any] = dict(self.header.get("wrapped") or {})
        info = wrapped.get("agentInfo") or {"name": "acp-bridge-fake-agent", "version": __version__}
        return {"protocolVersion": 1, "authMethods": [], "agentInfo": info,
                "agentCapabilities": {"loadSession": True,
                                      "promptCapabilities": {"image": False, "audio": False,
                                                             "embeddedContext": True}},
                "_meta": {"acpBridge": {"fakeAgent": {"turns": len(self.turns)}}}}

    def _open(self, sid: str, cwd: str) -> FakeSession:
        session = FakeSession(self, sid, cwd, self.recording.first_mode, [dict(o) for o in self.recording.options])
        self.host.add(sid, session)
        return session

    def _state(self, session: FakeSession) -> dict[str, Any]:
        state = self.recording.mode_state(session.mode)
        return {**state, "configOptions": session.options} if session.options else state

    async def new_session(self, params: Mapping[str, Any]) -> dict[str, Any]:
        sid = str(uuid.uuid4())
        session = self._open(sid, params["cwd"])
        # What the recorded agent sent before its first turn follows the answer.
        self.send_all(sid, session.ctx, self.between.get(0, []), after_answer=True)
        return {"sessionId": sid, **self._state(session)}

    async def open_session(self, session_id: str, params: Mapping[str, Any], send: Send | None,
                           live: FakeSession | None) -> tuple[FakeSession, None]:
        """`session/load`: the recorded turns (all, or `_meta.acpBridge.fakeAgent.turns`
        of them) of the recorded session, or the turns this process served of one it
        opened, replayed; the session goes on from there."""
        asked = _turns_asked(params.get("_meta"), len(self.turns))
        session = live
        if session is None:
            wrapped: dict[str, Any] = dict(self.header.get("wrapped") or {})
            if session_id not in {self.header["id"], wrapped.get("sessionId")}:
                raise SessionNotFoundError(f"session {session_id} not found: the fake agent serves the recorded "
                                           f"session {self.header['id']} and the sessions it opened",
                                           session_id=session_id)
            session = self._open(session_id, params["cwd"])
            session.turn = asked
        session.cwd = params["cwd"]
        ctx = UpdateContext(replay=True, wrapped=self.recording.wrapped, support=self.support)
        self.send_all(session_id, ctx, self.between.get(0, []))
        for number in range(1, session.turn + 1):
            self.send_all(session_id, ctx, [*self.turns[number], *self.between.get(number, [])])
        return session, None

    async def attach(self, session: FakeSession, params: Mapping[str, Any]) -> OpenAnswer:
        return OpenAnswer(self._state(session))

    # --- modes and config options ----------------------------------------------------

    async def set_mode(self, sessionId: str, modeId: str, **_: Any) -> dict[str, Any]:
        self._set_mode(sessionId, self.host.session(sessionId), modeId, "modeId")
        return {}

    def _set_mode(self, sid: str, session: FakeSession, mode: str, field_name: str) -> None:
        modes = self.recording.mode_ids()
        if mode not in modes:
            raise InvalidParamsError(f"unknown mode {mode!r}: the recording has {', '.join(modes) or 'none'}",
                                     field=field_name)
        session.mode = mode
        for option in session.options:
            if option.get("id") == "mode":
                option["currentValue"] = mode
        if not self.recording.wrapped:  # as our agent does (a wrapped agent's own are recorded)
            self.host.peer.notify_update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": mode})
            self._options_changed(sid, session)

    def _options_changed(self, sid: str, session: FakeSession) -> None:
        if session.options and not self.recording.wrapped:
            self.host.peer.notify_update(sid, {"sessionUpdate": "config_option_update",
                                               "configOptions": session.options})

    async def set_config_option(self, sessionId: str, configId: str, value: Any = None,
                                **_: Any) -> dict[str, Any]:
        session = self.host.session(sessionId)
        option = next((o for o in session.options if o.get("id") == configId), None)
        if option is None:
            ids = [str(o.get("id")) for o in session.options]
            raise InvalidParamsError(f"unknown config option {configId!r}: the recording has "
                                     f"{', '.join(ids) or 'none'}", field="configId")
        values = [choice.get("value") for choice in option.get("options", []) if isinstance(choice, dict)]
        if values and value not in values:
            raise InvalidParamsError(f"unknown value {value!r} for {configId}: use one of "
                                     f"{', '.join(map(str, values))}", field="value")
        if configId == "mode":
            self._set_mode(sessionId, session, value, "value")
        else:
            option["currentValue"] = value
            self._options_changed(sessionId, session)
        return {"configOptions": session.options}

    # --- what a turn sends ------------------------------------------------------------

    def _updates(self, ctx: UpdateContext, event: Event, extra: dict[str, Any] | None = None) -> list[Any]:
        updates = updates_for(event, ctx)
        if event["type"] == TOOL_CALL and self.header.get("wrapped"):
            # A wrapped agent's own `in_progress` (if it sent one) is a wrapped/update
            # of the log: the mapping's is not added to it.
            updates = updates[:1]
        if extra is not None:
            updates = [{**update, **extra} for update in updates]
        return updates

    def send(self, sid: str, ctx: UpdateContext, event: Event, extra: dict[str, Any] | None = None) -> None:
        for update in self._updates(ctx, event, extra):
            self.host.peer.notify_update(sid, update)

    def send_all(self, sid: str, ctx: UpdateContext, events: list[Event], *, after_answer: bool = False) -> None:
        peer = self.host.peer
        for event in events:
            for update in self._updates(ctx, event):
                if after_answer:
                    peer.notify_update_after_answer(sid, update)
                else:
                    peer.notify_update(sid, update)

    async def ask(self, sid: str, event: Event) -> None:
        # The recorded decision is replayed whatever the client says.
        with contextlib.suppress(ClientError):
            await self.host.peer.request("session/request_permission",
                                         permission_request(self.recording, sid, event["data"]))

    def failed(self, turn: int, code: str, why: str) -> ReplayError:
        return ReplayError(f"fake agent: turn {turn}: {why}; {RECORD_AGAIN}", code=code, recording=self.source)


def _turns_asked(meta: Any, recorded: int) -> int:
    """How many recorded turns a `session/load` replays: `_meta.acpBridge.fakeAgent.turns`
    if given (0 to all), else all."""
    asked = ((meta or {}).get("acpBridge") or {}).get("fakeAgent", {}).get("turns") if isinstance(meta, dict) else None
    if asked is None:
        return recorded
    if type(asked) is not int or not 0 <= asked <= recorded:
        raise InvalidParamsError(f"_meta.acpBridge.fakeAgent.turns must be an integer from 0 to {recorded} "
                                 "(the recorded turns)", field="_meta")
    return asked


def _extra_fields(event: Event, following: Event | None) -> dict[str, Any] | None:
    """The fields `acp-bridge wrap` kept aside of a wrapped agent's final tool call update
    (rawOutput, _meta, ...: a `wrapped/update` right after its `tool/result`), to send
    with the result again as one update; None if `event` has none."""
    if event["type"] != TOOL_RESULT or following is None or following["type"] != WRAPPED_UPDATE \
            or event["data"].get("silent"):
        return None
    update = following["data"].get("update")
    if not (isinstance(update, dict) and update.get("sessionUpdate") == "tool_call_update"
            and update.get("toolCallId") == event["data"]["callId"] and "status" not in update):
        return None
    return {k: v for k, v in update.items() if k not in ("sessionUpdate", "toolCallId")}


def _final_of(event: Event) -> str | None:
    """The call id a wrapped agent's update (a `wrapped/update`) gave its final status, or None."""
    if event["type"] != WRAPPED_UPDATE:
        return None
    update = event["data"].get("update")
    if isinstance(update, dict) and update.get("sessionUpdate") in ("tool_call", "tool_call_update") \
            and update.get("status") in ("completed", "failed") and isinstance(update.get("toolCallId"), str):
        return str(update["toolCallId"])
    return None


def serve(source: str) -> int:
    """Serve the recording `source` (a log file or a stored session id) on stdio."""
    import sys

    from acp_bridge.errors import ModelSpecError
    from acp_bridge.host.stdio import serve_stdio
    from acp_bridge.models.recording import read_log

    try:
        log = read_log(source)
    except ModelSpecError as exc:
        print(f"acp-bridge snapshot fake-agent: {exc}", file=sys.stderr)
        return 2
    agent = FakeAgent(log, source, check=os.environ.get(CHECK_ENV, "strict") != "loose")
    host: Host[FakeSession] = Host(agent, None)  # its sessions are the recording's, kept for the process
    return serve_stdio(host)
