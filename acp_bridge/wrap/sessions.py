"""The wrapper's sessions: our log, the child's session id, and restoring the child.

The editor sees our session ids (the log's); each maps to the wrapped agent's own id,
which is only valid on the run of the child that made it (`generation`, the child's
`starts` when it was made). A session whose child id is stale (the child died and was
restarted, or the session was just loaded from the store) is restored on the current
run before anything is passed on for it (docs/wrap.md, "Load"): the child's own
`session/load` if it advertises `loadSession` (its replay is kept from the editor: the
editor has ours), else its `session/resume` if advertised, else a fresh `session/new`.
The answer to our `session/load` or `session/resume` says which in
`_meta.acpBridge.wrapped.restored`. With `wrap --seed-fresh`, a fresh session is then
seeded with the transcript (acp_bridge.wrap.seed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from acp_bridge.rpc.protocol import RpcError
from acp_bridge.wrap.link import ChildDiedError, ChildLink
from session import SessionLog

if TYPE_CHECKING:
    from acp_bridge.wrap.record import TurnRecorder

log = logging.getLogger("acp_bridge.wrap.sessions")

Restored = Literal["load", "resume", "fresh"]


@dataclass
class WrappedSession:
    """One session of ours, live in this process, and what we know of the child's."""

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


class SessionMap:
    """Our session ids <-> the child's, for the sessions live here."""

    def __init__(self) -> None:
        self.ours: dict[str, WrappedSession] = {}
        self.theirs: dict[str, WrappedSession] = {}

    def add(self, ws: WrappedSession) -> None:
        self.ours[ws.id] = ws

    def bind(self, ws: WrappedSession, child_sid: str, generation: int) -> None:
        if ws.child_sid is not None and self.theirs.get(ws.child_sid) is ws:
            del self.theirs[ws.child_sid]
        ws.child_sid, ws.generation = child_sid, generation
        self.theirs[child_sid] = ws

    def remove(self, ws: WrappedSession) -> None:
        self.ours.pop(ws.id, None)
        if ws.child_sid is not None and self.theirs.get(ws.child_sid) is ws:
            del self.theirs[ws.child_sid]

    def of_child(self, child_sid: Any) -> WrappedSession | None:
        return self.theirs.get(child_sid) if isinstance(child_sid, str) else None


async def restore(ws: WrappedSession, link: ChildLink, caps: dict[str, Any],
                  sessions: SessionMap) -> tuple[Restored, dict[str, Any]]:
    """Give `ws` a session on the child's current run; which way, and the child's answer
    (its modes, config options...). A child that refuses to load or resume its old
    session gets a fresh one (it lost it): ChildDiedError and nothing else goes out."""
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
        except ChildDiedError:
            raise
        except RpcError as exc:
            log.info("the wrapped agent refused %s of %s (%s): trying the next way", method, old, exc.message)
            continue
        finally:
            ws.restoring = False
        ws.took_state(result)
        return restored, result if isinstance(result, dict) else {}
    result = await link.call("session/new", ws.session_params())
    if not isinstance(result, dict) or not isinstance(result.get("sessionId"), str):
        raise RpcError(-32603, "the wrapped agent answered session/new without a sessionId",
                       {"code": "agent_protocol"})
    sessions.bind(ws, result["sessionId"], link.generation)
    ws.took_state(result)
    log.info("session %s: a fresh session %s in the wrapped agent", ws.id, result["sessionId"])
    return "fresh", result
