"""Connecting to a PostgreSQL store, and what its reading and owning sides share: the
failures as StoreIOError (free of passwords), the durable commit level, the queries
both read (a session's time, a page's outlines), and the owner lock's key and holder.
The schema, its version and its migrations are in session.backends.postgres_schema;
the connection string's parsing and redaction in session.backends.postgres_conninfo.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import weakref
from typing import Any

import psycopg
from psycopg.adapt import Buffer, Loader
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import Format

from session.backends.postgres_conninfo import scrub, shown
from session.backends.postgres_schema import CHECKED_WRITER
from session.errors import SessionLockedError, StoreIOError

# A session's `updatedAt`: the time of its last event, or its creation.
UPDATED_AT = "greatest(s.updated_at, coalesce(s.last_time, 0))"
# ...in a store of version 1 (an index seek on the events key per session).
UPDATED_AT_V1 = (
    "greatest(s.updated_at, coalesce((SELECT e.time FROM acp_bridge.events e "
    "WHERE e.session_id = s.id ORDER BY e.seq DESC LIMIT 1), 0))"
)


def nul_free(column: str) -> str:
    r"""SQL: whether the `json` value in `column` holds no escaped NUL. PostgreSQL's json
    keeps `\u0000` verbatim, but taking such a value apart (`->`) fails ("\u0000 cannot
    be converted to text") wherever in the value the NUL is; a query reads a field in SQL
    only where this holds, and takes the whole value back otherwise (the caller reads
    the field with orjson). An escaped backslash before `u0000` answers false too: the
    slower, whole path, never a wrong one."""
    return f"strpos({column}::text, '\\u0000') = 0"


# A page of sessions' outlines (PostgresReader.outlines): those checked to their last
# seq, with their rows of the outline's types (an assistant message cut to its usage,
# here, or by the reader for a message holding a NUL: `nul_free`).
OUTLINE = f"""
SELECT s.id, s.header, s.title, coalesce(s.last_seq, -1), {UPDATED_AT}, e.seq, e.type, e.time,
    CASE WHEN e.type = 'assistant/message' AND {nul_free("e.data")}
         THEN json_build_object('usage', e.data -> 'usage') ELSE e.data END
FROM acp_bridge.sessions s
LEFT JOIN acp_bridge.events e ON e.session_id = s.id AND e.type = ANY(%s)
WHERE s.id = ANY(%s) AND s.checked_seq = coalesce(s.last_seq, -1)
ORDER BY s.id, e.seq"""
# The owner lock is a session-level advisory lock on this 64-bit key, taken by the
# agent's connection: PostgreSQL drops it when that connection ends, however it ends.
LOCK_HOLDER = (
    "SELECT o.host, o.pid FROM pg_locks l LEFT JOIN acp_bridge.owners o ON o.session_id = %s "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid LIMIT 1"
)
# ...of many sessions at once: (id, pid) of those whose lock is held.
LOCK_HOLDERS = (
    "SELECT DISTINCT ON (p.id) p.id, o.pid FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) AS p(id, hi, lo) "
    "JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND l.classid = p.hi::oid AND l.objid = p.lo::oid "
    "LEFT JOIN acp_bridge.owners o ON o.session_id = p.id ORDER BY p.id"
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


def connect(conninfo: str, *, purpose: str, writer: bool = False) -> psycopg.Connection[Any]:
    """An autocommit connection whose commits are asynchronous unless a transaction
    says otherwise (`set_durable` at the durability points); `writer`: the agent's own,
    which writes only checked events (`CHECKED_WRITER`).
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
        conn.execute("SELECT set_config('synchronous_commit', 'off', false), set_config(%s, %s, false)",
                     (CHECKED_WRITER, "on" if writer else "off"))
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


def dropped(db: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection was closed by the server (a restart, an
    administrator's pg_terminate_backend): its socket is readable with nothing asked.
    Checked before each use, so a connection dropped while idle costs no failed write."""
    if db.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return False
    try:
        # A notice or a parameter report also wakes it: read what came, and again (a
        # server that hung up sent its FATAL message first, then the end of the stream).
        for _ in range(3):
            if not select.select([db.fileno()], [], [], 0)[0]:
                break
            db.pgconn.consume_input()
            db.pgconn.is_busy()  # parses what came: a FATAL reaches the notice handler
    except (OSError, ValueError, psycopg.OperationalError):
        return True
    return db in HUNG_UP or db.pgconn.status != psycopg.pq.ConnStatus.OK


class Spares:
    """Reading connections kept for the next read of a log (at most `keep`), each
    checked before reuse: a connection costs a log read more than its rows do (a
    connect, the set-up queries), and a list reads a page of logs one after another."""

    def __init__(self, conninfo: str, purpose: str, keep: int = 2) -> None:
        self.conninfo, self.purpose, self.keep = conninfo, purpose, keep
        self._kept: list[psycopg.Connection[Any]] = []
        self._mutex = threading.Lock()
        self._closed = False  # a connection given back after `close` is closed, not kept

    def take(self) -> psycopg.Connection[Any]:
        """A kept connection if one is healthy, else a new one (StoreIOError)."""
        with self._mutex:
            while self._kept:
                db = self._kept.pop()
                if not db.closed and not dropped(db):
                    return db
                db.close()
        return connect(self.conninfo, purpose=self.purpose)

    def give_back(self, db: psycopg.Connection[Any], *, keep: bool = True) -> None:
        """A connection done with: its transaction ended, then kept if `keep` and there
        is room, else closed."""
        try:
            db.execute("ROLLBACK")
        except psycopg.Error:
            db.close()
            return
        with self._mutex:
            if keep and not self._closed and len(self._kept) < self.keep:
                self._kept.append(db)
                return
        db.close()

    def close(self) -> None:
        with self._mutex:
            kept, self._kept, self._closed = self._kept, [], True
        for db in kept:
            db.close()
