"""The ACP agent: every stable method of DESIGN.md section 5 over one connection.

Sessions live in the store; a session is *live* in this process once `session/new`,
`session/load` or `session/resume` has opened it (this process then owns its log) and
until `session/close`, `session/delete` or the end of stdin. Everything a turn does
reaches the client through the event -> update mapping (acp_bridge.agent.updates), and each
prompt is answered from its durable `turn/end` (acp_bridge.agent.settlement).
"""

from __future__ import annotations

import base64
import datetime
import gc
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import orjson

from acp_bridge import __version__
from acp_bridge.agent import permissions
from acp_bridge.agent.errors import PromptInProgressError
from acp_bridge.agent.params import check_params
from acp_bridge.agent.settlement import TurnFailed, settle
from acp_bridge.agent.updates import UpdateContext, updates_for
from acp_bridge.rpc.connection import Connection, current_request_id
from acp_bridge.rpc.protocol import RpcError, invalid_params
from session import (
    SessionLog,
    SessionNotFoundError,
    SessionStore,
    open_backend,
    validate_session_id,
)
from session.backends.base import SessionSummary, title_from_content
from session.events import TURN_START, USER_MESSAGE, Event
from session.repair import RepairReport
from session.transcript import Transcript, history_budget

if TYPE_CHECKING:
    # The turn machinery (runner, client services, tools, models, loading) is imported
    # on first use: `initialize` is answered before any of it is needed.
    from acp_bridge.agent.replay import ReplayEncoder, Send
    from acp_bridge.agent.runner import TurnRunner
    from acp_bridge.models import Model
    from acp_bridge.tools.local import LocalServices

log = logging.getLogger("acp_bridge.agent.server")

PROTOCOL_VERSION = 1
LIST_PAGE = 50



@dataclass(frozen=True)
class Config:
    store_dir: Path
    backend: str = "jsonl"
    model: str = "echo"
    max_steps: int = 50


@dataclass
class LiveSession:
    log: SessionLog
    runner: TurnRunner
    updates: UpdateContext
    idle: anyio.Event = field(default_factory=anyio.Event)

    def __post_init__(self) -> None:
        self.idle.set()


class Agent:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.conn: Connection | None = None
        self.client_capabilities: dict[str, Any] = {}
        self.sessions: dict[str, LiveSession] = {}
        self._store: SessionStore | None = None
        self._model: Model | None = None
        self._local: LocalServices | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._prompts: dict[Any, str] = {}  # running prompt request ids -> session id
        self._frozen = False

    # --- wiring ----------------------------------------------------------------------

    def methods(self) -> dict[str, Callable[..., Awaitable[Any]]]:
        table: dict[str, Callable[..., Awaitable[Any]]] = {
            "initialize": self.initialize, "authenticate": self.authenticate,
            "session/new": self.new_session, "session/load": self.load_session,
            "session/resume": self.resume_session, "session/list": self.list_sessions,
            "session/close": self.close_session, "session/delete": self.delete_session,
            "session/set_mode": self.set_mode, "session/set_config_option": self.set_config_option,
            "session/prompt": self.prompt, "session/cancel": self.cancel,
            "$/cancel_request": self.cancel_request,
        }
        return {name: _checked(name, fn) for name, fn in table.items()}

    async def serve(self, conn_factory: Callable[[Agent], Connection]) -> None:
        async with anyio.create_task_group() as tg:
            self._task_group = tg  # local commands run in it (LocalServices, on first use)
            self.conn = conn_factory(self)
            try:
                await self.conn.serve()
            finally:
                with anyio.CancelScope(shield=True):
                    for sid in list(self.sessions):
                        await anyio.to_thread.run_sync(self.sessions.pop(sid).log.close)
                    if self._store is not None:
                        self._store.close()
                tg.cancel_scope.cancel()  # local commands die with the connection

    async def on_eof(self) -> None:
        """stdin closed: every running turn ends as interrupted (shutdown) and its
        prompt is answered before the process exits."""
        for live in self.sessions.values():
            live.runner.stop()

    def on_cancel_request(self, rid: Any) -> bool:
        sid = self._prompts.get(_id_key(rid))
        if sid is None or sid not in self.sessions:
            return False
        return self.sessions[sid].runner.cancel("$/cancel_request")

    def store(self) -> SessionStore:
        if self._store is None:
            self._store = SessionStore(open_backend(self.config.backend, self.config.store_dir))
        return self._store

    def model(self) -> Model:
        if self._model is None:
            from acp_bridge.models import load_model

            self._model = load_model(self.config.model)
        return self._model

    def _connection(self) -> Connection:
        assert self.conn is not None
        return self.conn

    def _activate(self, session_log: SessionLog, *, transcript: Transcript | None = None,
                  always_allowed: set[str] | None = None) -> LiveSession:
        mode = permissions.DEFAULT_MODE
        for event in reversed(session_log.events):  # the mode of the last turn carries on
            if event["type"] == TURN_START:
                mode = event["data"].get("mode", mode)
                break
        from acp_bridge.agent.client_services import AcpClientServices
        from acp_bridge.agent.runner import TurnRunner

        if self._local is None:
            from acp_bridge.tools.local import LocalServices

            assert self._task_group is not None
            self._local = LocalServices(task_group=self._task_group)
        if not self._frozen:
            # What is imported and built by now lives as long as the process: keep it
            # out of every later full collection.
            gc.freeze()
            self._frozen = True
        services = AcpClientServices(self._connection(), session_log.id, self.client_capabilities, self._local)
        ctx = UpdateContext(replay=False, context_window=self.model().context_window)
        live: LiveSession
        sid = session_log.id

        async def on_event(event: Event) -> None:
            for update in updates_for(event, ctx):
                self._update(sid, update)
            if event["type"] == USER_MESSAGE and event["data"]["turn"] == 1:
                title = title_from_content(event["data"]["content"])
                if title is not None:  # the session is named by its first prompt
                    self._update(sid, {"sessionUpdate": "session_info_update", "title": title,
                                       "updatedAt": _iso(event["time"])})

        async def on_progress(call_id: str, content: list[Any]) -> None:
            self._update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": call_id, "content": content})

        if transcript is None:
            transcript = Transcript(budget=history_budget(self.model().context_window))
        runner = TurnRunner(session_log, self.model(), services, mode=mode, max_steps=self.config.max_steps,
                            on_event=on_event, on_progress=on_progress, transcript=transcript,
                            always_allowed=always_allowed)
        live = LiveSession(session_log, runner, ctx)
        self.sessions[sid] = live
        return live

    def _update(self, sid: str, update: dict[str, Any]) -> None:
        self._connection().notify_update(sid, update)

    def _live(self, sid: str) -> LiveSession:
        validate_session_id(sid)
        live = self.sessions.get(sid)
        if live is None:
            raise SessionNotFoundError(
                f"session {sid} is not open in this agent: use session/load or session/resume",
                session_id=sid)
        return live

    # --- methods ---------------------------------------------------------------------

    async def initialize(self, protocolVersion: int, clientCapabilities: dict[str, Any] | None = None,
                         **_: Any) -> dict[str, Any]:
        self.client_capabilities = clientCapabilities or {}
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {},
                                        "additionalDirectories": {}},
            },
            "authMethods": [],
            "agentInfo": {"name": "acp-bridge", "title": "acp-bridge", "version": __version__},
        }

    async def authenticate(self, methodId: str, **_: Any) -> dict[str, Any]:
        raise invalid_params(f"unknown authentication method {methodId!r}: this agent offers none",
                             field="methodId")

    async def new_session(self, cwd: str, mcpServers: list[Any], additionalDirectories: list[str] | None = None,
                          **_: Any) -> dict[str, Any]:
        if mcpServers:
            log.warning("MCP servers are not supported; ignoring %d", len(mcpServers))
        store = self.store()
        session_log = await anyio.to_thread.run_sync(
            lambda: store.create(cwd=cwd, additional_directories=additionalDirectories or (),
                                 keep_history=False))
        live = self._activate(session_log)
        return {"sessionId": session_log.id, **self._mode_state(live)}

    async def load_session(self, sessionId: str, **_: Any) -> dict[str, Any]:
        conn = self._connection()

        async def send(payload: bytes) -> None:
            conn.send_raw(payload)
            await conn.drain()  # the client reads at its pace; memory stays bounded

        from acp_bridge.agent.replay import ReplayEncoder

        encoder = ReplayEncoder(sessionId, self.model().context_window)
        live, report = await self._open(sessionId, (encoder, send))
        return {**self._mode_state(live), "_meta": {"acpBridge": self._open_meta(live, report)}}

    async def resume_session(self, sessionId: str, **_: Any) -> dict[str, Any]:
        live, report = await self._open(sessionId, None)
        return {**self._mode_state(live), "_meta": {"acpBridge": self._open_meta(live, report)}}

    async def _open(self, sid: str, replay: tuple[ReplayEncoder, Send] | None) -> tuple[LiveSession, RepairReport]:
        from acp_bridge.agent.replay import open_stored, replay_stored

        validate_session_id(sid)
        live = self.sessions.get(sid)
        if live is not None:  # already ours: nothing to repair
            if live.runner.running:
                raise PromptInProgressError(sid)
            if replay is not None:
                await replay_stored(self.store(), live.log, *replay)
            return live, RepairReport()
        opened = await open_stored(self.store(), sid, budget=history_budget(self.model().context_window),
                                   replay=replay)
        live = self._activate(opened.log, transcript=opened.transcript, always_allowed=opened.always_allowed)
        return live, opened.report

    @staticmethod
    def _open_meta(live: LiveSession, report: RepairReport) -> dict[str, Any]:
        return {"repair": report.to_meta(), "turns": live.log.tracker.turn, "events": live.log.tracker.next_seq}

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, **_: Any) -> dict[str, Any]:
        store = self.store()
        sessions = await anyio.to_thread.run_sync(lambda: store.list(cwd=cwd))
        start = 0
        if cursor is not None:
            after = _decode_cursor(cursor)
            start = next((i for i, s in enumerate(sessions) if (-s["updatedAt"], s["id"]) > after), len(sessions))
        page = sessions[start : start + LIST_PAGE]
        result: dict[str, Any] = {"sessions": [_session_info(s) for s in page]}
        if start + LIST_PAGE < len(sessions):
            last = page[-1]
            result["nextCursor"] = _encode_cursor((-last["updatedAt"], last["id"]))
        return result

    async def close_session(self, sessionId: str, **_: Any) -> dict[str, Any]:
        validate_session_id(sessionId)
        live = self.sessions.get(sessionId)
        if live is None:
            # Not open here: closing is idempotent for a stored session.
            if not any(s["id"] == sessionId for s in await anyio.to_thread.run_sync(self.store().list)):
                raise SessionNotFoundError(f"session {sessionId} not found", session_id=sessionId)
            return {}
        await self._shut(sessionId, live)
        return {}

    async def _shut(self, sid: str, live: LiveSession) -> None:
        live.runner.cancel("session/close")
        await live.idle.wait()
        self.sessions.pop(sid, None)
        await anyio.to_thread.run_sync(live.log.close)

    async def delete_session(self, sessionId: str, **_: Any) -> dict[str, Any]:
        validate_session_id(sessionId)
        live = self.sessions.get(sessionId)
        if live is not None:
            await self._shut(sessionId, live)
        await anyio.to_thread.run_sync(self.store().delete, sessionId)
        return {}

    async def set_mode(self, sessionId: str, modeId: str, **_: Any) -> dict[str, Any]:
        self._set_mode(self._live(sessionId), sessionId, modeId, "modeId")
        return {}

    async def set_config_option(self, sessionId: str, configId: str, value: Any = None,
                                **_: Any) -> dict[str, Any]:
        live = self._live(sessionId)
        if configId != "mode":
            raise invalid_params(f"unknown config option {configId!r}: this agent has 'mode'", field="configId")
        self._set_mode(live, sessionId, value, "value")
        return {"configOptions": self._mode_state(live)["configOptions"]}

    def _set_mode(self, live: LiveSession, sid: str, mode: Any, field_name: str) -> None:
        if mode not in permissions.MODES:
            raise invalid_params(f"unknown mode {mode!r}: use one of {', '.join(permissions.MODES)}",
                                 field=field_name)
        live.runner.mode = mode
        # The mode and the `mode` config option are one setting: tell the client both.
        state = self._mode_state(live)
        self._update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": mode})
        self._update(sid, {"sessionUpdate": "config_option_update", "configOptions": state["configOptions"]})

    async def prompt(self, sessionId: str, prompt: list[Any], **_: Any) -> dict[str, Any]:
        live = self._live(sessionId)
        if live.runner.running:
            raise PromptInProgressError(sessionId)
        key = _id_key(current_request_id.get())
        self._prompts[key] = sessionId
        live.idle = anyio.Event()
        try:
            end = await live.runner.prompt(prompt)
        finally:
            self._prompts.pop(key, None)
            live.idle.set()
        answer = settle(end)
        if isinstance(answer, TurnFailed):
            raise RpcError(answer.code, answer.message, dict(answer.data))
        return dict(answer)

    async def cancel(self, sessionId: str, **_: Any) -> None:
        live = self.sessions.get(sessionId)
        if live is None or not live.runner.cancel("session/cancel"):
            log.info("session/cancel for %s: no running prompt", sessionId)

    async def cancel_request(self, requestId: Any, **_: Any) -> None:
        if not self._connection().cancel_incoming(requestId):
            log.info("$/cancel_request for %r: no such request in flight", requestId)

    # --- shapes ----------------------------------------------------------------------

    @staticmethod
    def _mode_state(live: LiveSession) -> dict[str, Any]:
        mode = live.runner.mode
        modes = [{"id": m, "name": name, "description": text} for m, (name, text) in permissions.MODES.items()]
        option = {"id": "mode", "name": "Mode", "description": "When the agent asks before acting.",
                  "category": "mode", "type": "select", "currentValue": mode,
                  "options": [{"value": m["id"], "name": m["name"], "description": m["description"]}
                              for m in modes]}
        return {"modes": {"currentModeId": mode, "availableModes": modes}, "configOptions": [option]}


def _checked(method: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handler(**params: Any) -> Any:
        check_params(method, params)
        return await fn(**params)

    return handler


def _id_key(rid: Any) -> Any:
    return (type(rid).__name__, rid)


def _iso(ms: int) -> str:
    """ISO 8601 UTC with milliseconds, always the same width (so the strings sort)."""
    stamp = datetime.datetime.fromtimestamp(ms // 1000, tz=datetime.UTC)
    return f"{stamp:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


def _session_info(summary: SessionSummary) -> dict[str, Any]:
    info: dict[str, Any] = {"sessionId": summary["id"], "cwd": summary["cwd"], "title": summary["title"],
                            "updatedAt": _iso(summary["updatedAt"])}
    if summary.get("additionalDirectories"):
        info["additionalDirectories"] = summary["additionalDirectories"]
    return info


def _encode_cursor(position: tuple[int, str]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(position))).decode()


def _decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        value = orjson.loads(base64.urlsafe_b64decode(cursor.encode()))
        if isinstance(value, list) and len(value) == 2 and type(value[0]) is int and isinstance(value[1], str):
            return value[0], value[1]
    except (ValueError, orjson.JSONDecodeError):
        pass
    raise invalid_params("invalid cursor: pass back the nextCursor of a previous answer", field="cursor")
