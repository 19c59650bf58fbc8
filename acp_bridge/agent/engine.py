"""Our own agent as an engine of the host (acp_bridge.host): its turns are the turn
runner's (acp_bridge.agent.runner), with our models and tools.

What only this engine has: `initialize` (our capabilities), `authenticate` (the key of
an `openai:` model), the modes (`session/set_mode`, or the `mode` config option) and the
other config options (model, thought level). A session is made live with its runner,
its client services and its MCP servers (acp_bridge.agent.live); a stored one is loaded
with the model transcript and the "always allow" rules rebuilt as it is replayed.

The turn machinery (runner, client services, tools, models) is imported on first use,
in the handlers that need it: `initialize` is answered before any of it is needed
(DESIGN.md section 1).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from acp_bridge import __version__
from acp_bridge.agent import auth
from acp_bridge.agent.commands import session_commands
from acp_bridge.content import compact_images, has_images
from acp_bridge.errors import InvalidParamsError
from acp_bridge.host.advertised import client_support, notice
from acp_bridge.host.commands import commands_update
from acp_bridge.host.engine import OpenAnswer
from acp_bridge.host.host import Engine, Host
from acp_bridge.host.params import (
    MCP_TRANSPORTS,
    NewSessionRequest,
    SetSessionConfigOptionRequest,
    SetSessionModeRequest,
)
from acp_bridge.host.replay import Opened, ReplayEncoder, StoredOpener
from acp_bridge.models import options
from acp_bridge.models.catalog import EFFORT_LEVELS, ModelEntry, find
from acp_bridge.rpc.protocol import Handler
from acp_bridge.tools import permissions
from session import Event, SessionLog
from session.events import WrappedInfo
from session.fork import ForkPlan
from session.repair import RepairReport
from session.transcript import Transcript, history_budget

if TYPE_CHECKING:
    from acp_bridge.agent.live import LiveSession
    from acp_bridge.host.engine import Send
    from acp_bridge.models import Model
    from acp_bridge.prices import CostMeter, Prices
    from acp_bridge.tools.local import LocalServices

log = logging.getLogger("acp_bridge.agent")

PROTOCOL_VERSION = 1


@dataclass(frozen=True)
class Config:
    store_dir: Path | str  # a folder, or a PostgreSQL connection string
    backend: str = "jsonl"
    models: tuple[ModelEntry, ...] = (ModelEntry("echo"),)  # the first is the default
    max_steps: int = 50
    prices: Prices | None = None  # the price file (docs/search.md), for usage_update.cost


class KeptOfLog:
    """What a live session keeps of its whole log, rebuilt as a load reads it: the
    model transcript (bounded by the model's context window) and the "always allow"
    rules (tools.permissions.RememberedAlways)."""

    def __init__(self, budget: int, prices: Prices | None = None) -> None:
        from acp_bridge.prices import CostMeter

        self.transcript = Transcript(budget=budget)
        self.always = permissions.RememberedAlways()
        self.cost = CostMeter(prices) if prices is not None else None  # the session's so far

    def feed(self, event: Event) -> None:
        self.transcript.feed(event)
        self.always.feed(event)
        if self.cost is not None:
            self.cost.feed(event)


class AgentEngine(Engine["LiveSession"]):
    label = "this agent"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.client_capabilities: dict[str, Any] = {}
        self.made_models: dict[str, Model] = {}  # spec -> the model, made on first use
        self._local: LocalServices | None = None
        self._opener: StoredOpener[LiveSession] | None = None

    # --- the engine ------------------------------------------------------------------

    def methods(self) -> dict[str, Handler]:
        table: dict[str, Handler] = {"initialize": self.initialize, "authenticate": self.authenticate,
                                     "session/set_mode": self.set_mode,
                                     "session/set_config_option": self.set_config_option}
        if auth.needs_auth(self.config.models):  # only where there is a key to forget (and it is advertised)
            table["logout"] = self.logout
        return table

    async def start(self, host: Host[LiveSession]) -> None:
        await super().start(host)
        self._opener = StoredOpener(host, encoder=self._encoder, sink=self._kept, adopt=self._adopt)

    def model(self, entry: ModelEntry | None = None) -> Model:
        """The model of `entry` (default: the first configured), made once per process."""
        entry = entry or self.config.models[0]
        if entry.spec not in self.made_models:
            from acp_bridge.models import load_model

            self.made_models[entry.spec] = load_model(entry, store_dir=self.config.store_dir,
                                                      backend=self.config.backend)
        return self.made_models[entry.spec]

    def context_window_of(self, spec: str) -> int | None:
        """The context window of the model `spec` names (a turn's `turn/start.model`):
        the model's own if this process made it, else as it would be made; a `replay:`
        model's is known only once made: the default model's then."""
        made = self.made_models.get(spec)
        if made is not None:
            return made.context_window
        if spec.startswith("replay:"):
            return self.model().context_window
        from acp_bridge.models.windows import context_window_of

        return context_window_of(spec)

    def _require_key(self, entry: ModelEntry) -> None:
        auth.require_key(entry, auth.method_ids(self.config.models, self.client_capabilities), self.made_models)

    def _state(self, live: LiveSession) -> dict[str, Any]:
        """`modes` and `configOptions`, as the answers of session/new, load and resume
        carry them."""
        return {**permissions.mode_state(live.runner.mode), "configOptions": self._options(live)}

    def _options(self, live: LiveSession) -> list[dict[str, Any]]:
        """Every config option of a session: mode, model, and thought level where it applies."""
        return config_options(live.runner.mode, self.config.models, live.choice)

    # --- opening sessions ------------------------------------------------------------

    def _activate(self, session_log: SessionLog, *, transcript: Transcript | None = None,
                  always_allowed: set[permissions.Rule] | None = None, cost: CostMeter | None = None) -> LiveSession:
        """Make `session_log` (just created or opened) a live session of the host."""
        from acp_bridge.agent.live import make_live

        if self._local is None:
            from acp_bridge.tools.local import LocalServices

            self._local = LocalServices(task_group=self.host.task_group)
        choice = options.stored_choice(session_log.events, self.config.models)
        recorded, _ = options.stored_settings(session_log.events)
        live = make_live(session_log, conn=self.host.peer, model=self.model(choice.model), choice=choice,
                         capabilities=self.client_capabilities, local=self._local, admit=self._admit,
                         max_steps=self.config.max_steps, transcript=transcript, always_allowed=always_allowed,
                         tuning=self.host.tuning, cost=cost if cost is not None else self._meter(),  # new: 0 so far
                         secrets=lambda: auth.held_secrets(self.config.store_dir, self.config.backend))
        live.commands = session_commands(
            live, models=self.config.models, store=self.config.store_dir, backend=self.config.backend,
            switch_mode=lambda s, mode: self.switch_mode(s, s.log.id, mode, "value"),
            switch_model=lambda s, spec: self.switch_model(s, s.log.id, spec), sessions=self.host.store)
        self.host.add(session_log.id, live)
        if isinstance(recorded, str) and find(self.config.models, recorded) is None and live.ctx.support.notices:
            # A model no longer configured: the session goes on with the default (before
            # the answer of the load that opens it: what the client is told then).
            self.host.peer.notify_update(session_log.id, notice(
                "warning", "The session's model is not available",
                f"{recorded} is not configured in this agent: the session continues with {choice.model.spec}."))
        return live

    def _meter(self) -> CostMeter | None:
        """A fresh cost meter, with a price file (UpdateContext.cost)."""
        from acp_bridge.prices import CostMeter

        return CostMeter(self.config.prices) if self.config.prices is not None else None

    def _offer_commands(self, live: LiveSession, *, after_answer: bool) -> None:
        """The session's slash commands: right after the answer of `session/new` and
        `session/fork` (the client learns the session's id from it), before the answer
        of a load or resume (which ends what the client is sent of the session:
        docs/protocol.md, "Sessions")."""
        update = commands_update([c.available() for c in live.commands])
        if after_answer:
            self.host.peer.notify_update_after_answer(live.log.id, update)
        else:
            self.host.peer.notify_update(live.log.id, update)

    def _encoder(self, session_id: str) -> ReplayEncoder:
        return ReplayEncoder(session_id, self.model().context_window, self.context_window_of, cost=self._meter(),
                             support=client_support(self.client_capabilities))

    def _kept(self) -> KeptOfLog:
        return KeptOfLog(history_budget(self.model().context_window), self.config.prices)

    def _adopt(self, opened: Opened) -> LiveSession:
        kept = opened.sink
        assert isinstance(kept, KeptOfLog)
        return self._activate(opened.log, transcript=kept.transcript, always_allowed=kept.always.rules,
                              cost=kept.cost)

    async def new_session(self, params: NewSessionRequest) -> dict[str, Any]:
        self._require_key(self.config.models[0])
        self.model()  # a model that cannot be made fails here, before the store holds an empty session
        session_log = await self.host.create_log(cwd=params["cwd"], additional=params.get("additionalDirectories"))
        live = self._activate(session_log)
        mcp = await live.connect_mcp(params["mcpServers"], self.host.task_group)
        self._offer_commands(live, after_answer=True)
        return {"sessionId": session_log.id, **self._state(live),
                **({"_meta": {"acpBridge": mcp}} if mcp else {})}

    async def open_session(self, session_id: str, params: Mapping[str, Any], send: Send | None,
                           live: LiveSession | None) -> tuple[LiveSession, RepairReport]:
        assert self._opener is not None
        return await self._opener(session_id, params, send, live)

    async def attach(self, session: LiveSession, params: Mapping[str, Any]) -> OpenAnswer:
        return await self._attached(session, params, after_answer=False)

    async def fork(self, source: str, params: Mapping[str, Any], plan: ForkPlan,
                   make: Callable[[WrappedInfo | None], Awaitable[LiveSession]]) -> OpenAnswer:
        """A fork is opened as a load opens a session, but answered like `session/new`:
        its commands follow the answer that names it."""
        return await self._attached(await make(None), params, after_answer=True)

    async def _attached(self, session: LiveSession, params: Mapping[str, Any], *, after_answer: bool) -> OpenAnswer:
        mcp = await session.connect_mcp(params.get("mcpServers"), self.host.task_group)
        self._offer_commands(session, after_answer=after_answer)
        return OpenAnswer(self._state(session), ours=mcp)

    def _admit(self, live: LiveSession, prompt: list[Any]) -> list[Any]:
        """A prompt the session's model can take, as it is run (the same image twice is
        stored once); InvalidParamsError or AuthRequiredError if it cannot."""
        if has_images(prompt):
            if not live.choice.model.images:
                raise InvalidParamsError(
                    f"this session's model {live.choice.model.spec} does not take images: switch to one that "
                    f"does ({', '.join(m.spec for m in self.config.models if m.images) or 'none is configured'})"
                    " or send text", field="prompt")
            prompt = compact_images(prompt)
        self._require_key(live.choice.model)
        return prompt

    # --- the methods only this engine has --------------------------------------------

    async def initialize(self, protocolVersion: int, clientCapabilities: dict[str, Any] | None = None,
                         **_: Any) -> dict[str, Any]:
        self.client_capabilities = clientCapabilities or {}
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": True,
                # Announced once, before a session picks its model: images are offered when
                # any configured model takes them; a prompt with images for the session's
                # current model that does not is refused (-32602, `_admit`).
                "promptCapabilities": {"image": any(m.images for m in self.config.models), "audio": False,
                                       "embeddedContext": True},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}, "fork": {},
                                        "additionalDirectories": {}},
                "mcpCapabilities": {"http": "http" in MCP_TRANSPORTS, "sse": "sse" in MCP_TRANSPORTS},
                # `logout` forgets the key of `openai:` models: offered with their auth methods.
                **({"auth": {"logout": {}}} if auth.needs_auth(self.config.models) else {}),
            },
            "authMethods": auth.auth_methods(self.config.models, self.client_capabilities),
            "agentInfo": {"name": "acp-bridge", "title": "acp-bridge", "version": __version__},
        }

    async def authenticate(self, methodId: str, **_: Any) -> dict[str, Any]:
        offered = auth.method_ids(self.config.models, self.client_capabilities)
        if methodId not in offered:
            raise InvalidParamsError(f"unknown authentication method {methodId!r}: this agent offers "
                                     f"{', '.join(offered) or 'none'}", field="methodId")
        await auth.authenticate(self.config.models, offered, self.made_models)
        return {}

    async def logout(self, **_: Any) -> dict[str, Any]:
        """Forget the key (acp_bridge.agent.auth.logout). Idempotent: without a key there
        is nothing to forget, and it answers the same."""
        removed = auth.logout()
        return {"_meta": {"acpBridge": {"removed": removed}}}

    async def set_mode(self, **params: Unpack[SetSessionModeRequest]) -> dict[str, Any]:
        sid = params["sessionId"]
        await self.switch_mode(self.host.session(sid), sid, params["modeId"], "modeId")
        return {}

    async def set_config_option(self, **params: Unpack[SetSessionConfigOptionRequest]) -> dict[str, Any]:
        sessionId, configId, value = params["sessionId"], params["configId"], params["value"]
        live = self.host.session(sessionId)
        if configId == permissions.MODE_OPTION:
            await self.switch_mode(live, sessionId, value, "value")
        elif configId == options.MODEL_OPTION:
            await self.switch_model(live, sessionId, value)
        elif configId == options.THOUGHT_OPTION and live.choice.effort is not None:
            if not isinstance(value, str) or value not in EFFORT_LEVELS:
                raise InvalidParamsError(f"unknown thought level {value!r}: use one of {', '.join(EFFORT_LEVELS)}",
                                         field="value")
            await live.runner.record_setting(configId, value)
            live.switch(live.runner.model, options.choice_for(live.choice.model, value))
            self._options_changed(live, sessionId)
        else:
            ids = [o["id"] for o in self._options(live)]
            raise InvalidParamsError(f"unknown config option {configId!r}: this session has {', '.join(ids)}",
                                     field="configId")
        return {"configOptions": self._options(live)}

    async def switch_model(self, live: LiveSession, sid: str, value: Any) -> None:
        """`session/set_config_option` of `model` (and `/model`): recorded, then told."""
        entry = find(self.config.models, value)
        if entry is None:
            raise InvalidParamsError(f"unknown model {value!r}: use one of "
                                     f"{', '.join(m.spec for m in self.config.models)}", field="value")
        self._require_key(entry)
        model = self.model(entry)  # a model that cannot be made fails here, before the log changes
        await live.runner.record_setting(options.MODEL_OPTION, entry.spec)
        live.switch(model, options.choice_for(entry, live.choice.effort))
        self._options_changed(live, sid)

    def _options_changed(self, live: LiveSession, sid: str) -> None:
        self.host.peer.notify_update(sid, {"sessionUpdate": "config_option_update",
                                           "configOptions": self._options(live)})

    async def switch_mode(self, live: LiveSession, sid: str, mode: Any, field_name: str) -> None:
        """`session/set_mode` (and the `mode` option, `/mode`): recorded (`config/set
        mode`, durable before the answer, as a model switch is), then told. A switch
        while a turn runs applies to it at once and is recorded when it ends
        (`LiveSession.keep_mode`)."""
        if mode not in permissions.MODES:
            raise InvalidParamsError(f"unknown mode {mode!r}: use one of {', '.join(permissions.MODES)}",
                                     field=field_name)
        before, live.runner.mode = live.runner.mode, mode
        try:
            await live.keep_mode()
        except BaseException:
            live.runner.mode = before  # not recorded: not switched
            raise
        # The mode and the `mode` config option are one setting: tell the client both.
        self.host.peer.notify_update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": mode})
        self._options_changed(live, sid)


def config_options(mode: str, models: tuple[ModelEntry, ...] | list[ModelEntry],
                   choice: options.Choice) -> list[dict[str, Any]]:
    """Every config option of our agent's session: the mode's, then the model's."""
    return [*permissions.mode_state(mode)["configOptions"], *options.model_options(models, choice)]
