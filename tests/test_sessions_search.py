"""`acp-bridge sessions search` and `sessions index` (issue 26, point 1) over stores
written as agents write them (tests/support/search_store.py), on JSONL and SQLite here
and PostgreSQL at the end: every kind of text found with its session, turn and snippet,
the filters and the query language, `--json`; an index kept beside the store, brought
up to date from where it stopped, and rebuilt, never trusted, when it is missing,
truncated, corrupt, of another store, or behind a log that was cut, replaced or
deleted; a search while an agent owns a session; `index --watch` makes a new turn
searchable within a second of its `turn/end`."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from session import SessionStore, open_backend
from tests.support.logs import Script
from tests.support.search_store import (
    DAY0,
    DAY1,
    WORDS,
    Stored,
    add_session,
    append_turn,
    write_store,
)
from tests.test_sessions_cli import cli, store_state


@pytest.fixture(params=["jsonl", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def stored(tmp_path: Path, kind: str) -> Stored:
    return write_store(tmp_path / "store", kind, tmp_path)


def search(tmp_path: Path, kind: str, *args: str, root: Path | str | None = None) -> list[dict[str, Any]]:
    result = cli("--store", str(root or tmp_path / "store"), "--backend", kind, "search", *args, "--json")
    assert result.code == 0, result.err
    hits: list[dict[str, Any]] = orjson.loads(result.raw)
    return hits


def found(hits: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(h["sessionId"], h["turn"]) for h in hits]


def delete(root: Path | str, kind: str, sid: str) -> None:
    store = SessionStore(open_backend(kind, root))
    try:
        store.delete(sid)
    finally:
        store.close()


def files_of(root: Path) -> dict[str, bytes]:
    """The store's files and their bytes (as tests/test_sessions_cli.py sees them), the
    search index's folder left out."""
    return {name: data for name, data in store_state(root).items() if not name.startswith("index/")}


# --- what is found -----------------------------------------------------------------------------


def test_every_kind_of_text_is_found_with_its_facts(tmp_path: Path, kind: str, stored: Stored) -> None:
    before = files_of(tmp_path / "store")
    expected = {"prompt": (stored.ours, 1, 0), "thought": (stored.ours, 1, 1), "answer": (stored.ours, 1, 1),
                "tool": (stored.ours, 2, 1), "output": (stored.ours, 2, 1)}
    for text_kind, (sid, turn, step) in expected.items():
        word = WORDS[text_kind].split(".")[0]
        (hit,) = search(tmp_path, kind, word)
        assert (hit["sessionId"], hit["turn"], hit["kind"], hit["step"]) == (sid, turn, text_kind, step)
        start, end = hit["marks"][0]
        assert hit["snippet"][start:end].lower() == word.lower()
        assert hit["cwd"] == stored.cwd_a and hit["agent"] == "acp-bridge" and hit["model"] == "openai:gpt-4o"
    (hit,) = search(tmp_path, kind, "narwhal.txt")  # a file name is its words, as a phrase
    assert hit["callId"] == "c1" and hit["state"] == "error"
    assert hit["reason"] == {"kind": "error", "step": 2, "message": "rate limited", "code": "rate_limit",
                             "retryable": True}
    (hit,) = search(tmp_path, kind, WORDS["cancelled"])
    assert (hit["sessionId"], hit["state"], hit["agent"], hit["startedAt"]) == \
        (stored.wrapped, "cancelled", "claude-code", DAY1 + 10)
    (hit,) = search(tmp_path, kind, WORDS["open"])  # the open turn, its owner gone
    assert (hit["sessionId"], hit["turn"], hit["state"], hit["reason"]) == (stored.wrapped, 2, "interrupted", None)
    # One hit per turn (its best text), every turn that has the word.
    assert sorted(found(search(tmp_path, kind, "timeout"))) == sorted([(stored.ours, 1), (stored.wrapped, 1)])
    # The table: a line of facts and the snippet.
    text = cli("--store", str(tmp_path / "store"), "--backend", kind, "search", WORDS["answer"])
    assert text.code == 0 and stored.ours[:8] in text.lines[0] and "turn 1" in text.lines[0]
    assert text.lines[1].strip() == f"The {WORDS['answer']} timeout is fixed."
    assert "No turns match" in cli("--store", str(tmp_path / "store"), "--backend", kind, "search", "zzz").out
    assert files_of(tmp_path / "store") == before  # read-only: nothing locked, repaired or written
    assert (tmp_path / "store" / "index" / "search.sqlite3").is_file()


def test_filters_and_the_query_language(tmp_path: Path, kind: str, stored: Stored) -> None:
    both = sorted([(stored.ours, 1), (stored.wrapped, 1)])
    assert sorted(found(search(tmp_path, kind, "timeout"))) == both
    assert found(search(tmp_path, kind, "timeout", "--cwd", stored.cwd_b)) == [(stored.wrapped, 1)]
    assert found(search(tmp_path, kind, "timeout", "--agent", "Claude-Code")) == [(stored.wrapped, 1)]
    assert found(search(tmp_path, kind, "timeout", "--agent", "acp-bridge")) == [(stored.ours, 1)]
    assert found(search(tmp_path, kind, "timeout", "--model", "gpt-4o")) == [(stored.ours, 1)]  # after provider:
    assert found(search(tmp_path, kind, "timeout", "--model", "openai:gpt-4o")) == [(stored.ours, 1)]
    assert found(search(tmp_path, kind, "timeout", "--model", "gpt")) == []
    day1 = time.strftime("%Y-%m-%dT%H:%M", time.localtime(DAY1 / 1000))
    assert found(search(tmp_path, kind, "timeout", "--since", day1)) == [(stored.wrapped, 1)]
    assert found(search(tmp_path, kind, "timeout", "--until", day1)) == [(stored.ours, 1)]
    assert sorted(found(search(tmp_path, kind, "timeout", "--since", "100000d"))) == both
    assert found(search(tmp_path, kind, "timeout", "--since", "1d")) == []  # recorded in 2023
    assert found(search(tmp_path, kind, "timeout", "--ended", "cancelled")) == [(stored.wrapped, 1)]
    assert found(search(tmp_path, kind, "timeout", "--ended", "completed")) == [(stored.ours, 1)]
    assert found(search(tmp_path, kind, "the", "--ended", "error")) == [(stored.ours, 2)]
    assert found(search(tmp_path, kind, "the", "--ended", "interrupted")) == [(stored.wrapped, 2)]
    assert found(search(tmp_path, kind, "the", "--ended", "running")) == []  # its owner is gone
    assert sorted(found(search(tmp_path, kind, "the", "--ended", "error", "--ended", "cancelled"))) == \
        sorted([(stored.ours, 2), (stored.wrapped, 1)])
    assert [h["kind"] for h in search(tmp_path, kind, "timeout", "--in", "answer")] == ["answer"]
    assert found(search(tmp_path, kind, "timeout", "--in", "thought")) == []
    # Words (all), phrases, prefixes, exclusions, OR; case and punctuation do not matter.
    assert found(search(tmp_path, kind, "TIMEOUT", "quokka")) == [(stored.ours, 1)]
    assert found(search(tmp_path, kind, '"quokka timeout"')) == [(stored.ours, 1)]
    assert found(search(tmp_path, kind, '"timeout quokka"')) == []
    assert found(search(tmp_path, kind, "quok*")) == [(stored.ours, 1)]
    # A text matches (a prompt, a step's answer, a tool's output), and its turn is the hit:
    # the answer "The axolotl timeout is fixed." has no quokka.
    assert sorted(found(search(tmp_path, kind, "timeout -quokka"))) == both
    assert found(search(tmp_path, kind, "timeout -quokka -axolotl")) == [(stored.wrapped, 1)]
    assert sorted(found(search(tmp_path, kind, "quokka", "OR", "wombat"))) == both
    assert found(search(tmp_path, kind, "zerodivisionerror")) == [(stored.ours, 2)]
    assert len(search(tmp_path, kind, "the", "-n", "2")) == 2
    # A query with nothing to find is a usage error, before the index is touched.
    for nothing in (["-timeout -quokka"], ["--", "-timeout"], ["..."], ["OR"]):
        result = cli("--store", str(tmp_path / "store"), "--backend", kind, "search", *nothing)
        assert result.code == 2 and "nothing to search for" in result.err, (nothing, result.err)
    result = cli("--store", str(tmp_path / "store"), "--backend", kind, "search", "x", "--since", "soon")
    assert result.code == 2 and "--since" in result.err


# --- the index -----------------------------------------------------------------------------------


def index_run(tmp_path: Path, kind: str, *args: str) -> str:
    result = cli("--store", str(tmp_path / "store"), "--backend", kind, "index", *args)
    assert result.code == 0, result.err
    return result.err


def test_the_index_is_read_on_from_where_it_stopped(tmp_path: Path, kind: str, stored: Stored) -> None:
    assert "2 log(s) read, 0 unchanged" in index_run(tmp_path, kind)
    assert "0 log(s) read, 2 unchanged" in index_run(tmp_path, kind)
    append_turn(tmp_path / "store", kind, stored.ours, "and the pelican?", "the pelican flies", DAY0 + 3_600_000)
    assert "1 log(s) read, 1 unchanged" in index_run(tmp_path, kind)
    assert found(search(tmp_path, kind, "pelican")) == [(stored.ours, 3)]
    # Turns 1 and 2 were kept, not read again nor doubled.
    assert found(search(tmp_path, kind, "quokka")) == [(stored.ours, 1)]
    db = sqlite3.connect(tmp_path / "store" / "index" / "search.sqlite3")
    turns = db.execute("SELECT turn FROM turns WHERE session_id = ? ORDER BY turn", (stored.ours,)).fetchall()
    assert turns == [(1,), (2,), (3,)]
    at_seq = db.execute("SELECT at_seq, at_turn FROM sessions WHERE id = ?", (stored.ours,)).fetchone()
    db.close()
    assert at_seq[1] == 3
    # A search brings the index up to date first: no `index` needed.
    append_turn(tmp_path / "store", kind, stored.ours, "the heron too", "herons wade", DAY0 + 7_200_000)
    assert found(search(tmp_path, kind, "heron")) == [(stored.ours, 4)]


def test_a_log_cut_replaced_or_deleted_behind_the_index(tmp_path: Path, kind: str, stored: Stored) -> None:
    root = tmp_path / "store"
    append_turn(root, kind, stored.ours, "and the pelican?", "the pelican flies", DAY0 + 3_600_000)
    assert found(search(tmp_path, kind, "pelican")) == [(stored.ours, 3)]
    if kind == "jsonl":
        # Cut: the log loses its last turn (a restore from a backup), and goes on anew.
        path = root / "sessions" / f"{stored.ours}.jsonl"
        lines = path.read_bytes().splitlines(keepends=True)
        start = next(i for i, line in enumerate(lines) if b'"turn/start"' in line and b'"turn":3' in line)
        path.write_bytes(b"".join(lines[:start]))
        assert found(search(tmp_path, kind, "pelican")) == []
        append_turn(root, kind, stored.ours, "the heron too", "herons wade", DAY0 + 7_200_000)
        assert found(search(tmp_path, kind, "heron")) == [(stored.ours, 3)]
        assert found(search(tmp_path, kind, "pelican")) == []
    # Replaced: the session deleted and another written under its id.
    delete(root, kind, stored.ours)
    add_session(root, kind, stored.cwd_a, Script().text_turn("the ibis", "an ibis"), DAY0 + 9_000_000,
                session_id=stored.ours)
    assert found(search(tmp_path, kind, "ibis")) == [(stored.ours, 1)]
    assert found(search(tmp_path, kind, "quokka")) == found(search(tmp_path, kind, "heron")) == []
    # Deleted: its turns are no longer found.
    delete(root, kind, stored.wrapped)
    assert found(search(tmp_path, kind, WORDS["cancelled"])) == []
    assert "0 log(s) read, 1 unchanged, 0 gone" in index_run(tmp_path, kind)


@pytest.mark.parametrize("damage", ["deleted", "truncated", "corrupt", "another store", "another format"])
def test_a_damaged_index_is_made_again(tmp_path: Path, kind: str, stored: Stored, damage: str) -> None:
    index = tmp_path / "store" / "index" / "search.sqlite3"
    assert found(search(tmp_path, kind, "quokka")) == [(stored.ours, 1)]
    size = index.stat().st_size
    if damage == "deleted":
        index.unlink()
    elif damage == "truncated":
        with index.open("r+b") as f:
            f.truncate(size // 3)
    elif damage == "corrupt":
        with index.open("r+b") as f:
            for at in range(4096, size, 4096):  # every page but the first: its tables' b-trees
                f.seek(at)
                f.write(os.urandom(512))
    elif damage == "another store":
        other = tmp_path / "other"
        write_store(other / "store", kind, other)
        assert search(tmp_path, kind, "quokka", root=other / "store")
        shutil.copy(other / "store" / "index" / "search.sqlite3", index)
    else:
        db = sqlite3.connect(index)
        db.execute("UPDATE meta SET value = '0' WHERE key = 'format'")
        db.commit()
        db.close()
    result = cli("--store", str(tmp_path / "store"), "--backend", kind, "search", "quokka", "--json")
    assert result.code == 0, result.err
    assert found(orjson.loads(result.raw)) == [(stored.ours, 1)]
    assert found(search(tmp_path, kind, WORDS["open"])) == [(stored.wrapped, 2)]
    if damage != "deleted":
        assert "was made again" in result.err, result.err
    assert "2 log(s) read" in index_run(tmp_path, kind, "--rebuild")


def test_a_damaged_log_is_said_and_left_out(tmp_path: Path) -> None:
    kind = "jsonl"  # a log damaged in its middle (a damaged SQLite store is no store at all)
    stored = write_store(tmp_path / "store", kind, tmp_path)
    path = tmp_path / "store" / "sessions" / f"{stored.ours}.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3] = b'{"type": "garbage\n'
    path.write_bytes(b"".join(lines))
    result = cli("--store", str(tmp_path / "store"), "--backend", kind, "search", "timeout", "--json")
    assert result.code == 0
    assert found(orjson.loads(result.raw)) == [(stored.wrapped, 1)]
    assert f"session {stored.ours} cannot be read" in result.err


@pytest.mark.integration
def test_a_search_while_an_agent_owns_its_session(tmp_path: Path, kind: str) -> None:
    """A wrapped agent mid-turn (waiting on a permission): its running turn is found,
    `running`, and nothing of the store is locked, repaired or written."""
    import anyio

    from tests.support.html_sessions import waiting_on_a_permission

    store = tmp_path / "store"
    work = tmp_path / "work"
    work.mkdir()

    async def main() -> None:
        async with waiting_on_a_permission(store, kind, work, "look at the marmot") as (_, sid):
            before = files_of(store)
            hits = await anyio.to_thread.run_sync(lambda: search(tmp_path, kind, "marmot"))
            assert [(h["sessionId"], h["turn"], h["state"]) for h in hits] == [(sid, 1, "running")]
            running = await anyio.to_thread.run_sync(lambda: search(tmp_path, kind, "marmot", "--ended",
                                                                    "running"))
            assert found(running) == [(sid, 1)]
            assert files_of(store) == before

    anyio.run(main)


@pytest.mark.integration
def test_watch_makes_a_new_turn_searchable_within_a_second(tmp_path: Path, kind: str, stored: Stored) -> None:
    root = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    watcher = subprocess.Popen([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(root),
                                "--backend", kind, "index", "--watch", "--every", "0.2"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    try:
        assert watcher.stderr is not None
        assert "2 log(s) read" in watcher.stderr.readline()
        # it says that it watches, and (below) what it indexed: it used to print nothing
        # after its first pass (issue 36, point 7)
        assert f"watching {root} every 0.2 s (Ctrl-C stops)" in watcher.stderr.readline()
        index = root / "index" / "search.sqlite3"
        delays = []
        for n, word in enumerate(("gannet", "puffin", "kestrel")):
            append_turn(root, kind, stored.ours, f"the {word}", "yes", int(time.time() * 1000) + n)
            ended = time.monotonic()  # the turn/end is durable (append_turn synced it)
            while True:
                db = sqlite3.connect(f"file:{index}?mode=ro", uri=True)
                try:
                    hits = db.execute("SELECT count(*) FROM texts WHERE texts MATCH ?", (word,)).fetchone()[0]
                finally:
                    db.close()
                if hits:
                    break
                assert time.monotonic() - ended < 5, "not indexed"
                time.sleep(0.02)
            delays.append(time.monotonic() - ended)
        assert max(delays) < 1.0, delays
    finally:
        watcher.send_signal(signal.SIGINT if kind == "jsonl" else signal.SIGTERM)  # either stops it
        out, err = watcher.communicate(timeout=10)
    assert watcher.returncode == 0, err
    assert out == ""
    assert err.count(f"indexed 1 session(s): {stored.ours} (") >= 2, err  # (communicate may lose a buffered line)


def test_index_options(tmp_path: Path, kind: str, stored: Stored) -> None:
    elsewhere = tmp_path / "elsewhere" / "my.sqlite3"
    assert found(search(tmp_path, kind, "quokka", "--index", str(elsewhere))) == [(stored.ours, 1)]
    assert elsewhere.is_file() and not (tmp_path / "store" / "index").exists()
    result = cli("--store", str(tmp_path / "store"), "--backend", kind, "index", "--watch", "--every", "0")
    assert result.code == 2 and "--every" in result.err
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a folder")
    result = cli("--store", str(tmp_path / "store"), "--backend", kind, "search", "x", "--index",
                 str(blocked / "i.sqlite3"))
    assert result.code == 1 and "--index FILE" in result.err


# --- PostgreSQL ------------------------------------------------------------------------------------


def test_search_over_postgres(pg_dsn: str, tmp_path: Path) -> None:
    import psycopg

    stored = write_store(pg_dsn, "postgres", tmp_path)

    def pg(*args: str) -> list[tuple[str, int]]:
        return found(search(tmp_path, "postgres", *args, root=pg_dsn))

    assert pg("quokka") == [(stored.ours, 1)]
    assert [h["kind"] for h in search(tmp_path, "postgres", "pangolin", root=pg_dsn)] == ["thought"]
    assert pg("narwhal.txt") == [(stored.ours, 2)]
    assert pg("ZeroDivisionError", "--in", "output") == [(stored.ours, 2)]
    assert sorted(pg("timeout")) == sorted([(stored.ours, 1), (stored.wrapped, 1)])
    assert pg("timeout", "--agent", "claude-code") == [(stored.wrapped, 1)]
    assert pg("quok*") == pg('"quokka timeout"') == [(stored.ours, 1)]
    assert pg("timeout -quokka -axolotl") == [(stored.wrapped, 1)]
    assert pg("the", "--ended", "interrupted") == [(stored.wrapped, 2)]
    # The texts are searched through a GIN index on their tsvector, in a schema apart.
    with psycopg.connect(pg_dsn) as db:
        (definition,) = db.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = 'acp_bridge_search' "
                                   "AND indexname = 'docs_tsv'").fetchone() or ("",)
        assert "USING gin (tsv)" in definition
        db.execute("UPDATE acp_bridge_search.meta SET value = '0' WHERE key = 'format'")
    result = cli("--store", pg_dsn, "--backend", "postgres", "search", "quokka", "--json")
    assert "was made again" in result.err and found(orjson.loads(result.raw)) == [(stored.ours, 1)]
    append_turn(pg_dsn, "postgres", stored.ours, "and the pelican?", "yes", DAY0 + 3_600_000)
    assert pg("pelican") == [(stored.ours, 3)]
    delete(pg_dsn, "postgres", stored.wrapped)
    assert pg("wombat") == []
    with psycopg.connect(pg_dsn) as db:
        db.execute("DROP TABLE acp_bridge_search.docs")
    assert pg("quokka") == [(stored.ours, 1)]
