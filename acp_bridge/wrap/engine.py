"""`acp-bridge wrap` as an engine of the host: an ACP agent to the editor, an ACP client
to the wrapped agents.

One engine over N wrapped agents (`-- COMMAND` is N = 1; `--agent NAME=COMMAND ...` is
N named ones, acp_bridge.wrap.moves): each agent is a `ChildDriver` (its process, its
runs, the ids of the sessions placed in it, acp_bridge.wrap.driver), and each session
names the agent it is placed in (`State.agent`, acp_bridge.wrap.state). The engine
routes every method of a session to that agent.

Connections: the editor's, the host's (acp_bridge.host), and each child's over its pipes
(acp_bridge.wrap.link, its handlers in acp_bridge.wrap.upstream). The session methods that
are about our log are the host's, answered as for our own agent (`session/load`,
`session/resume`, `session/list`, `session/close`, `session/delete`); `session/new` and
`session/prompt` are the child's, recorded on the way (acp_bridge.wrap.turns);
everything else the editor sends (`authenticate`, `session/set_mode`,
`session/set_config_option`, extension and unknown methods) is passed on as it is
(`forward`), with the session id mapped, and answered with the child's answer. The
child's own errors are relayed unchanged (acp_bridge.host.errors.relayed).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from acp_bridge.host.advertised import client_support
from acp_bridge.host.commands import Command, commands_update, merged
from acp_bridge.host.engine import OpenAnswer, Send, TurnEnd
from acp_bridge.host.host import Engine, Host
from acp_bridge.host.replay import Opened, StoredOpener
from acp_bridge.rpc.connection import Fallback
from acp_bridge.rpc.protocol import Handler
from acp_bridge.wrap.children import (
    SessionMap,
    child_source,
    fork_ask,
    fork_in_child,
    new_session_id,
)
from acp_bridge.wrap.commands import (
    agent_command,
    command_turn,
    offer,
    replay_encoder,
    shown,
    their_commands,
    wrapper_fork,
)
from acp_bridge.wrap.driver import ChildDriver, WrapConfig
from acp_bridge.wrap.initialize import obj
from acp_bridge.wrap.moves import AgentOfLog, Mover, answer_text
from acp_bridge.wrap.sessions import WrappedSession
from acp_bridge.wrap.spawn import Early
from acp_bridge.wrap.state import State, Unplaced
from acp_bridge.wrap.subagents import Subagents, make_subagent
from acp_bridge.wrap.turns import WrappedTurns
from acp_bridge.wrap.upstream import ChildSide, mapped_session, took_setting
from session.events import WrappedInfo

if TYPE_CHECKING:
    from session.fork import ForkPlan
    from session.repair import RepairReport

log = logging.getLogger("acp_bridge.wrap")

__all__ = ["WrapConfig", "WrapEngine"]

# The editor's requests on a session that drop what is held of it (`requested`).
_DROPS_HELD = frozenset({"session/load", "session/resume", "session/close", "session/delete"})


class WrapEngine(Engine[WrappedTurns]):
    label = "this agent"

    def __init__(self, configs: list[WrapConfig], *, early: Early | None = None) -> None:
        if not configs or (configs[0].name is not None and any(c.name is None for c in configs)):
            raise ValueError("every agent needs a name")
        self.drivers: dict[str, ChildDriver] = {}
        for i, config in enumerate(configs):
            sessions = SessionMap()
            side = ChildSide(sessions, lambda: self.host.peer, self._shown)
            # `early`: the default agent's process, spawned by the command line (wrap.spawn).
            driver = ChildDriver(config, side, sessions, store=lambda: self.host.store(),
                                 early=early if i == 0 else None)
            self.drivers[driver.name] = driver
            side.subagents = Subagents(sessions, functools.partial(self._subagent, driver))
        self.default = next(iter(self.drivers.values()))
        # `--agent`: the `agent` option and the moves between agents.
        self.mover = Mover(self.drivers) if configs[0].name is not None else None
        self._opener: StoredOpener[WrappedTurns] | None = None
        self._prepared = anyio.Event()  # `_prepare` has tried to open the store

    # --- the engine ------------------------------------------------------------------

    def methods(self) -> dict[str, Handler]:
        return {"initialize": self.initialize}

    def fallback(self) -> Fallback:
        return self.forward

    async def start(self, host: Host[WrappedTurns]) -> None:
        """Spawn the default agent (OSError if it cannot be); the others at first use."""
        await super().start(host)
        host.task_group.start_soon(self._prepare)
        self._opener = StoredOpener(
            host, encoder=lambda sid: replay_encoder(sid, self.commands_of, self.default.side.support),
            sink=AgentOfLog, adopt=self._adopt)
        for driver in self.drivers.values():
            if driver is self.default:
                await driver.start(host.task_group)
            else:
                driver.bind(host.task_group)
        if self.default.init_params is not None:  # the start-up handshake's `initialize`
            self._others_init(self.default.init_params)

    async def _prepare(self) -> None:
        """While the child boots (0.3-1 s for the SDK's echo agent), in a worker thread:
        the store is opened (SQLite's connection and schema check sync the disk), so it
        is not on the path of the editor's first `session/new` (issue 23, start-up). A
        store that cannot be opened is left for `session/new` to meet, and answer for,
        as before."""
        try:
            await anyio.to_thread.run_sync(self.host.store)
        except Exception as exc:  # reported where it is used: session/new, list, load
            log.debug("opening the store early failed: %s", exc)
        finally:
            self._prepared.set()

    async def aclose(self) -> None:
        for driver in self.drivers.values():
            await driver.aclose()

    # --- what the sessions' turns need (acp_bridge.wrap.turns.Agents) ---------------------

    def child_of(self, ws: WrappedSession) -> ChildDriver:
        return self.drivers.get(ws.state.agent) or self.default

    def commands_of(self, sid: str) -> list[Command]:
        """The wrapper's own slash commands for `sid` (acp_bridge.wrap.commands): `/fork`,
        and `/agent` with more than one agent."""
        ours = [wrapper_fork(self.host, sid)]
        if len(self.drivers) > 1:
            ours.append(agent_command(list(self.drivers), lambda: self._live(sid).session.state.agent,
                                      lambda name: self._move_in_turn(self._live(sid), name)))
        return ours

    async def run_own(self, turns: WrappedTurns, found: tuple[Command, str], prompt: list[Any]) -> TurnEnd:
        return await command_turn(turns, found, prompt, self.host.peer)

    def _live(self, sid: str) -> WrappedTurns:
        turns = self.host.find(sid)
        assert turns is not None  # its own prompt runs the command
        return turns

    def _subagent(self, driver: ChildDriver, parent: WrappedTurns, theirs: str, ours: str, title: str | None) -> None:
        """The parent's agent announced a subagent session (`theirs`): our session `ours`
        of it made in a task (acp_bridge.wrap.subagents), on the run it was announced on."""
        link, subagents = driver.link, driver.side.subagents
        assert subagents is not None
        self.host.task_group.start_soon(make_subagent, self.host, self, driver, subagents, parent.session, theirs,
                                        ours, title, link.generation if link is not None else 0)

    def _shown(self, ws: WrappedSession, update: Any) -> Any:
        """What the editor is shown of the child's update: its command list with ours,
        its config options with ours (`--agent`); the log keeps it as the child sent it."""
        if their_commands(update) is not None:  # (ours are made only for a list: not per chunk)
            update = shown(update, self.commands_of(ws.id))
        if self.mover is not None:
            turns = self.host.find(ws.id)
            if turns is not None:
                update = self.mover.shown(turns, update)
        return update

    def _offered(self, turns: WrappedTurns, fields: dict[str, Any]) -> dict[str, Any]:
        return self.mover.offered(turns, fields) if self.mover is not None else fields

    def _made(self, turns: WrappedTurns, ours: dict[str, Any]) -> dict[str, Any]:
        """`_meta.acpBridge.wrapped` of an answer that places a session: with `--agent`,
        the agent it is placed in."""
        return {**ours, "agent": turns.session.state.agent} if self.mover is not None else ours

    # --- the editor's methods ----------------------------------------------------------

    async def initialize(self, **params: Any) -> dict[str, Any]:
        """The child's `initialize` answer with ours added (acp_bridge.wrap.initialize).
        Not called when the start-up handshake answered it (acp_bridge.wrap.handshake:
        the same bytes, before this engine was imported)."""
        driver = self.default
        link = await driver.ensure_link()
        driver.init_params = params
        done = driver.took_init(await link.first_initialize(params), self._agent_names())
        self._others_init(params)
        return done.answer

    def _agent_names(self) -> list[str] | None:
        """`_meta.acpBridge.agents` of the `initialize` answer (`wrap --agent`)."""
        return list(self.drivers) if self.mover is not None else None

    def _others_init(self, params: dict[str, Any]) -> None:
        support = client_support(params.get("clientCapabilities"))
        for other in self.drivers.values():
            other.side.support = support  # each agent is sent the editor's as it came: it asks no more
            if other is not self.default:
                other.init_params = params  # what each agent is sent when it starts

    async def new_session(self, params: Mapping[str, Any]) -> dict[str, Any]:
        driver = self.default
        link = await driver.ensure_link()
        cwd, mcp = params["cwd"], params["mcpServers"]
        rest = {k: v for k, v in params.items() if k not in ("cwd", "mcpServers")}
        result = await link.call("session/new", {**rest, "cwd": cwd, "mcpServers": mcp})
        child_sid = new_session_id(result)
        extra = params.get("additionalDirectories")
        additional = extra if isinstance(extra, list) else None
        await self._prepared.wait()  # never two threads opening the store
        session_log = await self.host.create_log(cwd=cwd, additional=additional, wrapped=driver.wrapped(child_sid))
        turns = WrappedTurns(WrappedSession(session_log, cwd, State(driver.name), list(mcp), additional), self)
        self.host.add(turns.id, turns)
        driver.adopt(turns, child_sid, link.generation, result)
        if turns.session.commands is None:  # else the child's list came first, shown with ours
            offer(self.host.peer, turns.session, self.commands_of(turns.id))
        return self._offered(turns, {**result, "sessionId": turns.id})

    async def fork(self, source: str, params: Mapping[str, Any], plan: ForkPlan,
                   make: Callable[[WrappedInfo | None], Awaitable[WrappedTurns]]) -> OpenAnswer:
        """Our log is forked (`make`) with the child's context of the fork, by the agent
        the original is placed in: that child's own fork of the original's session when
        it offers `session/fork` and the fork holds the whole conversation, else a fresh
        session seeded with the fork's transcript (docs/wrap.md, "Fork"). The child's
        session is made first, so the fork's header names it."""
        live = self.host.find(source)
        driver = self.child_of(live.session) if live is not None else await anyio.to_thread.run_sync(
            self._driver_of_stored, source)
        link = await driver.ensure_link(live)
        theirs = child_source(driver.caps, live.session if live is not None else None, plan, driver.sessions)
        result, child_sid, emulated, why = await fork_in_child(link, fork_ask(params), theirs, driver.sessions,
                                                               driver.side.drop_early)
        try:  # an emulated fork's header says so: a fresh restore of it, by any wrapper, is seeded again
            turns = await make(driver.wrapped(child_sid, seeded=emulated))
        except BaseException:
            if obj(driver.caps.get("sessionCapabilities")).get("close") is not None:
                link.ask("session/close", {"sessionId": child_sid}).late = lambda _: None
            raise
        ws = turns.session
        ws.mcp_servers = list(params.get("mcpServers") or [])
        driver.adopt(turns, child_sid, link.generation, result)
        ours: dict[str, Any] = {"forked": "emulated" if emulated else "child"}
        if why is not None:
            ours["forkError"] = why
        if emulated:
            from acp_bridge.wrap.seed import seed  # (a fork's path only: issue 32)

            ours.update(await seed(ws, link, self.host.store()))
            ws.carried = True  # a fresh restore of it is seeded again
        if not self.host.answering(source):
            offer(self.host.peer, ws, self.commands_of(ws.id))
        else:  # `/fork`, a command of its turn: the editor opens the fork later (its load drops this)
            ws.held = []
        fields = {k: v for k, v in result.items() if k not in ("sessionId", "_meta")}
        return OpenAnswer(self._offered(turns, fields), meta=obj(result.get("_meta")),
                          ours={"wrapped": self._made(turns, ours)})

    def _driver_of_stored(self, session_id: str) -> ChildDriver:
        """The agent a load of the stored `session_id` would place it in (`Mover.of_stored`)."""
        return self.default if self.mover is None else self.mover.of_stored(self.host.store(), session_id)

    def _adopt(self, opened: Opened) -> WrappedTurns:
        sink = opened.sink
        assert isinstance(sink, AgentOfLog)
        header = opened.log.header
        wrapped = header.get("wrapped")
        last = wrapped.get("sessionId") if wrapped is not None else None
        # Seeded when fresh: an emulated fork; an imported history (another agent's context,
        # handed over as a move is: docs/import.md), without --seed-fresh.
        driver, carried = self.default, bool(wrapped and wrapped.get("seeded") is True) or "imported" in header
        if self.mover is not None:  # the agent of its log (acp_bridge.wrap.moves)
            driver, last, carried = self.mover.placement(sink, header, last, carried)
        state = State(driver.name, Unplaced(last))
        ws = WrappedSession(opened.log, header["cwd"], state, [], header.get("additionalDirectories"),
                            commands=sink.theirs, carried=carried)
        return WrappedTurns(ws, self)

    async def open_session(self, session_id: str, params: Mapping[str, Any], send: Send | None,
                           live: WrappedTurns | None) -> tuple[WrappedTurns, RepairReport]:
        assert self._opener is not None
        return await self._opener(session_id, params, send, live)

    async def attach(self, session: WrappedTurns, params: Mapping[str, Any]) -> OpenAnswer:
        ws = session.session
        ws.cwd, ws.mcp_servers = params["cwd"], params.get("mcpServers") or []
        extra = params.get("additionalDirectories")
        if isinstance(extra, list):
            ws.additional_directories = extra
        placing = await self.child_of(ws).place(session)
        # The commands before the answer, and what the child sends after it held until
        # the editor's next request on the session (`requested`): a load or resume
        # ends with its answer (docs/wrap.md, "Load").
        offer(self.host.peer, ws, self.commands_of(ws.id), after_answer=False)
        fields = {k: v for k, v in placing.result.items() if k not in ("sessionId", "_meta")}
        answer = OpenAnswer(self._offered(session, fields), meta=obj(placing.result.get("_meta")),
                            ours={"wrapped": self._made(session, {"restored": placing.way, **placing.seeded})})
        ws.held = []  # nothing is awaited from here to the answer: what comes later is after it
        return answer

    def requested(self, session: WrappedTurns, method: str) -> None:
        """The editor's request on `session`: what the child sent since the answer of
        its load or resume goes to the editor first; a load, resume, close or delete
        drops it instead (recorded, it is in the replay of the next load)."""
        if session.session.held is None:
            return
        if method in _DROPS_HELD:
            session.session.held = None
        else:
            self.child_of(session.session).side.release(session.session)

    async def forward(self, method: str, params: Any, is_request: bool) -> Any:
        """Any other method of the editor: passed on to the agent of the session it
        names (the default without one), the session id mapped both ways (in the params,
        and in the result the child answers with); a switch of the `agent` option is a
        move (acp_bridge.wrap.moves)."""
        turns = self.host.find(params.get("sessionId")) if isinstance(params, dict) else None
        mover = self.mover
        if turns is not None and mover is not None and method == "session/set_config_option" \
                and mover.is_ours(turns, params.get("configId")):
            if not is_request:
                log.info("session %s: a switch of its agent sent as a notification: ignored", turns.id)
                return None
            return await self._move(turns, params.get("value"))
        driver = self.child_of(turns.session) if turns is not None else self.default
        link = await driver.ensure_link(turns)
        if turns is None:
            if not is_request:
                link.notify(method, params)
                return None
            return await link.call(method, params)
        link, child_sid = await driver.child_session(turns)
        params = {**params, "sessionId": child_sid}
        if not is_request:
            link.notify(method, params)
            return None
        result = await link.call(method, params)
        took_setting(turns.session, method, params, result)
        result = mapped_session(result, child_sid, turns.id)
        if method == "session/set_config_option" and isinstance(result, dict):
            result = self._offered(turns, result)
        return result

    async def _move(self, turns: WrappedTurns, name: Any) -> dict[str, Any]:
        """`session/set_config_option` of the `agent` option: the move's answer, then the
        commands offered again when the source's are gone."""
        assert self.mover is not None
        ws = turns.session
        had = ws.commands
        answer = await self.mover.move(turns, name)
        if had is not None and ws.commands is None:  # the source's are gone; the target gave none
            offer(self.host.peer, ws, self.commands_of(ws.id))
        return answer

    async def _move_in_turn(self, turns: WrappedTurns, name: str) -> str:
        """`/agent NAME`: the move as the `agent` option makes it (recorded before the
        command's turn, which then names the new agent), the editor shown the new
        options and commands; the command's answer."""
        assert self.mover is not None
        ws = turns.session
        had = ws.commands
        answer = await self.mover.move(turns, name, in_command=True)
        peer = self.host.peer
        peer.notify_update(ws.id, {"sessionUpdate": "config_option_update", "configOptions": answer["configOptions"]})
        if had is not None and ws.commands is None:  # the source's are gone; the target gave none
            peer.notify_update(ws.id, commands_update(merged(None, self.commands_of(ws.id))))
        return answer_text(answer, name)
