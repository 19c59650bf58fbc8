"""Damaging stored logs on purpose, the same way for every backend, so the contract
suite can check what load does with each kind of damage."""

from __future__ import annotations

import contextlib
import sqlite3

import orjson

from session import Backend
from session.backends.jsonl import JsonlBackend
from session.backends.memory import MemoryBackend
from session.backends.sqlite import SqliteBackend


def _jsonl_lines(backend: JsonlBackend, sid: str) -> list[bytes]:
    return backend.path_of(sid).read_bytes().split(b"\n")


def _jsonl_save(backend: JsonlBackend, sid: str, lines: list[bytes]) -> None:
    backend.path_of(sid).write_bytes(b"\n".join(lines))


def _pg(backend: Backend, query: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
    """Run `query` on the PostgreSQL store of `backend` through a connection of its own."""
    import psycopg

    with psycopg.connect(backend.conninfo, autocommit=True) as db:  # type: ignore[attr-defined]
        cursor = db.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def pg_tables(backend: Backend) -> object:
    """Every row of a PostgreSQL store, to compare before and after a read."""
    return {table: _pg(backend, f"SELECT t::text FROM acp_bridge.{table} t ORDER BY 1", ())
            for table in ("sessions", "events", "torn_events", "owners", "schema_version")}


def replace_event(backend: Backend, sid: str, seq: int, raw: bytes) -> None:
    """Replace the stored record of event `seq` with `raw` (any bytes). PostgreSQL's
    json column refuses bytes that are not JSON: there the row's type becomes one no
    event has, damage it can store."""
    if backend.name == "postgres":
        try:
            orjson.loads(raw)
        except orjson.JSONDecodeError:
            _pg(backend, "UPDATE acp_bridge.events SET type = 'not/json' WHERE session_id = %s "
                "AND seq = %s", (sid, seq))
        else:
            _pg(backend, "UPDATE acp_bridge.events SET data = %s::json WHERE session_id = %s "
                "AND seq = %s", (raw.decode(), sid, seq))
    elif isinstance(backend, JsonlBackend):
        lines = _jsonl_lines(backend, sid)
        lines[seq + 1] = raw
        _jsonl_save(backend, sid, lines)
    elif isinstance(backend, SqliteBackend):
        with contextlib.closing(sqlite3.connect(backend.path)) as db, db:
            db.execute(
                "UPDATE events SET data = ? WHERE session_id = ? AND seq = ?", (raw, sid, seq)
            )
    elif isinstance(backend, MemoryBackend):
        backend.stored[sid].records[seq] = raw
    else:
        raise TypeError(backend)


def delete_event(backend: Backend, sid: str, seq: int) -> None:
    """Remove the stored record of event `seq`, leaving a seq gap."""
    if backend.name == "postgres":
        _pg(backend, "DELETE FROM acp_bridge.events WHERE session_id = %s AND seq = %s", (sid, seq))
    elif isinstance(backend, JsonlBackend):
        lines = _jsonl_lines(backend, sid)
        del lines[seq + 1]
        _jsonl_save(backend, sid, lines)
    elif isinstance(backend, SqliteBackend):
        with contextlib.closing(sqlite3.connect(backend.path)) as db, db:
            db.execute("DELETE FROM events WHERE session_id = ? AND seq = ?", (sid, seq))
    elif isinstance(backend, MemoryBackend):
        del backend.stored[sid].records[seq]
    else:
        raise TypeError(backend)


def set_header_version(backend: Backend, sid: str, version: int) -> None:
    if backend.name == "postgres":
        _pg(backend, "UPDATE acp_bridge.sessions SET header = jsonb_set(header::jsonb, "
            "'{version}', to_jsonb(%s::int))::json WHERE id = %s", (version, sid))
    elif isinstance(backend, JsonlBackend):
        lines = _jsonl_lines(backend, sid)
        header = orjson.loads(lines[0])
        header["version"] = version
        lines[0] = orjson.dumps(header)
        _jsonl_save(backend, sid, lines)
    elif isinstance(backend, SqliteBackend):
        with contextlib.closing(sqlite3.connect(backend.path)) as db, db:
            (raw,) = db.execute("SELECT header FROM sessions WHERE id = ?", (sid,)).fetchone()
            header = orjson.loads(raw)
            header["version"] = version
            db.execute("UPDATE sessions SET header = ? WHERE id = ?", (orjson.dumps(header), sid))
    elif isinstance(backend, MemoryBackend):
        backend.stored[sid].header["version"] = version
    else:
        raise TypeError(backend)


def stored_seqs(backend: Backend, sid: str) -> int:
    """How many event records are stored (to check that failed loads change nothing)."""
    if backend.name == "postgres":
        count = _pg(backend, "SELECT count(*) FROM acp_bridge.events WHERE session_id = %s",
                    (sid,))[0][0]
        assert isinstance(count, int)
        return count
    if isinstance(backend, JsonlBackend):
        return len(_jsonl_lines(backend, sid)) - 2
    if isinstance(backend, SqliteBackend):
        with contextlib.closing(sqlite3.connect(backend.path)) as db, db:
            (n,) = db.execute("SELECT count(*) FROM events WHERE session_id = ?", (sid,)).fetchone()
            return int(n)
    if isinstance(backend, MemoryBackend):
        return len(backend.stored[sid].records)
    raise TypeError(backend)
