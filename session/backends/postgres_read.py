"""Reading a PostgreSQL store: its read-only open (`PostgresReader`, see
session.backends.base.StoreReader). Nothing here writes; the owned side (the schema,
appends, repair, the lock) is in session.backends.postgres, the connection and what
both sides share in session.backends.postgres_connect (the schema's version in
postgres_schema), a session's event rows read as records in
session.backends.postgres_stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import psycopg

from session.backends.base import OUTLINE_TYPES, At, Outline, SessionPeek, Stamp, peek_of
from session.backends.event_rows import raw_pieces
from session.backends.postgres_connect import (
    LOCK_HOLDER,
    LOCK_HOLDERS,
    OUTLINE,
    UPDATED_AT,
    UPDATED_AT_V1,
    Spares,
    connect,
    lock_holder_args,
    store_error,
)
from session.backends.postgres_conninfo import shown
from session.backends.postgres_schema import (
    READABLE,
    SCHEMA_VERSION,
    schema_version,
    schema_version_error,
)
from session.backends.postgres_stream import PostgresStream
from session.backends.session_ids import validate_session_id
from session.errors import SessionNotFoundError
from session.files import Owner
from session.scan import parse_header


class PostgresReader:
    """A PostgreSQL store opened read-only (see session.backends.base.StoreReader):
    its connection runs read-only transactions, never creates the schema (a database
    without one is an empty store), takes no lock and repairs nothing. Owners are read
    from `pg_locks`, never by trying a lock."""

    name = "postgres"

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self.where = shown(conninfo)
        self._db: psycopg.Connection[Any] | None = None
        self._empty = False
        self._updated_at = UPDATED_AT  # the store's schema version's (see _conn)
        self._version = SCHEMA_VERSION
        self._spares = Spares(conninfo, "reader", keep=1)  # the streams' connections: one log after another

    def _conn(self) -> psycopg.Connection[Any] | None:
        if self._db is not None or self._empty:
            return self._db
        db = connect(self.conninfo, purpose="sessions")
        try:
            db.execute("SET default_transaction_read_only = on")
            version = schema_version(db)
        except psycopg.Error as exc:
            db.close()
            raise store_error(self.conninfo, "read the store", exc) from None
        if version is None:
            db.close()
            self._empty = True
            return None
        if version not in READABLE:
            db.close()
            raise schema_version_error(self.conninfo, version)
        if version == 1:  # not yet brought to 2 by an agent: no last_seq, last_time
            self._updated_at = UPDATED_AT_V1
        self._version = version
        self._db = db
        return db

    def _query(self, query: str, params: tuple[Any, ...], sid: str | None = None) -> list[Any]:
        db = self._conn()
        if db is None:
            return []
        try:
            return db.execute(query, params).fetchall()
        except psycopg.Error as exc:
            raise store_error(self.conninfo, "read the store", exc, session_id=sid) from None

    def _row(self, sid: str) -> tuple[bytes, str | None, int]:
        db = self._conn()  # first: the store's version decides the query
        rows = self._query(f"SELECT s.header, s.title, {self._updated_at} FROM acp_bridge.sessions s "
                           "WHERE s.id = %s", (sid,), sid) if db is not None else []
        if not rows:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        header, title, updated = rows[0]
        return header, title, int(updated)

    def ids(self) -> list[str]:
        return [row[0] for row in self._query("SELECT id FROM acp_bridge.sessions", ())]

    def stream(self, session_id: str, at: At | None = None) -> PostgresStream:
        sid = validate_session_id(session_id)
        header_json, title, updated = self._row(sid)
        header = parse_header(sid, header_json, "the sessions row")
        stream = PostgresStream(self.conninfo, header, start=at.seq if at is not None else 0,
                                spares=self._spares)
        stream.updated, stream.where = updated, f"{self.where} (table acp_bridge.events)"
        stream.title = title or header.get("title")
        return stream

    def stamps(self) -> dict[str, Stamp]:
        """(last seq, `updatedAt`) of each session: one scan of `sessions`, no log read
        (version 1: an index seek per session for its last event)."""
        if self._conn() is None:
            return {}
        if self._updated_at == UPDATED_AT:
            rows = self._query(f"SELECT s.id, coalesce(s.last_seq, -1), {UPDATED_AT} FROM acp_bridge.sessions s", ())
        else:
            rows = self._query("SELECT s.id, coalesce(e.seq, -1), greatest(s.updated_at, coalesce(e.time, 0)) "
                               "FROM acp_bridge.sessions s LEFT JOIN LATERAL (SELECT seq, time FROM "
                               "acp_bridge.events e WHERE e.session_id = s.id ORDER BY e.seq DESC LIMIT 1) e "
                               "ON true", ())
        return {row[0]: (int(row[1]), int(row[2])) for row in rows}

    def fingerprint(self) -> str | None:
        return None  # its stamps are one scan of `sessions` already

    def unstamped(self) -> set[str]:
        return set()  # every write changes the stamp

    def peek(self, session_id: str) -> SessionPeek:
        try:
            header_json, title, updated = self._row(validate_session_id(session_id))
        except SessionNotFoundError:
            return SessionPeek(None, None, None)
        return peek_of(header_json, updated, title)

    def raw(self, session_id: str) -> bytes:
        """The stored header, then one line per event row in seq order, the stored
        data text verbatim (the JSONL backend's line format), from one snapshot."""
        return b"".join(self.raw_chunks(session_id))

    def raw_chunks(self, session_id: str) -> Iterator[bytes]:
        """`raw` a piece at a time (pieces of about RAW_PIECE bytes), the rows read through
        a server-side cursor in one snapshot of the stream's own connection: bounded
        memory for a log of any size. SessionNotFoundError now, before the first piece."""
        sid = validate_session_id(session_id)
        header_json = self._row(sid)[0]
        stream = PostgresStream(self.conninfo, parse_header(sid, header_json, "the sessions row"))
        return self._raw_pieces(stream, header_json)

    RAW_PIECE = 256 << 10

    def _raw_pieces(self, stream: PostgresStream, header_json: bytes) -> Iterator[bytes]:
        sid = stream.header["id"]
        try:
            yield bytes(header_json) + b"\n"
            cursor = stream.connection().cursor(name=f"acp_bridge_raw_{sid[:8]}", binary=True)
            try:
                cursor.execute("SELECT seq, type, time, data FROM acp_bridge.events "
                               "WHERE session_id = %s ORDER BY seq", (sid,))
                yield from raw_pieces(lambda: cursor.fetchmany(256), self.RAW_PIECE)
            finally:
                with contextlib.suppress(psycopg.Error):
                    cursor.close()
        except psycopg.Error as exc:
            raise store_error(self.conninfo, "read the store", exc, session_id=sid) from None
        finally:
            stream.close()

    def owner(self, session_id: str) -> Owner:
        sid = validate_session_id(session_id)
        rows = self._query(LOCK_HOLDER, lock_holder_args(sid), sid)
        if not rows:
            return Owner("none")
        return Owner("live", rows[0][1])

    def owners(self, session_ids: Sequence[str]) -> dict[str, Owner]:
        """One query for them all (`LOCK_HOLDERS`)."""
        if not session_ids:
            return {}
        keys = [lock_holder_args(validate_session_id(sid)) for sid in session_ids]
        rows = self._query(LOCK_HOLDERS, ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]))
        live = {sid: Owner("live", pid) for sid, pid in rows}
        return {sid: live.get(sid, Owner("none")) for sid in session_ids}

    def outlines(self, session_ids: Sequence[str]) -> dict[str, Outline]:
        """One query: the sessions whose `checked_seq` is their last seq (every row
        written by a checked writer, or checked by the last load: postgres_schema's
        CHECKED_WRITER), with their rows of the outline's types (found by the events'
        key: about 8 ms for a page of 50 sessions of 627 events each, bench/README.md).
        A store of version 1 or 2 keeps no `checked_seq`: none."""
        if not session_ids or self._conn() is None or self._version < 3:
            return {}
        rows = self._query(OUTLINE, (list(OUTLINE_TYPES), list(session_ids)))
        out: dict[str, Outline] = {}
        bad: set[str] = set()
        for sid, header, title, last_seq, updated, seq, etype, time, data in rows:
            outline = out.get(sid)
            if outline is None:
                outline = out[sid] = Outline(bytes(header), title, (int(last_seq), int(updated)), [])
            if seq is None:
                continue  # no turns
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError:
                bad.add(sid)  # cannot be (a json column): the log will say
                continue
            if etype == "assistant/message" and isinstance(value, dict) and set(value) != {"usage"}:
                value = {"usage": value.get("usage")}  # one holding a NUL comes whole (`nul_free`)
            outline.events.append({"type": etype, "seq": seq, "time": time, "data": value})
        for sid in bad:
            del out[sid]
        return out

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()
        self._spares.close()

