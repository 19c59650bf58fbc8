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


@pytest.mark.parametrize(("text", "filters"), CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("limit", [1, 5, 50])
def test_a_walk_finds_what_the_planner_finds(index: Any, text: str, filters: Filters, limit: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    query = parse_query(text)
    monkeypatch.setattr(pg, "WALK_FROM", 1)  # every query with a match walks
    walked = index.search(query, filters, limit)
    monkeypatch.setattr(pg, "WALK_FROM", 1 << 30)  # none does
    planned = index.search(query, filters, limit)
    assert shown(walked) == shown(planned)


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
