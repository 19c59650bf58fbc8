"""The wrapper's side of the store: our logs, opened and replayed as our agent does.

A wrapped session is an ordinary session of the store (the same log, invariants and
crash repair) whose header says what it wraps (`wrapped: {command, sessionId,
agentInfo}`). It is created when the child's `session/new` has answered; `session/load`
replays it with the agent's replay (acp_bridge.agent.replay: the same encoder, the same
mapping, `wrapped/update` sent back as it came) and repairs an interrupted last turn
first; `session/list` is the agent's listing. Store work runs in worker threads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from acp_bridge.agent.listing import list_page
from acp_bridge.agent.replay import ReplayEncoder, open_stored, replay_stored
from acp_bridge.rpc.connection import Connection
from acp_bridge.wrap.sessions import SessionMap, WrappedSession
from session import SessionNotFoundError, SessionStore, open_backend
from session.events import WrappedInfo
from session.repair import RepairReport
from session.transcript import history_budget


class StoredSessions:
    def __init__(self, store_dir: Path | str, backend: str, sessions: SessionMap) -> None:
        self._dir = store_dir
        self._backend = backend
        self._sessions = sessions
        self._store: SessionStore | None = None

    def store(self) -> SessionStore:
        if self._store is None:
            self._store = SessionStore(open_backend(self._backend, self._dir))
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    async def create(self, cwd: str, mcp: list[Any], additional: list[str] | None, *, command: list[str],
                     child_sid: str, agent_info: dict[str, Any] | None) -> WrappedSession:
        wrapped: WrappedInfo = {"command": list(command), "sessionId": child_sid}
        if agent_info is not None:
            wrapped["agentInfo"] = agent_info
        store = self.store()
        session_log = await anyio.to_thread.run_sync(lambda: store.create(
            cwd=cwd, additional_directories=additional or (), keep_history=False, wrapped=wrapped))
        ws = WrappedSession(session_log, cwd, list(mcp), additional)
        self._sessions.add(ws)
        return ws

    async def open(self, sid: str, editor: Connection | None) -> tuple[WrappedSession, dict[str, Any]]:
        """Make a stored session live here (or take the live one), replayed to
        `editor` if given; and the `_meta.acpBridge` of the answer (what the load
        repaired, how long the log is)."""
        replay = None
        if editor is not None:
            async def send(payload: bytes) -> None:
                editor.send_raw(payload)
                await editor.drain()  # the editor reads at its pace; memory stays bounded

            replay = (ReplayEncoder(sid, None), send)
        ws = self._sessions.ours.get(sid)
        report = RepairReport()
        if ws is not None:
            if replay is not None:
                await replay_stored(self.store(), ws.log, *replay)
        else:
            opened = await open_stored(self.store(), sid, budget=history_budget(None), replay=replay)
            report = opened.report
            header = opened.log.header
            ws = WrappedSession(opened.log, header["cwd"], [], header.get("additionalDirectories"))
            self._sessions.add(ws)
        tracker = ws.log.tracker
        return ws, {"repair": report.to_meta(), "turns": tracker.turn, "events": tracker.next_seq}

    async def list_page(self, cwd: str | None, cursor: str | None) -> dict[str, Any]:
        store = self.store()
        sessions = await anyio.to_thread.run_sync(lambda: store.list(cwd=cwd))
        return list_page(sessions, cursor)

    async def require(self, sid: str) -> None:
        """SessionNotFoundError unless `sid` is stored."""
        if not any(s["id"] == sid for s in await anyio.to_thread.run_sync(self.store().list)):
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)

    async def delete(self, sid: str) -> None:
        await anyio.to_thread.run_sync(self.store().delete, sid)
