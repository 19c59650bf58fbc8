"""`acp-bridge wrap --agent NAME=COMMAND ...`: several wrapped agents behind one host,
and a session handed from one to another between turns (docs/wrap.md, "Several
agents: handing a session to another agent").

Each agent is a `WrapEngine` of its own (its child process, its link, the ids of its
sessions), bound to the one host: the first is the default, spawned at start-up and
given every `session/new`; the others are started at their first use (their own
`initialize`, the editor's params as the first agent got them). `SwitchEngine` is the
host's engine: it routes each session's methods to the engine the session is placed in
(`WrappedSession.child`), adds the `agent` config option to every answer that carries
the child's config options (theirs unchanged, ours after them), and serves
`session/set_config_option` of that option itself (`switch`):

1. refused while a prompt of the session runs (-32001), or another switch does;
2. the new agent is started if it is not running, given a fresh session and seeded with
   the transcript so far (acp_bridge.wrap.seed, as `--seed-fresh` does); a prompt that
   comes meanwhile waits for the switch (`WrappedSession.placing`);
3. the switch is recorded and made durable before the answer: `config/set {configId:
   "agent", value: NAME, wrapped: {command, sessionId, agentInfo?}}`;
4. the old agent's child session is closed (if it can close sessions), and its process
   stopped (its whole group) if no live session of ours is placed in it.

A failure before 3 (the new agent cannot be started, refuses `session/new`) leaves the
session in its old agent, as it was, and is answered as the error it is. A load places
the session in the agent of its last turn (`turn/start.agent`) or of a later switch
(`AgentOfLog`, fed as the load reads the log); an agent no longer configured gives
way to the default.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

import anyio

from acp_bridge.errors import (
    InvalidParamsError,
    PromptInProgressError,
    RequestRefusedError,
)
from acp_bridge.host.commands import Command, commands_update, merged
from acp_bridge.host.engine import OpenAnswer, Send
from acp_bridge.host.host import Engine, Host
from acp_bridge.host.replay import Opened, StoredOpener
from acp_bridge.rpc.connection import Fallback
from acp_bridge.rpc.protocol import Handler
from acp_bridge.wrap.commands import CommandsOfLog, agent_command, offer, replay_encoder, shown
from acp_bridge.wrap.engine import WrapConfig, WrapEngine
from acp_bridge.wrap.link import obj
from acp_bridge.wrap.sessions import WrappedSession
from acp_bridge.wrap.spawn import Early
from session.backends.base import read_stored
from session.events import CONFIG_SET, TURN_START, Event, Header, WrappedInfo
from session.fork import ForkPlan
from session.items import config_set
from session.repair import RepairReport

log = logging.getLogger("acp_bridge.wrap.switch")

AGENT_OPTION: Final = "agent"  # our option's id, and the `configId` its switches are recorded under
OTHER_ID: Final = "acp-bridge.agent"  # its id where the child has an option `agent` of its own
OTHER_CATEGORY: Final = "_agent"  # its category where the child has a `model` option (ACP: `_` is free)


class AgentOfLog(CommandsOfLog):
    """What a load needs of the log to place a session (a `LoadSink`): the agent of its
    last turn or later switch, whether it ever moved, and each agent's own session id
    as its last switch to that agent recorded it; and the agent's commands."""

    def __init__(self) -> None:
        super().__init__()
        self.agent: str | None = None
        self.moved = False
        self.sessions: dict[str, str] = {}
        self._turn = 0  # the last turn started so far
        self._at: dict[str, int] = {}  # the turn during or after which `sessions[name]` was recorded

    def feed(self, event: Event) -> None:
        super().feed(event)
        data = event["data"]
        if event["type"] == TURN_START:
            if isinstance(data.get("turn"), int):
                self._turn = data["turn"]
            if isinstance(data.get("agent"), str):
                self.agent = data["agent"]
        elif (event["type"] == CONFIG_SET and data.get("configId") == AGENT_OPTION
              and isinstance(data.get("wrapped"), dict) and isinstance(data.get("value"), str)):
            self.agent, self.moved = data["value"], True
            sid = data["wrapped"].get("sessionId")
            if isinstance(sid, str):
                self.sessions[data["value"]] = sid
                self._at[data["value"]] = self._turn

    def session_of(self, name: str, command: list[str], header: Header) -> str | None:
        """The child session of agent `name` this session may take again. In a fork, a
        switch recorded up to the fork's turn is the original's (its child session is
        the original's): the fork's own is the one its header names, if it is that
        agent's; none else (a fresh session, seeded)."""
        forked = header.get("forkedFrom")
        if forked is None or self._at.get(name, -1) > forked["turn"]:
            return self.sessions.get(name)
        wrapped = header.get("wrapped")
        if wrapped is not None and wrapped.get("command") == command:
            return wrapped.get("sessionId")
        return None


def option_id(child_options: list[Any]) -> str:
    """Our option's id beside the child's options: `agent`, unless the child has one."""
    return OTHER_ID if any(obj(o).get("id") == AGENT_OPTION for o in child_options) else AGENT_OPTION


def agent_option(agents: Mapping[str, list[str]], current: str, child_options: list[Any]) -> dict[str, Any]:
    """The `agent` config option (ACP SessionConfigOption, a select): category `model`
    unless the child offers a `model` option of its own (then `_agent`)."""
    model_taken = any(obj(o).get("category") == "model" for o in child_options)
    return {"id": option_id(child_options), "name": "Agent",
            "description": "The wrapped agent that answers the next prompt (acp-bridge wrap --agent); a switch "
                           "starts it and shows it the conversation so far",
            "category": OTHER_CATEGORY if model_taken else "model", "type": "select", "currentValue": current,
            "options": [{"value": name, "name": name, "description": Path(command[0]).name}
                        for name, command in agents.items()]}


class SwitchEngine(Engine[WrappedSession]):
    label = "this agent"

    def __init__(self, configs: list[WrapConfig], *, early: Early | None = None) -> None:
        if not configs or any(c.name is None for c in configs):
            raise ValueError("every agent needs a name")
        # `early`: the default agent's process, spawned by the command line (wrap.spawn).
        self.engines = {str(c.name): WrapEngine(c, early=early if i == 0 else None) for i, c in enumerate(configs)}
        for engine in self.engines.values():
            engine.side.shown = self._shown
            if len(configs) > 1:
                engine.more_commands = self._agent_command
        self.default = next(iter(self.engines.values()))
        self.commands = {name: list(e.config.command) for name, e in self.engines.items()}
        # The child's config options of each live session, as it last gave them.
        self._options: weakref.WeakKeyDictionary[WrappedSession, list[Any]] = weakref.WeakKeyDictionary()
        self._opener: StoredOpener[WrappedSession] | None = None

    def methods(self) -> dict[str, Handler]:
        """`initialize` ours; any other method of the wrapper's own, served by the engine
        the session named in its params is placed in (the default without one)."""
        table = {name: self._routed(name) for name in self.default.methods()}
        table["initialize"] = self.initialize
        return table

    def _routed(self, method: str) -> Handler:
        async def handler(**params: Any) -> Any:
            ws = self.host.find(params.get("sessionId"))
            engine = self.engine_of(ws) if ws is not None else self.default
            return await engine.methods()[method](**params)

        return handler

    def fallback(self) -> Fallback:
        return self.forward

    async def start(self, host: Host[WrappedSession]) -> None:
        """Spawn the default agent (OSError if it cannot be); the others at first use."""
        await super().start(host)
        for engine in self.engines.values():
            await (engine.start(host) if engine is self.default else engine.bind(host))
        self._opener = StoredOpener(host, encoder=lambda sid: replay_encoder(sid, self.default.commands_of),
                                    sink=AgentOfLog, adopt=self._adopt)

    async def aclose(self) -> None:
        for engine in self.engines.values():
            await engine.aclose()

    def engine_of(self, ws: WrappedSession) -> WrapEngine:
        return next((e for e in self.engines.values() if ws.child is e), self.default)

    def name_of(self, ws: WrappedSession) -> str:
        return str(self.engine_of(ws).config.name)

    # --- what the editor is offered ----------------------------------------------------

    def offered(self, ws: WrappedSession, result: dict[str, Any]) -> dict[str, Any]:
        """`result` (an answer that may carry the child's config options) with ours
        after the child's; the child's kept for the next answer that omits them."""
        given = result.get("configOptions")
        if isinstance(given, list):
            self._options[ws] = given
        theirs = self._options.get(ws, [])
        return {**result, "configOptions": [*theirs, agent_option(self.commands, self.name_of(ws), theirs)]}

    def _shown(self, ws: WrappedSession, update: Any) -> Any:
        """The child's `config_option_update` (its whole set, which an editor puts in
        place of what it had) with ours added, its commands with ours; the log keeps it
        as the child sent it."""
        update = shown(update, self.engine_of(ws).commands_of(ws.id))
        if isinstance(update, dict) and update.get("sessionUpdate") == "config_option_update" \
                and isinstance(update.get("configOptions"), list):
            return {**update, **self.offered(ws, {"configOptions": update["configOptions"]})}
        return update

    async def initialize(self, **params: Any) -> dict[str, Any]:
        result = await self.default.initialize(**params)
        for engine in self.engines.values():
            if engine is not self.default:
                engine.init_params = params  # what each agent is sent when it starts
        meta = obj(result.get("_meta"))
        ours = obj(meta.get("acpBridge"))
        result["_meta"] = {**meta, "acpBridge": {**ours, "agents": list(self.engines)}}
        return result

    # --- sessions --------------------------------------------------------------------

    async def new_session(self, params: Mapping[str, Any]) -> dict[str, Any]:
        result = await self.default.new_session(params)
        ws = self.host.find(result.get("sessionId"))
        return self.offered(ws, result) if ws is not None else result

    def _adopt(self, opened: Opened) -> WrappedSession:
        sink = opened.sink
        assert isinstance(sink, AgentOfLog)
        header = opened.log.header
        name = sink.agent
        if name is not None and name not in self.engines:
            log.warning("session %s: its agent %r is not configured here: placed in the default, %r",
                        header["id"], name, self.default.config.name)
        engine = self.engines.get(name or "") or self._by_command(header.get("wrapped"))
        ws = WrappedSession(engine, opened.log, header["cwd"], [], header.get("additionalDirectories"))
        ws.commands = sink.theirs
        ws.moved = sink.moved
        ws.moved_sid = sink.session_of(str(engine.config.name), list(engine.config.command), header)
        return ws

    def _by_command(self, wrapped: WrappedInfo | None) -> WrapEngine:
        """The agent that made the session (no turn or switch names one): the one with
        the header's command, else the default."""
        command = wrapped.get("command") if wrapped is not None else None
        return next((e for e in self.engines.values() if e.config.command == command), self.default)

    async def open_session(self, session_id: str, params: Mapping[str, Any], send: Send | None,
                           live: WrappedSession | None) -> tuple[WrappedSession, RepairReport]:
        assert self._opener is not None
        return await self._opener(session_id, params, send, live)

    async def attach(self, session: WrappedSession, params: Mapping[str, Any]) -> OpenAnswer:
        opened = await self.engine_of(session).attach(session, params)
        wrapped = {**obj(opened.ours.get("wrapped")), "agent": self.name_of(session)}
        return OpenAnswer(self.offered(session, dict(opened.fields)), meta=opened.meta,
                          ours={**opened.ours, "wrapped": wrapped})

    async def fork(self, source: str, params: Mapping[str, Any], plan: ForkPlan,
                   make: Callable[[WrappedInfo | None], Awaitable[WrappedSession]]) -> OpenAnswer:
        """The fork is made by the engine of the original's agent (its child forks or is
        seeded: WrapEngine.fork); the fork's log names that agent, so a load places it
        there too. The answer with our option, as a load's."""
        live = self.host.find(source)
        engine = self.engine_of(live) if live is not None else await anyio.to_thread.run_sync(
            self._engine_of_stored, source)
        made: list[WrappedSession] = []

        async def making(wrapped: WrappedInfo | None) -> WrappedSession:
            made.append(await make(wrapped))
            return made[-1]

        opened = await engine.fork(source, params, plan, making)
        wrapped = {**obj(opened.ours.get("wrapped")), "agent": str(engine.config.name)}
        return OpenAnswer(self.offered(made[-1], dict(opened.fields)), meta=opened.meta,
                          ours={**opened.ours, "wrapped": wrapped})

    def _engine_of_stored(self, session_id: str) -> WrapEngine:
        """The engine a load of the stored `session_id` would place it in (its log read
        as stored, without its lock)."""
        stored = read_stored(self.host.store().backend.read_stream(session_id))  # closes it
        sink = AgentOfLog()
        for event in stored.events:
            sink.feed(event)
        name = sink.agent
        return self.engines.get(name or "") or self._by_command(stored.header.get("wrapped"))

    # --- the editor's other methods --------------------------------------------------

    async def forward(self, method: str, params: Any, is_request: bool) -> Any:
        ws = self.host.find(params.get("sessionId")) if isinstance(params, dict) else None
        if ws is None:
            return await self.default.forward(method, params, is_request)
        if method == "session/set_config_option" and params.get("configId") == option_id(self._options.get(ws, [])):
            if not is_request:
                log.info("session %s: a switch of its agent sent as a notification: ignored", ws.id)
                return None
            return await self.switch(ws, params.get("value"))
        result = await self.engine_of(ws).forward(method, params, is_request)
        if method == "session/set_config_option" and isinstance(result, dict):
            result = self.offered(ws, result)
        return result

    async def switch(self, ws: WrappedSession, name: Any) -> dict[str, Any]:
        """Hand `ws` to the agent `name` (see the module docstring); the answer, then its
        commands offered again when the old agent's are gone."""
        self._named(name)
        if ws.prompting or ws.recorder is not None:
            raise PromptInProgressError(ws.id)
        had = ws.commands
        answer = await self._move(ws, name)
        if had is not None and ws.commands is None:  # the old agent's are gone; the new one gave none
            offer(self.host.peer, ws, self.engine_of(ws).commands_of(ws.id))
        return answer

    async def _move(self, ws: WrappedSession, name: Any) -> dict[str, Any]:
        """The switch itself (steps 2-4), for `session/set_config_option` and `/agent`
        (which runs in the session's prompt: its turn is recorded after the switch)."""
        name = self._named(name)
        if ws.placing is not None:
            raise RequestRefusedError(f"session {ws.id} is being handed to another agent already; wait",
                                      code="switching")
        old, new = self.engine_of(ws), self.engines[name]
        if new is old:
            return self.offered(ws, {})
        before = (ws.child_sid, ws.generation, ws.moved, ws.moved_sid, ws.mode, ws.commands)
        placing = ws.placing = anyio.Event()
        try:
            # The new agent's mode is what its session/new says (none: none), its
            # commands what it sends.
            ws.child, ws.child_sid, ws.generation, ws.moved, ws.moved_sid, ws.mode = new, None, 0, True, None, None
            ws.commands = None
            try:
                restored, result, seeded = await new.place(ws)
                assert ws.child_sid is not None
                info: WrappedInfo = {"command": list(new.config.command), "sessionId": ws.child_sid}
                if new.child_info is not None:
                    info["agentInfo"] = new.child_info
                ws.log.extend([config_set(AGENT_OPTION, name, wrapped=info)])
                await anyio.to_thread.run_sync(ws.log.sync)
            except BaseException:
                new.forget(ws)
                ws.child = old
                ws.child_sid, ws.generation, ws.moved, ws.moved_sid, ws.mode, ws.commands = before
                if ws.child_sid is not None:
                    old.children.bind(ws, ws.child_sid, ws.generation)
                with anyio.CancelScope(shield=True):  # a new agent started for nothing goes again
                    await new.stop_unused()
                raise
            log.info("session %s: handed from agent %s to %s (its session %s, %s)", ws.id, old.config.name, name,
                     ws.child_sid, "seeded" if seeded.get("seeded") else seeded.get("seedError", "nothing to seed"))
            with anyio.CancelScope(shield=True):  # recorded: the old agent goes whatever happens to us
                await self._leave(old, ws, before[0], before[1])
        finally:
            ws.placing = None
            placing.set()
        self._options[ws] = []  # the old agent's are gone; the new one's, if it gave any:
        answer = self.offered(ws, {"configOptions": result["configOptions"]}
                              if isinstance(result.get("configOptions"), list) else {})
        answer["_meta"] = {"acpBridge": {"wrapped": {"agent": name, "restored": restored, **seeded}}}
        return answer

    def _named(self, name: Any) -> str:
        if not isinstance(name, str) or name not in self.engines:
            raise InvalidParamsError(f"no agent named {name!r}: this wrapper has {', '.join(self.engines)}",
                                     field="value")
        return name

    def _agent_command(self, sid: str) -> list[Command]:
        """`/agent [NAME]` of the session `sid` (acp_bridge.wrap.commands.agent_command)."""
        def live() -> WrappedSession:
            ws = self.host.find(sid)
            assert ws is not None  # its own prompt runs the command
            return ws

        return [agent_command(list(self.engines), lambda: self.name_of(live()),
                              lambda name: self._switch_in_turn(live(), name))]

    async def _switch_in_turn(self, ws: WrappedSession, name: str) -> str:
        """`/agent NAME`: the switch as the `agent` option makes it (recorded before the
        command's turn, which then names the new agent), the editor shown the new
        options and commands; the command's answer."""
        had = ws.commands
        answer = await self._move(ws, name)
        peer = self.host.peer
        peer.notify_update(ws.id, {"sessionUpdate": "config_option_update", "configOptions": answer["configOptions"]})
        if had is not None and ws.commands is None:  # the old agent's are gone; the new one gave none
            peer.notify_update(ws.id, commands_update(merged(None, self.engine_of(ws).commands_of(ws.id))))
        how = answer["_meta"]["acpBridge"]["wrapped"]
        told = "shown the conversation so far" if how.get("seeded") else (
            f"not shown the conversation ({how['seedError']})" if how.get("seedError") else "a fresh session")
        return f"Agent: {name} (from the next prompt on; {told})."

    async def _leave(self, old: WrapEngine, ws: WrappedSession, child_sid: str | None, generation: int) -> None:
        """`ws` left `old`: its child session there closed, the process stopped if no
        session is placed in it any more."""
        link = old.link
        if child_sid is not None and link is not None and generation == link.generation:
            # `close_child_session` closes what a session names: the one `ws` had there.
            await old.close_child_session(WrappedSession(old, ws.log, ws.cwd, child_sid=child_sid,
                                                         generation=generation))
        if child_sid is not None and old.children.theirs.get(child_sid) is ws:
            del old.children.theirs[child_sid]
        await old.stop_unused()
