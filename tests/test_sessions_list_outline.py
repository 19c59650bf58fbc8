"""`sessions list` on PostgreSQL from the store's outlines (`PostgresReader.outlines`,
acp_bridge/cli/sessions/rows.py `Outlines`), with no search index: the same bytes as
from the logs, for the sessions whose every row an agent checked as it wrote it (or
that an agent's load checked since: `sessions.checked_seq`, schema version 3); any
other write of events (an INSERT, UPDATE or DELETE by hand) makes `list` read that
session's log whole again, and a load by an agent vouches for it again.

Whether a row came from the outline is seen as in test_sessions_list_index.py: a log
damaged behind the triggers' back (with them disabled) is still listed from its
outline; read from its log, it is listed as damaged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.pg_server import required

if not required():
    pytest.importorskip("psycopg", reason="!!! psycopg is not installed: the PostgreSQL backend is NOT tested")
import psycopg

from session import SessionStore, open_backend
from session.backends.postgres_schema import CHECKED_WRITER
from tests.support.logs import Script, write
from tests.test_sessions_list_index import list_both, write_five

KIND = "postgres"


def sql(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as db:
        cursor = db.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def checked(dsn: str) -> dict[str, bool | None]:
    """Per session: whether its store vouches for every row (checked_seq is its last seq)."""
    return dict(sql(dsn, "SELECT id, checked_seq = coalesce(last_seq, -1) FROM acp_bridge.sessions"))


def rows(dsn: str) -> dict[str, dict[str, Any]]:
    return {row["id"]: row for row in orjson.loads(list_both(KIND, dsn)[0])}


def behind_the_triggers(dsn: str, query: str, *params: Any) -> None:
    sql(dsn, "ALTER TABLE acp_bridge.events DISABLE TRIGGER USER")
    try:
        sql(dsn, query, *params)
    finally:
        sql(dsn, "ALTER TABLE acp_bridge.events ENABLE TRIGGER USER")


def tamper(dsn: str, sid: str, seq: int = 1, *, hidden: bool = False) -> None:
    """An event in the middle of the log made one a load refuses."""
    query = "UPDATE acp_bridge.events SET data = '{\"turn\": 99}' WHERE session_id = %s AND seq = %s"
    if hidden:
        behind_the_triggers(dsn, query, sid, seq)
    else:
        sql(dsn, query, sid, seq)


def test_the_list_from_outlines_is_the_list_from_the_logs(pg_dsn: str, tmp_path: Path) -> None:
    write_five(KIND, pg_dsn, tmp_path)
    assert set(checked(pg_dsn).values()) == {True}  # every row written by the agent's store
    cwd = str(tmp_path / "work-a")
    outlined = [list_both(KIND, pg_dsn), list_both(KIND, pg_dsn, "-n", "2"), list_both(KIND, pg_dsn, "--cwd", cwd)]
    sql(pg_dsn, "UPDATE acp_bridge.sessions SET checked_seq = NULL")  # nothing vouched for: the logs read
    assert [list_both(KIND, pg_dsn), list_both(KIND, pg_dsn, "-n", "2"), list_both(KIND, pg_dsn, "--cwd", cwd)] == outlined
    listed = orjson.loads(outlined[0][0])
    assert {row["status"] for row in listed} >= {"error", "interrupted", "completed", None}
    assert next(row for row in listed if row["title"] == "reasoning first")["tokens"] == {
        "inputTokens": 11, "outputTokens": 3, "cacheReadTokens": 4, "reasoningTokens": 9}
    # ...and those rows were the outlines': vouched for again (by hand, here) and
    # damaged behind the triggers' back, a closed session is listed as before...
    sql(pg_dsn, "UPDATE acp_bridge.sessions SET checked_seq = coalesce(last_seq, -1)")
    closed = next(row["id"] for row in listed if row["status"] not in ("interrupted", None))
    tamper(pg_dsn, closed, hidden=True)
    assert list_both(KIND, pg_dsn) == outlined[0]
    # ...while its log says it is damaged.
    sql(pg_dsn, "UPDATE acp_bridge.sessions SET checked_seq = NULL WHERE id = %s", closed)
    assert rows(pg_dsn)[closed]["status"] == "damaged"


@pytest.mark.parametrize("change", ["update", "delete", "insert"])
def test_a_write_of_events_by_another_hand_makes_list_read_the_log(pg_dsn: str, change: str) -> None:
    store = SessionStore(open_backend(KIND, pg_dsn))
    log = store.create(cwd="/w")
    write(log, Script().text_turn("one", "a b").text_turn("two", "c"))
    log.close()
    sid = log.id
    before = rows(pg_dsn)[sid]
    assert before["status"] == "completed" and checked(pg_dsn) == {sid: True}
    (seq, etype, data), = sql(pg_dsn, "SELECT seq, type, data::text FROM acp_bridge.events "
                                      "WHERE session_id = %s AND seq = 1", sid)
    if change == "update":
        tamper(pg_dsn, sid)
    elif change == "delete":  # a gap in the seqs
        sql(pg_dsn, "DELETE FROM acp_bridge.events WHERE session_id = %s AND seq = 1", sid)
    else:  # a turn/end after the last turn ended
        sql(pg_dsn, "INSERT INTO acp_bridge.events SELECT session_id, seq + 1, type, time, data "
                    "FROM acp_bridge.events WHERE session_id = %s AND seq = (SELECT max(seq) "
                    "FROM acp_bridge.events WHERE session_id = %s)", sid, sid)
    assert checked(pg_dsn) == {sid: None}
    assert rows(pg_dsn)[sid]["status"] == "damaged"  # from its log, which says why
    # Put right by hand, the session is listed from its log (the store cannot vouch for
    # it) until an agent loads it: its load checks the log whole.
    if change == "update":
        sql(pg_dsn, "UPDATE acp_bridge.events SET data = %s::json WHERE session_id = %s AND seq = %s",
            data, sid, seq)
    elif change == "delete":
        sql(pg_dsn, "INSERT INTO acp_bridge.events (session_id, seq, type, time, data) "
                    "SELECT %s, %s, %s, 0, %s::json", sid, seq, etype, data)
        sql(pg_dsn, "UPDATE acp_bridge.events e SET time = p.time FROM acp_bridge.events p "
                    "WHERE e.session_id = %s AND e.seq = 1 AND p.session_id = e.session_id AND p.seq = 0", sid)
    else:
        sql(pg_dsn, "DELETE FROM acp_bridge.events WHERE session_id = %s AND seq = (SELECT max(seq) "
                    "FROM acp_bridge.events WHERE session_id = %s)", sid, sid)
    assert checked(pg_dsn) == {sid: None}
    again = rows(pg_dsn)[sid]
    assert again["status"] == "completed"
    store.load(sid).log.close()
    assert checked(pg_dsn) == {sid: True}
    assert rows(pg_dsn)[sid] == again
    store.close()


def test_only_a_checked_writer_moves_checked_seq_on(pg_dsn: str) -> None:
    """The triggers' rule, table by table: the agent's own writes (its connections set
    CHECKED_WRITER) keep `checked_seq` at the last seq while it was there; anyone
    else's leave it unknown, and the agent's later appends do not vouch for them."""
    store = SessionStore(open_backend(KIND, pg_dsn))
    empty = store.create(cwd="/w")
    empty.close()
    log = store.create(cwd="/w")
    write(log, Script().text_turn("one", "a b c"))
    log.flush()
    assert sql(pg_dsn, "SELECT id, checked_seq FROM acp_bridge.sessions ORDER BY id") == sorted(
        [(empty.id, -1), (log.id, log.durable_seq - 1)])

    def as_writer(query: str, *params: Any) -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as db:
            db.execute("SELECT set_config(%s, 'on', false)", (CHECKED_WRITER,))
            db.execute(query, params)

    last = log.durable_seq - 1
    as_writer("DELETE FROM acp_bridge.events WHERE session_id = %s AND seq >= %s", log.id, last - 1)  # a cut
    assert checked(pg_dsn)[log.id] is True
    assert sql(pg_dsn, "SELECT checked_seq FROM acp_bridge.sessions WHERE id = %s", log.id) == [(last - 2,)]
    as_writer("DELETE FROM acp_bridge.events WHERE session_id = %s", log.id)  # every event
    assert sql(pg_dsn, "SELECT checked_seq, last_seq FROM acp_bridge.sessions WHERE id = %s", log.id) == [(-1, None)]
    log.close()
    other = store.create(cwd="/w")
    write(other, Script().text_turn("two"))
    other.close()
    sql(pg_dsn, "UPDATE acp_bridge.events SET time = time WHERE session_id = %s AND seq = 0", other.id)
    assert checked(pg_dsn)[other.id] is None
    as_writer("INSERT INTO acp_bridge.events SELECT session_id, seq + 100, type, time, data "
              "FROM acp_bridge.events WHERE session_id = %s AND seq = 0", other.id)
    assert checked(pg_dsn)[other.id] is None  # what came before is still unknown
    as_writer("DELETE FROM acp_bridge.events WHERE session_id = %s AND seq >= 100", other.id)
    assert checked(pg_dsn)[other.id] is None
    store.close()


def test_a_live_owner_is_listed_from_one_query_of_the_locks(pg_dsn: str) -> None:
    """The owners of a page's sessions come from one query (`PostgresReader.owners`),
    the same as one query a session (`owner`): live, with the holder's pid, or none."""
    import os

    from session import open_reader

    store = SessionStore(open_backend(KIND, pg_dsn))
    held = store.create(cwd="/w")
    write(held, Script().text_turn("held", "yes"))
    held.flush()
    free = store.create(cwd="/w")
    write(free, Script().text_turn("free", "no"))
    free.close()
    try:
        listed = rows(pg_dsn)
        assert (listed[held.id]["live"], listed[held.id]["ownerPid"]) == (True, os.getpid())
        assert listed[free.id]["live"] is False and "ownerPid" not in listed[free.id]
        reader = open_reader(KIND, pg_dsn)
        try:
            ids = [held.id, free.id]
            assert reader.owners(ids) == {sid: reader.owner(sid) for sid in ids}
        finally:
            reader.close()
        sql(pg_dsn, "UPDATE acp_bridge.sessions SET checked_seq = NULL")
        assert rows(pg_dsn) == listed  # from the logs, one owner query each
    finally:
        held.close()
        store.close()


def test_a_version_2_store_is_listed_from_its_logs_then_vouched_for_as_it_is_loaded(pg_dsn: str) -> None:
    store = SessionStore(open_backend(KIND, pg_dsn))
    ids = []
    for n in range(2):
        log = store.create(cwd="/w")
        write(log, Script().text_turn(f"prompt {n}", "ok"))
        log.close()
        ids.append(log.id)
    store.close()
    listed = list_both(KIND, pg_dsn)
    sql(pg_dsn, "DROP TRIGGER events_changed ON acp_bridge.events; DROP FUNCTION acp_bridge.events_changed(); "
        "ALTER TABLE acp_bridge.sessions DROP COLUMN checked_seq; UPDATE acp_bridge.schema_version SET version = 2")
    assert list_both(KIND, pg_dsn) == listed  # read as version 2: no outline, the logs
    store = SessionStore(open_backend(KIND, pg_dsn))  # brought to 3: nothing vouched for yet
    assert sql(pg_dsn, "SELECT version FROM acp_bridge.schema_version") == [(3,)]
    assert checked(pg_dsn) == {ids[0]: None, ids[1]: None}
    assert list_both(KIND, pg_dsn) == listed
    store.load(ids[0]).log.close()
    assert checked(pg_dsn) == {ids[0]: True, ids[1]: None}
    assert list_both(KIND, pg_dsn) == listed
    store.close()
