"""Reading a PostgreSQL store: connections, the schema version, the event rows as a
stream of records, and the read-only open of a store (`PostgresReader`). Nothing here
writes; the owned side (the schema, appends, repair, the lock) is in
session.backends.postgres.

Everything lives in the schema `acp_bridge` of the database the connection string
names, so the store can share a database with other applications. Event data and
headers are `json` columns: PostgreSQL checks them and keeps the text verbatim (key
order, spacing), so `raw` gives back the bytes written, and people can query them.
"""

from __future__ import annotations

import contextlib
import os
import socket
import weakref
from collections.abc import Iterator
from typing import Any, NoReturn

import orjson
import psycopg
from psycopg.adapt import Buffer, Loader
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import Format

from session.backends.base import SessionPeek, validate_session_id
from session.backends.postgres_conninfo import scrub, shown
from session.backends.sqlite_read import row_events
from session.errors import (
    SessionLockedError,
    SessionNotFoundError,
    SessionVersionError,
    StoreIOError,
)
from session.events import Event, Header
from session.files import Owner
from session.scan import Damage, parse_header

SCHEMA = "acp_bridge"
SCHEMA_VERSION = 1
# A session's `updatedAt`: the time of its last event (an index seek on the events
# key), or its creation; the sessions row is not rewritten at every commit.
UPDATED_AT = (
    "greatest(s.updated_at, coalesce((SELECT e.time FROM acp_bridge.events e "
    "WHERE e.session_id = s.id ORDER BY e.seq DESC LIMIT 1), 0))"
)
# The owner lock is a session-level advisory lock on this 64-bit key, taken by the
# agent's connection: PostgreSQL drops it when that connection ends, however it ends.
LOCK_HOLDER = (
    "SELECT o.host, o.pid FROM pg_locks l LEFT JOIN acp_bridge.owners o ON o.session_id = %s "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid LIMIT 1"
)
HOST = socket.gethostname()
# Connections the server said FATAL to while they were idle (see `connect`).
HUNG_UP: weakref.WeakSet[psycopg.Connection[Any]] = weakref.WeakSet()


class RawJson(Loader):
    """`json` columns as the bytes stored (text or binary format alike): the caller
    parses them once, with orjson."""

    def load(self, data: Buffer) -> bytes:
        return bytes(data)


class RawJsonBinary(RawJson):
    format = Format.BINARY


# Unless the connection string says otherwise: give up connecting after 10 s, and let
# the kernel declare a silent peer (a network cut) dead within about 30 s, so that a
# write or an owner lock does not hang for the TCP default of many minutes.
LINK_DEFAULTS: dict[str, Any] = {"connect_timeout": 10, "keepalives_idle": 30, "keepalives_interval": 10,
                                 "keepalives_count": 3, "tcp_user_timeout": 30_000}


def connect(conninfo: str, *, purpose: str) -> psycopg.Connection[Any]:
    """An autocommit connection whose commits are asynchronous unless a transaction
    says otherwise (`set_durable` at the durability points).
    Raises StoreIOError, its message free of passwords."""
    try:
        given = conninfo_to_dict(conninfo)
    except psycopg.Error:  # libpq's words may quote a piece of the string: a password
        raise StoreIOError("the PostgreSQL connection string (--store, or $ACP_BRIDGE_POSTGRES) "
                           "cannot be parsed; libpq's syntax is postgresql://USER@HOST/DB or "
                           "'host=... dbname=...' (not shown: it may hold a password)") from None
    extra = {k: v for k, v in LINK_DEFAULTS.items()
             if k not in given and not (k == "connect_timeout" and os.environ.get("PGCONNECT_TIMEOUT"))}
    try:
        conn = psycopg.connect(
            conninfo,
            autocommit=True,
            application_name=f"acp-bridge {purpose} {HOST}:{os.getpid()}",
            **extra,
        )
    except psycopg.Error as exc:
        raise store_error(conninfo, "connect to the store", exc) from None
    try:
        row = conn.execute("SELECT reset_val FROM pg_settings WHERE name = 'synchronous_commit'").fetchone()
        DURABLE_LEVEL[conn] = durable_level(row[0] if row else None)
        conn.execute("SET synchronous_commit = off")
    except psycopg.Error as exc:
        conn.close()
        raise store_error(conninfo, "set up the connection", exc) from None
    ref = weakref.ref(conn)

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        # A FATAL message while the connection is idle arrives as a notice: the server
        # is hanging up (restart, pg_terminate_backend), before the socket closes.
        if diag.severity_nonlocalized in ("FATAL", "PANIC") and (held := ref()) is not None:
            HUNG_UP.add(held)

    conn.add_notice_handler(on_notice)
    conn.adapters.register_loader("json", RawJson)
    conn.adapters.register_loader("json", RawJsonBinary)
    return conn


# Strength of the `synchronous_commit` levels: a durability point commits at "on" or at
# what the server's administrator configured, whichever waits for more (with synchronous
# replication, "remote_apply" also waits for the standby to apply the commit).
_LEVELS = ("off", "local", "remote_write", "on", "remote_apply")
# The level of each connection's durability points (read from the server at connect).
DURABLE_LEVEL: weakref.WeakKeyDictionary[psycopg.Connection[Any], str] = weakref.WeakKeyDictionary()


def durable_level(configured: str | None) -> str:
    if configured in _LEVELS and _LEVELS.index(configured) > _LEVELS.index("on"):
        return configured
    return "on"


def set_durable(db: psycopg.Connection[Any]) -> None:
    """Make the transaction in progress commit synchronously (see `durable_level`)."""
    level = DURABLE_LEVEL.get(db, "on")
    db.execute(f"SET LOCAL synchronous_commit = {level}")


def store_error(conninfo: str, what: str, exc: BaseException, *,
                session_id: str | None = None, **details: Any) -> StoreIOError:
    """A driver failure as StoreIOError: what we tried, the store (redacted), the
    server's words (scrubbed of the password)."""
    who = f"session {session_id}: " if session_id else ""
    words = " ".join(str(exc).split()) or type(exc).__name__
    return StoreIOError(
        f"{who}could not {what} (PostgreSQL store {shown(conninfo)}): {scrub(words, conninfo)}",
        session_id=session_id,
        sqlstate=getattr(exc, "sqlstate", None),
        **details,
    )


def lock_key(session_id: str) -> int:
    """The advisory lock key of a session: the first 64 bits of its UUID, signed."""
    key = int(session_id.replace("-", "")[:16], 16)
    return key - (1 << 64) if key >= 1 << 63 else key


def lock_holder_args(session_id: str) -> tuple[str, int, int]:
    """Parameters of LOCK_HOLDER: pg_locks shows a bigint key as two unsigned halves."""
    key = lock_key(session_id) & 0xFFFFFFFFFFFFFFFF
    return session_id, key >> 32, key & 0xFFFFFFFF


def locked_error(session_id: str, holder: tuple[str | None, int | None] | None) -> SessionLockedError:
    host, pid = holder if holder is not None else (None, None)
    if pid is not None and host == HOST and pid == os.getpid():
        who = "this process"
    elif pid is not None:
        who = f"process {pid} on {host}"
    else:
        who = "another agent"
    return SessionLockedError(
        f"session {session_id} is open in {who}; close it there first",
        session_id=session_id, pid=pid, host=host,
    )


def schema_version(conn: psycopg.Connection[Any]) -> int | None:
    """The store's schema version, or None where no store was ever made here."""
    exists = conn.execute("SELECT to_regclass('acp_bridge.schema_version')").fetchone()
    if exists is None or exists[0] is None:
        return None
    row = conn.execute("SELECT max(version) FROM acp_bridge.schema_version").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def schema_version_error(conninfo: str, version: int) -> SessionVersionError:
    return SessionVersionError(
        f"store {shown(conninfo)} has schema version {version}; this build reads only "
        f"version {SCHEMA_VERSION} (pre-release: no migration)",
        version=version,
        supported=SCHEMA_VERSION,
    )


class PostgresStream:
    """A session's event rows, read through a connection of its own in one
    read-only REPEATABLE READ transaction (one snapshot for `blocks`, `locate` and
    `size_from`), with a server-side cursor: memory holds one block at a time."""

    BLOCK = 4096
    BLOCK_BYTES = 256 << 10
    FETCH = 2048
    FETCH_BYTES = 8 << 20
    # Filled in by PostgresReader.stream (see session.backends.base.ReadStream).
    updated = 0
    title: str | None = None
    where = ""

    def __init__(self, conninfo: str, header: Header, conn: psycopg.Connection[Any] | None = None) -> None:
        self.header = header
        self.conninfo = conninfo
        self._db = conn
        self._began = False
        self._cursor: psycopg.ServerCursor[Any] | None = None

    def _conn(self) -> psycopg.Connection[Any]:
        if self._db is None:
            self._db = connect(self.conninfo, purpose="reader")
        if not self._began:  # explicit: the connection is in autocommit mode
            self._db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._began = True
        return self._db

    def _fail(self, what: str, exc: psycopg.Error) -> NoReturn:
        raise store_error(self.conninfo, what, exc, session_id=self.header["id"]) from None

    def blocks(self) -> Iterator[list[Event | Damage]]:
        sid = self.header["id"]
        try:
            cursor = self._cursor = self._conn().cursor(name=f"acp_bridge_load_{sid[:8]}", binary=True)
        except psycopg.Error as exc:
            self._fail("read the log", exc)
        try:
            cursor.execute("SELECT seq, type, time, data FROM acp_bridge.events "
                           "WHERE session_id = %s ORDER BY seq", (sid,))
            # Blocks are bounded in rows and in bytes: one tool result may be megabytes,
            # so a fetch asks for as many rows as fit in FETCH_BYTES if each were as big
            # as the biggest row seen so far.
            block: list[tuple[int, str, int, bytes]] = []
            size, ask, biggest = 0, 16, 1
            while rows := cursor.fetchmany(ask):
                block.extend(rows)
                for row in rows:
                    size += len(row[3])
                    biggest = max(biggest, len(row[3]))
                ask = max(1, min(self.FETCH, self.FETCH_BYTES // biggest))
                if len(block) >= self.BLOCK or size >= self.BLOCK_BYTES:
                    yield row_events(block)  # type: ignore[arg-type]
                    block, size = [], 0
            if block:
                yield row_events(block)  # type: ignore[arg-type]
        except psycopg.Error as exc:
            self._fail("read the log", exc)
        finally:
            with contextlib.suppress(psycopg.Error):
                cursor.close()

    def locate(self, index: int) -> dict[str, int]:
        try:
            row = self._conn().execute(
                "SELECT seq FROM acp_bridge.events WHERE session_id = %s ORDER BY seq "
                "OFFSET %s LIMIT 1", (self.header["id"], index)
            ).fetchone()
        except psycopg.Error as exc:
            self._fail("read the log", exc)
        return {"seq": row[0] if row is not None else index}

    def size_from(self, index: int) -> int:
        try:
            row = self._conn().execute(
                "SELECT coalesce(sum(octet_length(data::text)), 0) FROM (SELECT data FROM "
                "acp_bridge.events WHERE session_id = %s ORDER BY seq OFFSET %s) t",
                (self.header["id"], index),
            ).fetchone()
        except psycopg.Error as exc:
            self._fail("read the log", exc)
        return int(row[0]) if row is not None else 0

    def close(self) -> None:
        # The cursor first: an abandoned `blocks` generator may be finalized later, in
        # any thread, and must then find its cursor closed (no statement sent) rather
        # than use a connection that went back to the backend for another load.
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            with contextlib.suppress(psycopg.Error):
                cursor.close()
        db, self._db = self._db, None
        if db is not None:
            self._done(db)

    def _done(self, db: psycopg.Connection[Any]) -> None:
        """Let go of the connection (a subclass may keep it for the next load)."""
        db.close()


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
        if version != SCHEMA_VERSION:
            db.close()
            raise schema_version_error(self.conninfo, version)
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
        rows = self._query(f"SELECT s.header, s.title, {UPDATED_AT} FROM acp_bridge.sessions s "
                           "WHERE s.id = %s", (sid,), sid)
        if not rows:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        header, title, updated = rows[0]
        return header, title, int(updated)

    def ids(self) -> list[str]:
        return [row[0] for row in self._query("SELECT id FROM acp_bridge.sessions", ())]

    def stream(self, session_id: str) -> PostgresStream:
        sid = validate_session_id(session_id)
        header_json, title, updated = self._row(sid)
        header = parse_header(sid, header_json, "the sessions row")
        stream = PostgresStream(self.conninfo, header)
        stream.updated, stream.where = updated, f"{self.where} (table acp_bridge.events)"
        stream.title = title or header.get("title")
        return stream

    def peek(self, session_id: str) -> SessionPeek:
        try:
            header_json, title, updated = self._row(validate_session_id(session_id))
        except SessionNotFoundError:
            return SessionPeek(None, None, None)
        try:
            header = orjson.loads(header_json)
        except orjson.JSONDecodeError:
            header = None
        return SessionPeek(header if isinstance(header, dict) else None, updated, title)

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
            cursor = stream._conn().cursor(name=f"acp_bridge_raw_{sid[:8]}", binary=True)
            try:
                cursor.execute("SELECT seq, type, time, data FROM acp_bridge.events "
                               "WHERE session_id = %s ORDER BY seq", (sid,))
                piece: list[bytes] = []
                size = 0
                while rows := cursor.fetchmany(256):
                    for seq, etype, stamp, data in rows:
                        line = b'{"type":%s,"seq":%d,"time":%d,"data":%s}\n' % (
                            orjson.dumps(etype), seq, stamp, data)
                        piece.append(line)
                        size += len(line)
                    if size >= self.RAW_PIECE:
                        yield b"".join(piece)
                        piece, size = [], 0
                if piece:
                    yield b"".join(piece)
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

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()

