"""`Host`: every ACP session served the same way, whatever runs its turns (the
`Engine`, one per process, and each live session's `Turns`: acp_bridge.host.engine).

The host owns the store and the table of live sessions, the session methods, the params
check of every method, replay on load, log before send, one prompt at a time, cancel
routing, and the answer of every prompt settled from its persisted `turn/end`
(docs/architecture.md; the prompts, their cancels and answers: acp_bridge.host.prompts). Every failure a handler lets out becomes one JSON-RPC error in
one place (acp_bridge.host.errors.to_rpc_error, which the connection is handed).
"""

from __future__ import annotations

import abc
import contextlib
import functools
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Unpack

import anyio
import anyio.abc

from acp_bridge.errors import PromptInProgressError
from acp_bridge.host.engine import OpenAnswer, S, Send
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.host.params import (
    LoadSessionRequest,
    NewSessionRequest,
    PromptRequest,
    ResumeSessionRequest,
    check_params,
)
from acp_bridge.host.prompts import Prompts
from acp_bridge.host.tuning import Tuning
from acp_bridge.rpc.connection import Connection, Fallback
from acp_bridge.rpc.protocol import Handler
from acp_bridge.rpc.transport import LineReader, Writer
from session import (
    SessionLog,
    SessionNotFoundError,
    SessionStore,
    open_backend,
    validate_session_id,
)
from session.events import ParentInfo, WrappedInfo

if TYPE_CHECKING:
    from session.fork import ForkPlan
    from session.repair import RepairReport


class Engine(abc.ABC, Generic[S]):
    """What runs a host's sessions (one per process): its ACP methods of its own, how a
    session is made and opened, and each live session's `Turns`. Sessions live in the
    host's store, or, for a host without one, are kept by the engine for the process
    (the fake agent serves a recording)."""

    label: str  # how messages name it: "this agent", "the fake agent"
    _host: Host[S] | None = None

    @property
    def host(self) -> Host[S]:
        assert self._host is not None  # set by `start`, before any request
        return self._host

    async def start(self, host: Host[S]) -> None:
        """Before the first message is read (the wrapper spawns its child: OSError if it
        cannot)."""
        self._host = host

    def fallback(self) -> Fallback | None:
        """What answers the methods nobody serves (the wrapper passes them on)."""
        return None

    async def aclose(self) -> None:
        """The host has stopped and every session is closed."""

    @abc.abstractmethod
    def methods(self) -> Mapping[str, Handler]:
        """The ACP methods only this engine has (`initialize`, `authenticate`, modes,
        config options), each taking the params as keywords (checked by the host)."""

    @abc.abstractmethod
    async def new_session(self, params: NewSessionRequest) -> dict[str, Any]:
        """`session/new`: a new session (its log made with `Host.create_log`), made live
        with `Host.add`, and the answer."""

    @abc.abstractmethod
    async def open_session(self, session_id: str, params: Mapping[str, Any], send: Send | None,
                           live: S | None) -> tuple[S, RepairReport | None]:
        """`session/load` (`send`: where its replay goes) or `session/resume` of
        `session_id`: `live` if it is live here already (no prompt runs), else the stored
        one made live; and what opening it repaired (None: nothing to repair, no store).
        Engines with a store use `acp_bridge.host.replay.StoredOpener`."""

    @abc.abstractmethod
    async def attach(self, session: S, params: Mapping[str, Any]) -> OpenAnswer:
        """After a load or resume: take the client's params for the session (cwd, MCP
        servers), send what the client must know of the session's state that the
        answer does not carry (its slash commands), and make the answer. Nothing of the
        session goes out after the answer until the client's next request on it: a load
        or resume ends with its answer (docs/protocol.md, "Sessions")."""

    def requested(self, session: S, method: str) -> None:
        """The client sent a request (`method`) that names the live `session`: the
        first after its load or resume, what the engine held of it since may go out
        (the wrapper holds what its child sends after the answer: docs/wrap.md)."""

    async def fork(self, source: str, params: Mapping[str, Any], plan: ForkPlan,
                   make: Callable[[WrappedInfo | None], Awaitable[S]]) -> OpenAnswer:
        """`session/fork` of `source` (acp_bridge.host.fork): `make` has the store copy
        `plan` (the header's `wrapped` given) and makes the copy live; the answer's
        fields. Ours: made, then the client's params taken as after a load."""
        return await self.attach(await make(None), params)


@dataclass(frozen=True)
class StoreSpec:
    """Where a host's sessions are stored: a folder, or a PostgreSQL connection string."""

    location: Path | str
    backend: str = "jsonl"


class Host(Generic[S]):
    """Serve `engine`'s sessions over one connection (`run`). `store` None: the engine
    keeps its sessions for the process (no list, resume or delete)."""

    def __init__(self, engine: Engine[S], store: StoreSpec | None, *, tuning: Tuning | None = None) -> None:
        self.engine = engine
        self.tuning = tuning or Tuning()
        self._spec = store
        self._store: SessionStore | None = None
        self._opening = threading.Lock()
        self._live: dict[str, S] = {}
        self._prompts = Prompts()
        self._conn: Connection | None = None
        self._tg: anyio.abc.TaskGroup | None = None

    # --- what engines use --------------------------------------------------------------

    @property
    def peer(self) -> Connection:
        """The client's connection."""
        assert self._conn is not None  # made in `run`, before any message is read
        return self._conn

    @property
    def task_group(self) -> anyio.abc.TaskGroup:
        """Where engines run what lives as long as the host (local commands, a child)."""
        assert self._tg is not None
        return self._tg

    def store(self) -> SessionStore:
        """The store, opened at first use (the wrapper opens it in a worker thread while
        its child boots: the lock keeps a request meanwhile from opening a second one)."""
        with self._opening:
            if self._store is None:
                assert self._spec is not None, "this host keeps no store"
                self._store = SessionStore(open_backend(self._spec.backend, self._spec.location))
            return self._store

    async def create_log(self, *, cwd: str, additional: list[str] | None, wrapped: WrappedInfo | None = None,
                         session_id: str | None = None, parent: ParentInfo | None = None,
                         title: str | None = None) -> SessionLog:
        """A new session in the store, owned by this process (its log keeps only its last
        turn in memory, less its chunks: a session may stream for hours, and nothing
        reads them back from memory)."""
        store = self.store()
        return await anyio.to_thread.run_sync(lambda: store.create(
            cwd=cwd, additional_directories=additional or (), keep_history=False, keep_chunks=False,
            wrapped=wrapped, session_id=session_id, parent=parent, title=title))

    def add(self, session_id: str, session: S) -> None:
        """`session` is live here from now on."""
        self._live[session_id] = session
        self.tuning.first_session()

    def session(self, session_id: str) -> S:
        """The live session `session_id`; SessionNotFoundError if it is not live here."""
        validate_session_id(session_id)
        session = self._live.get(session_id)
        if session is None:
            raise self._not_live(session_id)
        return session

    def find(self, session_id: Any) -> S | None:
        return self._live.get(session_id) if isinstance(session_id, str) else None

    def answering(self, session_id: str) -> bool:
        """Whether the live session `session_id` is answering a prompt."""
        return self._prompts.answering(session_id)

    async def send_replay(self, payload: bytes) -> None:
        """Encoded `session/update` lines of a replay, to the client at its own pace."""
        self.peer.send_raw(payload)
        await self.peer.drain()

    # --- serving -----------------------------------------------------------------------

    async def run(self, reader: LineReader, writer: Writer, *, answered_first: bool = False) -> None:
        """Start the engine, then serve the client until its input ends; every session
        is closed before this returns. OSError if the engine cannot start.
        `answered_first`: the client's first message was answered before (the wrapper's
        start-up handshake: acp_bridge.wrap.handshake)."""
        failed: OSError | None = None
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                await self.engine.start(self)
            except OSError as exc:
                failed = exc
            else:
                fallback = self.engine.fallback()
                self._conn = Connection(
                    reader, writer, self.methods(), on_eof=self._on_eof, error_for=to_rpc_error,
                    before_write=self._before_write, fallback=self._seen(fallback) if fallback else None,
                    inline={"session/cancel": self._cancel_now}, answered_first=answered_first)
                try:
                    await self._conn.serve()
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._close_all()
            tg.cancel_scope.cancel()  # what the engine started dies with the connection
        if failed is not None:
            raise failed

    def methods(self) -> dict[str, Handler]:
        table: dict[str, Handler] = {
            "session/new": self.new_session, "session/load": self.load_session,
            "session/close": self.close_session, "session/prompt": self.prompt,
            "session/cancel": self.cancel,
        }
        if self._spec is not None:
            table.update({"session/resume": self.resume_session, "session/list": self.list_sessions,
                          "session/delete": self.delete_session, "session/fork": self.fork_session})
        table.update(self.engine.methods())
        return {name: self._checked(name, fn) for name, fn in table.items()}

    def _checked(self, method: str, fn: Callable[..., Awaitable[Any]]) -> Handler:
        """`fn` behind the params check of `method` (-32602 naming the field); the
        engine told of a request on a live session first (`Engine.requested`)."""
        async def handler(**params: Any) -> Any:
            check_params(method, params)
            self._requested(method, params)
            return await fn(**params)

        return handler

    def _seen(self, fallback: Fallback) -> Fallback:
        """The engine's `fallback`, the engine told of a request on a live session
        first, as `_checked` tells it."""
        async def handler(method: str, params: Any, is_request: bool) -> Any:
            if is_request and isinstance(params, dict):
                self._requested(method, params)
            return await fallback(method, params, is_request)

        return handler

    def _requested(self, method: str, params: Mapping[str, Any]) -> None:
        if method == "session/cancel":  # a notification, of a prompt: not a request on the session
            return
        session = self.find(params.get("sessionId"))
        if session is not None:
            self.engine.requested(session, method)

    def _before_write(self) -> Awaitable[None] | None:
        """Called before each write to the client: every live log hands its buffered
        events to the OS first, so an update never reaches the client before the event
        it shows (DESIGN.md section 3). One log write per write to stdout, however many
        chunks it carries. A log a worker thread is writing at this moment (a durable
        commit) is waited for in a thread rather than on the event loop."""
        busy: list[SessionLog] = []
        for session in self._live.values():
            session_log = session.log
            if session_log is not None and session_log.buffered and not session_log.hand_off(wait=False):
                busy.append(session_log)
        return _hand_off_in_threads(busy) if busy else None

    async def _on_eof(self) -> None:
        """stdin closed: every running turn ends as interrupted (shutdown) and its prompt
        is answered before the process exits."""
        for session in self._live.values():
            session.stop()

    async def _close_all(self) -> None:
        for session_id in list(self._live):
            await self._live.pop(session_id).close(stopping=True)
        await self.engine.aclose()
        if self._store is not None:
            self._store.close()

    # --- the session methods -----------------------------------------------------------

    async def new_session(self, **params: Unpack[NewSessionRequest]) -> dict[str, Any]:
        return await self.engine.new_session(params)

    async def load_session(self, **params: Unpack[LoadSessionRequest]) -> dict[str, Any]:
        return await self._open(params, replay=True)

    async def resume_session(self, **params: Unpack[ResumeSessionRequest]) -> dict[str, Any]:
        return await self._open(params, replay=False)

    async def _open(self, request: LoadSessionRequest | ResumeSessionRequest, *, replay: bool) -> dict[str, Any]:
        sid = request["sessionId"]
        params = _without(request, "sessionId")  # what the engine takes: the rest
        validate_session_id(sid)
        live = self._live.get(sid)
        if live is not None and self._prompts.answering(sid):
            raise PromptInProgressError(sid)
        session, report = await self.engine.open_session(sid, params, self.send_replay if replay else None, live)
        opened = await self.engine.attach(session, params)
        if report is None:
            return opened.answer({})
        assert session.log is not None  # a stored session
        tracker = session.log.tracker
        return opened.answer({"repair": report.to_meta(), "turns": tracker.turn, "events": tracker.next_seq})

    async def fork_session(self, sessionId: str, **params: Any) -> dict[str, Any]:
        from acp_bridge.host.fork import fork_session  # (off the start-up path: issue 32)

        return await fork_session(self, sessionId, params)

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, **_: Any) -> dict[str, Any]:
        from acp_bridge.host.listing import list_page  # (off the start-up path: issue 32)

        store = self.store()
        sessions = await anyio.to_thread.run_sync(lambda: store.list(cwd=cwd))
        return list_page(sessions, cursor)

    async def close_session(self, sessionId: str, **_: Any) -> dict[str, Any]:
        validate_session_id(sessionId)
        session = self._live.get(sessionId)
        if session is None:
            # Not open here: closing is idempotent for a stored session.
            if self._spec is None:
                raise self._not_live(sessionId)
            if not any(s["id"] == sessionId for s in await anyio.to_thread.run_sync(self.store().list)):
                raise SessionNotFoundError(f"session {sessionId} not found", session_id=sessionId)
            return {}
        await self._shut(sessionId, session)
        return {}

    async def delete_session(self, sessionId: str, **_: Any) -> dict[str, Any]:
        validate_session_id(sessionId)
        session = self._live.get(sessionId)
        if session is not None:
            await self._shut(sessionId, session)
        # Never made, or deleted already: what was asked for is so (docs/protocol.md).
        with contextlib.suppress(SessionNotFoundError):
            await anyio.to_thread.run_sync(self.store().delete, sessionId)
        return {}

    async def _shut(self, sid: str, session: S) -> None:
        """End the live session `sid`: its running turn cancelled (by session/close) and
        answered, then the session closed."""
        await self._prompts.cancel_and_wait(sid, session)
        self._live.pop(sid, None)
        await session.close(stopping=False)

    def _not_live(self, sid: str) -> SessionNotFoundError:
        hint = "session/load or session/resume" if self._spec is not None else "session/new or session/load"
        return SessionNotFoundError(f"session {sid} is not open in {self.engine.label}: use {hint}", session_id=sid)

    # --- prompts and cancels (acp_bridge.host.prompts) ---------------------------------

    async def prompt(self, **params: Unpack[PromptRequest]) -> dict[str, Any]:
        sid = params["sessionId"]
        return await self._prompts.run(sid, self.session(sid), params["prompt"], _without(params, "sessionId", "prompt"),
                                       self.peer.notify_update)

    def _cancel_now(self, params: Any) -> bool | None:
        return self._prompts.cancel_now(params, self._live)

    async def cancel(self, sessionId: str, **rest: Any) -> None:
        self._prompts.cancel(sessionId, rest, self._live)


async def _hand_off_in_threads(logs: list[SessionLog]) -> None:
    for session_log in logs:
        await anyio.to_thread.run_sync(functools.partial(session_log.hand_off, wait=True))


def _without(params: Mapping[str, Any], *names: str) -> dict[str, Any]:
    """`params` less the members `names` (those a handler takes itself), in their order."""
    return {name: value for name, value in params.items() if name not in names}
