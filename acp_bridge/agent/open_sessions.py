"""The sessions live in this process, and their opening and closing (DESIGN.md section 5):
`OpenSessions` holds them by id with what opening one needs, each made on first use
(the store, the models, the local services); `session/new`, `session/load`,
`session/resume`, `session/close` and `session/delete` in acp_bridge.agent.server come
here. `Config` is what the agent is started with.

The turn machinery (runner, client services, tools, models, replay) is imported on
first use: `initialize` is answered before any of it is needed (DESIGN.md section 1).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from acp_bridge.agent import settings
from acp_bridge.agent.errors import PromptInProgressError
from acp_bridge.models.catalog import ModelEntry
from acp_bridge.rpc.connection import Connection
from session import (
    SessionLog,
    SessionNotFoundError,
    SessionStore,
    open_backend,
    validate_session_id,
)
from session.repair import RepairReport
from session.transcript import Transcript, history_budget

if TYPE_CHECKING:
    from acp_bridge.agent.live import LiveSession
    from acp_bridge.agent.replay import ReplayEncoder, Send
    from acp_bridge.models import Model
    from acp_bridge.tools.local import LocalServices


@dataclass(frozen=True)
class Config:
    store_dir: Path | str  # a folder, or a PostgreSQL connection string
    backend: str = "jsonl"
    models: tuple[ModelEntry, ...] = (ModelEntry("echo"),)  # the first is the default
    max_steps: int = 50


class OpenSessions:
    """The live sessions of one agent (`live`, by id): a session is live once
    `session/new`, `session/load` or `session/resume` has opened it (this process then
    owns its log) and until `session/close`, `session/delete` or the end of stdin."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.live: dict[str, LiveSession] = {}
        self.made_models: dict[str, Model] = {}  # spec -> the model, made on first use
        # Local commands run in it (LocalServices, on first use); set by Agent.serve.
        self.task_group: anyio.abc.TaskGroup | None = None
        self._store: SessionStore | None = None
        self._local: LocalServices | None = None
        self._frozen = False

    def store(self) -> SessionStore:
        if self._store is None:
            self._store = SessionStore(open_backend(self.config.backend, self.config.store_dir))
        return self._store

    def model(self, entry: ModelEntry | None = None) -> Model:
        """The model of `entry` (default: the first configured), made once per process."""
        entry = entry or self.config.models[0]
        if entry.spec not in self.made_models:
            from acp_bridge.models import load_model

            self.made_models[entry.spec] = load_model(entry, store_dir=self.config.store_dir,
                                                      backend=self.config.backend)
        return self.made_models[entry.spec]

    def context_window_of(self, spec: str) -> int | None:
        """The context window of the model `spec` names (a turn's `turn/start.model`):
        the model's own if this process made it, else as it would be made; a `replay:`
        model's is known only once made: the default model's then."""
        made = self.made_models.get(spec)
        if made is not None:
            return made.context_window
        if spec.startswith("replay:"):
            return self.model().context_window
        from acp_bridge.models.windows import context_window_of

        return context_window_of(spec)

    def tasks(self) -> anyio.abc.TaskGroup:
        assert self.task_group is not None  # set by Agent.serve before any request
        return self.task_group

    def activate(self, session_log: SessionLog, conn: Connection, capabilities: dict[str, Any], *,
                 transcript: Transcript | None = None, always_allowed: set[str] | None = None) -> LiveSession:
        """Make `session_log` (just created or opened) a live session of this process."""
        from acp_bridge.agent.live import make_live

        if self._local is None:
            from acp_bridge.tools.local import LocalServices

            self._local = LocalServices(task_group=self.tasks())
        if not self._frozen:
            # What is imported and built by now lives as long as the process: keep it
            # out of every later full collection.
            gc.freeze()
            self._frozen = True
        choice = settings.stored_choice(session_log.events, self.config.models)
        live = make_live(session_log, conn=conn, model=self.model(choice.model), choice=choice,
                         capabilities=capabilities, local=self._local,
                         max_steps=self.config.max_steps, transcript=transcript, always_allowed=always_allowed)
        self.live[session_log.id] = live
        return live

    async def open(self, sid: str, replay: tuple[ReplayEncoder, Send] | None, conn: Connection,
                   capabilities: dict[str, Any]) -> tuple[LiveSession, RepairReport]:
        """The stored session `sid` opened (repaired, and replayed through `replay` if
        given: `session/load`), or the live one if it is live already."""
        from acp_bridge.agent.replay import open_stored, replay_stored

        validate_session_id(sid)
        live = self.live.get(sid)
        if live is not None:  # already ours: nothing to repair
            if live.runner.running:
                raise PromptInProgressError(sid)
            if replay is not None:
                await replay_stored(self.store(), live.log, *replay)
            return live, RepairReport()
        opened = await open_stored(self.store(), sid, budget=history_budget(self.model().context_window),
                                   replay=replay)
        live = self.activate(opened.log, conn, capabilities, transcript=opened.transcript,
                             always_allowed=opened.always_allowed)
        return live, opened.report

    def get(self, sid: str) -> LiveSession:
        """The live session `sid`; SessionNotFoundError if it is not live here."""
        validate_session_id(sid)
        live = self.live.get(sid)
        if live is None:
            raise SessionNotFoundError(
                f"session {sid} is not open in this agent: use session/load or session/resume",
                session_id=sid)
        return live

    async def shut(self, sid: str, live: LiveSession) -> None:
        """End the live session `sid`: its running turn cancelled, its log closed."""
        live.runner.cancel("session/close")
        await live.runner.wait_idle()
        self.live.pop(sid, None)
        await live.close()

    async def close_all(self) -> None:
        """The connection ended: every live session closed, then the store."""
        for sid in list(self.live):
            await self.live.pop(sid).close()
        if self._store is not None:
            self._store.close()


def open_meta(live: LiveSession, report: RepairReport) -> dict[str, Any]:
    """The `_meta.acpBridge` of a load or resume: the repair done, the log's size."""
    return {"repair": report.to_meta(), "turns": live.log.tracker.turn, "events": live.log.tracker.next_seq}
