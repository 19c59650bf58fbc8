"""The ACP agent: every stable method of DESIGN.md section 5 over one connection.

Sessions live in the store; a session is *live* in this process once `session/new`,
`session/load` or `session/resume` has opened it (this process then owns its log) and
until `session/close`, `session/delete` or the end of stdin (acp_bridge.agent.open_sessions
holds the live ones, and opens and closes them). Everything a turn does
reaches the client through the event -> update mapping (acp_bridge.agent.live), and each
prompt is answered from its durable `turn/end` (acp_bridge.agent.settlement).

The turn machinery (runner, client services, tools, models, replay) is imported on
first use, in the handlers that need it: `initialize` is answered before any of it is
needed (DESIGN.md section 1).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from acp_bridge import __version__
from acp_bridge.agent import auth, permissions, settings
from acp_bridge.agent.errors import to_rpc_error
from acp_bridge.agent.listing import list_page
from acp_bridge.agent.open_sessions import Config, OpenSessions, open_meta
from acp_bridge.agent.params import MCP_TRANSPORTS, check_params
from acp_bridge.agent.settlement import TurnFailed, settle
from acp_bridge.content import compact_images, has_images
from acp_bridge.models.catalog import EFFORT_LEVELS, ModelEntry, find
from acp_bridge.rpc import on_cancel
from acp_bridge.rpc.connection import Connection
from acp_bridge.rpc.protocol import RpcError, invalid_params
from session import SessionLog, SessionNotFoundError, StoreIOError, validate_session_id

if TYPE_CHECKING:
    from acp_bridge.agent.live import LiveSession

log = logging.getLogger("acp_bridge.agent.server")

PROTOCOL_VERSION = 1


class Agent:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.conn: Connection | None = None
        self.client_capabilities: dict[str, Any] = {}
        self.opened = OpenSessions(config)  # the live sessions, the store, the models

    @property
    def sessions(self) -> dict[str, LiveSession]:
        return self.opened.live

    # --- wiring ----------------------------------------------------------------------

    def methods(self) -> dict[str, Callable[..., Awaitable[Any]]]:
        table: dict[str, Callable[..., Awaitable[Any]]] = {
            "initialize": self.initialize, "authenticate": self.authenticate,
            "session/new": self.new_session, "session/load": self.load_session,
            "session/resume": self.resume_session, "session/list": self.list_sessions,
            "session/close": self.close_session, "session/delete": self.delete_session,
            "session/set_mode": self.set_mode, "session/set_config_option": self.set_config_option,
            "session/prompt": self.prompt, "session/cancel": self.cancel,
        }
        return {name: _checked(name, fn) for name, fn in table.items()}

    def inline(self) -> dict[str, Callable[[Any], bool | None]]:
        """Notifications the connection's reader handles itself, as it reads them: a
        `session/cancel` takes effect before the reader takes the next message (the
        client's `cancelled` answer to a permission request, which ACP has it send
        right after), so the cancel wins however the two are read (docs/protocol.md).
        rpc does the same for `$/cancel_request`, through the prompt's `on_cancel`."""
        return {"session/cancel": self.cancel_now}

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
            self.opened.task_group = tg  # local commands run in it (LocalServices, on first use)
            self.conn = conn_factory(self)
            try:
                await self.conn.serve()
            finally:
                with anyio.CancelScope(shield=True):
                    await self.opened.close_all()
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

    def _require_key(self, entry: ModelEntry) -> None:
        auth.require_key(entry, auth.method_ids(self.config.models, self.client_capabilities),
                         self.opened.made_models)

    def _state(self, live: LiveSession) -> dict[str, Any]:
        return settings.session_state(live.runner.mode, self.config.models, live.choice)

    def _connection(self) -> Connection:
        assert self.conn is not None
        return self.conn

    def _update(self, sid: str, update: dict[str, Any]) -> None:
        self._connection().notify_update(sid, update)

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
        await auth.authenticate(self.config.models, offered, self.opened.made_models)
        return {}

    async def new_session(self, cwd: str, mcpServers: list[Any], additionalDirectories: list[str] | None = None,
                          **_: Any) -> dict[str, Any]:
        self._require_key(self.config.models[0])
        self.opened.model()  # a model that cannot be made fails here, before the store holds an empty session
        store = self.opened.store()
        session_log = await anyio.to_thread.run_sync(
            lambda: store.create(cwd=cwd, additional_directories=additionalDirectories or (),
                                 keep_history=False))
        live = self.opened.activate(session_log, self._connection(), self.client_capabilities)
        mcp = await live.connect_mcp(mcpServers, self.opened.tasks())
        return {"sessionId": session_log.id, **self._state(live),
                **({"_meta": {"acpBridge": mcp}} if mcp else {})}

    async def load_session(self, sessionId: str, mcpServers: list[Any], **_: Any) -> dict[str, Any]:
        conn = self._connection()

        async def send(payload: bytes) -> None:
            conn.send_raw(payload)
            await conn.drain()  # the client reads at its pace; memory stays bounded

        from acp_bridge.agent.replay import ReplayEncoder

        encoder = ReplayEncoder(sessionId, self.opened.model().context_window, self.opened.context_window_of)
        live, report = await self.opened.open(sessionId, (encoder, send), conn, self.client_capabilities)
        mcp = await live.connect_mcp(mcpServers, self.opened.tasks())
        return {**self._state(live), "_meta": {"acpBridge": {**open_meta(live, report), **mcp}}}

    async def resume_session(self, sessionId: str, mcpServers: list[Any] | None = None,
                             **_: Any) -> dict[str, Any]:
        live, report = await self.opened.open(sessionId, None, self._connection(), self.client_capabilities)
        mcp = await live.connect_mcp(mcpServers, self.opened.tasks())
        return {**self._state(live), "_meta": {"acpBridge": {**open_meta(live, report), **mcp}}}

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, **_: Any) -> dict[str, Any]:
        store = self.opened.store()
        sessions = await anyio.to_thread.run_sync(lambda: store.list(cwd=cwd))
        return list_page(sessions, cursor)

    async def close_session(self, sessionId: str, **_: Any) -> dict[str, Any]:
        validate_session_id(sessionId)
        live = self.sessions.get(sessionId)
        if live is None:
            # Not open here: closing is idempotent for a stored session.
            if not any(s["id"] == sessionId for s in await anyio.to_thread.run_sync(self.opened.store().list)):
                raise SessionNotFoundError(f"session {sessionId} not found", session_id=sessionId)
            return {}
        await self.opened.shut(sessionId, live)
        return {}

    async def delete_session(self, sessionId: str, **_: Any) -> dict[str, Any]:
        validate_session_id(sessionId)
        live = self.sessions.get(sessionId)
        if live is not None:
            await self.opened.shut(sessionId, live)
        await anyio.to_thread.run_sync(self.opened.store().delete, sessionId)
        return {}

    async def set_mode(self, sessionId: str, modeId: str, **_: Any) -> dict[str, Any]:
        self._set_mode(self.opened.get(sessionId), sessionId, modeId, "modeId")
        return {}

    async def set_config_option(self, sessionId: str, configId: str, value: Any = None,
                                **_: Any) -> dict[str, Any]:
        live = self.opened.get(sessionId)
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
        model = self.opened.model(entry)  # a model that cannot be made fails here, before the log changes
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
        live = self.opened.get(sessionId)
        if has_images(prompt):
            if not live.choice.model.images:
                raise invalid_params(
                    f"this session's model {live.choice.model.spec} does not take images: switch to one that "
                    f"does ({', '.join(m.spec for m in self.config.models if m.images) or 'none is configured'})"
                    " or send text", field="prompt")
            prompt = compact_images(prompt)  # the same image twice is stored once
        self._require_key(live.choice.model)
        # A `$/cancel_request` of this prompt settles its turn as cancelled (False, and
        # the request is cancelled, if no turn runs).
        on_cancel(lambda: live.runner.cancel("$/cancel_request"))
        try:
            end = await live.runner.prompt(prompt)  # PromptInProgressError if one runs
        except StoreIOError as exc:
            # A full or failing disk, not a bug: one line in the log, not a traceback.
            log.warning("%s", exc.message)
            raise to_rpc_error(exc) from None
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


async def hand_off_in_threads(logs: list[SessionLog]) -> None:
    for session_log in logs:
        await anyio.to_thread.run_sync(functools.partial(session_log.hand_off, wait=True))


def _checked(method: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handler(**params: Any) -> Any:
        check_params(method, params)
        return await fn(**params)

    return handler
