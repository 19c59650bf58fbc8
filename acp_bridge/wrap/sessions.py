"""The wrapper's sessions: our log, the child's session id, and one prompt through it.

The editor sees our session ids (the log's); each maps to the wrapped agent's own id,
which is only valid on the run of the child that made it (`generation`, the child's
`starts` when it was made). A session whose child id is stale (the child died and was
restarted, or the session was just loaded from the store) is restored on the current
run before anything is passed on for it (`restore`, docs/wrap.md, "Load"): the child's
own `session/load` if it advertises `loadSession` (its replay is kept from the editor:
the editor has ours), else its `session/resume` if advertised, else a fresh
`session/new`; the answer to our load or resume says which in
`_meta.acpBridge.wrapped.restored`. With `wrap --seed-fresh`, a fresh session is then
seeded with the transcript (acp_bridge.wrap.seed).

A `WrappedSession` is the host's `Turns` of a wrapped session. One prompt opens a turn
in our log (`TurnRecorder.prompt`), goes to the child under its session id, and while
it runs the child's updates are recorded by the same recorder (acp_bridge.wrap.upstream).
The child's answer closes the turn: `TurnRecorder.answer` for a result, `.failed` for an
error answer, `.cancelled` when the editor cancelled and the child said so. A child that
dies first closes it with the crash closers (`SessionLog.close_interrupted(cause=
"crash")`), and the end of our stdin with the shutdown ones, as our own agent does: a
live crash and one found on load are written the same way. The host then settles the
editor's answer from the persisted `turn/end`; the child's own fields and `_meta` are
kept beside ours.

The turn's closing events are appended on the event loop, not in a worker thread as
the agent does: the child's updates are recorded in its connection's reader, and the
turn's end must sit after every update that came before the answer and before every
one after it. That costs the loop one fsync per turn (and one per step end).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio

from acp_bridge.errors import AgentExitedError, AgentProtocolError
from acp_bridge.host.engine import TurnEnd
from acp_bridge.host.errors import relayed, to_rpc_error
from acp_bridge.rpc.protocol import ClientError
from acp_bridge.wrap.link import ChildLink
from acp_bridge.wrap.record import TurnRecorder
from session import SessionLog
from session.events import TURN_END, Event

log = logging.getLogger("acp_bridge.wrap.sessions")


class Child(Protocol):
    """What a wrapped session needs of the wrapper: the child agent it runs in."""

    @property
    def agent_name(self) -> str: ...

    async def child_session(self, ws: WrappedSession) -> tuple[ChildLink, str]:
        """The child's session for `ws` on its current run (restored if stale)."""

    def tell_cancel(self, ws: WrappedSession, params: Mapping[str, Any] | None) -> None:
        """Pass the editor's cancel of `ws`'s running turn on to the child."""

    async def close_child_session(self, ws: WrappedSession) -> None:
        """Close `ws`'s session in the child, if it can close sessions."""

    def forget(self, ws: WrappedSession) -> None:
        """`ws` is no longer live: its child session id maps to nothing."""


@dataclass(eq=False)
class WrappedSession:
    """One session of ours, live in this process, and what we know of the child's."""

    child: Child
    log: SessionLog
    cwd: str
    mcp_servers: list[Any] = field(default_factory=list)
    additional_directories: list[str] | None = None
    child_sid: str | None = None
    generation: int = 0  # the child run `child_sid` belongs to; 0: none yet
    mode: str | None = None  # the child's current mode, as it last said
    recorder: TurnRecorder | None = None  # the running turn's
    cancelled_by: str | None = None  # how the editor cancelled the running turn
    # The editor cancelled the running turn (session/cancel, $/cancel_request, close):
    # the child's permission requests of the turn are answered `cancelled` (docs/wrap.md).
    cancelling: bool = False
    asking: set[anyio.CancelScope] = field(default_factory=set)  # its permission requests at the editor
    stopping: anyio.CancelScope | None = None  # the running prompt's wait on the child
    restoring: bool = False  # the child is replaying to us (or seeded): kept from the editor
    seeding: bool = False  # the wrapper's own seed prompt runs (acp_bridge.wrap.seed)

    @property
    def id(self) -> str:
        return self.log.id

    def session_params(self) -> dict[str, Any]:
        """The params that place a session in the child (new, load, resume)."""
        params: dict[str, Any] = {"cwd": self.cwd, "mcpServers": self.mcp_servers}
        if self.additional_directories:
            params["additionalDirectories"] = self.additional_directories
        return params

    def took_state(self, result: Any) -> None:
        """Keep what the child said of the session's state (its current mode)."""
        if isinstance(result, dict) and isinstance(result.get("modes"), dict):
            mode = result["modes"].get("currentModeId")
            self.mode = mode if isinstance(mode, str) else self.mode

    def stored_child_sid(self) -> str | None:
        wrapped = self.log.header.get("wrapped")
        sid = wrapped.get("sessionId") if wrapped is not None else None
        return self.child_sid or sid

    # --- the host's Turns --------------------------------------------------------------

    async def prompt(self, prompt: list[Any], params: Mapping[str, Any]) -> TurnEnd:
        """Record and pass on one prompt; the turn's persisted end and the child's answer."""
        recorder = TurnRecorder(self.log.tracker.turn + 1, agent=self.child.agent_name, mode=self.mode)
        self.recorder, self.cancelled_by, self.cancelling = recorder, None, False
        result: dict[str, Any] = {}
        try:
            link, child_sid = await self.child.child_session(self)  # a dead child is restarted first
            self.log.extend(recorder.prompt(prompt))
            with anyio.CancelScope() as scope:
                self.stopping = scope
                ends = await self._ask(recorder, link, {**params, "sessionId": child_sid, "prompt": prompt}, result)
            if scope.cancelled_caught:  # our stdin ended (`stop`)
                self.log.extend(recorder.known_calls())
                ends = await anyio.to_thread.run_sync(lambda: self.log.close_interrupted(cause="shutdown"))
        finally:
            self.recorder, self.stopping = None, None
            if self.log.tracker.in_turn and not self.log.closed:
                # Anything else that ended the wait (a bug, a failed write): the turn is
                # never left open.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(lambda: self.log.close_interrupted(cause="shutdown"))
        end = ends[-1]
        assert end["type"] == TURN_END, end
        return TurnEnd(end, result)

    async def _ask(self, recorder: TurnRecorder, link: ChildLink, params: dict[str, Any],
                   result: dict[str, Any]) -> list[Event]:
        """The child's answer to the prompt, recorded: the events that closed the turn."""
        try:
            answer = await link.call("session/prompt", params)
        except AgentExitedError:
            self.log.extend(recorder.known_calls())  # the crash closers answer its calls
            return await anyio.to_thread.run_sync(lambda: self.log.close_interrupted(cause="crash"))
        except ClientError as exc:
            return self.log.extend(recorder.failed(relayed(exc).to_json()))
        if not isinstance(answer, dict):
            answer = {}
        result.update(answer)
        if answer.get("stopReason") == "cancelled" and self.cancelled_by is not None:
            items = recorder.cancelled(self.cancelled_by)
        else:
            items = recorder.answer(answer)
        return self.log.extend(items)

    def cancel(self, by: str, params: Mapping[str, Any] | None) -> bool:
        """The editor cancelled the running turn: the child is told (`params`: the
        editor's session/cancel, passed on as it came), and the child's permission
        requests waiting on the editor stop waiting (answered `cancelled`, without
        recording; `$/cancel_request` to the editor for one it has not answered)."""
        if self.recorder is None:
            return False
        self.cancelled_by = self.cancelled_by or by
        self.cancelling = True
        for scope in self.asking:
            scope.cancel()
        self.child.tell_cancel(self, params)
        return True

    def stop(self) -> None:
        if self.stopping is not None:
            self.stopping.cancel()

    async def close(self, *, stopping: bool) -> None:
        """The child's session closed if it can be (not when we are stopping: the child
        is about to be), our log released."""
        if not stopping:
            await self.child.close_child_session(self)
        self.child.forget(self)
        await anyio.to_thread.run_sync(self.log.close)


class SessionMap:
    """The child's session ids -> ours, for the sessions live here."""

    def __init__(self) -> None:
        self.theirs: dict[str, WrappedSession] = {}

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


Restored = Literal["load", "resume", "fresh"]


async def restore(ws: WrappedSession, link: ChildLink, caps: dict[str, Any],
                  sessions: SessionMap) -> tuple[Restored, dict[str, Any]]:
    """Give `ws` a session on the child's current run; which way, and the child's answer
    (its modes, config options...). A child that refuses to load or resume its old
    session gets a fresh one (it lost it): AgentExitedError and nothing else goes out."""
    old = ws.stored_child_sid()
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


def new_session_id(result: Any) -> str:
    """The child's session id in its answer to `session/new`."""
    if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
        raise AgentProtocolError("the wrapped agent answered session/new without a sessionId")
    child_sid: str = result["sessionId"]
    return child_sid
