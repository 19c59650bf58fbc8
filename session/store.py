"""`SessionStore`: the sessions of one backend, created, loaded (with crash repair),
listed and deleted. The live handle it hands out is `session.log.SessionLog`; a load
runs block by block in `session.loading.SessionLoad`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from uuid import uuid4

from session.backends.base import Backend, SessionSummary
from session.backends.session_ids import validate_session_id
from session.events import SESSION_FORMAT_VERSION, Event, Header, ParentInfo, WrappedInfo
from session.invariants import InvariantTracker
from session.log import SessionLog, encode, now_ms

if TYPE_CHECKING:
    from session.fork import ForkPlan
    from session.loading import LoadedSession, SessionLoad


class SessionStore:
    """Sessions on one backend: create, load (repairing), list, delete."""

    def __init__(self, backend: Backend, *, clock: Callable[[], int] = now_ms) -> None:
        self.backend = backend
        self.clock = clock  # stamps the events of the logs it opens

    def create(
        self,
        *,
        cwd: str,
        additional_directories: Sequence[str] = (),
        title: str | None = None,
        session_id: str | None = None,
        keep_history: bool = True,
        keep_chunks: bool = True,
        wrapped: WrappedInfo | None = None,
        parent: ParentInfo | None = None,
    ) -> SessionLog:
        """A new, durable, owned session with a fresh UUID (or `session_id`). Without
        `keep_history` the log keeps only the events of its last turn in memory (the
        agent: a session may stream for hours), without `keep_chunks` none of the
        `assistant/chunk`s it appends (SessionLog.events). `wrapped` marks a session
        recorded by `acp-bridge wrap` (the header's `wrapped` field), `parent` a
        subagent's session (the header's `parent`)."""
        sid = validate_session_id(session_id) if session_id is not None else str(uuid4())
        header: Header = {
            "type": "session",
            "version": SESSION_FORMAT_VERSION,
            "id": sid,
            "createdAt": self.clock(),
            "cwd": cwd,
        }
        if additional_directories:
            header["additionalDirectories"] = list(additional_directories)
        if title is not None:
            header["title"] = title
        if wrapped is not None:
            header["wrapped"] = wrapped
        if parent is not None:
            header["parent"] = parent
        handle = self.backend.create(header)
        return SessionLog(
            handle, header, [], InvariantTracker(session_id=sid), self.clock,
            keep_history=keep_history, keep_chunks=keep_chunks,
        )

    def load(self, session_id: str) -> LoadedSession:
        """Open a stored session for this process, repairing it durably first: cut a
        torn tail (kept aside) and close an interrupted final turn. The log keeps every
        event in memory (see `loading` for a load that does not). Raises the
        SessionError family: not found, locked, version, corrupt, invariant."""
        load = self.loading(session_id, keep_history=True)
        for _ in load:
            pass
        assert load.loaded is not None
        return load.loaded

    def loading(self, session_id: str, *, keep_history: bool = False, keep_chunks: bool = True) -> SessionLoad:
        """A load to run block by block (see session.loading.SessionLoad)."""
        # Imported by loads and forks only: off `acp-bridge wrap`'s start-up path (issue 32).
        from session.loading import SessionLoad

        return SessionLoad(
            self.backend, validate_session_id(session_id), self.clock, keep_history=keep_history,
            keep_chunks=keep_chunks,
        )

    def plan_fork(self, session_id: str, *, at_turn: int | None = None) -> ForkPlan:
        """What a fork of `session_id` would hold (session.fork.plan_fork): read as stored
        now, without taking its owner lock. Raises the SessionError family: not found,
        version, corrupt, ForkTurnError."""
        from session.fork import plan_fork

        stream = self.backend.read_stream(validate_session_id(session_id))
        try:
            return plan_fork(stream, at_turn, lambda: self._running(session_id))
        finally:
            stream.close()

    def fork(self, plan: ForkPlan, *, cwd: str, additional_directories: Sequence[str] = (),
             wrapped: WrappedInfo | None = None) -> Header:
        """Publish the fork `plan` says, under a fresh id, whole or not at all, owned by
        nobody (load it to use it); its header (session.fork.fork_header)."""
        from session.fork import fork_header

        header = fork_header(plan, str(uuid4()), created=self.clock(), cwd=cwd,
                             additional_directories=list(additional_directories), wrapped=wrapped)
        self.backend.copy(plan.source["id"], header, plan.upto, [encode(c) for c in plan.closers],
                          title=plan.title)
        return header

    def publish(self, header: Header, events: Sequence[Event], *, after: tuple[int, int] | None = None) -> None:
        """Publish a whole session's events (an import), or append whole turns to a
        stored one that holds `after` = (records, turns) and ends between turns: checked
        as the live log checks them, then written whole or not at all (Backend.publish).
        Raises InvariantError for events the log would refuse, the SessionError family."""
        from session.invariants import InvariantTracker
        from session.titles import session_title

        sid = validate_session_id(header["id"])
        records, turns = after if after is not None else (0, 0)
        tracker = InvariantTracker(session_id=sid, next_seq=records, turn=turns)
        tracker.feed_all(events)
        if tracker.in_turn:
            from session.errors import InvariantError

            raise InvariantError(f"session {sid}: the events end inside turn {tracker.turn}", session_id=sid)
        title = session_title(header, events) if after is None else None
        self.backend.publish(header, [encode(e) for e in events],
                             title=title, after=None if after is None else records)

    def _running(self, session_id: str) -> bool:
        """Whether a live owner may be running the session's open turn (held lock; or
        the system does not say)."""
        reader = self.backend.reader()
        try:
            return reader.owner(session_id).state != "none"
        finally:
            reader.close()

    def list(self, *, cwd: str | None = None) -> list[SessionSummary]:
        """Stored sessions, most recently updated first, optionally only those of `cwd`."""
        sessions = self.backend.list_sessions()
        if cwd is not None:
            sessions = [s for s in sessions if s["cwd"] == cwd]
        return sorted(sessions, key=lambda s: (-s["updatedAt"], s["id"]))

    def delete(self, session_id: str) -> None:
        self.backend.delete(validate_session_id(session_id))

    def close(self) -> None:
        self.backend.close()
