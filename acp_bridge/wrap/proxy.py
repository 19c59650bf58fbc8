"""`WrapAgent`: an ACP agent to the editor, an ACP client to the wrapped agent.

Two connections: the editor's over our stdio, serving the methods below, and the
child's over its pipes (acp_bridge.wrap.link, its handlers in acp_bridge.wrap.upstream).
The session methods that are about our log are ours, answered as our own agent answers
them (`session/load`, `session/resume`, `session/list`, `session/close`,
`session/delete`); `session/new` and `session/prompt` are the child's, recorded on the
way (acp_bridge.wrap.turns); everything else the editor sends (`authenticate`,
`session/set_mode`, `session/set_config_option`, extension and unknown methods) is
passed on as it is, with the session id mapped, and answered with the child's answer.

The child is spawned at start-up and restarted at the next request after it died
(sessions are then restored on the new run, acp_bridge.wrap.sessions). Errors become
JSON-RPC errors in one place (acp_bridge.agent.errors.to_rpc_error); the child's own
errors are relayed unchanged (`link.relayed`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from acp_bridge.agent.errors import PromptInProgressError
from acp_bridge.agent.params import check_params
from acp_bridge.agent.server import hand_off_in_threads
from acp_bridge.rpc import on_cancel
from acp_bridge.rpc.connection import Connection, Inline
from acp_bridge.rpc.protocol import INTERNAL_ERROR, RpcError
from acp_bridge.wrap.child import ChildAgent
from acp_bridge.wrap.link import ChildLink, obj
from acp_bridge.wrap.seed import quiet_while_seeding, seed
from acp_bridge.wrap.sessions import Restored, SessionMap, WrappedSession, restore
from acp_bridge.wrap.stored import StoredSessions
from acp_bridge.wrap.turns import run_prompt
from acp_bridge.wrap.upstream import ChildSide
from session import SessionLog, SessionNotFoundError, validate_session_id

log = logging.getLogger("acp_bridge.wrap.proxy")


@dataclass(frozen=True)
class WrapConfig:
    store_dir: Path | str  # a folder, or a PostgreSQL connection string
    command: list[str]
    backend: str = "jsonl"
    grace: float = 2.0  # seconds the child gets to exit after its stdin closed
    env: dict[str, str] | None = field(default=None)
    seed_fresh: bool = False  # seed a fresh child session with the transcript (wrap/seed.py)


class WrapAgent:
    def __init__(self, config: WrapConfig) -> None:
        self.config = config
        self.child = ChildAgent(config.command, env=config.env, grace=config.grace)
        self.conn: Connection | None = None
        self.sessions = SessionMap()
        self.side = ChildSide(self.sessions, self._editor)
        self.stored = StoredSessions(config.store_dir, config.backend, self.sessions)
        self.link: ChildLink | None = None
        self.init_params: dict[str, Any] | None = None
        self.child_caps: dict[str, Any] = {}
        self.child_info: dict[str, Any] | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._starting = anyio.Lock()

    # --- wiring ----------------------------------------------------------------------

    def methods(self) -> dict[str, Callable[..., Awaitable[Any]]]:
        table: dict[str, Callable[..., Awaitable[Any]]] = {
            "initialize": self.initialize, "session/new": self.new_session,
            "session/load": self.load_session, "session/resume": self.resume_session,
            "session/list": self.list_sessions, "session/close": self.close_session,
            "session/delete": self.delete_session, "session/prompt": self.prompt,
            "session/cancel": self.cancel,
        }
        return {name: _checked(name, fn) for name, fn in table.items()}

    def inline(self) -> dict[str, Inline]:
        """The editor's cancels, handled in its connection's reader as they are read:
        a cancel takes effect before the permission answer read behind it (or with
        it), so what is recorded and passed on does not depend on which task runs
        first (docs/wrap.md, "Cancel and a permission answer"). What they cannot act on
        at once (no running prompt yet) goes to a task, as any notification. rpc does
        the same for `$/cancel_request`, through the prompt's `on_cancel`."""
        return {"session/cancel": self.cancel_now}

    def cancel_now(self, params: Any) -> bool:
        if not isinstance(params, dict) or not isinstance(params.get("sessionId"), str):
            return False  # the task's params check answers for it
        ws = self.sessions.ours.get(params["sessionId"])
        if ws is None or ws.recorder is None:
            return False
        self._cancel_turn(ws, "session/cancel", params)
        return True

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Spawn the child (OSError if it cannot be)."""
        self._tg = task_group
        await self._new_link()

    async def serve(self, conn_factory: Callable[[WrapAgent], Connection]) -> None:
        """Serve the editor until our stdin ends; the child is started already."""
        try:
            self.conn = conn_factory(self)
            await self.conn.serve()
        finally:
            with anyio.CancelScope(shield=True):
                for ws in list(self.sessions.ours.values()):
                    self.sessions.remove(ws)
                    await anyio.to_thread.run_sync(ws.log.close)
                if self.link is not None:
                    await self.link.close()
                self.stored.close()

    def before_write(self) -> Awaitable[None] | None:
        """Log before send, as agent.server's: every live log hands its buffered events
        to the OS before a write to the editor."""
        busy: list[SessionLog] = []
        for ws in self.sessions.ours.values():
            if ws.log.buffered and not ws.log.hand_off(wait=False):
                busy.append(ws.log)
        return hand_off_in_threads(busy) if busy else None

    async def on_eof(self) -> None:
        """Our stdin closed: running turns end as interrupted (shutdown) and their
        prompts are answered; the child is closed after (in `serve`)."""
        for ws in self.sessions.ours.values():
            if ws.stopping is not None:
                ws.stopping.cancel()

    def _editor(self) -> Connection:
        assert self.conn is not None
        return self.conn

    async def _new_link(self) -> ChildLink:
        assert self._tg is not None
        if self.link is not None:
            await self.link.close()
        await self.child.start(self._tg)
        link = ChildLink(self.child, fallback_for=quiet_while_seeding(self.side.fallback_for, self.sessions),
                         inline=self.side.inline())
        self._tg.start_soon(link.run)
        self.link = link
        return link

    async def ensure_link(self) -> ChildLink:
        """The child's connection, restarted (and initialized again) if it died."""
        link = self.link
        if link is not None and link.running:  # the usual case: no lock, no checkpoint
            return link
        async with self._starting:
            link = self.link
            if link is not None and link.running:
                return link
            log.warning("the wrapped agent is not running: restarting it")
            try:
                link = await self._new_link()
            except OSError as exc:
                raise RpcError(INTERNAL_ERROR, f"the wrapped agent cannot be started: {exc}",
                               {"code": "agent_start"}) from None
            if self.init_params is not None:
                self._took_init(await link.call("initialize", self.init_params))
            return link

    async def child_session(self, ws: WrappedSession) -> tuple[ChildLink, str]:
        """The child's session for `ws` on its current run (restored if stale)."""
        link = await self.ensure_link()
        if ws.child_sid is None or ws.generation != link.generation:
            await self._restore(ws, link)
        assert ws.child_sid is not None
        return link, ws.child_sid

    async def _restore(self, ws: WrappedSession, link: ChildLink) -> tuple[Restored, dict[str, Any], dict[str, Any]]:
        """`restore`, then (with `--seed-fresh`, when it ended fresh) the seed prompt:
        how, the child's answer, and what the seed adds to `_meta.acpBridge.wrapped`."""
        restored, result = await restore(ws, link, self.child_caps, self.sessions)
        self.side.adopt(ws)
        seeded: dict[str, Any] = {}
        if restored == "fresh" and self.config.seed_fresh:
            seeded = await seed(ws, link, self.stored.store())
        return restored, result, seeded

    def _took_init(self, answer: Any) -> dict[str, Any]:
        result = dict(obj(answer))
        self.child_caps = dict(obj(result.get("agentCapabilities")))
        info = result.get("agentInfo")
        self.child_info = info if isinstance(info, dict) else None
        return result

    @property
    def agent_name(self) -> str:
        name = (self.child_info or {}).get("name")
        return name if isinstance(name, str) else Path(self.config.command[0]).name

    def _session(self, sid: str) -> WrappedSession:
        validate_session_id(sid)
        ws = self.sessions.ours.get(sid)
        if ws is None:
            raise SessionNotFoundError(
                f"session {sid} is not open in this agent: use session/load or session/resume", session_id=sid)
        return ws

    def _cancel_turn(self, ws: WrappedSession, by: str, params: dict[str, Any] | None = None) -> None:
        """The editor cancelled `ws`'s running turn: the child is told (`params`: the
        editor's session/cancel, passed on as it came), and the child's permission
        requests waiting on the editor stop waiting (answered `cancelled`, without
        recording; `$/cancel_request` to the editor for one it has not answered)."""
        ws.cancelled_by = ws.cancelled_by or by
        ws.cancelling = True
        for scope in ws.asking:
            scope.cancel()
        if self.link is not None and ws.child_sid is not None and ws.generation == self.link.generation:
            self.link.notify("session/cancel", {**(params or {}), "sessionId": ws.child_sid})

    # --- the editor's methods --------------------------------------------------------

    async def initialize(self, **params: Any) -> dict[str, Any]:
        link = await self.ensure_link()
        self.init_params = params
        result = self._took_init(await link.call("initialize", params))
        caps = dict(self.child_caps)
        caps["loadSession"] = True
        caps["sessionCapabilities"] = {**obj(caps.get("sessionCapabilities")),
                                       "list": {}, "resume": {}, "close": {}, "delete": {}}
        result["agentCapabilities"] = caps
        meta = obj(result.get("_meta"))
        ours = obj(meta.get("acpBridge"))
        result["_meta"] = {**meta, "acpBridge": {**ours, "wrapped": {"agentInfo": self.child_info}}}
        return result

    async def new_session(self, cwd: str, mcpServers: list[Any], **rest: Any) -> dict[str, Any]:
        link = await self.ensure_link()
        result = await link.call("session/new", {**rest, "cwd": cwd, "mcpServers": mcpServers})
        if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
            raise RpcError(INTERNAL_ERROR, "the wrapped agent answered session/new without a sessionId",
                           {"code": "agent_protocol"})
        extra = rest.get("additionalDirectories")
        ws = await self.stored.create(cwd, mcpServers, extra if isinstance(extra, list) else None,
                                      command=self.config.command, child_sid=result["sessionId"],
                                      agent_info=self.child_info)
        self.sessions.bind(ws, result["sessionId"], link.generation)
        ws.took_state(result)
        self.side.adopt(ws)
        return {**result, "sessionId": ws.id}

    async def load_session(self, sessionId: str, cwd: str, mcpServers: list[Any], **rest: Any) -> dict[str, Any]:
        return await self._open(sessionId, cwd, mcpServers, rest, replay=True)

    async def resume_session(self, sessionId: str, cwd: str, mcpServers: list[Any] | None = None,
                             **rest: Any) -> dict[str, Any]:
        return await self._open(sessionId, cwd, mcpServers or [], rest, replay=False)

    async def _open(self, sid: str, cwd: str, mcp: list[Any], rest: dict[str, Any], *,
                    replay: bool) -> dict[str, Any]:
        validate_session_id(sid)
        ws = self.sessions.ours.get(sid)
        if ws is not None and ws.recorder is not None:
            raise PromptInProgressError(sid)
        ws, meta = await self.stored.open(sid, self._editor() if replay else None)
        ws.cwd, ws.mcp_servers = cwd, mcp
        extra = rest.get("additionalDirectories")
        if isinstance(extra, list):
            ws.additional_directories = extra
        link = await self.ensure_link()
        restored, result, seeded = await self._restore(ws, link)
        answer = {k: v for k, v in result.items() if k not in ("sessionId", "_meta")}
        child_meta = obj(result.get("_meta"))
        meta["wrapped"] = {"restored": restored, **seeded}
        answer["_meta"] = {**child_meta, "acpBridge": meta}
        return answer

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, **_: Any) -> dict[str, Any]:
        return await self.stored.list_page(cwd, cursor)

    async def close_session(self, sessionId: str, **_: Any) -> dict[str, Any]:
        validate_session_id(sessionId)
        ws = self.sessions.ours.get(sessionId)
        if ws is None:
            await self.stored.require(sessionId)  # closing a stored session: nothing to do
            return {}
        await self._shut(ws)
        return {}

    async def delete_session(self, sessionId: str, **_: Any) -> dict[str, Any]:
        validate_session_id(sessionId)
        ws = self.sessions.ours.get(sessionId)
        if ws is not None:
            await self._shut(ws)
        await self.stored.delete(sessionId)
        return {}

    async def _shut(self, ws: WrappedSession) -> None:
        """Close a live session: its running turn is cancelled (by session/close) and
        answered, the child's session closed if it can be, our log released."""
        if ws.recorder is not None:
            self._cancel_turn(ws, "session/close")
            while ws.recorder is not None:
                await anyio.sleep(0.01)
        link = self.link
        if (link is not None and link.alive and ws.child_sid is not None and ws.generation == link.generation
                and isinstance(self.child_caps.get("sessionCapabilities"), dict)
                and self.child_caps["sessionCapabilities"].get("close") is not None):
            try:
                await link.call("session/close", {"sessionId": ws.child_sid})
            except RpcError as exc:
                log.info("the wrapped agent did not close session %s: %s", ws.child_sid, exc.message)
        self.sessions.remove(ws)
        await anyio.to_thread.run_sync(ws.log.close)

    async def prompt(self, sessionId: str, prompt: list[Any], **rest: Any) -> dict[str, Any]:
        ws = self._session(sessionId)
        on_cancel(lambda: self._cancel_prompt(ws))
        return await run_prompt(ws, prompt, rest, child_session=self.child_session, agent=self.agent_name)

    def _cancel_prompt(self, ws: WrappedSession) -> bool:
        """`$/cancel_request` of a running prompt: the child is asked to cancel the
        turn (it answers `cancelled`, which settles the prompt)."""
        if ws.recorder is None:
            return False
        self._cancel_turn(ws, "$/cancel_request")
        return True

    async def cancel(self, sessionId: str, **rest: Any) -> None:
        ws = self.sessions.ours.get(sessionId)
        if ws is None or ws.recorder is None:
            log.info("session/cancel for %s: no running prompt", sessionId)
            return
        self._cancel_turn(ws, "session/cancel", {**rest, "sessionId": sessionId})

    async def forward(self, method: str, params: Any, is_request: bool) -> Any:
        """Any other method of the editor: passed on, the session id mapped."""
        link = await self.ensure_link()
        ws = self.sessions.ours.get(str(params.get("sessionId"))) if isinstance(params, dict) else None
        if ws is not None:
            link, child_sid = await self.child_session(ws)
            params = {**params, "sessionId": child_sid}
        if not is_request:
            link.notify(method, params)
            return None
        return await link.call(method, params)


def _checked(method: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """The agent's params checks for the methods it shares with us (agent.params)."""
    async def handler(**params: Any) -> Any:
        check_params(method, params)
        return await fn(**params)

    return handler
