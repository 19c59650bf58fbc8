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
from collections.abc import Callable
from typing import Any, Literal

from acp_bridge.errors import AgentProtocolError, RequestRefusedError
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.rpc.connection import Fallback
from acp_bridge.rpc.protocol import ClientError
from acp_bridge.wrap.link import Call, ChildLink, permission_cancelled
from acp_bridge.wrap.sessions import WrappedSession

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
