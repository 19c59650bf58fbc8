"""The session persistence layer: event vocabulary, invariants, crash repair, the
derived model transcript, the live log and the store, and the memory/JSONL/SQLite backends.

Nothing in this package knows about ACP or JSON-RPC.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from session.backends.base import Backend, SessionPeek, SessionSummary, StoreReader
    from session.backends.session_ids import is_session_id, validate_session_id
    from session.errors import (
        EventDataError,
        InvalidSessionIdError,
        InvariantError,
        SearchIndexError,
        SearchQueryError,
        SequenceError,
        SessionClosedError,
        SessionCorruptError,
        SessionError,
        SessionExistsError,
        SessionLockedError,
        SessionNotFoundError,
        SessionVersionError,
        StoreIOError,
        StoreUnavailableError,
    )
    from session.events import SESSION_FORMAT_VERSION, Event, Header, reason
    from session.files import Owner
    from session.invariants import InvariantTracker, check_invariants
    from session.loading import LoadedSession, SessionLoad
    from session.log import DURABLE_TYPES, SessionLog
    from session.repair import RepairReport, interrupted_turn_closers
    from session.store import SessionStore
    from session.transcript import Message, derive_messages

# Each public name is imported from its module on first use (PEP 562), so that a module
# needing one piece (the error types, for acp_bridge.errors and the JSON-RPC core; the
# vocabulary) does not load the store, the log and the backends with it.
_ON_FIRST_USE = {
    "Backend": "session.backends.base",
    "DURABLE_TYPES": "session.log",
    "Event": "session.events",
    "EventDataError": "session.errors",
    "Header": "session.events",
    "InvalidSessionIdError": "session.errors",
    "InvariantError": "session.errors",
    "InvariantTracker": "session.invariants",
    "LoadedSession": "session.loading",
    "Message": "session.transcript",
    "Owner": "session.files",
    "RepairReport": "session.repair",
    "SESSION_FORMAT_VERSION": "session.events",
    "SearchIndexError": "session.errors",
    "SearchQueryError": "session.errors",
    "SequenceError": "session.errors",
    "SessionClosedError": "session.errors",
    "SessionCorruptError": "session.errors",
    "SessionError": "session.errors",
    "SessionExistsError": "session.errors",
    "SessionLoad": "session.loading",
    "SessionLockedError": "session.errors",
    "SessionLog": "session.log",
    "SessionNotFoundError": "session.errors",
    "SessionPeek": "session.backends.base",
    "SessionStore": "session.store",
    "SessionSummary": "session.backends.base",
    "SessionVersionError": "session.errors",
    "StoreIOError": "session.errors",
    "StoreUnavailableError": "session.errors",
    "StoreReader": "session.backends.base",
    "check_invariants": "session.invariants",
    "derive_messages": "session.transcript",
    "interrupted_turn_closers": "session.repair",
    "is_session_id": "session.backends.session_ids",
    "reason": "session.events",
    "validate_session_id": "session.backends.session_ids",
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value


BACKENDS = ("jsonl", "sqlite", "postgres", "memory")
# The backends whose sessions outlive the process: the ones the command line offers
# (`--backend`, `$ACP_BRIDGE_BACKEND`). `memory` keeps nothing on disk; it is for tests
# that build a `SessionStore` in-process, and the command line refuses it.
DURABLE_BACKENDS = tuple(name for name in BACKENDS if name != "memory")


def default_store_dir(environ: dict[str, str] | None = None) -> Path:
    """`$ACP_BRIDGE_HOME`, else `$XDG_STATE_HOME/acp-bridge`, else
    `~/.local/state/acp-bridge` (README.md; `--store` overrides all)."""
    env = os.environ if environ is None else environ
    if env.get("ACP_BRIDGE_HOME"):
        return Path(env["ACP_BRIDGE_HOME"])
    state = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "acp-bridge"


def store_location(kind: str, option: str | None) -> Path | str:
    """Where a store of backend `kind` is, from `--store` (`option`): a folder (default
    `default_store_dir()`), or for postgres a connection string (default
    `$ACP_BRIDGE_POSTGRES`, else libpq's `PG*` variables)."""
    if kind == "postgres":
        from session.backends.postgres_conninfo import resolve

        return resolve(option, os.environ)
    return Path(option) if option else default_store_dir()


def shown_store(location: Path | str) -> str:
    """A store location for people to read: a connection string without its password."""
    if isinstance(location, Path):
        return str(location)
    from session.backends.postgres_conninfo import shown

    return shown(location)


def open_backend(kind: str, root: str | os.PathLike[str] | None = None) -> Backend:
    """A backend by name. File backends live under `root` (default: the store dir); for
    postgres `root` is a connection string (see `store_location`). The SQLite and
    PostgreSQL modules are imported only when asked for."""
    if kind == "memory":
        from session.backends.memory import MemoryBackend

        return MemoryBackend()
    if kind == "postgres":
        from session.backends.postgres import PostgresBackend

        return PostgresBackend(str(store_location(kind, None if root is None else str(root))))
    where = Path(root) if root is not None else default_store_dir()
    if kind not in ("jsonl", "sqlite"):
        raise ValueError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")
    try:
        if kind == "jsonl":
            from session.backends.jsonl import JsonlBackend

            return JsonlBackend(where)
        from session.backends.sqlite import SqliteBackend

        return SqliteBackend(where)
    except OSError as exc:  # its folder or database file cannot be made (a full disk...)
        from session.errors import StoreUnavailableError

        raise StoreUnavailableError(
            f"the session store {where} cannot be opened: {exc.strerror or exc}", errno=exc.errno
        ) from exc


def open_reader(kind: str, root: str | os.PathLike[str] | None = None) -> StoreReader:
    """A file store opened read-only (see `StoreReader`): unlike `open_backend`, it
    creates nothing, not even the store folder, and takes no lock. A memory store is
    read through its backend (`Backend.reader()`). A PostgreSQL store is read in
    read-only transactions (`root`: its connection string)."""
    if kind == "postgres":
        from session.backends.postgres_read import PostgresReader

        return PostgresReader(str(store_location(kind, None if root is None else str(root))))
    where = Path(root) if root is not None else default_store_dir()
    if kind == "jsonl":
        from session.backends.jsonl_read import JsonlReader

        return JsonlReader(where)
    if kind == "sqlite":
        from session.backends.sqlite_read import SqliteReader

        return SqliteReader(where)
    raise ValueError(f"no read-only open by path for backend {kind!r}; choose jsonl, sqlite or postgres")


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
    "SearchIndexError",
    "SearchQueryError",
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
    "StoreUnavailableError",
    "check_invariants",
    "default_store_dir",
    "derive_messages",
    "interrupted_turn_closers",
    "is_session_id",
    "open_backend",
    "open_reader",
    "reason",
    "shown_store",
    "store_location",
    "validate_session_id",
]
