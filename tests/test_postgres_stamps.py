"""A PostgreSQL store's stamps from `sessions.last_seq`/`last_time` (schema version 2:
session/backends/postgres_schema.py), kept by a trigger on `events` whoever writes
(an append, a COPY of a batch, a rollback's or a repair's delete, a fork's copy, a
deletion), so that `PostgresReader.stamps()` is one scan of `sessions` instead of an
index seek per session into the events; and a store of version 1, read as it is, then
brought to 2 by the first agent that opens it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.pg_server import required

if not required():
    pytest.importorskip("psycopg", reason="!!! psycopg is not installed: the PostgreSQL backend is NOT tested")
import psycopg

from session import SessionStore, open_backend, open_reader
from session.backends.postgres_stream import PostgresStream
from tests.support.logs import Script, write
from tests.test_sessions_cli import cli

TRUTH = ("SELECT s.id, coalesce(e.seq, -1), greatest(s.updated_at, coalesce(e.time, 0)) FROM acp_bridge.sessions s "
         "LEFT JOIN LATERAL (SELECT seq, time FROM acp_bridge.events e WHERE e.session_id = s.id "
         "ORDER BY seq DESC LIMIT 1) e ON true")


def sql(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as db:
        cursor = db.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def truth(dsn: str) -> dict[str, tuple[int, int]]:
    """Every session's (last seq, updatedAt) from its events themselves."""
    return {sid: (int(seq), int(updated)) for sid, seq, updated in sql(dsn, TRUTH)}


def stamps(dsn: str) -> dict[str, tuple[int, ...]]:
    reader = open_reader("postgres", dsn)
    try:
        return reader.stamps()
    finally:
        reader.close()


def test_every_write_of_events_keeps_the_sessions_last_event(pg_dsn: str) -> None:
    store = SessionStore(open_backend("postgres", pg_dsn))
    empty = store.create(cwd="/w")  # no event: -1, its creation time
    empty.close()
    log = store.create(cwd="/w")
    write(log, Script().text_turn("one", "a b c"))  # batches of one event and COPYs of several
    log.flush()
    assert stamps(pg_dsn) == truth(pg_dsn)
    assert stamps(pg_dsn)[log.id][0] == log.durable_seq - 1 and stamps(pg_dsn)[empty.id][0] == -1
    write(log, Script(first_turn=2).start_turn("two").start_step().chunk("x"))
    log.flush()
    assert stamps(pg_dsn) == truth(pg_dsn)
    log.close()
    sql(pg_dsn, "DELETE FROM acp_bridge.events WHERE session_id = %s AND seq >= %s", log.id, 8)  # a cut
    assert stamps(pg_dsn) == truth(pg_dsn) and stamps(pg_dsn)[log.id][0] == 7
    sql(pg_dsn, "DELETE FROM acp_bridge.events WHERE session_id = %s", log.id)  # every event
    assert stamps(pg_dsn)[log.id][0] == -1 and stamps(pg_dsn) == truth(pg_dsn)
    again = store.create(cwd="/w")
    write(again, Script().text_turn("three"))
    again.close()
    store.close()
    result = cli("--store", pg_dsn, "--backend", "postgres", "fork", again.id)  # INSERT ... SELECT of its rows
    assert result.code == 0, result.err
    fork = result.raw.decode().split()[0]
    assert fork in stamps(pg_dsn) and stamps(pg_dsn) == truth(pg_dsn)
    plan = sql(pg_dsn, "EXPLAIN SELECT s.id, coalesce(s.last_seq, -1) FROM acp_bridge.sessions s")
    assert "events" not in " ".join(row[0] for row in plan)


def test_a_version_1_store_is_read_as_it_is_then_brought_to_3(pg_dsn: str) -> None:
    store = SessionStore(open_backend("postgres", pg_dsn))
    ids = []
    for n in range(3):
        log = store.create(cwd="/w")
        write(log, Script().text_turn(f"prompt {n}"))
        log.close()
        ids.append(log.id)
    store.close()
    expected = truth(pg_dsn)
    listed = cli("--store", pg_dsn, "--backend", "postgres", "list", "--json")
    assert listed.code == 0, listed.err
    # The store as version 1 made it: no columns, no trigger.
    sql(pg_dsn, "DROP TRIGGER events_appended ON acp_bridge.events; DROP TRIGGER events_deleted ON acp_bridge.events; "
        "DROP TRIGGER events_changed ON acp_bridge.events; DROP FUNCTION acp_bridge.events_appended(); "
        "DROP FUNCTION acp_bridge.events_deleted(); DROP FUNCTION acp_bridge.events_changed(); "
        "ALTER TABLE acp_bridge.sessions DROP COLUMN last_seq, DROP COLUMN last_time, DROP COLUMN checked_seq; "
        "UPDATE acp_bridge.schema_version SET version = 1")
    assert stamps(pg_dsn) == expected  # a reader reads version 1, writing nothing
    again = cli("--store", pg_dsn, "--backend", "postgres", "list", "--json")
    assert (again.code, again.raw) == (0, listed.raw)
    assert sql(pg_dsn, "SELECT version FROM acp_bridge.schema_version") == [(1,)]
    open_backend("postgres", pg_dsn).close()  # an agent brings it to 3 (by way of 2)
    assert sql(pg_dsn, "SELECT version FROM acp_bridge.schema_version") == [(3,)]
    assert sql(pg_dsn, "SELECT id, last_seq FROM acp_bridge.sessions ORDER BY id") == sorted(
        (sid, seq) for sid, (seq, _) in expected.items())
    assert stamps(pg_dsn) == expected
    store = SessionStore(open_backend("postgres", pg_dsn))  # and the trigger keeps them from now on
    log = store.load(ids[0]).log
    write(log, Script(first_turn=2).text_turn("more"))
    log.close()
    store.close()
    assert stamps(pg_dsn) == truth(pg_dsn) != expected
    # Written before version 3, the sessions are not known checked until an agent loads
    # them (ids[0]: loaded, and written on since): the others' logs are read by `list`.
    assert dict(sql(pg_dsn, "SELECT id, checked_seq = last_seq FROM acp_bridge.sessions")) == {
        ids[0]: True, ids[1]: None, ids[2]: None}


def backend_pid(stream: object) -> int:
    assert isinstance(stream, PostgresStream)
    return stream.connection().info.backend_pid


def test_a_reader_reads_one_log_after_another_on_one_connection(pg_dsn: str) -> None:
    # `sessions list` without an index reads its page's logs one after another: each
    # used to open (and set up) a connection of its own, most of 1.41 s for 50 logs.
    store = SessionStore(open_backend("postgres", pg_dsn))
    ids = []
    for word in ("one", "two", "three"):
        log = store.create(cwd="/w")
        write(log, Script().text_turn(word, "a b"))
        log.close()
        ids.append(log.id)
    store.close()
    reader = open_reader("postgres", pg_dsn)
    try:
        pids, seen = [], []
        for sid in ids:
            stream = reader.stream(sid)
            try:
                seen.append(sum(len(block) for block in stream.blocks()))
                pids.append(backend_pid(stream))
            finally:
                stream.close()
        assert seen == [seen[0]] * 3 and seen[0] > 0
        assert len(set(pids)) == 1, pids  # the one connection, given back after each log
        held = reader.stream(ids[0])
        other = reader.stream(ids[1])  # two open at once: each its own connection
        try:
            assert backend_pid(held) != backend_pid(other)
        finally:
            held.close()
            other.close()
    finally:
        reader.close()
    left = sql(pg_dsn, "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s", "acp-bridge reader%")
    assert left == [(0,)]  # closed with the reader
