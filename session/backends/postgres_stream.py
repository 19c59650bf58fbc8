"""A PostgreSQL session's event rows read back as a stream of records (`PostgresStream`,
see session.backends.base.ReadStream), in one snapshot, a block at a time."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn

import psycopg

from session.backends.event_rows import row_events
from session.backends.postgres_connect import Spares, connect, store_error
from session.events import Event, Header
from session.scan import Damage


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

    def __init__(self, conninfo: str, header: Header, conn: psycopg.Connection[Any] | None = None,
                 start: int = 0, spares: Spares | None = None) -> None:
        self.header = header
        self.conninfo = conninfo
        self._spares = spares  # where its connection comes from and goes back to (a reader's)
        self._start = start  # the seq of the first row read (a read from `At`)
        self._db = conn
        self._began = False
        self._cursor: psycopg.ServerCursor[Any] | None = None

    def connection(self) -> psycopg.Connection[Any]:
        """The stream's own connection, in its snapshot's transaction (begun on first use)."""
        if self._db is None:
            self._db = self._spares.take() if self._spares is not None else connect(self.conninfo, purpose="reader")
        if not self._began:  # explicit: the connection is in autocommit mode
            self._db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._began = True
        return self._db

    def _fail(self, what: str, exc: psycopg.Error) -> NoReturn:
        raise store_error(self.conninfo, what, exc, session_id=self.header["id"]) from None

    def blocks(self) -> Iterator[list[Event | Damage]]:
        sid = self.header["id"]
        try:
            cursor = self._cursor = self.connection().cursor(name=f"acp_bridge_load_{sid[:8]}", binary=True)
        except psycopg.Error as exc:
            self._fail("read the log", exc)
        try:
            cursor.execute("SELECT seq, type, time, data FROM acp_bridge.events "
                           "WHERE session_id = %s AND seq >= %s ORDER BY seq", (sid, self._start))
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
            row = self.connection().execute(
                "SELECT seq FROM acp_bridge.events WHERE session_id = %s AND seq >= %s ORDER BY seq "
                "OFFSET %s LIMIT 1", (self.header["id"], self._start, index - self._start)
            ).fetchone()
        except psycopg.Error as exc:
            self._fail("read the log", exc)
        return {"seq": row[0] if row is not None else index}

    def size_from(self, index: int) -> int:
        try:
            row = self.connection().execute(
                "SELECT coalesce(sum(octet_length(data::text)), 0) FROM (SELECT data FROM "
                "acp_bridge.events WHERE session_id = %s AND seq >= %s ORDER BY seq OFFSET %s) t",
                (self.header["id"], self._start, index - self._start),
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
        """Let go of the connection: back to the reader's spares (for the next log of a
        list), else closed (a subclass may keep it for the next load)."""
        if self._spares is not None:
            self._spares.give_back(db)
        else:
            db.close()
