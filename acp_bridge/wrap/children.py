"""The child's sessions as the wrapper sees them: the child's ids of ours (`SessionMap`),
the ones stuck in a turn the wrapper ended, what of the child's traffic is kept from the
editor (`kept_from_editor`), and restoring a session on the child's current run
(`restore`).

A session whose child id is stale (the child died and was restarted, or the session was
just loaded from the store) is restored on the current run before anything is passed on
for it (docs/wrap.md, "Load"): the child's own `session/load` if it advertises
`loadSession` (its replay is kept from the editor: the editor has ours), else its
`session/resume` if advertised, else a fresh `session/new`; the answer to our load or
resume says which in `_meta.acpBridge.wrapped.restored`. With `wrap --seed-fresh`, a
fresh session is then seeded with the transcript (acp_bridge.wrap.seed).

A child session is stuck when the wrapper ended its turn because the child had not
answered the cancelled prompt within the cancel grace (docs/wrap.md, "The cancel
grace"): until the child answers that prompt, whatever it sends for the session is the
old turn's, and is dropped; it is never restored by load or resume on that run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal

import anyio

from acp_bridge.errors import AgentProtocolError, RequestRefusedError
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.rpc.connection import Fallback
from acp_bridge.rpc.protocol import ClientError
from acp_bridge.wrap.link import Call, ChildLink, obj, permission_cancelled
from acp_bridge.wrap.sessions import WrappedSession
from session.fork import ForkPlan

log = logging.getLogger("acp_bridge.wrap.children")


class SessionMap:
    """The child's session ids -> ours, for the sessions live here; and the child
    sessions that are `stuck` on the child's current run."""

    def __init__(self) -> None:
        self.theirs: dict[str, WrappedSession] = {}
        # Child session id -> the prompt of it whose answer the wrapper stopped waiting
        # for (the cancel grace ran out). What the child sends for that session until it
        # answers (for good, if a fresh session replaced it) is the old turn's: dropped.
        self.stuck: dict[str, Call] = {}
        self.dropped: dict[str, int] = {}  # stuck session -> messages of it dropped

    def bind(self, ws: WrappedSession, child_sid: str, generation: int) -> None:
        if ws.child_sid is not None and self.theirs.get(ws.child_sid) is ws:
            del self.theirs[ws.child_sid]
        ws.child_sid, ws.generation = child_sid, generation
        self.theirs[child_sid] = ws

    def remove(self, ws: WrappedSession) -> None:
        if ws.child_sid is not None and self.theirs.get(ws.child_sid) is ws:
            del self.theirs[ws.child_sid]

    def busy(self, generation: int, ws: WrappedSession | None) -> bool:
        """Whether a session other than `ws` has a prompt (or a restore) running in the
        child's run `generation`: a restart would cut it."""
        return any(other is not ws and other.generation == generation
                   and (other.recorder is not None or other.restoring or other.seeding)
                   for other in self.theirs.values())

    def of_child(self, child_sid: Any) -> WrappedSession | None:
        return self.theirs.get(child_sid) if isinstance(child_sid, str) else None

    def is_stuck(self, child_sid: Any) -> bool:
        return isinstance(child_sid, str) and child_sid in self.stuck

    def drop(self, child_sid: Any, what: str) -> None:
        """A message of a stuck child session, kept from the editor and the log."""
        count = self.dropped[child_sid] = self.dropped.get(child_sid, 0) + 1
        if count == 1:
            log.info("the wrapped agent's session %s runs a turn acp-bridge ended: dropping its %s and what "
                     "follows until it answers", child_sid, what)

    def stick(self, ws: WrappedSession, child_sid: str, call: Call) -> None:
        """`ws`'s child session `child_sid` is stuck until the child answers `call`:
        then it is in step again, if it is still `ws`'s."""
        self.stuck[child_sid] = call

        def late(done: Call) -> None:
            if done.error is None:
                log.info("session %s: the wrapped agent answered its cancelled turn late (%s): dropped, with %d "
                         "message(s) before it", ws.id, done.result, self.dropped.get(child_sid, 0))
            if self.stuck.get(child_sid) is done and self.theirs.get(child_sid) is ws and done.error is None:
                del self.stuck[child_sid]
                self.dropped.pop(child_sid, None)

        call.late = late

    def new_run(self) -> None:
        """The child was restarted: nothing of the old run is stuck on the new one."""
        for child_sid, count in self.dropped.items():
            log.info("the wrapped agent's session %s: %d message(s) of a turn acp-bridge ended were dropped",
                     child_sid, count)
        self.stuck.clear()
        self.dropped.clear()


def kept_from_editor(fallback_for: Callable[[ChildLink], Fallback],
                     sessions: SessionMap) -> Callable[[ChildLink], Fallback]:
    """The child's requests and notifications for a session being seeded
    (acp_bridge.wrap.seed), or for a stuck one (a turn the wrapper ended), never reach
    the editor: a permission is answered `cancelled`, other requests refused,
    notifications dropped. Everything else goes to `fallback_for`'s handler."""
    def make(link: ChildLink) -> Fallback:
        inner = fallback_for(link)

        async def fallback(method: str, params: Any, is_request: bool) -> Any:
            child_sid = params.get("sessionId") if isinstance(params, dict) else None
            ws = sessions.of_child(child_sid)
            if sessions.is_stuck(child_sid):
                sessions.drop(child_sid, method)
                code, why = "cancelled", "after acp-bridge ended the session's turn"
            elif ws is not None and ws.seeding:
                log.info("session %s: %s of the wrapped agent while seeding: kept from the editor", ws.id, method)
                code, why = "seeding", "while acp-bridge seeds the session"
            else:
                return await inner(method, params, is_request)
            if not is_request:
                return None
            if method == "session/request_permission":
                return permission_cancelled()
            raise RequestRefusedError(f"{method} is not available {why}", code=code)

        return fallback

    return make


Restored = Literal["load", "resume", "fresh"]


async def restore(ws: WrappedSession, link: ChildLink, caps: dict[str, Any],
                  sessions: SessionMap) -> tuple[Restored, dict[str, Any]]:
    """Give `ws` a session on the child's current run; which way, and the child's answer
    (its modes, config options...). A child that refuses to load or resume its old
    session gets a fresh one (it lost it): AgentExitedError and nothing else goes out."""
    old = ws.stored_child_sid()
    if sessions.is_stuck(old):  # it still runs a turn we ended: only a new one is ours
        old = None
    session_caps = caps.get("sessionCapabilities") or {}
    ways: list[tuple[Restored, str]] = []
    if old is not None and caps.get("loadSession") is True:
        ways.append(("load", "session/load"))
    if old is not None and isinstance(session_caps, dict) and session_caps.get("resume") is not None:
        ways.append(("resume", "session/resume"))
    for restored, method in ways:
        assert old is not None
        sessions.bind(ws, old, link.generation)
        ws.restoring = restored == "load"
        try:
            result = await link.call(method, {**ws.session_params(), "sessionId": old})
        except ClientError as exc:
            log.info("the wrapped agent refused %s of %s (%s): trying the next way", method, old,
                     to_rpc_error(exc).message)
            continue
        finally:
            ws.restoring = False
        ws.took_state(result)
        return restored, result if isinstance(result, dict) else {}
    result = await link.call("session/new", ws.session_params())
    child_sid = new_session_id(result)
    sessions.bind(ws, child_sid, link.generation)
    ws.took_state(result)
    log.info("session %s: a fresh session %s in the wrapped agent", ws.id, child_sid)
    return "fresh", result


def new_session_id(result: Any, method: str = "session/new") -> str:
    """The child's session id in its answer to `session/new` (or `session/fork`)."""
    if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
        raise AgentProtocolError(f"the wrapped agent answered {method} without a sessionId")
    child_sid: str = result["sessionId"]
    return child_sid


async def close_child(link: ChildLink | None, ws: WrappedSession, caps: dict[str, Any], sessions: SessionMap,
                      grace: float) -> None:
    """The child's `session/close` of `ws`'s session, if it has one, waited for until the
    bound of the editor's close (the cancel `grace` from its cancel of the running turn,
    else from now): a child that does not answer does not hold the editor's close. A
    stuck session is told, not waited for (it had its grace)."""
    if (link is None or not link.alive or ws.child_sid is None or ws.generation != link.generation
            or not isinstance(caps.get("sessionCapabilities"), dict)
            or caps["sessionCapabilities"].get("close") is None):
        return
    now = anyio.current_time()
    bound, ws.close_by = ws.close_by or now + grace, None
    call = link.ask("session/close", {"sessionId": ws.child_sid})
    with anyio.move_on_after(0 if sessions.is_stuck(ws.child_sid) else max(0.0, bound - now)):
        await call.done.wait()
    if not call.done.is_set():
        log.info("the wrapped agent did not answer session/close of %s in time: closed without it", ws.child_sid)
        call.late = lambda _: None
    elif isinstance(call.error, ClientError):
        log.info("the wrapped agent did not close session %s: %s", ws.child_sid, call.error)


# --- the child's side of a fork (docs/wrap.md, "Fork"): whether the child can fork the
# original's session itself, its `session/fork` asked and its answer checked;
# `WrapEngine.fork` emulates the fork (a fresh session, seeded) otherwise.

def fork_ask(params: Mapping[str, Any]) -> dict[str, Any]:
    """What the child is asked for the fork (its `session/fork` or `session/new`): the
    fork request's cwd, MCP servers, directories and `_meta` less ours."""
    ask = {"cwd": params["cwd"], **{k: v for k, v in params.items() if k in ("mcpServers", "additionalDirectories")}}
    meta = {k: v for k, v in obj(params.get("_meta")).items() if k != "acpBridge"}
    if meta:
        ask["_meta"] = meta
    return ask


def child_source(caps: Mapping[str, Any], live: WrappedSession | None, plan: ForkPlan,
                 children: SessionMap) -> str | None:
    """The child's session of the original (`live`, if it is live here) to fork in the
    child, if it can be: the child offers `session/fork`, the fork holds every turn,
    the session is not stuck."""
    if obj(caps.get("sessionCapabilities")).get("fork") is None or not plan.whole:
        return None
    theirs = live.stored_child_sid() if live is not None else plan.source.get("wrapped", {}).get("sessionId")
    return None if children.is_stuck(theirs) else theirs


async def child_fork(link: ChildLink, ask: dict[str, Any], children: SessionMap,
                     drop_early: Callable[[str], None]) -> tuple[dict[str, Any] | None, str | None]:
    """The child's answer to its `session/fork` (its `sessionId` checked), or why
    there is none: an error answer (it cannot fork that session: not on this run...),
    or an answer that names no new session (none, or one of ours already: taking it
    would mix two sessions' updates). Either way the fork is emulated. `drop_early`: what
    the child sent for its fork before it answered (ChildSide.drop_early)."""
    try:
        result = obj(await link.call("session/fork", ask))
        child_sid = new_session_id(result, "session/fork")
        if child_sid == ask["sessionId"] or children.of_child(child_sid) is not None:
            raise AgentProtocolError(f"the wrapped agent answered session/fork with a session it had: {child_sid}")
    except (ClientError, AgentProtocolError) as exc:
        why = to_rpc_error(exc).message
        log.info("the wrapped agent did not fork %s (%s): a fresh session, seeded", ask["sessionId"], why)
        return None, why
    drop_early(child_sid)
    return result, None
