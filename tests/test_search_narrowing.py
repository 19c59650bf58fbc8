"""A search scores fewer matches when its filters allow (session.search.fts_search,
`narrowing`: `since` as a least text id, a folder or agent that keeps few
sessions as the texts those sessions hold), and finds exactly what it found without:
a table of filters over one store, each compared with the same search unnarrowed."""

from __future__ import annotations

from typing import Any

import pytest

from acp_bridge.cli.sessions.indexer import catch_up, open_index
from acp_bridge.cli.sessions.source import Source
from session.search import fts
from session.search.base import Filters, Hit
from session.search.fts import FtsIndex
from session.search.fts_search import narrowing
from session.search.query import parse_query
from tests.support.logs import Script
from tests.support.search_store import DAY0, add_session

pytestmark = pytest.mark.unit
HOUR = 3_600_000


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """24 sessions an hour apart in 4 folders (the last one's 2 of them), 2 turns each
    that all say "connection refused", a third turn in every third session that fails."""
    root = tmp_path_factory.mktemp("narrow") / "store"
    for i in range(24):
        cwd = f"/work/p{3 if i in (6, 17) else i % 3}"
        s = Script().text_turn(f"connection refused on port {i}", "the connection was refused, retrying")
        s.text_turn("is the connection refused still", "connection refused again")
        if i % 3 == 0:
            s.start_turn("once more: connection refused?").start_step().end_step()
            s.end_turn("error", step=1, message="connection refused", code="x", retryable=False)
        add_session(root, "jsonl", cwd, s, DAY0 + i * HOUR)
    idx = open_index("jsonl", root, None)
    catch_up(Source("jsonl", root), idx)
    yield idx
    idx.close()


def shown(hits: list[Hit]) -> list[tuple[str, int, str, int]]:
    return [(h.session_id, h.turn, h.kind, h.doc_id) for h in hits]


CASES = [
    Filters(),
    Filters(since=DAY0 + 10 * HOUR),
    Filters(since=DAY0 + 10 * HOUR + 1),  # not a turn's start
    Filters(since=DAY0 + 100 * HOUR),  # after every turn
    Filters(cwds=("/work/p3",)),  # 2 of 24 sessions: narrowed
    Filters(cwds=("/work/p3",), ended=("error",)),
    Filters(cwds=("/work/p3", "/work/p1"), since=DAY0 + 6 * HOUR, kinds=("prompt",)),
    Filters(cwds=("/work/p0", "/work/p1", "/work/p2")),  # most sessions: not narrowed by folder
    Filters(cwds=("/nowhere",)),
    Filters(agent="nobody"),
    Filters(cwds=("/work/p2",), until=DAY0 + 12 * HOUR),
]


@pytest.mark.parametrize("filters", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("text", ["connection", '"connection refused"', "retrying OR failed"])
@pytest.mark.parametrize("limit", [1, 3, 50])
def test_narrowed_searches_find_what_unnarrowed_ones_do(index: FtsIndex, filters: Filters, text: str,
                                                        limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    query = parse_query(text)
    narrowed = index.search(query, filters, limit)
    with monkeypatch.context() as m:
        m.setattr(fts, "narrowing", lambda db, f: ("", []))
        whole = index.search(query, filters, limit)
    assert shown(narrowed) == shown(whole)
    assert [h.snippet for h in narrowed] == [h.snippet for h in whole]


def test_what_is_narrowed(index: FtsIndex) -> None:
    db = index._conn()
    assert narrowing(db, Filters()) == ("", [])
    sql, args = narrowing(db, Filters(since=DAY0))
    assert sql.strip() == "AND rowid >= ?" and args == [DAY0 << 16]
    sql, _ = narrowing(db, Filters(cwds=("/work/p3",)))
    assert "+rowid IN" in sql  # 2 of 24 sessions
    sql, _ = narrowing(db, Filters(cwds=("/work/p0",)))
    assert "+rowid IN" not in sql  # 7 of 24: more than a quarter


def test_a_narrowed_search_scores_fewer_texts(index: FtsIndex) -> None:
    """What it is for: the texts the scan of a match yields (each of which bm25 scores)."""
    db = index._conn()
    match = '"connection refused"'
    (every,) = db.execute("SELECT count(*) FROM texts WHERE texts MATCH ?", (match,)).fetchone()
    for filters in (Filters(cwds=("/work/p3",)), Filters(since=DAY0 + 20 * HOUR)):
        sql, args = narrowing(db, filters)
        (scored,) = db.execute(f"SELECT count(*) FROM texts WHERE texts MATCH ? {sql}", (match, *args)).fetchone()
        assert 0 < scored < every / 4
