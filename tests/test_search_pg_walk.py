"""A PostgreSQL search of a query many texts match walks the turns newest first
(session.search.pg: WALK_FROM, the planner's other ways off) and finds exactly what the
planner's own plan finds; every search is planned for its own values, never prepared
(a prepared statement's generic plan cannot tell a rare word from a common one: the
served phrase with filters took 270 ms p50 on 10,000 sessions once psycopg prepared
it, at its sixth run)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import session.search.pg as pg
from acp_bridge.cli.sessions.indexer import catch_up, open_index
from acp_bridge.cli.sessions.source import Source
from session.search.base import Filters, Hit
from session.search.query import parse_query, tsquery
from tests.support.logs import Script
from tests.support.search_store import DAY0, add_session

pytestmark = pytest.mark.integration
HOUR = 3_600_000


@pytest.fixture
def index(pg_dsn: str) -> Iterator[Any]:
    for i in range(16):
        s = Script().text_turn(f"connection refused on port {i}", "the connection was refused")
        s.text_turn("refused again, the connection", "a connection refused twice" if i % 2 else "fine now")
        add_session(pg_dsn, "postgres", f"/work/p{i % 4}", s, DAY0 + i * HOUR)
    idx, source = open_index("postgres", pg_dsn, None), Source("postgres", pg_dsn)
    try:
        catch_up(source, idx)
    finally:
        source.close()
    yield idx
    idx.close()


def shown(hits: list[Hit]) -> list[tuple[str, int, str, int, str]]:
    return [(h.session_id, h.turn, h.kind, h.doc_id, h.snippet) for h in hits]


CASES = [
    ("connection", Filters()),
    ('"connection refused"', Filters()),
    ('"connection refused"', Filters(cwds=("/work/p1",), ended=("completed",), since=DAY0 + 3 * HOUR)),
    ("refused", Filters(cwds=("/work/p2", "/work/p3"))),
    ("twice OR port", Filters(until=DAY0 + 9 * HOUR)),
    ('"refused again"', Filters(kinds=("prompt",))),
    ("nowhere", Filters()),
]


def test_a_walk_finds_what_the_planner_finds(index: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table: each query, filters and limit searched walking and not (one store)."""
    for text, filters in CASES:
        for limit in (1, 5, 50):
            query = parse_query(text)
            monkeypatch.setattr(pg, "WALK_FROM", 1)  # every query with a match walks
            walked = index.search(query, filters, limit)
            monkeypatch.setattr(pg, "WALK_FROM", 1 << 30)  # none does
            planned = index.search(query, filters, limit)
            assert shown(walked) == shown(planned), (text, filters, limit)
            if text != "nowhere":
                assert walked, (text, filters, limit)


def test_searches_are_not_prepared(index: Any) -> None:
    query = parse_query('"connection refused"')
    for _ in range(8):  # psycopg prepares a statement at its sixth run, by default
        assert index.search(query, Filters(cwds=("/work/p1",)), 5)
    db: psycopg.Connection[Any] = index._conn()
    prepared = [row[0] for row in db.execute("SELECT statement FROM pg_prepared_statements")]
    assert prepared and not [sql for sql in prepared if "tsquery" in sql]  # the lesser ones are


def test_the_words_of_a_phrase() -> None:
    query = parse_query('"connection refused" -timeout port*')
    assert tsquery(query) == "(('connection' <-> 'refused') & !'timeout' & 'port':*)"
    assert tsquery(query, near=" & ") == "(('connection' & 'refused') & !'timeout' & 'port':*)"


def test_the_changes_found_in_the_database_are_the_stamps_compared(pg_dsn: str, index: Any) -> None:
    """A pass over a PostgreSQL store compares the stamps where the store and the index
    are (`PgIndex.changes`: one query, not 2 x 10,000 rows sent here): what it finds is
    what comparing every stamp finds, for a session changed, one gone, one new, and the
    rest unchanged."""
    from session import SessionStore, open_backend
    from session.search.base import stamp_text
    from tests.support.search_store import append_turn

    source = Source("postgres", pg_dsn)
    try:
        ids = sorted(source.reader.stamps())
        assert index.changes(pg_dsn) is not None and index.changes(pg_dsn).changed == []
        append_turn(pg_dsn, "postgres", ids[0], "one more", "turn", DAY0 + 100 * HOUR)
        store = SessionStore(open_backend("postgres", pg_dsn))
        try:
            store.delete(ids[1])
        finally:
            store.close()
        new = add_session(pg_dsn, "postgres", "/work/p9", Script().text_turn("new", "one"), DAY0 + 101 * HOUR)
        found = index.changes(pg_dsn)
        stamps, known = source.reader.stamps(), index.stamps()
        assert sorted(found.changed) == sorted((sid, stamp, sid in known) for sid, stamp in stamps.items()
                                               if known.get(sid) != stamp_text(stamp))
        assert {sid for sid, _, _ in found.changed} == {ids[0], new}
        assert found.gone == [ids[1]] == sorted(known.keys() - stamps.keys())
        assert found.stored == len(stamps) == 16
        assert index.changes("postgresql:///another") is None  # not its store's: stamps compared here
        report = catch_up(source, index)
        assert sorted(report.indexed) == sorted([ids[0], new]) and report.dropped == 1
        assert index.changes(pg_dsn).changed == []
    finally:
        source.close()
