"""A pass over an SQLite store whose files did not change since the last whole pass
began is skipped (`StoreReader.fingerprint`, acp_bridge.cli.sessions.indexer): 10,000
sessions' stamps are an index seek each (bench/README.md, "Search speed"). Whatever is
written after a pass is still found by the next, and a fingerprint is not trusted while
the store's files were touched too recently for their times to tell two writes apart."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import session.backends.sqlite_read as sqlite_read
from acp_bridge.cli.sessions.indexer import catch_up, open_index
from acp_bridge.cli.sessions.source import Source
from session.search.base import Filters
from session.search.query import parse_query
from tests.support.logs import Script
from tests.support.search_store import DAY0, add_session, append_turn

pytestmark = pytest.mark.unit
TICK = 0.05  # more than a clock tick of file times (at most 10 ms)


def counting(source: Source) -> list[int]:
    """Count the reader's stamp passes."""
    calls: list[int] = []
    stamps = source.reader.stamps

    def counted() -> Any:
        calls.append(1)
        return stamps()
    source.reader.stamps = counted  # type: ignore[method-assign]
    return calls


def found(index: Any, word: str) -> list[tuple[str, int]]:
    return [(h.session_id, h.turn) for h in index.search(parse_query(word), Filters(), 50)]


def test_an_unchanged_store_is_not_passed_over_and_a_write_is_still_found(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_read, "SETTLED_NS", 0)
    root = tmp_path / "store"
    first = add_session(root, "sqlite", "/w", Script().text_turn("the heron waits"), DAY0)
    index = open_index("sqlite", root, None)
    source = Source("sqlite", root)
    calls = counting(source)
    try:
        assert catch_up(source, index).indexed == [first]
        assert index.fingerprint() is not None
        report = catch_up(source, index)
        assert (len(calls), report.unchanged, report.indexed) == (1, 1, [])  # skipped: no stamps read
        time.sleep(TICK)
        second = add_session(root, "sqlite", "/w", Script().text_turn("a heron flies"), DAY0 + 60_000)
        assert catch_up(source, index).indexed == [second]
        assert len(calls) == 2
        time.sleep(TICK)
        append_turn(root, "sqlite", first, "the heron again", "still waiting", DAY0 + 120_000)
        catch_up(source, index)
        assert sorted(found(index, "heron")) == sorted([(first, 1), (second, 1), (first, 2)])
        assert len(calls) == 3
        catch_up(source, index)
        assert len(calls) == 3
    finally:
        source.close()
        index.close()


def test_a_store_touched_just_now_is_passed_over(tmp_path: Path) -> None:
    """With the default SETTLED_NS a store written a moment ago has no fingerprint:
    every pass compares every stamp, as before."""
    root = tmp_path / "store"
    add_session(root, "sqlite", "/w", Script().text_turn("hello"), DAY0)
    source = Source("sqlite", root)
    try:
        assert source.reader.fingerprint() is None
    finally:
        source.close()


def test_the_fingerprint_follows_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_read, "SETTLED_NS", 0)
    root = tmp_path / "store"
    sid = add_session(root, "sqlite", "/w", Script().text_turn("hello"), DAY0)
    source = Source("sqlite", root)
    try:
        before = source.reader.fingerprint()
        assert before is not None and before == source.reader.fingerprint()
        source.reader.stamps()  # reading does not change it
        assert source.reader.fingerprint() == before
        time.sleep(TICK)
        append_turn(root, "sqlite", sid, "more", "words", DAY0 + 1000)
        assert source.reader.fingerprint() not in (None, before)
    finally:
        source.close()


@pytest.mark.parametrize("kind", ["jsonl"])
def test_stores_without_one(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    add_session(root, kind, "/w", Script().text_turn("hello"), DAY0)
    source = Source(kind, root)
    try:
        assert source.reader.fingerprint() is None
    finally:
        source.close()


def test_a_pass_with_nothing_to_write_does_not_fail_for_its_fingerprint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fingerprint is kept at the end of a pass; on a full disk (the index's writes
    refused) a pass that found nothing new must not report the index unwritable for it."""
    import contextlib

    from session.search.base import IndexUnwritable
    from session.search.fts import FtsIndex

    monkeypatch.setattr(sqlite_read, "SETTLED_NS", 0)
    root = tmp_path / "store"
    add_session(root, "sqlite", "/w", Script().text_turn("the heron waits"), DAY0)
    index = open_index("sqlite", root, None)
    source = Source("sqlite", root)
    try:
        index.keep_fingerprint = lambda fingerprint: None  # type: ignore[method-assign]
        catch_up(source, index)  # indexed, its fingerprint not kept
        del index.keep_fingerprint

        @contextlib.contextmanager
        def refused(self: FtsIndex) -> Any:
            raise IndexUnwritable("database or disk is full")
            yield
        monkeypatch.setattr(FtsIndex, "_writing", refused)
        report = catch_up(source, index)
        assert (report.unwritable, report.indexed, report.unchanged) == (None, [], 1)
        assert found(index, "heron")
    finally:
        source.close()
        index.close()
