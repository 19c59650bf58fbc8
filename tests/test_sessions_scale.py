"""At scale (issue 26, point 5): `sessions list -n N` reads only the logs of its first
page, newest first by the store's stamps (a log older than the page is never opened:
here, a damaged one that a full list reports); and bench/sessions_scale.py runs (a
tiny store; the figures at 10,000 sessions are in bench/README.md, "At scale")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.support.logs import Script
from tests.support.search_store import DAY0, add_session
from tests.test_sessions_cli import cli


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
@pytest.mark.integration
@pytest.mark.long
def test_a_first_page_reads_only_its_own_logs(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "store"
    ids = [add_session(root, kind, f"/w/{n % 2}", Script().text_turn(f"prompt {n}", f"answer {n}"),
                       DAY0 + n * 60_000) for n in range(6)]
    if kind == "jsonl":  # the oldest log damaged in its middle: `list` says so when it reads it
        path = root / "sessions" / f"{ids[0]}.jsonl"
        lines = path.read_bytes().splitlines(keepends=True)
        lines[2] = b'{"type": "garbage\n'
        path.write_bytes(b"".join(lines))
        for n, sid in enumerate(ids):  # a JSONL log's update time is its mtime: the events' times
            ns = (DAY0 + n * 60_000 + 100) * 1_000_000
            os.utime(root / "sessions" / f"{sid}.jsonl", ns=(ns, ns))
    else:
        import sqlite3

        db = sqlite3.connect(root / "sessions.sqlite3")
        db.execute("UPDATE events SET data = CAST('{' AS BLOB) WHERE session_id = ? AND seq = 2", (ids[0],))
        db.commit()
        db.close()

    def listed(*args: str) -> list[tuple[str, str]]:
        result = cli("--store", str(root), "--backend", kind, "list", "--json", *args, process=True)
        assert result.code == 0, result.err
        return [(row["id"], row["status"]) for row in orjson.loads(result.raw)]

    everything = listed()
    assert [sid for sid, _ in everything] == ids[::-1]
    assert everything[-1] == (ids[0], "damaged")
    if kind == "jsonl":  # an older "log" that blocks whoever opens it: a first page never does
        fifo = root / "sessions" / "00000000-0000-4000-8000-000000000001.jsonl"
        os.mkfifo(fifo)
        os.utime(fifo, ns=((DAY0 - 86_400_000) * 1_000_000,) * 2)
    assert listed("-n", "3") == [(sid, "completed") for sid in ids[:2:-1]]
    assert listed("-n", "5") == [(sid, "completed") for sid in ids[:0:-1]]
    assert listed("-n", "6") == everything
    assert listed("-n", "2", "--cwd", "/w/0") == [(ids[4], "completed"), (ids[2], "completed")]
    # `-n 0` was taken for "none" (issue 36): a count is 1 or more (docs/cli.md).
    refused = cli("--store", str(root), "--backend", kind, "list", "-n", "0", process=True)
    assert refused.code == 2 and "argument -n/--limit: must be 1 to 1,000,000,000, got 0" in refused.err


@pytest.mark.integration
@pytest.mark.long
def test_the_scale_bench_runs(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    proc = subprocess.run([sys.executable, "bench/sessions_scale.py", "--sessions", "12", "--backends", "jsonl",
                           "--tmp", str(tmp_path), "--json", str(out)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode in (0, 1), proc.stderr  # 1: a target missed on a busy machine
    results = orjson.loads(out.read_bytes())
    runs = {run["command"]: run for run in results["runs"]}
    assert all(run["code"] == 0 for run in runs.values()), proc.stderr
    assert set(runs) >= {"list -n 50", "index (first)", "search rare", "stats --by day"}
    assert results["stores"]["jsonl"]["bytes"] > 12 * 100_000  # twelve ~119 KB sessions
    assert list(tmp_path.iterdir()) == [out]  # the scratch store is removed


def test_the_bench_copies_in_postgres_are_what_an_agent_would_have_written(pg_dsn: str) -> None:
    """bench/sessions_scale.py's PostgreSQL copies: vouched for by the store, as the
    agent's sessions are (`checked_seq`), and listed from their outlines exactly as
    from their logs (each log checked as a load checks it)."""
    import psycopg

    from bench.sessions_scale import build_sql, unvouched

    build_sql("postgres", pg_dsn, 6)
    with psycopg.connect(pg_dsn) as db:
        assert db.execute("SELECT count(*), count(*) FILTER (WHERE checked_seq = last_seq), count(title) "
                          "FROM acp_bridge.sessions").fetchone() == (6, 6, 6)

    def listed() -> bytes:
        result = cli("--store", pg_dsn, "--backend", "postgres", "list", "--json")
        assert result.code == 0, result.err
        return result.raw

    outlined = listed()
    with unvouched(pg_dsn, True):
        assert listed() == outlined
    rows = orjson.loads(outlined)
    assert len(rows) == 6 and {row["status"] for row in rows} == {"completed"}
    assert all("w0000" in row["title"] for row in rows)


@pytest.mark.integration
def test_the_served_list_is_the_newest_page(tmp_path: Path) -> None:
    """`serve`'s list shows the newest LIST_PAGE sessions (reading only their logs) and
    says how many older ones it leaves to the search."""
    from acp_bridge.cli.sessions.serve import LIST_PAGE
    from tests.support.html_sessions import Served, fetch, parse_page

    root = tmp_path / "store"
    ids = [add_session(root, "jsonl", "/w", Script().text_turn(f"prompt {n}", "ok"), DAY0 + n * 60_000)
           for n in range(LIST_PAGE + 3)]
    for n, sid in enumerate(ids):  # their update times: their events'
        ns = (DAY0 + n * 60_000 + 100) * 1_000_000
        os.utime(root / "sessions" / f"{sid}.jsonl", ns=(ns, ns))
    with Served(root, "jsonl") as served:
        status, _, body = fetch(served.url)
    assert status == 200
    rows = parse_page(body).find_all("tr")[1:]
    assert [row.find_all("a")[0].attrs["href"] for row in rows] == [f"session/{sid}" for sid in ids[:2:-1]]
    assert f"the newest {LIST_PAGE} of {LIST_PAGE + 3} sessions" in body
    assert "3 older session(s) are not listed: search finds them." in body
