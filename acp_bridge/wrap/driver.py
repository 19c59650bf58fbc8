"""`ChildDriver`: one wrapped agent's process, its runs and the sessions placed in it.

The driver performs what the sessions' lifecycle decides about the child
(acp_bridge.wrap.lifecycle): it starts the child, restarts it when it died or is
troubled (`link_plan`), gives a session a session on its current run (`restore`, then
the seed when `seeds` says so), tells it a cancel, sticks a session the wrapper ended,
closes a child session, and stops the process when no session is placed in it any more
(`wrap --agent`). It reports back as events on the session (`Bound`, `RestoreBegan`...).

The child is spawned at start-up (the default agent; the others at their first use)
and restarted at the next request after it died; sessions are then restored on the new
run. A child that still runs a turn the wrapper ended (it did not answer a cancelled
prompt within the cancel grace: a stuck child session), or that did not answer what a
prompt needed first within the grace (overdue), is restarted at the next request that
needs it, unless another session's prompt, replay or seed runs in it: the stuck session
then gets a fresh child session instead, and the running turn is not cut (docs/wrap.md,
"The cancel grace").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from acp_bridge.errors import AgentStartError
from acp_bridge.host.advertised import notice
from acp_bridge.wrap.child import ChildAgent
from acp_bridge.wrap.child_runs import link_plan, seeds
from acp_bridge.wrap.children import SessionMap, close_child, restore
from acp_bridge.wrap.initialize import Initialized, initialized
from acp_bridge.wrap.link import Call, ChildLink
from acp_bridge.wrap.sessions import WrappedSession
from acp_bridge.wrap.signals import Bound
from acp_bridge.wrap.spawn import Early
from acp_bridge.wrap.state import State, Stuck, Way
from acp_bridge.wrap.turns import WrappedTurns
from acp_bridge.wrap.upstream import ChildSide
from session import SessionStore
from session.events import WrappedInfo

log = logging.getLogger("acp_bridge.wrap")


@dataclass(frozen=True)
class WrapConfig:
    store_dir: Path | str  # a folder, or a PostgreSQL connection string
    command: list[str]
    cancel_grace: float  # seconds a cancelled prompt waits for the child's answer (`--cancel-grace`)
    backend: str = "jsonl"
    grace: float = 2.0  # seconds the child gets to exit after its stdin closed
    env: dict[str, str] | None = field(default=None)
    seed_fresh: bool = False  # seed a fresh child session with the transcript (wrap/seed.py)
    name: str | None = None  # `--agent NAME=COMMAND`: the agent's name (None: `-- COMMAND`)


@dataclass(frozen=True)
class Placing:
    """How a session was given its child session: the way, the child's answer, and what
    the seed adds to `_meta.acpBridge.wrapped`."""

    way: Way
    result: dict[str, Any]
    seeded: dict[str, Any]


class ChildDriver:
    """One wrapped agent: its process (`ChildAgent`), the link to its current run, the
    ids of the sessions placed in it, what it answered to `initialize`."""

    def __init__(self, config: WrapConfig, side: ChildSide, sessions: SessionMap, *,
                 store: Any, early: Early | None = None) -> None:
        self.config = config
        # `early`: the first process of `config.command`, spawned by the command line.
        self.child = ChildAgent(config.command, env=config.env, grace=config.grace, early=early)
        self.sessions = sessions
        self.side = side
        self._store = store  # () -> SessionStore
        self.link: ChildLink | None = None
        self.init_params: dict[str, Any] | None = None
        self.caps: dict[str, Any] = {}
        self.info: dict[str, Any] | None = None
        self._starting = anyio.Lock()
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def name(self) -> str:
        """Its name among the wrapper's agents ("" in the one-agent form)."""
        return self.config.name or ""

    @property
    def agent_name(self) -> str:
        name = (self.info or {}).get("name")
        return name if isinstance(name, str) else Path(self.config.command[0]).name

    @property
    def agent_label(self) -> str | None:
        return self.config.name

    @property
    def cancel_grace(self) -> float:
        return self.config.cancel_grace

    def wrapped(self, child_sid: str, *, seeded: bool = False) -> WrappedInfo:
        """The header's (or a move's) `wrapped` of a session whose child session is
        `child_sid`; `seeded`: that session had the conversation only by our seed."""
        wrapped: WrappedInfo = {"command": list(self.config.command), "sessionId": child_sid}
        if self.info is not None:
            wrapped["agentInfo"] = self.info
        if seeded:
            wrapped["seeded"] = True
        return wrapped

    def took_init(self, answer: Any, agents: list[str] | None = None) -> Initialized:
        """The child's answer to `initialize` read (its capabilities, its `agentInfo`),
        and the editor's answer made of it (`agents`: with `wrap --agent`)."""
        done = initialized(answer, agents)
        self.caps, self.info = done.caps, done.info
        return done

    # --- its runs ----------------------------------------------------------------------

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Serve its runs in `task_group`, spawning the first now (OSError if it cannot
        be)."""
        self._tg = task_group
        link = await self._new_link()
        greeting = self.child.greeting
        if greeting is not None and greeting.state == "done":
            # The start-up handshake answered the editor's `initialize` with this run's
            # answer (acp_bridge.wrap.handshake): as `WrapEngine.initialize` leaves it.
            self.init_params = greeting.params
            self.took_init(greeting.answer)
            link.ready = True

    def bind(self, task_group: anyio.abc.TaskGroup) -> None:
        """Serve its runs in `task_group`, the first started at its first use."""
        self._tg = task_group

    async def _new_link(self, *, grace: float | None = None) -> ChildLink:
        assert self._tg is not None
        # Whole or not at all: a spawned child always has its link (a cancel here
        # would leave a process nobody reads).
        with anyio.CancelScope(shield=True):
            if self.link is not None:
                await self.link.close(grace=grace)
            self.sessions.new_run()
            await self.child.start(self._tg)
            link = ChildLink(self.child, fallback_for=self.side.fallback_for, inline=self.side.inline())
            await self._tg.start(link.run)
            self.link = link
        return link

    async def ensure_link(self, turns: WrappedTurns | None = None) -> ChildLink:
        """The child's connection, started or restarted (and initialized again) as
        `link_plan` says."""
        link = self.link
        if link is not None and link.running and link.ready and not (self.sessions.stuck or link.overdue):
            return link  # the usual case: no lock, no checkpoint
        async with self._starting:
            link = self.link
            troubled = link is not None and bool(self.sessions.stuck or link.overdue)
            plan = link_plan(running=link is not None and link.running, started=link is not None,
                             troubled=troubled,
                             busy=link is not None and self.sessions.busy(link.generation, turns))
            if plan != "use":
                if plan == "restart_now":
                    log.warning("the wrapped agent did not answer within the cancel grace: restarting it")
                elif plan == "start":  # `wrap --agent`: not started yet, or stopped when unused
                    log.info("starting the wrapped agent %s", self.agent_label or self.agent_name)
                else:
                    log.warning("the wrapped agent is not running: restarting it")
                try:
                    # A troubled child is not waited for: it had its grace.
                    link = await self._new_link(grace=0 if plan == "restart_now" else None)
                except OSError as exc:
                    raise AgentStartError(f"the wrapped agent cannot be started: {exc}") from None
                if plan != "start" and turns is not None:
                    self.side.notice(turns.id, restarted_notice(plan == "restart_now", self.agent_label))
            assert link is not None
            if not link.ready:  # a restart (or one whose `initialize` was given up)
                if self.init_params is not None:
                    self.took_init(await link.call("initialize", self.init_params))
                link.ready = True
            return link

    async def stop_unused(self) -> None:
        """Stop the child (its whole process group, as at shutdown) if no live session
        of ours is placed in it any more; it is started again at its next use."""
        link = self.link
        if link is None or self.sessions.theirs:
            return
        self.link = None
        log.info("no session uses the wrapped agent %s any more: stopping it", self.agent_label or self.agent_name)
        await link.close()

    async def aclose(self) -> None:
        if self.link is not None:
            await self.link.close()

    # --- its sessions --------------------------------------------------------------------

    async def child_session(self, turns: WrappedTurns) -> tuple[ChildLink, str]:
        """The child's session for `turns`' session on its current run (restored if it
        has none there, and a fresh one if it is stuck in a turn the wrapper ended)."""
        link = await self.ensure_link(turns)
        state = turns.session.state
        child_sid = state.bound_on(link.generation)
        if child_sid is None or isinstance(state.place, Stuck) or self.sessions.is_stuck(child_sid):
            async with turns.restoring:  # one restore at a time: a second caller finds it done
                state = turns.session.state
                child_sid = state.bound_on(link.generation)
                if child_sid is None or isinstance(state.place, Stuck) or self.sessions.is_stuck(child_sid):
                    await self._restore(turns, link)
                    child_sid = turns.session.state.bound_on(link.generation)
        assert child_sid is not None
        return link, child_sid

    async def place(self, turns: WrappedTurns) -> Placing:
        """Give the session a session on this child's current run (the child started if
        need be): a load's and a move's, even if it has one there."""
        link = await self.ensure_link(turns)
        async with turns.restoring:
            return await self._restore(turns, link)

    async def _restore(self, turns: WrappedTurns, link: ChildLink) -> Placing:
        """`restore`, then the seed prompt when `seeds` says so."""
        way, result = await restore(turns, link, self.caps, self.sessions)
        ws = turns.session
        self.side.adopt(ws)
        seeded: dict[str, Any] = {}
        if seeds(way, seed_fresh=self.config.seed_fresh, carried=ws.carried):
            seeded = await self.seed(ws, link)
            if seeded.get("seedError"):
                self.side.notice(ws.id, notice("warning", "The agent was not given this session's history",
                                               f"Its fresh session could not be seeded with the transcript: "
                                               f"{seeded['seedError']}"))
        return Placing(way, result, seeded)

    async def seed(self, ws: WrappedSession, link: ChildLink) -> dict[str, Any]:
        from acp_bridge.wrap.seed import seed  # (a seed only: issue 32)

        store: SessionStore = self._store()
        return await seed(ws, link, store)

    def adopt(self, turns: WrappedTurns, child_sid: str, generation: int, result: Any) -> None:
        """`turns`' session has the child session `child_sid` on the run `generation`
        (made by `session/new` or `session/fork`)."""
        self.sessions.bind(turns, child_sid)
        turns.session.to(Bound(child_sid, generation, self.name))
        turns.session.took_state(result)
        self.side.adopt(turns.session)

    def notice(self, sid: str, update: dict[str, Any]) -> None:
        self.side.notice(sid, update)

    def tell_cancel(self, ws: WrappedSession, params: Mapping[str, Any] | None) -> None:
        link = self.link
        child_sid = ws.state.bound_on(link.generation) if link is not None else None
        if link is not None and child_sid is not None:
            link.notify("session/cancel", {**(params or {}), "sessionId": child_sid})

    def stick(self, turns: WrappedTurns, child_sid: str, call: Call) -> None:
        self.sessions.stick(turns, child_sid, call)

    def overdue(self, before: State | None) -> None:
        """The child did not answer what a prompt needed first (its start, its
        `initialize`, the session's restore) within a cancel's grace: it is restarted at
        its next use, and what it says of the half-restored session until then is
        dropped."""
        link = self.link
        if link is None:
            return
        link.overdue = True
        child_sid = before.bound_on(link.generation) if before is not None else None
        if child_sid is not None:
            self.sessions.stuck[child_sid] = Call("restore")  # never answered: until the restart

    async def close_child_session(self, ws: WrappedSession, *, wait: bool) -> None:
        link = self.link
        child_sid = ws.state.bound_on(link.generation) if link is not None else None
        now = anyio.current_time()
        bound = ws.state.close_by or now + self.cancel_grace
        await close_child(link, child_sid, self.caps, bound - now if wait else 0)

    def forget(self, turns: WrappedTurns) -> None:
        self.sessions.remove(turns)


def restarted_notice(troubled: bool, name: str | None) -> dict[str, Any]:
    """The notice of a restart of the wrapped agent, for the session whose use needed it."""
    agent = f"The wrapped agent {name}" if name else "The wrapped agent"
    why = "did not answer within the cancel grace" if troubled else "had stopped"
    return notice("warning", "The agent was restarted",
                  f"{agent} {why} and was restarted; this session's context is restored in it.")
