"""The ACP agent: every stable method of DESIGN.md section 5 over one connection.

Sessions live in the store; a session is *live* in this process once `session/new`,
`session/load` or `session/resume` has opened it (this process then owns its log) and
until `session/close`, `session/delete` or the end of stdin. Everything a turn does
reaches the client through the event -> update mapping (acp_bridge.agent.live), and each
prompt is answered from its durable `turn/end` (acp_bridge.agent.settlement).

The turn machinery (runner, client services, tools, models, replay) is imported on
first use, in the handlers that need it: `initialize` is answered before any of it is
needed (DESIGN.md section 1).
"""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from acp_bridge import __version__
from acp_bridge.agent import auth, permissions, settings
from acp_bridge.agent.errors import PromptInProgressError, to_rpc_error
from acp_bridge.agent.listing import list_page
from acp_bridge.agent.params import MCP_TRANSPORTS, check_params
from acp_bridge.agent.settlement import TurnFailed, settle
from acp_bridge.content import compact_images, has_images
from acp_bridge.models.catalog import EFFORT_LEVELS, ModelEntry, find
from acp_bridge.rpc.connection import Connection, current_request_id
from acp_bridge.rpc.protocol import RpcError, invalid_params, is_id, request_key
from session import (
    SessionLog,
    SessionNotFoundError,
    SessionStore,
    StoreIOError,
    open_backend,
    validate_session_id,
)
from session.repair import RepairReport
from session.transcript import Transcript, history_budget

if TYPE_CHECKING:
    from acp_bridge.agent.live import LiveSession
    from acp_bridge.agent.replay import ReplayEncoder, Send
    from acp_bridge.models import Model
    from acp_bridge.tools.local import LocalServices

log = logging.getLogger("acp_bridge.agent.server")

PROTOCOL_VERSION = 1


@dataclass(frozen=True)
class Config:
    store_dir: Path | str  # a folder, or a PostgreSQL connection string
    backend: str = "jsonl"
    models: tuple[ModelEntry, ...] = (ModelEntry("echo"),)  # the first is the default
    max_steps: int = 50


class Agent:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.conn: Connection | None = None
        self.client_capabilities: dict[str, Any] = {}
        self.sessions: dict[str, LiveSession] = {}
        self._store: SessionStore | None = None
        self._models: dict[str, Model] = {}  # spec -> the model, made on first use
        self._local: LocalServices | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._prompts: dict[tuple[str, Any], str] = {}  # running prompt request ids -> session id
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

    def inline(self) -> dict[str, Callable[[Any], bool | None]]:
        """Notifications the connection's reader handles itself, as it reads them: a
        `session/cancel` or `$/cancel_request` takes effect before the reader takes the
        next message (the client's `cancelled` answer to a permission request, which ACP
        has it send right after), so the cancel wins however the two are read
        (docs/protocol.md)."""
        return {"session/cancel": self.cancel_now, "$/cancel_request": self.cancel_request_now}

    def cancel_request_now(self, params: Any) -> bool:
        """`$/cancel_request` of a request in flight, in the reader. False (a task then
        handles it, as any notification) for anything else: a request read in the same
        write, whose task has not started yet, is cancelled there once it has."""
        if not isinstance(params, dict) or not is_id(params.get("requestId")):
            return False
        return self._connection().cancel_incoming(params["requestId"])

    def cancel_now(self, params: Any) -> bool | None:
        if not isinstance(params, dict):
            log.info("session/cancel ignored: params must be an object")
            return None
        try:
            check_params("session/cancel", params)
        except RpcError as exc:  # a notification: nobody to answer
            log.info("session/cancel ignored: %s", exc.message)
            return None
        live = self.sessions.get(params["sessionId"])
        if live is None or not live.runner.running:
            # Left to a task, as any notification: a prompt read in the same write has
            # not started yet, and its task runs first.
            return False
        self._cancel(params["sessionId"])
        return None

    async def serve(self, conn_factory: Callable[[Agent], Connection]) -> None:
        async with anyio.create_task_group() as tg:
            self._task_group = tg  # local commands run in it (LocalServices, on first use)
            self.conn = conn_factory(self)
            try:
                await self.conn.serve()
            finally:
                with anyio.CancelScope(shield=True):
                    for sid in list(self.sessions):
                        await self.sessions.pop(sid).close()
                    if self._store is not None:
                        self._store.close()
                tg.cancel_scope.cancel()  # local commands die with the connection

    def before_write(self) -> Awaitable[None] | None:
        """The connection calls this before each write to the client: every live log
        hands its buffered events to the OS first, so an update never reaches the
        client before the event it shows (DESIGN.md section 3). One log write per
        write to stdout, however many chunks it carries. A log a worker thread is
        writing at this moment (a durable commit) is waited for in a thread rather
        than on the event loop."""
        busy: list[SessionLog] = []
        for live in self.sessions.values():
            if live.log.buffered and not live.log.hand_off(wait=False):
                busy.append(live.log)
        return hand_off_in_threads(busy) if busy else None

    async def on_eof(self) -> None:
        """stdin closed: every running turn ends as interrupted (shutdown) and its
        prompt is answered before the process exits."""
        for live in self.sessions.values():
            live.runner.stop()

    def on_cancel_request(self, rid: Any) -> bool:
        sid = self._prompts.get(request_key(rid))
        if sid is None or sid not in self.sessions:
            return False
        return self.sessions[sid].runner.cancel("$/cancel_request")

    def store(self) -> SessionStore:
        if self._store is None:
            self._store = SessionStore(open_backend(self.config.backend, self.config.store_dir))
        return self._store

    def model(self, entry: ModelEntry | None = None) -> Model:
        """The model of `entry` (default: the first configured), made once per process."""
        entry = entry or self.config.models[0]
        if entry.spec not in self._models:
            from acp_bridge.models import load_model

            self._models[entry.spec] = load_model(entry, store_dir=self.config.store_dir,
                                                  backend=self.config.backend)
        return self._models[entry.spec]

    def context_window_of(self, spec: str) -> int | None:
        """The context window of the model `spec` names (a turn's `turn/start.model`):
        the model's own if this process made it, else as it would be made; a `replay:`
        model's is known only once made: the default model's then."""
        made = self._models.get(spec)
        if made is not None:
            return made.context_window
        if spec.startswith("replay:"):
            return self.model().context_window
        from acp_bridge.models.windows import context_window_of

        return context_window_of(spec)

    def _require_key(self, entry: ModelEntry) -> None:
        auth.require_key(entry, auth.method_ids(self.config.models, self.client_capabilities), self._models)

    def _state(self, live: LiveSession) -> dict[str, Any]:
        return settings.session_state(live.runner.mode, self.config.models, live.choice)

    def _connection(self) -> Connection:
        assert self.conn is not None
        return self.conn

    def _activate(self, session_log: SessionLog, *, transcript: Transcript | None = None,
                  always_allowed: set[str] | None = None) -> LiveSession:
        from acp_bridge.agent.live import make_live

        if self._local is None:
            from acp_bridge.tools.local import LocalServices

            assert self._task_group is not None
            self._local = LocalServices(task_group=self._task_group)
        if not self._frozen:
            # What is imported and built by now lives as long as the process: keep it
            # out of every later full collection.
            gc.freeze()
            self._frozen = True
        choice = settings.stored_choice(session_log.events, self.config.models)
        live = make_live(session_log, conn=self._connection(), model=self.model(choice.model), choice=choice,
                         capabilities=self.client_capabilities, local=self._local,
                         max_steps=self.config.max_steps, transcript=transcript, always_allowed=always_allowed)
        self.sessions[session_log.id] = live
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
                # Announced once, before a session picks its model: images are offered when
                # any configured model takes them; a prompt with images for the session's
                # current model that does not is refused (-32602, `prompt`).
                "promptCapabilities": {"image": any(m.images for m in self.config.models), "audio": False,
                                       "embeddedContext": True},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {},
                                        "additionalDirectories": {}},
                "mcpCapabilities": {"http": "http" in MCP_TRANSPORTS, "sse": "sse" in MCP_TRANSPORTS},
            },
            "authMethods": auth.auth_methods(self.config.models, self.client_capabilities),
            "agentInfo": {"name": "acp-bridge", "title": "acp-bridge", "version": __version__},
        }

    async def authenticate(self, methodId: str, **_: Any) -> dict[str, Any]:
        offered = auth.method_ids(self.config.models, self.client_capabilities)
        if methodId not in offered:
            raise invalid_params(f"unknown authentication method {methodId!r}: this agent offers "
                                 f"{', '.join(offered) or 'none'}", field="methodId")
        await auth.authenticate(self.config.models, offered, self._models)
        return {}

    async def new_session(self, cwd: str, mcpServers: list[Any], additionalDirectories: list[str] | None = None,
                          **_: Any) -> dict[str, Any]:
        self._require_key(self.config.models[0])
        self.model()  # a model that cannot be made fails here, before the store holds an empty session
        store = self.store()
        session_log = await anyio.to_thread.run_sync(
            lambda: store.create(cwd=cwd, additional_directories=additionalDirectories or (),
                                 keep_history=False))
        live = self._activate(session_log)
        mcp = await live.connect_mcp(mcpServers, self._tasks())
        return {"sessionId": session_log.id, **self._state(live),
                **({"_meta": {"acpBridge": mcp}} if mcp else {})}

    async def load_session(self, sessionId: str, mcpServers: list[Any], **_: Any) -> dict[str, Any]:
        conn = self._connection()

        async def send(payload: bytes) -> None:
            conn.send_raw(payload)
            await conn.drain()  # the client reads at its pace; memory stays bounded

        from acp_bridge.agent.replay import ReplayEncoder

        encoder = ReplayEncoder(sessionId, self.model().context_window, self.context_window_of)
        live, report = await self._open(sessionId, (encoder, send))
        mcp = await live.connect_mcp(mcpServers, self._tasks())
        return {**self._state(live), "_meta": {"acpBridge": {**self._open_meta(live, report), **mcp}}}

    async def resume_session(self, sessionId: str, mcpServers: list[Any] | None = None,
                             **_: Any) -> dict[str, Any]:
        live, report = await self._open(sessionId, None)
        mcp = await live.connect_mcp(mcpServers, self._tasks())
        return {**self._state(live), "_meta": {"acpBridge": {**self._open_meta(live, report), **mcp}}}

    def _tasks(self) -> anyio.abc.TaskGroup:
        assert self._task_group is not None  # set by serve() before any request
        return self._task_group

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
        return list_page(sessions, cursor)

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
        await live.runner.wait_idle()
        self.sessions.pop(sid, None)
        await live.close()

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
        if configId == "mode":
            self._set_mode(live, sessionId, value, "value")
        elif configId == settings.MODEL_OPTION:
            await self._set_model(live, sessionId, value)
        elif configId == settings.THOUGHT_OPTION and live.choice.effort is not None:
            if value not in EFFORT_LEVELS:
                raise invalid_params(f"unknown thought level {value!r}: use one of {', '.join(EFFORT_LEVELS)}",
                                     field="value")
            await live.runner.record_setting(configId, value)
            live.switch(live.runner.model, settings.choice_for(live.choice.model, value))
            self._options_changed(live, sessionId)
        else:
            ids = [o["id"] for o in settings.config_options(live.runner.mode, self.config.models, live.choice)]
            raise invalid_params(f"unknown config option {configId!r}: this session has {', '.join(ids)}",
                                 field="configId")
        return {"configOptions": self._state(live)["configOptions"]}

    async def _set_model(self, live: LiveSession, sid: str, value: Any) -> None:
        entry = find(self.config.models, value)
        if entry is None:
            raise invalid_params(f"unknown model {value!r}: use one of "
                                 f"{', '.join(m.spec for m in self.config.models)}", field="value")
        self._require_key(entry)
        model = self.model(entry)  # a model that cannot be made fails here, before the log changes
        await live.runner.record_setting(settings.MODEL_OPTION, entry.spec)
        live.switch(model, settings.choice_for(entry, live.choice.effort))
        self._options_changed(live, sid)

    def _options_changed(self, live: LiveSession, sid: str) -> None:
        self._update(sid, {"sessionUpdate": "config_option_update",
                           "configOptions": self._state(live)["configOptions"]})

    def _set_mode(self, live: LiveSession, sid: str, mode: Any, field_name: str) -> None:
        if mode not in permissions.MODES:
            raise invalid_params(f"unknown mode {mode!r}: use one of {', '.join(permissions.MODES)}",
                                 field=field_name)
        live.runner.mode = mode
        # The mode and the `mode` config option are one setting: tell the client both.
        self._update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": mode})
        self._options_changed(live, sid)

    async def prompt(self, sessionId: str, prompt: list[Any], **_: Any) -> dict[str, Any]:
        live = self._live(sessionId)
        if has_images(prompt):
            if not live.choice.model.images:
                raise invalid_params(
                    f"this session's model {live.choice.model.spec} does not take images: switch to one that "
                    f"does ({', '.join(m.spec for m in self.config.models if m.images) or 'none is configured'})"
                    " or send text", field="prompt")
            prompt = compact_images(prompt)  # the same image twice is stored once
        self._require_key(live.choice.model)
        key = request_key(current_request_id.get())
        self._prompts[key] = sessionId
        try:
            end = await live.runner.prompt(prompt)  # PromptInProgressError if one runs
        except StoreIOError as exc:
            # A full or failing disk, not a bug: one line in the log, not a traceback.
            log.warning("%s", exc.message)
            raise to_rpc_error(exc) from None
        finally:
            self._prompts.pop(key, None)
        answer = settle(end)
        if isinstance(answer, TurnFailed):
            raise RpcError(answer.code, answer.message, dict(answer.data))
        return dict(answer)

    async def cancel(self, sessionId: str, **_: Any) -> None:
        self._cancel(sessionId)  # a session/cancel sent as a request (with an id)

    def _cancel(self, sessionId: str) -> None:
        live = self.sessions.get(sessionId)
        if live is None or not live.runner.cancel("session/cancel"):
            log.info("session/cancel for %s: no running prompt", sessionId)

    async def cancel_request(self, requestId: Any, **_: Any) -> None:
        if not self._connection().cancel_incoming(requestId):
            log.info("$/cancel_request for %r: no such request in flight", requestId)


async def hand_off_in_threads(logs: list[SessionLog]) -> None:
    for session_log in logs:
        await anyio.to_thread.run_sync(functools.partial(session_log.hand_off, wait=True))


def _checked(method: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handler(**params: Any) -> Any:
        check_params(method, params)
        return await fn(**params)

    return handler
