"""`acp-bridge wrap` as an engine of the host: an ACP agent to the editor, an ACP client
to the wrapped agent.

Two connections: the editor's, the host's (acp_bridge.host), and the child's over its
pipes (acp_bridge.wrap.link, its handlers in acp_bridge.wrap.upstream). The session
methods that are about our log are the host's, answered as for our own agent
(`session/load`, `session/resume`, `session/list`, `session/close`, `session/delete`);
`session/new` and `session/prompt` are the child's, recorded on the way
(acp_bridge.wrap.sessions); everything else the editor sends (`authenticate`,
`session/set_mode`, `session/set_config_option`, extension and unknown methods) is
passed on as it is (`forward`), with the session id mapped, and answered with the
child's answer.

The child is spawned at start-up and restarted at the next request after it died
(sessions are then restored on the new run, acp_bridge.wrap.children.restore). The child's own
errors are relayed unchanged (acp_bridge.host.errors.relayed).

A child that still runs a turn the wrapper ended (it did not answer a cancelled prompt
within the cancel grace: a stuck child session) is restarted at the next request that
needs it, unless another session's prompt runs in it: the stuck session then gets a
fresh child session instead, and the running turn is not cut (docs/wrap.md, "The
cancel grace").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from acp_bridge.errors import AgentStartError
from acp_bridge.host.commands import Command
from acp_bridge.host.engine import OpenAnswer, Send, TurnEnd
from acp_bridge.host.host import Engine, Host
from acp_bridge.host.replay import Opened, StoredOpener
from acp_bridge.rpc.connection import Fallback
from acp_bridge.rpc.protocol import Handler
from acp_bridge.wrap.child import ChildAgent
from acp_bridge.wrap.children import (
    Restored,
    SessionMap,
    child_fork,
    child_source,
    close_child,
    fork_ask,
    kept_from_editor,
    new_session_id,
    restore,
)
from acp_bridge.wrap.commands import (
    CommandsOfLog,
    command_turn,
    offer,
    replay_encoder,
    shown,
    wrapper_fork,
)
from acp_bridge.wrap.link import Call, ChildLink, obj
from acp_bridge.wrap.seed import seed
from acp_bridge.wrap.sessions import WrappedSession
from acp_bridge.wrap.spawn import Early
from acp_bridge.wrap.upstream import ChildSide, mapped_session, took_setting
from session.events import WrappedInfo
from session.fork import ForkPlan
from session.repair import RepairReport

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


class WrapEngine(Engine[WrappedSession]):
    label = "this agent"

    def __init__(self, config: WrapConfig, *, early: Early | None = None) -> None:
        self.config = config
        # `early`: the first process of `config.command`, spawned by the command line.
        self.child = ChildAgent(config.command, env=config.env, grace=config.grace, early=early)
        self.children = SessionMap()
        self.side = ChildSide(self.children, lambda: self.host.peer)
        self.side.shown = lambda ws, update: shown(update, self.commands_of(ws.id))  # ours added
        self.more_commands: Callable[[str], list[Command]] = lambda sid: []  # `wrap --agent`: `/agent`
        self.link: ChildLink | None = None
        self.init_params: dict[str, Any] | None = None
        self.child_caps: dict[str, Any] = {}
        self.child_info: dict[str, Any] | None = None
        self._starting = anyio.Lock()
        self._opener: StoredOpener[WrappedSession] | None = None
        self._prepared = anyio.Event()  # `_prepare` has tried to open the store

    # --- the engine ------------------------------------------------------------------

    def methods(self) -> dict[str, Handler]:
        return {"initialize": self.initialize}

    def fallback(self) -> Fallback:
        return self.forward

    async def start(self, host: Host[WrappedSession]) -> None:
        """Spawn the child (OSError if it cannot be)."""
        await self.bind(host)
        await self._new_link()

    async def bind(self, host: Host[WrappedSession]) -> None:
        """Serve `host`, the child not spawned yet (`wrap --agent`: an agent other than
        the default is started at its first use, acp_bridge.wrap.switch)."""
        await super().start(host)
        host.task_group.start_soon(self._prepare)
        self._opener = StoredOpener(host, encoder=lambda sid: replay_encoder(sid, self.commands_of),
                                    sink=CommandsOfLog, adopt=self._adopt)

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
        if self.link is not None:
            await self.link.close()

    async def stop_unused(self) -> None:
        """Stop the child (its whole process group, as at shutdown) if no live session
        of ours is placed in it any more; it is started again at its next use."""
        link = self.link
        if link is None or self.children.theirs:
            return
        self.link = None
        log.info("no session uses the wrapped agent %s any more: stopping it", self.agent_label or self.agent_name)
        await link.close()

    @property
    def agent_name(self) -> str:
        name = (self.child_info or {}).get("name")
        return name if isinstance(name, str) else Path(self.config.command[0]).name

    @property
    def agent_label(self) -> str | None:
        return self.config.name

    @property
    def cancel_grace(self) -> float:
        return self.config.cancel_grace

    # --- the child -------------------------------------------------------------------

    async def _new_link(self, *, grace: float | None = None) -> ChildLink:
        # Whole or not at all: a spawned child always has its link (a cancel here
        # would leave a process nobody reads).
        with anyio.CancelScope(shield=True):
            if self.link is not None:
                await self.link.close(grace=grace)
            self.children.new_run()
            await self.child.start(self.host.task_group)
            link = ChildLink(self.child, fallback_for=kept_from_editor(self.side.fallback_for, self.children),
                             inline=self.side.inline())
            await self.host.task_group.start(link.run)
            self.link = link
        return link

    async def ensure_link(self, ws: WrappedSession | None = None) -> ChildLink:
        """The child's connection, restarted (and initialized again) if it died, or if
        it is overdue (it runs a turn the wrapper ended, or did not answer the wrapper
        within a cancel's grace) and no other prompt (than `ws`'s) runs in it."""
        link = self.link
        if link is not None and link.running and link.ready and not (self.children.stuck or link.overdue):
            return link  # the usual case: no lock, no checkpoint
        async with self._starting:
            link = self.link
            overdue = link is not None and link.running and bool(self.children.stuck or link.overdue)
            if link is None or not link.running or (overdue and not self.children.busy(link.generation, ws)):
                if overdue:
                    log.warning("the wrapped agent did not answer within the cancel grace: restarting it")
                elif link is None:  # `wrap --agent`: not started yet, or stopped when unused
                    log.info("starting the wrapped agent %s", self.agent_label or self.agent_name)
                else:
                    log.warning("the wrapped agent is not running: restarting it")
                try:
                    # An overdue child is not waited for: it had its grace.
                    link = await self._new_link(grace=0 if overdue else None)
                except OSError as exc:
                    raise AgentStartError(f"the wrapped agent cannot be started: {exc}") from None
            if not link.ready:  # a restart (or one whose `initialize` was given up)
                if self.init_params is not None:
                    self._took_init(await link.call("initialize", self.init_params))
                link.ready = True
            return link

    async def child_session(self, ws: WrappedSession) -> tuple[ChildLink, str]:
        """The child's session for `ws` on its current run (restored if stale, and a
        fresh one if it is stuck in a turn the wrapper ended)."""
        link = await self.ensure_link(ws)
        if ws.child_sid is None or ws.generation != link.generation or self.children.is_stuck(ws.child_sid):
            await self._restore(ws, link)
        assert ws.child_sid is not None
        return link, ws.child_sid

    def stuck(self, ws: WrappedSession, child_sid: str, call: Call) -> None:
        self.children.stick(ws, child_sid, call)

    def overdue(self, ws: WrappedSession) -> None:
        """The child did not answer what `ws`'s prompt needed first (its start, its
        `initialize`, the session's restore) within a cancel's grace: it is restarted at
        its next use, and what it says of `ws`'s half-restored session until then is
        dropped."""
        link = self.link
        if link is None:
            return
        link.overdue = True
        if ws.child_sid is not None and ws.generation == link.generation:
            self.children.stuck[ws.child_sid] = Call("restore")  # never answered: until the restart
        ws.generation = 0  # restored again at its next use

    async def _restore(self, ws: WrappedSession, link: ChildLink) -> tuple[Restored, dict[str, Any], dict[str, Any]]:
        """`restore`, then (with `--seed-fresh`, when it ended fresh) the seed prompt:
        how, the child's answer, and what the seed adds to `_meta.acpBridge.wrapped`."""
        restored, result = await restore(ws, link, self.child_caps, self.children)
        self.side.adopt(ws)
        seeded: dict[str, Any] = {}
        # A session that moved to this agent (`wrap --agent`) is always seeded: what it
        # knows of the conversation came that way.
        if restored == "fresh" and (self.config.seed_fresh or ws.moved or ws.seed_again):
            seeded = await seed(ws, link, self.host.store())
        return restored, result, seeded

    async def place(self, ws: WrappedSession) -> tuple[Restored, dict[str, Any], dict[str, Any]]:
        """Give `ws` a session on this child's current run (the child started if need
        be): `_restore`'s answer."""
        return await self._restore(ws, await self.ensure_link(ws))

    def tell_cancel(self, ws: WrappedSession, params: Mapping[str, Any] | None) -> None:
        link = self.link
        if link is not None and ws.child_sid is not None and ws.generation == link.generation:
            link.notify("session/cancel", {**(params or {}), "sessionId": ws.child_sid})

    async def close_child_session(self, ws: WrappedSession) -> None:
        await close_child(self.link, ws, self.child_caps, self.children, self.cancel_grace)

    def forget(self, ws: WrappedSession) -> None:
        self.children.remove(ws)

    def commands_of(self, sid: str) -> list[Command]:  # the wrapper's own (acp_bridge.wrap.commands)
        return [wrapper_fork(self.host, sid), *self.more_commands(sid)]

    async def run_own(self, ws: WrappedSession, found: tuple[Command, str], prompt: list[Any]) -> TurnEnd:
        return await command_turn(ws, found, prompt, self.host.peer)

    def _took_init(self, answer: Any) -> dict[str, Any]:
        result = dict(obj(answer))
        self.child_caps = dict(obj(result.get("agentCapabilities")))
        info = result.get("agentInfo")
        self.child_info = info if isinstance(info, dict) else None
        return result

    # --- sessions --------------------------------------------------------------------

    async def new_session(self, params: Mapping[str, Any]) -> dict[str, Any]:
        link = await self.ensure_link()
        cwd, mcp = params["cwd"], params["mcpServers"]
        rest = {k: v for k, v in params.items() if k not in ("cwd", "mcpServers")}
        result = await link.call("session/new", {**rest, "cwd": cwd, "mcpServers": mcp})
        child_sid = new_session_id(result)
        extra = params.get("additionalDirectories")
        additional = extra if isinstance(extra, list) else None
        await self._prepared.wait()  # never two threads opening the store
        session_log = await self.host.create_log(cwd=cwd, additional=additional, wrapped=self._wrapped(child_sid))
        ws = WrappedSession(self, session_log, cwd, list(mcp), additional)
        self.host.add(ws.id, ws)
        self.children.bind(ws, child_sid, link.generation)
        ws.took_state(result)
        self.side.adopt(ws)
        if ws.commands is None:  # else the child's list came first, shown with ours
            offer(self.host.peer, ws, self.commands_of(ws.id))
        return {**result, "sessionId": ws.id}

    def _wrapped(self, child_sid: str) -> WrappedInfo:
        """The header's `wrapped` of a session whose child session is `child_sid`."""
        wrapped: WrappedInfo = {"command": list(self.config.command), "sessionId": child_sid}
        if self.child_info is not None:
            wrapped["agentInfo"] = self.child_info
        return wrapped

    async def fork(self, source: str, params: Mapping[str, Any], plan: ForkPlan,
                   make: Callable[[WrappedInfo | None], Awaitable[WrappedSession]]) -> OpenAnswer:
        """Our log is forked (`make`) with the child's context of the fork: the child's
        own fork of the original's session when it offers `session/fork` and the fork
        holds the whole conversation, else a fresh session seeded with the fork's
        transcript (docs/wrap.md, "Fork"). The child's session is made first, so the
        fork's header names it."""
        link = await self.ensure_link(self.host.find(source))
        theirs, why = child_source(self.child_caps, self.host.find(source), plan, self.children), None
        ask = fork_ask(params)
        result: dict[str, Any] | None = None
        if theirs is not None:
            result, why = await child_fork(link, {**ask, "sessionId": theirs}, self.children, self.side.drop_early)
        if result is not None:
            child_sid = result["sessionId"]
        else:
            result = obj(await link.call("session/new", {"mcpServers": [], **ask}))
            child_sid = new_session_id(result)
        try:
            ws = await make(self._wrapped(child_sid))
        except BaseException:
            if obj(self.child_caps.get("sessionCapabilities")).get("close") is not None:
                link.ask("session/close", {"sessionId": child_sid}).late = lambda _: None
            raise
        ws.mcp_servers = list(params.get("mcpServers") or [])
        self.children.bind(ws, child_sid, link.generation)
        ws.took_state(result)
        self.side.adopt(ws)
        ours: dict[str, Any] = {"forked": "child" if theirs is not None and why is None else "emulated"}
        if why is not None:
            ours["forkError"] = why
        if ours["forked"] == "emulated":
            ours.update(await seed(ws, link, self.host.store()))
            ws.seed_again = True
        if not self.host.answering(source):  # `/fork`, a command of its turn: the editor has not opened it
            offer(self.host.peer, ws, self.commands_of(ws.id))
        fields = {k: v for k, v in result.items() if k not in ("sessionId", "_meta")}
        return OpenAnswer(fields, meta=obj(result.get("_meta")), ours={"wrapped": ours})

    def _adopt(self, opened: Opened) -> WrappedSession:
        header = opened.log.header
        ws = WrappedSession(self, opened.log, header["cwd"], [], header.get("additionalDirectories"))
        assert isinstance(opened.sink, CommandsOfLog)
        ws.commands = opened.sink.theirs
        return ws

    async def open_session(self, session_id: str, params: Mapping[str, Any], send: Send | None,
                           live: WrappedSession | None) -> tuple[WrappedSession, RepairReport]:
        assert self._opener is not None
        return await self._opener(session_id, params, send, live)

    async def attach(self, session: WrappedSession, params: Mapping[str, Any]) -> OpenAnswer:
        session.cwd, session.mcp_servers = params["cwd"], params.get("mcpServers") or []
        extra = params.get("additionalDirectories")
        if isinstance(extra, list):
            session.additional_directories = extra
        restored, result, seeded = await self.place(session)
        offer(self.host.peer, session, self.commands_of(session.id))
        fields = {k: v for k, v in result.items() if k not in ("sessionId", "_meta")}
        return OpenAnswer(fields, meta=obj(result.get("_meta")), ours={"wrapped": {"restored": restored, **seeded}})

    # --- the editor's other methods --------------------------------------------------

    async def initialize(self, **params: Any) -> dict[str, Any]:
        link = await self.ensure_link()
        self.init_params = params
        result = self._took_init(await link.call("initialize", params))
        caps = dict(self.child_caps)
        caps["loadSession"] = True
        caps["sessionCapabilities"] = {**obj(caps.get("sessionCapabilities")),
                                       "list": {}, "resume": {}, "close": {}, "delete": {}, "fork": {}}
        result["agentCapabilities"] = caps
        meta = obj(result.get("_meta"))
        ours = obj(meta.get("acpBridge"))
        result["_meta"] = {**meta, "acpBridge": {**ours, "wrapped": {"agentInfo": self.child_info}}}
        return result

    async def forward(self, method: str, params: Any, is_request: bool) -> Any:
        """Any other method of the editor: passed on, the session id mapped both ways
        (in the params, and in the result the child answers with)."""
        ws = self.host.find(params.get("sessionId")) if isinstance(params, dict) else None
        link = await self.ensure_link(ws)
        if ws is not None:
            link, child_sid = await self.child_session(ws)
            params = {**params, "sessionId": child_sid}
        if not is_request:
            link.notify(method, params)
            return None
        result = await link.call(method, params)
        if ws is None:
            return result
        took_setting(ws, method, params, result)
        return mapped_session(result, child_sid, ws.id)
