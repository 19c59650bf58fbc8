"""A wrapped agent's subagents (ACP's unstable `subagent_update`; docs/wrap.md,
"Subagents"): a child session the agent announces on a session of ours becomes a session
of ours too, whose header names the parent.

`Subagents` (one per agent, beside its `ChildSide`) maps the child's id of each
subagent to ours at its first announcement (the editor knows only ours), has the session
made (`make`, the engine's, in a task) and lets a request of the subagent wait until it
is; its updates meanwhile are held as any update of a session not bound yet
(`ChildSide._hold`). `make_subagent` makes the session: its log in the store, the
session of ours in the host, bound to the child's session on the run it announced it on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol
from uuid import uuid4

import anyio

from acp_bridge.wrap.children import SessionMap
from acp_bridge.wrap.sessions import WrappedSession
from acp_bridge.wrap.state import State
from acp_bridge.wrap.turns import Agents, WrappedTurns
from session import SessionLog
from session.events import ParentInfo, WrappedInfo

log = logging.getLogger("acp_bridge.wrap.subagents")

Make = Callable[[WrappedTurns, str, str, "str | None"], None]
"""`make(parent, theirs, ours, title)`: have our session `ours` of the subagent made."""


class Subagents:
    """The subagent sessions one agent announced: the child's ids -> ours."""

    def __init__(self, sessions: SessionMap, make: Make) -> None:
        self._sessions = sessions
        self._make = make
        self._ours: dict[str, str] = {}
        self._making: dict[str, anyio.Event] = {}

    def mapped(self, parent: WrappedTurns, update: dict[str, Any]) -> dict[str, Any]:
        """A `subagent_update` of `parent`'s session with the subagent's id ours (what the
        editor is sent and the parent's log keeps); its session made at its first."""
        theirs = update.get("sessionId")
        if not isinstance(theirs, str):
            return update
        ours = self._ours.get(theirs)
        if ours is None:
            known = self._sessions.of_child(theirs)
            if known is not None:  # a session of the child's that is ours already
                return {**update, "sessionId": known.id}
            ours = self._ours[theirs] = str(uuid4())
            self._making[theirs] = anyio.Event()
            title = update.get("title")
            self._make(parent, theirs, ours, title if isinstance(title, str) else None)
        return {**update, "sessionId": ours}

    def made(self, theirs: str) -> None:
        """Our session of the subagent `theirs` is made (or could not be)."""
        made = self._making.pop(theirs, None)
        if made is not None:
            made.set()

    async def wait(self, child_sid: Any) -> None:
        """Until our session of `child_sid` is made, if it is a subagent being made (a
        request of it goes to the editor under our id)."""
        making = self._making.get(child_sid) if isinstance(child_sid, str) else None
        if making is not None:
            await making.wait()


class Host(Protocol):
    """What `make_subagent` needs of the host."""

    async def create_log(self, *, cwd: str, additional: list[str] | None, wrapped: WrappedInfo | None = None,
                         session_id: str | None = None, parent: ParentInfo | None = None,
                         title: str | None = None) -> SessionLog: ...

    def add(self, session_id: str, session: WrappedTurns) -> None: ...


class Driver(Protocol):
    """What `make_subagent` needs of the agent (acp_bridge.wrap.driver.ChildDriver)."""

    @property
    def name(self) -> str: ...

    def wrapped(self, child_sid: str) -> WrappedInfo: ...

    def adopt(self, turns: WrappedTurns, child_sid: str, generation: int, result: Any) -> None: ...


async def make_subagent(host: Host, agents: Agents, driver: Driver, subagents: Subagents, parent: WrappedSession,
                        theirs: str, ours: str, title: str | None, generation: int) -> None:
    """Our session `ours` of the subagent `theirs` the parent's agent announced on the
    run `generation`: its header naming the parent, its title the parent's for it,
    placed in the same agent; what the child sent for it meanwhile goes through then."""
    try:
        session_log = await host.create_log(
            cwd=parent.cwd, additional=parent.additional_directories, wrapped=driver.wrapped(theirs),
            session_id=ours, parent={"sessionId": parent.id}, title=title)
    except Exception as exc:  # its traffic then reaches the editor under the child's id, unrecorded
        log.warning("session %s: the session of its subagent %s could not be made: %s", parent.id, theirs, exc)
        subagents.made(theirs)
        return
    turns = WrappedTurns(WrappedSession(session_log, parent.cwd, State(driver.name),
                                        list(parent.mcp_servers), parent.additional_directories), agents)
    host.add(turns.id, turns)
    driver.adopt(turns, theirs, generation, {})
    subagents.made(theirs)
    log.info("session %s: its subagent %s is recorded as session %s", parent.id, theirs, ours)
