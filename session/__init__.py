"""The session persistence layer: event vocabulary, invariants, crash repair, the
derived model transcript, the live log and the store, and the memory/JSONL/SQLite backends.

Nothing in this package knows about ACP or JSON-RPC.
"""

from __future__ import annotations

import os
from pathlib import Path

from session.backends.base import (
    Backend,
    SessionPeek,
    SessionSummary,
    StoreReader,
    is_session_id,
    validate_session_id,
)
from session.errors import (
    EventDataError,
    InvalidSessionIdError,
    InvariantError,
    SequenceError,
    SessionClosedError,
    SessionCorruptError,
    SessionError,
    SessionExistsError,
    SessionLockedError,
    SessionNotFoundError,
    SessionVersionError,
    StoreIOError,
)
from session.events import SESSION_FORMAT_VERSION, Event, Header, reason
from session.files import Owner
from session.invariants import InvariantTracker, check_invariants
from session.loading import LoadedSession, SessionLoad
from session.log import DURABLE_TYPES, SessionLog
from session.repair import RepairReport, interrupted_turn_closers
from session.store import SessionStore
from session.transcript import Message, derive_messages

BACKENDS = ("jsonl", "sqlite", "memory")
# The backends whose sessions outlive the process: the ones the command line offers
# (`--backend`, `$ACP_BRIDGE_BACKEND`). `memory` keeps nothing on disk; it is for tests
# that build a `SessionStore` in-process, and the command line refuses it.
DURABLE_BACKENDS = tuple(name for name in BACKENDS if name != "memory")


def default_store_dir(environ: dict[str, str] | None = None) -> Path:
    """`$ACP_BRIDGE_HOME`, else `$XDG_STATE_HOME/acp-bridge`, else
    `~/.local/state/acp-bridge` (DESIGN.md section 3; `--store` overrides all)."""
    env = os.environ if environ is None else environ
    if env.get("ACP_BRIDGE_HOME"):
        return Path(env["ACP_BRIDGE_HOME"])
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "acp-bridge"


def open_backend(kind: str, root: str | os.PathLike[str] | None = None) -> Backend:
    """A backend by name. File backends live under `root` (default: the store dir).
    The SQLite module is imported only when asked for."""
    if kind == "memory":
        from session.backends.memory import MemoryBackend

        return MemoryBackend()
    where = Path(root) if root is not None else default_store_dir()
    if kind == "jsonl":
        from session.backends.jsonl import JsonlBackend

        return JsonlBackend(where)
    if kind == "sqlite":
        from session.backends.sqlite import SqliteBackend

        return SqliteBackend(where)
    raise ValueError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")


def open_reader(kind: str, root: str | os.PathLike[str] | None = None) -> StoreReader:
    """A file store opened read-only (see `StoreReader`): unlike `open_backend`, it
    creates nothing, not even the store folder, and takes no lock. A memory store is
    read through its backend (`Backend.reader()`)."""
    where = Path(root) if root is not None else default_store_dir()
    if kind == "jsonl":
        from session.backends.jsonl_read import JsonlReader

        return JsonlReader(where)
    if kind == "sqlite":
        from session.backends.sqlite_read import SqliteReader

        return SqliteReader(where)
    raise ValueError(f"no read-only open by path for backend {kind!r}; choose jsonl or sqlite")


__all__ = [
    "BACKENDS",
    "DURABLE_BACKENDS",
    "DURABLE_TYPES",
    "SESSION_FORMAT_VERSION",
    "Backend",
    "Event",
    "EventDataError",
    "Header",
    "InvalidSessionIdError",
    "InvariantError",
    "InvariantTracker",
    "LoadedSession",
    "Message",
    "Owner",
    "RepairReport",
    "SequenceError",
    "SessionClosedError",
    "SessionCorruptError",
    "SessionError",
    "SessionExistsError",
    "SessionLoad",
    "SessionLockedError",
    "SessionLog",
    "SessionNotFoundError",
    "SessionPeek",
    "SessionStore",
    "SessionSummary",
    "SessionVersionError",
    "StoreIOError",
    "StoreReader",
    "check_invariants",
    "default_store_dir",
    "derive_messages",
    "interrupted_turn_closers",
    "is_session_id",
    "open_backend",
    "open_reader",
    "reason",
    "validate_session_id",
]
