"""The child's sessions as the wrapper sees them: the child's ids of ours (`SessionMap`),
the ones stuck in a turn the wrapper ended, restoring a session on the child's current
run (`restore`), closing one, and the child's side of a fork.

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
from typing import TYPE_CHECKING, Any

import anyio

from acp_bridge.errors import AgentProtocolError
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.rpc.protocol import ClientError
from acp_bridge.wrap.child_runs import restore_ways
from acp_bridge.wrap.initialize import obj
from acp_bridge.wrap.link import Call, ChildLink
from acp_bridge.wrap.sessions import WrappedSession
from acp_bridge.wrap.signals import (
    Act,
    Bound,
    LateAnswer,
    RestoreAbandoned,
    RestoreBegan,
    RestoreRefused,
)
from acp_bridge.wrap.state import Restoring, Way
from acp_bridge.wrap.turns import WrappedTurns

if TYPE_CHECKING:
    from session.fork import ForkPlan

log = logging.getLogger("acp_bridge.wrap.children")


class SessionMap:
    """The child's session ids -> our sessions' turns, for the sessions live here; and the
    child sessions that are `stuck` on the child's current run."""

    def __init__(self) -> None:
        self.theirs: dict[str, WrappedTurns] = {}
        self._sid: dict[WrappedTurns, str] = {}  # the other way
        # Child session id -> the prompt of it whose answer the wrapper stopped waiting
        # for (the cancel grace ran out). What the child sends for that session until it
        # answers (for good, if a fresh session replaced it) is the old turn's: dropped.
        self.stuck: dict[str, Call] = {}
        self.dropped: dict[str, int] = {}  # stuck session -> messages of it dropped

    def bind(self, turns: WrappedTurns, child_sid: str) -> None:
        self.remove(turns)
        self.theirs[child_sid] = turns
        self._sid[turns] = child_sid

    def remove(self, turns: WrappedTurns) -> None:
        child_sid = self._sid.pop(turns, None)
        if child_sid is not None and self.theirs.get(child_sid) is turns:
            del self.theirs[child_sid]

    def busy(self, generation: int, turns: WrappedTurns | None) -> bool:
        """Whether a session other than `turns`'s has a prompt (or the child's replay of
        it, or a seed) running in the child's run `generation`: a restart would cut it."""
        return any(other is not turns and other.session.state.busy
                   and other.session.state.bound_on(generation) is not None
                   for other in self.theirs.values())

    def of_child(self, child_sid: Any) -> WrappedTurns | None:
        return self.theirs.get(child_sid) if isinstance(child_sid, str) else None

    def is_stuck(self, child_sid: Any) -> bool:
        return isinstance(child_sid, str) and child_sid in self.stuck

    def drop(self, child_sid: Any, what: str) -> None:
        """A message of a stuck child session, kept from the editor and the log."""
        count = self.dropped[child_sid] = self.dropped.get(child_sid, 0) + 1
        if count == 1:
            log.info("the wrapped agent's session %s runs a turn acp-bridge ended: dropping its %s and what "
                     "follows until it answers", child_sid, what)

    def stick(self, turns: WrappedTurns, child_sid: str, call: Call) -> None:
        """The child session `child_sid` of `turns`'s session is stuck until the child
        answers `call`: then it is in step again, if it is still that session's."""
        self.stuck[child_sid] = call

        def late(done: Call) -> None:
            ws = turns.session
            if done.error is None:
                log.info("session %s: the wrapped agent answered its cancelled turn late (%s): dropped, with %d "
                         "message(s) before it", ws.id, done.result, self.dropped.get(child_sid, 0))
            if self.stuck.get(child_sid) is not done or self.theirs.get(child_sid) is not turns:
                return
            if Act.UNSTICK in ws.to(LateAnswer(child_sid, ok=done.error is None)):
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


async def restore(turns: WrappedTurns, link: ChildLink, caps: dict[str, Any],
                  sessions: SessionMap) -> tuple[Way, dict[str, Any]]:
    """Give the session a session on the child's current run, the ways tried in the
    order `child_runs.restore_ways` gives; which way, and the child's answer (its modes,
    config options...). A child that refuses to load or resume its old session gets a
    fresh one (it lost it): AgentExitedError and nothing else goes out."""
    ws, generation = turns.session, link.generation
    last = ws.state.child_sid
    if sessions.is_stuck(last):  # it still runs a turn we ended: only a new one is ours
        last = None
    for way in restore_ways(caps, last):
        if way == "fresh":
            break
        assert last is not None
        method = f"session/{way}"
        ws.to(RestoreBegan(way, last, generation))
        sessions.bind(turns, last)  # its replay is routed to the session (and dropped)

        def answered(ok: bool, sid: str = last) -> None:
            # In the reader, as the child's answer is read: what it sends after its answer
            # (in the same read too) is the session's, no longer its replay.
            if ok and isinstance(ws.state.place, Restoring):
                ws.to(Bound(sid, generation, ws.state.agent))

        try:
            result = await link.call(method, {**ws.session_params(), "sessionId": last}, on_answer=answered)
        except ClientError as exc:
            ws.to(RestoreRefused())
            log.info("the wrapped agent refused %s of %s (%s): trying the next way", method, last,
                     to_rpc_error(exc).message)
            continue
        except BaseException as exc:
            _stopped(ws, exc, sessions)
            raise
        ws.to(Bound(last, generation, ws.state.agent))
        ws.took_state(result)
        return way, result if isinstance(result, dict) else {}
    ws.to(RestoreBegan("fresh", None, generation))
    try:
        result = await link.call("session/new", ws.session_params())
        child_sid = new_session_id(result)
    except BaseException as exc:
        _stopped(ws, exc, sessions)
        raise
    sessions.bind(turns, child_sid)
    ws.to(Bound(child_sid, generation, ws.state.agent))
    ws.took_state(result)
    log.info("session %s: a fresh session %s in the wrapped agent", ws.id, child_sid)
    return "fresh", result


def _stopped(ws: WrappedSession, exc: BaseException, sessions: SessionMap) -> None:
    """A restore that did not end: refused (the child died, or answered nonsense), or
    abandoned (our wait was cancelled: the child may still be at it)."""
    if not isinstance(exc, anyio.get_cancelled_exc_class()):
        ws.to(RestoreRefused())
    elif Act.STICK in ws.to(RestoreAbandoned()):
        child_sid = ws.state.child_sid
        assert child_sid is not None
        sessions.stuck[child_sid] = Call("restore")  # never answered: until the child's restart


def new_session_id(result: Any, method: str = "session/new") -> str:
    """The child's session id in its answer to `session/new` (or `session/fork`)."""
    if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
        raise AgentProtocolError(f"the wrapped agent answered {method} without a sessionId")
    child_sid: str = result["sessionId"]
    return child_sid


async def close_child(link: ChildLink | None, child_sid: str | None, caps: dict[str, Any], wait: float) -> None:
    """The child's `session/close` of its session `child_sid` on `link`'s run, if it has
    one, waited for at most `wait` seconds (the bound of the editor's close: the cancel
    grace from its cancel of the running turn, else from now; none for a stuck session,
    which had its grace): a child that does not answer does not hold the editor's close."""
    if (link is None or not link.alive or child_sid is None
            or not isinstance(caps.get("sessionCapabilities"), dict)
            or caps["sessionCapabilities"].get("close") is None):
        return
    call = link.ask("session/close", {"sessionId": child_sid})
    with anyio.move_on_after(max(0.0, wait)):
        await call.done.wait()
    if not call.done.is_set():
        log.info("the wrapped agent did not answer session/close of %s in time: closed without it", child_sid)
        call.late = lambda _: None
    elif isinstance(call.error, ClientError):
        log.info("the wrapped agent did not close session %s: %s", child_sid, call.error)


# --- the child's side of a fork (docs/wrap.md, "Fork"): whether the child can fork the
# original's session itself, its `session/fork` asked and its answer checked; else a
# fresh session, and `WrapEngine.fork` emulates the fork (seeds it).

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
    theirs = live.state.child_sid if live is not None else plan.source.get("wrapped", {}).get("sessionId")
    return None if children.is_stuck(theirs) else theirs


async def fork_in_child(link: ChildLink, ask: dict[str, Any], theirs: str | None, children: SessionMap,
                        drop_early: Callable[[str], None]) -> tuple[dict[str, Any], str, bool, str | None]:
    """The child's session of a fork, as `ask` (`fork_ask`) asks: its own fork of
    `theirs` (the original's child session, if `child_source` found one) if it makes
    one, else a fresh one (the fork emulated: seeded). The child's answer, its session
    id, whether the fork is emulated, and why the child did not fork (None if it was not
    asked to, or did)."""
    result, why = None, None
    if theirs is not None:
        result, why = await child_fork(link, {**ask, "sessionId": theirs}, children, drop_early)
    if result is not None:
        return result, result["sessionId"], False, why
    result = obj(await link.call("session/new", {"mcpServers": [], **ask}))
    return result, new_session_id(result), True, why


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
