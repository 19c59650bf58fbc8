"""The PostgreSQL backend's owned session: appends (one statement for one event, COPY
for several; asynchronous commits between durability points, synchronous at them),
the rollback to the durable point after a failure, the repair, and the owned read
stream a load starts from. The connection, the locks and the sessions' table are in
session.backends.postgres.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol

import orjson
import psycopg

from session.backends.base import Encoded, changed_while_forked, check_batch_seqs
from session.backends.postgres_connect import store_error
from session.backends.postgres_stream import PostgresStream
from session.errors import StoreIOError
from session.events import Header
from session.log import now_ms
from session.scan import TornTail
from session.titles import first_prompt_title, last_set_title

INSERT_ONE = ("INSERT INTO acp_bridge.events (session_id, seq, type, time, data) "
              "VALUES (%s, %s, %s, %s, %s::json)")
# Several events go in by COPY: measured 4-5x faster than one INSERT over unnest()ed
# arrays for a batch of 512 streamed chunks.
COPY_EVENTS = "COPY acp_bridge.events (session_id, seq, type, time, data) FROM STDIN"




class Connections(Protocol):
    """What a session needs of its backend (session.backends.postgres.PostgresBackend)."""

    conninfo: str
    where: str
    generation: int

    def owned(self, sid: str, *, sync: bool,
              atomic: bool = True) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]: ...

    def unlock(self, sid: str) -> None: ...

    def reader_connection(self) -> psycopg.Connection[Any]: ...

    def give_back(self, db: psycopg.Connection[Any]) -> None: ...


class PostgresSession:
    def __init__(self, backend: Connections, session_id: str, next_seq: int, has_title: bool) -> None:
        self.session_id = session_id
        self._backend = backend
        self._open = True
        self._next_seq = next_seq
        self._durable_seq = next_seq
        self._stale = False  # rows past the durable seq may remain after a failure
        self._has_title = has_title
        self._generation = backend.generation

    def write(self, batch: Sequence[Encoded], *, sync: bool) -> None:
        check_batch_seqs(self.session_id, batch, self._next_seq)
        sid = self.session_id
        named = last_set_title(item.event for item in batch)  # a `/title`: replaces the title
        title = None if self._has_title or named is not None else _title(batch)
        atomic = self._stale or title is not None or named is not None or len(batch) != 1
        try:
            with self._backend.owned(sid, sync=sync, atomic=atomic) as db:
                if self._generation != self._backend.generation:
                    self._check_stored(db)
                if self._stale:
                    db.execute("DELETE FROM acp_bridge.events WHERE session_id = %s AND seq >= %s",
                               (sid, self._next_seq))
                self._insert(db, batch)
                if named is not None:
                    db.execute("UPDATE acp_bridge.sessions SET title = %s WHERE id = %s",
                               (text_column(named), sid))
                elif title is not None:
                    db.execute("UPDATE acp_bridge.sessions SET title = coalesce(title, %s) "
                               "WHERE id = %s", (text_column(title), sid))
                if sync and not batch:  # an xid makes the commit flush the WAL, and so
                    db.execute("SELECT pg_current_xact_id()")  # every earlier commit
            self._stale = False
        except (psycopg.Error, StoreIOError) as exc:
            # Back to the last durable point, as the live log is: rows committed since
            # (streamed batches; a commit whose answer was lost) are deleted now, or by
            # the next write, so no event the client is told was rolled back stays.
            self._next_seq, self._stale = self._durable_seq, True
            self._drop_stale()
            what = "sync the log" if sync else "write the log"
            if isinstance(exc, StoreIOError):
                raise StoreIOError(f"{exc.message}; rolled back to seq {self._durable_seq}",
                                   session_id=sid, durableSeq=self._durable_seq) from None
            raise store_error(self._backend.conninfo, what, exc, session_id=sid,
                              durableSeq=self._durable_seq) from None
        if title is not None or named is not None:
            self._has_title = True
        self._next_seq += len(batch)
        if sync:
            self._durable_seq = self._next_seq

    def _check_stored(self, db: psycopg.Connection[Any]) -> None:
        """After a reconnection: the store must hold exactly what this session wrote.
        A server that crashed may have lost the last asynchronous commits; writing on
        would leave a gap, so the write fails and the log rolls back to its durable
        point (all of which the server kept: those commits were synchronous)."""
        row = db.execute("SELECT coalesce(max(seq) + 1, 0) FROM acp_bridge.events "
                         "WHERE session_id = %s", (self.session_id,)).fetchone()
        stored = row[0] if row is not None else 0
        # More than written is expected only after a failure (`_stale`: deleted next).
        if stored < self._next_seq or (stored > self._next_seq and not self._stale):
            raise StoreIOError(
                f"session {self.session_id}: the store holds events up to seq {stored - 1} "
                f"where {self._next_seq - 1} were written: the database lost its latest "
                "asynchronous commits (a server crash)", session_id=self.session_id)
        self._generation = self._backend.generation

    def _drop_stale(self) -> None:
        """Delete the rows past the durable seq a failed write left (best effort)."""
        try:
            with self._backend.owned(self.session_id, sync=True) as db:
                db.execute("DELETE FROM acp_bridge.events WHERE session_id = %s AND seq >= %s",
                           (self.session_id, self._durable_seq))
        except (psycopg.Error, StoreIOError):
            return
        self._stale = False

    def _insert(self, db: psycopg.Connection[Any], batch: Sequence[Encoded]) -> None:
        insert_events(db, self.session_id, batch)

    def repair(self, torn: TornTail | None, closers: Sequence[Encoded]) -> str | None:
        sid = self.session_id
        kept = None
        try:
            with self._backend.owned(sid, sync=True) as db:
                if torn is not None:
                    cut = torn.where["seq"]
                    db.execute(
                        "INSERT INTO acp_bridge.torn_events SELECT session_id, seq, type, time, "
                        "data, %s FROM acp_bridge.events WHERE session_id = %s AND seq >= %s",
                        (now_ms(), sid, cut))
                    db.execute("DELETE FROM acp_bridge.events WHERE session_id = %s AND seq >= %s",
                               (sid, cut))
                    kept = f"{self._backend.where} (table acp_bridge.torn_events)"
                self._insert(db, closers)
        except psycopg.Error as exc:
            raise store_error(self._backend.conninfo, "repair the log", exc, session_id=sid) from None
        self._next_seq = self._durable_seq = (torn.index if torn else self._next_seq) + len(closers)
        return kept

    def close(self) -> None:
        if self._open:
            self._open = False
            if self._stale:
                self._drop_stale()
            self._backend.unlock(self.session_id)


class OwnedPostgresStream(PostgresStream):
    """A session's rows read by its owner (`PostgresBackend.open_stream` took the lock),
    through a reading connection the backend keeps for the next load."""

    def __init__(self, backend: Connections, header: Header, *, has_title: bool) -> None:
        super().__init__(backend.conninfo, header, backend.reader_connection())
        self._backend = backend
        self._has_title = has_title
        self._owned = True

    def _done(self, db: psycopg.Connection[Any]) -> None:
        self._backend.give_back(db)

    def session(self, next_seq: int, torn: TornTail | None) -> PostgresSession:
        if not self._owned:
            raise RuntimeError("the stream was released")
        self._owned = False
        sid = self.header["id"]
        # The load checked every row before `next_seq`: a session written before schema
        # version 3, or touched by another writer, is known checked again (so `list` may
        # read its facts from its outline: postgres_schema.CHECKED_WRITER). Only a
        # shortcut for `list`: a failure here is the next write's to meet.
        with contextlib.suppress(psycopg.Error, StoreIOError), \
                self._backend.owned(sid, sync=False, atomic=False) as db:
            db.execute("UPDATE acp_bridge.sessions SET checked_seq = %s WHERE id = %s "
                       "AND checked_seq IS DISTINCT FROM %s", (next_seq - 1, sid, next_seq - 1))
        return PostgresSession(self._backend, sid, next_seq=next_seq, has_title=self._has_title)

    def release(self) -> None:
        if self._owned:
            self._owned = False
            self._backend.unlock(self.header["id"])


def insert_events(db: psycopg.Connection[Any], sid: str, batch: Sequence[Encoded]) -> None:
    if len(batch) == 1:
        e = batch[0]
        db.execute(INSERT_ONE, (sid, e.event["seq"], e.event["type"], e.event["time"], e.data_json.decode()))
    elif batch:
        with db.cursor().copy(COPY_EVENTS) as copy:
            for e in batch:
                event = e.event
                copy.write_row((sid, event["seq"], event["type"], event["time"], e.data_json.decode()))


def insert_session(db: psycopg.Connection[Any], header: Header, title: str | None) -> None:
    db.execute("INSERT INTO acp_bridge.sessions (id, header, cwd, title, created_at, updated_at, checked_seq) "
               "VALUES (%s, %s::json, %s, %s, %s, %s, -1)",
               (header["id"], json_text(header), text_column(header["cwd"]),
                text_column(title if title is not None else header.get("title")),
                header["createdAt"], header["createdAt"]))


def copy_rows(db: psycopg.Connection[Any], source_id: str, header: Header, upto: int,
              closers: Sequence[Encoded], title: str | None) -> None:
    """A fork's rows, in the caller's transaction: its sessions row, the first `upto`
    events of `source_id` copied inside the database (their json as stored), `closers`."""
    insert_session(db, header, title)
    copied = db.execute("INSERT INTO acp_bridge.events (session_id, seq, type, time, data) "
                        "SELECT %s, seq, type, time, data FROM acp_bridge.events "
                        "WHERE session_id = %s AND seq < %s", (header["id"], source_id, upto)).rowcount
    if copied != upto:
        raise changed_while_forked(source_id, copied, upto)
    insert_events(db, header["id"], closers)


def _title(batch: Sequence[Encoded]) -> str | None:
    return next(filter(None, (first_prompt_title(item.event) for item in batch)), None)


def text_column(value: str | None) -> str | None:
    """A string for a text column, which cannot hold NUL: shown as U+FFFD instead (the
    header and the events, json, keep it escaped and exact)."""
    return None if value is None else value.replace("\x00", "\ufffd")


def json_text(value: Any) -> str:
    return orjson.dumps(value).decode()
