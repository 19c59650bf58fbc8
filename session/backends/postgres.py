"""The PostgreSQL backend: the sessions of many machines in one database.

    acp_bridge.schema_version   the schema version (other versions are refused)
    acp_bridge.sessions         one row per session: header, cwd, title, created_at, last event
    acp_bridge.events           (session_id, seq) -> type, time, data (json, verbatim)
    acp_bridge.torn_events      records a repair cut, kept aside
    acp_bridge.owners           who took a session's lock last (host, pid, token)

One connection per agent writes every session it owns and holds their owner locks:
session-level advisory locks, which any agent on any machine sees and which the
server drops when the connection ends, so a crashed or partitioned agent never leaves
a session locked. Commits are asynchronous (`synchronous_commit = off`: committed,
visible to every reader, but the server may lose the last few hundred milliseconds if
*it* crashes) except at the durability points, where a transaction sets
`synchronous_commit = on` (or the server's own setting, if it waits for more) and so
also flushes every earlier asynchronous commit.

A dropped connection (server restart, `pg_terminate_backend`, network) fails the write
in progress with StoreIOError; the next write reconnects, takes the locks back and
checks through the owners row that no other agent held a session meanwhile (one that
did is lost to this agent: its writes fail until it is loaded again). The owned
session (appends, rollback, repair) is in session.backends.postgres_session; reading
in session.backends.postgres_stream (the row stream) and postgres_read (the read-only
`PostgresReader`); connecting, errors and the lock key in postgres_connect; the schema,
its version and migrations in postgres_schema.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from session.backends.base import (
    BackendSession,
    Encoded,
    SessionSummary,
    StoredLog,
    changed_while_imported,
    read_whole,
)
from session.backends.postgres_connect import (
    DURABLE_LEVEL,
    HOST,
    LOCK_HOLDER,
    UPDATED_AT,
    Spares,
    connect,
    dropped,
    lock_holder_args,
    lock_key,
    locked_error,
    nul_free,
    set_durable,
    store_error,
)
from session.backends.postgres_conninfo import shown
from session.backends.postgres_read import PostgresReader
from session.backends.postgres_schema import (
    DDL,
    MIGRATE_FROM_1,
    MIGRATE_FROM_2,
    SCHEMA_VERSION,
    schema_version,
    schema_version_error,
)
from session.backends.postgres_session import (
    OwnedPostgresStream,
    PostgresSession,
    copy_rows,
    insert_events,
    insert_session,
)
from session.backends.postgres_stream import PostgresStream
from session.backends.session_ids import validate_session_id
from session.errors import SessionExistsError, SessionNotFoundError, StoreIOError
from session.events import Header
from session.log import now_ms
from session.scan import parse_header

# Taken (for one transaction) while the schema is checked and created: two agents
# opening a new store at once must not both create it.
SCHEMA_LOCK = 0x6163_702D_6272_6467  # "acp-brdg"
class PostgresBackend:
    name = "postgres"

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self.where = shown(conninfo)
        # One connection, used from the event loop's worker threads one call at a time.
        self._mutex = threading.RLock()
        self._held: dict[str, str] = {}  # session id -> token of the lock we hold
        self._lost: set[str] = set()  # sessions whose lock went with a dropped connection
        self._spares = Spares(conninfo, "loader")  # reading connections, for reuse
        self.generation = 0  # counts reconnections: a session checks the store after one
        self._db: psycopg.Connection[Any] | None = connect(conninfo, purpose="agent", writer=True)
        try:
            self._check_schema(self._db)
        except BaseException:
            self._db.close()
            raise

    def _check_schema(self, db: psycopg.Connection[Any]) -> None:
        try:
            with db.transaction():
                set_durable(db)
                db.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                version = schema_version(db)
                if version is None:
                    db.execute(DDL)
                    return
                if version == 1:  # one scan of the events, once (see SCHEMA_VERSION)
                    db.execute(MIGRATE_FROM_1)
                    version = 2
                if version == 2:
                    db.execute(MIGRATE_FROM_2)
                    return
        except psycopg.Error as exc:
            raise store_error(self.conninfo, "open the store", exc) from None
        if version != SCHEMA_VERSION:
            raise schema_version_error(self.conninfo, version)

    # -- the connection and the locks ----------------------------------------------

    @property
    def durable_level(self) -> str:
        """The `synchronous_commit` level of the durability points on this connection."""
        with self._mutex:
            return DURABLE_LEVEL.get(self._live(), "on")

    def _live(self) -> psycopg.Connection[Any]:
        """The agent's connection, reconnected (locks taken back) if it was lost.
        Called under the mutex."""
        db = self._db
        if db is not None and not db.closed and not dropped(db):
            return db
        if db is not None:
            db.close()
        self._db = None
        db = connect(self.conninfo, purpose="agent", writer=True)
        self._db = db
        self.generation += 1
        for sid, token in list(self._held.items()):
            if not self._retake(db, sid, token):
                del self._held[sid]
                self._lost.add(sid)
        return db

    def _retake(self, db: psycopg.Connection[Any], sid: str, token: str) -> bool:
        """Take a lock back after a reconnection: only if nobody took it meanwhile."""
        try:
            row = db.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(sid),)).fetchone()
            if not (row and row[0]):
                return False
            owner = db.execute("SELECT token FROM acp_bridge.owners WHERE session_id = %s",
                               (sid,)).fetchone()
            if owner is not None and owner[0] == token:
                return True
            db.execute("SELECT pg_advisory_unlock(%s)", (lock_key(sid),))
        except psycopg.Error:
            with contextlib.suppress(psycopg.Error):
                db.close()
        return False

    def _lock(self, sid: str) -> None:
        """Take the owner lock of `sid` for this process (SessionLockedError if
        anyone, this process included, holds it) and say who holds it."""
        with self._mutex:
            if sid in self._held:
                raise locked_error(sid, (HOST, os.getpid()))
            try:
                db = self._live()
                row = db.execute("SELECT pg_try_advisory_lock(%s)", (lock_key(sid),)).fetchone()
                if not (row and row[0]):
                    holder = db.execute(LOCK_HOLDER, lock_holder_args(sid)).fetchone()
                    raise locked_error(sid, None if holder is None else (holder[0], holder[1]))
                token = uuid.uuid4().hex
                self._held[sid] = token
                self._lost.discard(sid)
                with db.transaction():
                    set_durable(db)
                    db.execute(
                        "INSERT INTO acp_bridge.owners (session_id, host, pid, token, since) "
                        "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session_id) DO UPDATE SET "
                        "host = excluded.host, pid = excluded.pid, token = excluded.token, "
                        "since = excluded.since",
                        (sid, HOST, os.getpid(), token, now_ms()),
                    )
            except psycopg.Error as exc:
                self.unlock(sid)
                raise store_error(self.conninfo, "take the session's lock", exc,
                                  session_id=sid) from None

    def unlock(self, sid: str) -> None:
        with self._mutex:
            self._lost.discard(sid)
            if self._held.pop(sid, None) is None:
                return
            db = self._db
            if db is None or db.closed:
                return  # the lock went with the connection
            try:
                db.execute("SELECT pg_advisory_unlock(%s)", (lock_key(sid),))
            except psycopg.Error:
                db.close()  # drops every lock it held: the others are taken back on use

    @contextlib.contextmanager
    def owned(self, sid: str, *, sync: bool, atomic: bool = True) -> Iterator[psycopg.Connection[Any]]:
        """The connection, for writes to a session this process owns: in one
        transaction (synchronously committed if `sync`), or for one autocommitted
        statement (asynchronous) if neither `sync` nor `atomic`."""
        with self._mutex:
            db = self._live()
            if sid in self._lost or sid not in self._held:
                raise StoreIOError(
                    f"session {sid}: the connection to the store was lost and the session's "
                    "lock could not be taken back (another agent may have opened it); load "
                    "the session again", session_id=sid)
            if not sync and not atomic:
                yield db
                return
            with db.transaction():
                if sync:
                    set_durable(db)
                yield db

    def reader_connection(self) -> psycopg.Connection[Any]:
        """A connection for reading a log (a spare one if healthy, else a new one)."""
        return self._spares.take()

    def give_back(self, db: psycopg.Connection[Any]) -> None:
        """A reading connection, done with: kept for the next load if it is healthy
        and the backend is open."""
        self._spares.give_back(db, keep=self._db is not None)

    # -- sessions ---------------------------------------------------------------------

    def create(self, header: Header) -> PostgresSession:
        sid = validate_session_id(header["id"])
        self._lock(sid)
        try:
            with self.owned(sid, sync=True) as db:
                insert_session(db, header, None)
        except pg_errors.UniqueViolation:
            self.unlock(sid)
            raise SessionExistsError(f"session {sid} already exists", session_id=sid) from None
        except psycopg.Error as exc:
            self.unlock(sid)
            raise store_error(self.conninfo, "create the session", exc, session_id=sid) from None
        except BaseException:
            self.unlock(sid)
            raise
        return PostgresSession(self, sid, next_seq=0, has_title=header.get("title") is not None)

    def copy(self, source_id: str, header: Header, upto: int, closers: Sequence[Encoded], *,
             title: str | None) -> None:
        self._header(validate_session_id(source_id))  # not found: raised here
        try:
            with self._mutex, (db := self._live()).transaction():  # one synchronous transaction
                set_durable(db)
                copy_rows(db, source_id, header, upto, closers, title)
        except pg_errors.UniqueViolation:
            raise SessionExistsError(f"session {header['id']} already exists", session_id=header["id"]) from None
        except psycopg.Error as exc:
            raise store_error(self.conninfo, "fork the session", exc, session_id=header["id"]) from None

    def publish(self, header: Header, records: Sequence[Encoded], *, title: str | None,
                after: int | None = None) -> None:
        # One synchronous transaction, as a fork's copy; an append under the owner lock,
        # finding the session holding exactly `after` events.
        sid = validate_session_id(header["id"])
        if after is not None:
            self._header(sid)  # not found: say so before trying the lock
            self._lock(sid)
        try:
            with self._mutex, (db := self._live()).transaction():
                set_durable(db)
                if after is None:
                    insert_session(db, header, title)
                else:
                    row = db.execute("SELECT count(*) FROM acp_bridge.events WHERE session_id = %s",
                                     (sid,)).fetchone()
                    found = int(row[0]) if row else 0
                    if found != after:
                        raise changed_while_imported(sid, found, after)
                insert_events(db, sid, records)
        except pg_errors.UniqueViolation:
            raise SessionExistsError(f"session {sid} already exists", session_id=sid) from None
        except psycopg.Error as exc:
            raise store_error(self.conninfo, "import the session", exc, session_id=sid) from None
        finally:
            if after is not None:
                self.unlock(sid)

    def open(self, session_id: str) -> tuple[BackendSession, StoredLog]:
        return read_whole(self.open_stream(session_id))

    def open_stream(self, session_id: str) -> OwnedPostgresStream:
        sid = validate_session_id(session_id)
        self._header(sid)  # not found: say so before trying the lock
        self._lock(sid)
        try:
            header, has_title = self._header(sid)  # again: deleted while we took the lock?
            return OwnedPostgresStream(self, header, has_title=has_title)
        except BaseException:
            self.unlock(sid)
            raise

    def read_stream(self, session_id: str) -> PostgresStream:
        header, _ = self._header(validate_session_id(session_id))
        return PostgresStream(self.conninfo, header)

    def _header(self, sid: str) -> tuple[Header, bool]:
        """The stored header and whether the row has a title."""
        row = self._query("SELECT header, title FROM acp_bridge.sessions WHERE id = %s", (sid,), sid)
        if not row:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        return parse_header(sid, row[0][0], "the sessions row"), row[0][1] is not None

    def _query(self, query: str, params: tuple[Any, ...], sid: str | None = None) -> list[Any]:
        with self._mutex:
            try:
                return self._live().execute(query, params).fetchall()
            except psycopg.Error as exc:
                raise store_error(self.conninfo, "read the store", exc, session_id=sid) from None

    def list_sessions(self) -> list[SessionSummary]:
        import orjson

        rows = self._query(
            f"SELECT s.id, s.cwd, s.title, {UPDATED_AT}, CASE WHEN {nul_free('s.header')} THEN "
            "json_build_object('additionalDirectories', s.header -> 'additionalDirectories') ELSE s.header END "
            "FROM acp_bridge.sessions s", ())
        out: list[SessionSummary] = []
        for sid, cwd, title, updated_at, extra in rows:
            summary: SessionSummary = {"id": sid, "cwd": cwd, "title": title,
                                       "updatedAt": int(updated_at)}
            dirs = orjson.loads(extra).get("additionalDirectories")
            if dirs:
                summary["additionalDirectories"] = list(dirs)
            out.append(summary)
        return out

    def delete(self, session_id: str) -> None:
        sid = validate_session_id(session_id)
        self._header(sid)
        self._lock(sid)
        try:
            with self.owned(sid, sync=True) as db:
                for table in ("events", "torn_events", "owners"):
                    db.execute(f"DELETE FROM acp_bridge.{table} WHERE session_id = %s", (sid,))
                db.execute("DELETE FROM acp_bridge.sessions WHERE id = %s", (sid,))
        except psycopg.Error as exc:
            raise store_error(self.conninfo, "delete the session", exc, session_id=sid) from None
        finally:
            self.unlock(sid)

    def reader(self) -> PostgresReader:
        return PostgresReader(self.conninfo)

    def close(self) -> None:
        with self._mutex:
            self._spares.close()
            if self._db is not None:
                self._db.close()  # the server drops the advisory locks with the connection
            self._db = None
            self._held.clear()
