"""`sessions list` from the search index's rows (acp_bridge/cli/sessions/listing.py,
`Summaries`): the same bytes as from the logs, on every backend; a row is trusted only
while it is fresh (its stamp the store's, the log read whole and checked, the last turn
ended, nothing held in SQLite's tail), and anything else (a stale row, a damaged index,
one of another format, a log that breaks the invariants) falls back to the log,
silently.

Whether a row came from the index is seen by damaging a log behind the index's back
without changing its stamp (the same size and mtime for JSONL, an event in the middle
for the SQL stores): read from the log, that session is listed as damaged."""

from __future__ import annotations

import itertools
import os
import sqlite3
from pathlib import Path

import orjson
import pytest

from session import SessionStore, open_backend
from tests.support.logs import Script
from tests.support.search_store import DAY0, DAY1, add_session, append_turn, write_store
from tests.test_sessions_cli import cli

BACKENDS = ["jsonl", "sqlite", "postgres"]


def _root(kind: str, tmp_path: Path, pg_dsn: str | None) -> str:
    return pg_dsn if kind == "postgres" and pg_dsn else str(tmp_path / "store")


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    kind = str(request.param)
    dsn = request.getfixturevalue("pg_dsn") if kind == "postgres" else None
    root = _root(kind, tmp_path, dsn)
    write_five(kind, root, tmp_path)
    return kind, root


def write_five(kind: str, root: str, tmp_path: Path) -> None:
    """A store of five sessions: the search tests' two (ours: completed, then an error;
    a wrapped agent's: cancelled, then left open), one without turns, one whose token
    kinds come in another order, one with additional directories."""
    write_store(root, kind, tmp_path)
    tokens = Script().start_turn("reasoning first").start_step()
    tokens.add("assistant/message", {"turn": 1, "step": 1, "content": [{"type": "text", "text": "a"}],
                                     "usage": {"inputTokens": 5, "outputTokens": 1, "reasoningTokens": 9}})
    tokens.end_step().start_step()
    tokens.add("assistant/message", {"turn": 1, "step": 2, "content": [{"type": "text", "text": "b"}],
                                     "usage": {"inputTokens": 6, "outputTokens": 2, "cacheReadTokens": 4}})
    tokens.end_step().end_turn()
    add_session(root, kind, str(tmp_path / "work-c"), tokens, DAY1 + 3_600_000)
    store = SessionStore(open_backend(kind, root), clock=itertools.count(DAY1 + 7_200_000, 10).__next__)
    try:
        store.create(cwd=str(tmp_path / "work-d")).close()  # no turns
        log = store.create(cwd=str(tmp_path / "work-e"), additional_directories=[str(tmp_path / "more")])
        log.extend(Script().text_turn("with more folders", "done").items)
        log.sync()
        log.close()
    finally:
        store.close()


def list_both(kind: str, root: str, *args: str) -> tuple[bytes, bytes]:
    """(`list --json ARGS`, `list ARGS`), each checked to exit 0 with nothing on stderr."""
    out = []
    for extra in (("--json",), ()):
        result = cli("--store", root, "--backend", kind, "list", *extra, *args)
        assert result.code == 0 and result.err == "", result.err
        out.append(result.raw)
    return out[0], out[1]


def _index(kind: str, root: str) -> None:
    result = cli("--store", root, "--backend", kind, "index")
    assert result.code == 0, result.err


def _ids(kind: str, root: str) -> list[str]:
    return [row["id"] for row in orjson.loads(list_both(kind, root)[0])]


def _tamper(kind: str, root: str, sid: str) -> None:
    """Damage the session's log in its middle, its stamp unchanged."""
    if kind == "jsonl":
        path = Path(root) / "sessions" / f"{sid}.jsonl"
        before = path.stat()
        lines = path.read_bytes().splitlines(keepends=True)
        lines[2] = b"{" + b"x" * (len(lines[2]) - 2) + b"\n"  # the same size
        with open(path, "r+b") as f:  # the same inode
            f.write(b"".join(lines))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_size == before.st_size
    elif kind == "sqlite":
        db = sqlite3.connect(Path(root) / "sessions.sqlite3")
        db.execute("UPDATE events SET data = CAST('{\"turn\": 99}' AS BLOB) WHERE session_id = ? AND seq = 1", (sid,))
        db.commit()
        db.close()
    else:
        import psycopg

        with psycopg.connect(root) as pg:
            pg.execute("UPDATE acp_bridge.events SET data = '{\"turn\": 99}' WHERE session_id = %s AND seq = 1",
                       (sid,))


def _status(kind: str, root: str, sid: str, *args: str) -> str:
    rows = {row["id"]: row for row in orjson.loads(list_both(kind, root, *args)[0])}
    return str(rows[sid]["status"])


def test_the_list_from_fresh_index_rows_is_the_list_from_the_logs(store: tuple[str, str], tmp_path: Path) -> None:
    kind, root = store
    cwd = str(tmp_path / "work-a")
    before = [list_both(kind, root), list_both(kind, root, "-n", "2"), list_both(kind, root, "--cwd", cwd)]
    _index(kind, root)
    after = [list_both(kind, root), list_both(kind, root, "-n", "2"), list_both(kind, root, "--cwd", cwd)]
    assert after == before
    listed = orjson.loads(before[0][0])
    assert {row["status"] for row in listed} >= {"error", "interrupted", "completed", None}
    assert next(row for row in listed if row["title"] == "reasoning first")["tokens"] == {
        "inputTokens": 11, "outputTokens": 3, "cacheReadTokens": 4, "reasoningTokens": 9}
    # ...and those rows are the index's: a log damaged behind its back (the same stamp)
    # is still listed as the index read it, while its last turn ended; the wrapped
    # session's last turn is open, so its log is read, whatever the index says.
    newest_closed = next(row["id"] for row in listed if row["status"] not in ("interrupted", None))
    _tamper(kind, root, newest_closed)
    assert list_both(kind, root) == before[0]
    assert list_both(kind, root, "-n", "2") == before[1]


def test_a_stale_row_or_a_damaged_index_falls_back_to_the_log(store: tuple[str, str], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    kind, root = store
    _index(kind, root)
    # Sessions the index has no row of yet, among those it has: read from their logs
    # (the index asked for three sessions at a time, so some are missing from a chunk).
    from acp_bridge.cli.sessions.rows import Summaries

    monkeypatch.setattr(Summaries, "CHUNK", 3)
    for n, base in enumerate((DAY0 + 60_000, DAY1 + 60_000, DAY1 + 3_660_000)):
        add_session(root, kind, str(tmp_path / "work-a"), Script().text_turn(f"new {n}", "ok"), base)
    mixed = [list_both(kind, root), list_both(kind, root, "-n", "6")]
    assert len(orjson.loads(mixed[0][0])) == 8
    assert [list_both(kind, root), list_both(kind, root, "-n", "6")] == _without_index(kind, root)
    _index(kind, root)
    ids = _ids(kind, root)
    newest = ids[0]
    append_turn(root, kind, newest, "one more", "yes", DAY1 + 9_000_000)  # the log grew after indexing
    grown = list_both(kind, root)
    assert orjson.loads(grown[0])[0]["turns"] == 2
    _tamper(kind, root, newest)  # its stamp is not the index's: its log is read
    assert _status(kind, root, newest) == "damaged"
    _index(kind, root)  # read again from where the index stopped: trusted again
    assert _status(kind, root, newest) != "damaged"
    if kind == "postgres":
        import psycopg

        with psycopg.connect(root) as pg:  # an index of another format is not read
            pg.execute("UPDATE acp_bridge_search.meta SET value = '1' WHERE key = 'format'")
        assert _status(kind, root, newest) == "damaged"
        return
    path = Path(root) / "index" / "search.sqlite3"
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '1' WHERE key = 'format'")  # another format: not read
    db.commit()
    db.close()
    assert _status(kind, root, newest) == "damaged"
    for suffix in ("-wal", "-shm"):
        (path.parent / f"{path.name}{suffix}").unlink(missing_ok=True)
    path.write_bytes(b"not a database, " * 512)  # damaged: nothing said, the logs read
    listed = list_both(kind, root)
    assert path.read_bytes() == b"not a database, " * 512  # and the list left it as it was
    path.unlink()
    assert listed == list_both(kind, root)
    assert _status(kind, root, newest) == "damaged"


def _without_index(kind: str, root: str) -> list[tuple[bytes, bytes]]:
    """`list` and `list -n 6` with the index set aside (then put back)."""
    if kind == "postgres":
        import psycopg

        with psycopg.connect(root, autocommit=True) as pg:
            pg.execute("ALTER SCHEMA acp_bridge_search RENAME TO aside")
        try:
            return [list_both(kind, root), list_both(kind, root, "-n", "6")]
        finally:
            with psycopg.connect(root, autocommit=True) as pg:
                pg.execute("ALTER SCHEMA aside RENAME TO acp_bridge_search")
    index, aside = Path(root) / "index", Path(root) / "aside"
    index.rename(aside)
    try:
        return [list_both(kind, root), list_both(kind, root, "-n", "6")]
    finally:
        aside.rename(index)


def test_a_log_that_breaks_the_invariants_is_listed_from_itself(tmp_path: Path) -> None:
    """A log the indexer reads (for search) but a load would refuse: its row is not
    `checked`, and `list` reads the log, which says why it is damaged."""
    root = str(tmp_path / "store")
    script = Script().text_turn("first", "ok")
    sid = add_session(root, "jsonl", "/w", script, DAY0)
    path = Path(root) / "sessions" / f"{sid}.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    event = orjson.loads(lines[3])
    event["time"] = -1  # epoch ms must not be negative: the invariants, not the scan
    lines[3] = orjson.dumps(event) + b"\n"
    path.write_bytes(b"".join(lines))
    before = list_both("jsonl", root)
    assert orjson.loads(before[0])[0]["status"] == "damaged"
    _index("jsonl", root)
    assert list_both("jsonl", root) == before
    db = sqlite3.connect(Path(root) / "index" / "search.sqlite3")
    assert db.execute("SELECT checked FROM sessions WHERE id = ?", (sid,)).fetchone() == (0,)
    db.close()


def test_streamed_events_in_a_sqlite_tail_are_read_from_the_log(tmp_path: Path) -> None:
    """SQLite keeps a turn's streamed events in a tail file until its next durable
    commit, outside the stamp: a session with a tail is read from its log."""
    root = str(tmp_path / "store")
    sid = add_session(root, "sqlite", "/w", Script().text_turn("first", "ok"), DAY0)
    _index("sqlite", root)
    indexed = list_both("sqlite", root)
    tail = Path(root) / "tails" / f"{sid}.jsonl"
    tail.parent.mkdir(exist_ok=True)
    events = Script(first_turn=2).start_turn("second").items
    seq = len(Script().text_turn("first", "ok").items)  # the next seq after the rows
    assert orjson.loads(indexed[0])[0]["turns"] == 1
    lines = [orjson.dumps({"type": t, "seq": seq + n, "time": DAY0 + 1000 + n, "data": d})
             for n, (t, d) in enumerate(events)]
    tail.write_bytes(b"".join(line + b"\n" for line in lines))
    (Path(root) / "index" / "search.sqlite3").unlink()  # what the log says, without an index
    expected = list_both("sqlite", root)
    assert orjson.loads(expected[0])[0]["turns"] == 2
    _index_without_tail(root, tail)
    assert list_both("sqlite", root) == expected


def _index_without_tail(root: str, tail: Path) -> None:
    """Index the store as it was before the tail was written (the tail set aside)."""
    kept = tail.read_bytes()
    tail.unlink()
    _index("sqlite", root)
    tail.write_bytes(kept)


def test_a_title_the_index_cannot_hold_is_read_from_the_log(store: tuple[str, str], tmp_path: Path) -> None:
    """A NUL in a prompt: the index's text columns hold U+FFFD instead (PostgreSQL's
    text cannot hold NUL), so such a row's title is not trusted."""
    kind, root = store
    sid = add_session(root, kind, str(tmp_path / "work-f"), Script().text_turn("a\x00b", "ok"), DAY1 + 9_000_000)
    before = list_both(kind, root)
    title = next(row["title"] for row in orjson.loads(before[0]) if row["id"] == sid)
    assert title == ("a\ufffdb" if kind == "postgres" else "a\x00b")  # the store's own title column, for postgres
    _index(kind, root)
    assert list_both(kind, root) == before
    _tamper(kind, root, sid)  # read from its log: so it says it is damaged
    assert _status(kind, root, sid) == "damaged"
