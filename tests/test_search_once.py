"""`sessions search` finds each turn once and reads texts as text (issue 35), on every
backend: a turn a fork copied is one hit, the original's, naming the forks that hold
it (forks of forks, at a turn, the original gone); a tool call's arguments are indexed
as the text they hold, not as JSON (an escaped newline glued `n` to the next word), an
edit by what it wrote; snippets show that text; an index of the format before is made
again so that a reindex picks it up."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from session import SessionStore, open_backend
from tests.support.logs import Script
from tests.support.search_store import DAY0, add_session
from tests.test_sessions_cli import cli

CONTENT = "line one\nline two\nconnection refused at port 5432\n"


@pytest.fixture(params=["jsonl", "sqlite", "postgres"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path | str]:
    kind = str(request.param)
    if kind == "postgres":
        return kind, str(request.getfixturevalue("pg_dsn"))
    return kind, tmp_path / "store"


def search(kind: str, root: Path | str, *args: str) -> list[dict[str, Any]]:
    result = cli("--store", str(root), "--backend", kind, "search", *args, "--json")
    assert result.code == 0, result.err
    hits: list[dict[str, Any]] = orjson.loads(result.raw)
    return hits


def announce(s: Script, text: str, call_id: str, name: str, arguments: Any) -> None:
    s.add("assistant/message", {"turn": s.turn, "step": s.step, "content": [
        {"type": "text", "text": text},
        {"type": "tool-call", "id": call_id, "name": name,
         "arguments": arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()}]})


def edit_script() -> Script:
    """Turn 1 writes a file (its content an argument, as a model's JSON text), turn 2
    edits one (the diff's new text, shown by the tool's result)."""
    s = Script()
    s.start_turn("write the notes").start_step()
    arguments = orjson.dumps({"path": "notes.txt", "content": CONTENT}).decode()
    announce(s, "Writing.", "w1", "write_file", arguments)
    s.add("tool/call", {"turn": 1, "step": 1, "callId": "w1", "name": "write_file", "arguments": arguments,
                        "title": "Write notes.txt", "kind": "edit"})
    s.add("tool/result", {"turn": 1, "step": 1, "callId": "w1", "isError": False,
                          "content": [{"type": "text", "text": "written"}]})
    s.end_step().end_turn()
    s.start_turn("fix the config").start_step()
    edit = {"path": "conf/app.toml", "edits": [{"old": "a", "new": "b"}], "retries": 3}
    announce(s, "Editing.", "e1", "edit", edit)
    s.add("tool/call", {"turn": 2, "step": 1, "callId": "e1", "name": "edit", "arguments": edit,
                        "title": "Edit app.toml", "kind": "edit"})
    s.add("tool/result", {"turn": 2, "step": 1, "callId": "e1", "isError": False,
                          "content": [{"type": "text", "text": "edited"}],
                          "display": [{"type": "diff", "path": "conf/app.toml", "oldText": "port = 1\n",
                                       "newText": "port = 1\nmarmoset_timeout = 30\n"}]})
    return s.end_step().end_turn()


def test_tool_arguments_are_indexed_as_text(root: tuple[str, Path | str], tmp_path: Path) -> None:
    kind, where = root
    sid = add_session(where, kind, str(tmp_path), edit_script(), DAY0)
    (hit,) = search(kind, where, "connection")
    assert (hit["sessionId"], hit["turn"], hit["kind"], hit["callId"]) == (sid, 1, "tool", "w1")
    assert "\\n" not in hit["snippet"] and "connection refused at port 5432" in hit["snippet"]
    assert [hit["snippet"][a:b] for a, b in hit["marks"]] == ["connection"]
    assert [h["callId"] for h in search(kind, where, '"connection refused"')] == ["w1"]
    assert [h["callId"] for h in search(kind, where, '"two connection"')] == ["w1"]  # lines are words apart
    assert search(kind, where, "nconnection") == [] and search(kind, where, "content") == []  # no JSON
    assert [h["callId"] for h in search(kind, where, "5432")] == ["w1"]
    # An edit: its path, the strings and numbers of its arguments, what it wrote.
    for words in ("conf/app.toml", "marmoset_timeout", "retries", "3"):
        hits = search(kind, where, words, "--in", "tool")
        assert [h["callId"] for h in hits] == ([] if words == "retries" else ["e1"]), words


def test_an_index_of_the_format_before_is_made_again(tmp_path: Path) -> None:
    root = tmp_path / "store"
    add_session(root, "sqlite", str(tmp_path), edit_script(), DAY0)
    assert len(search("sqlite", root, "connection")) == 1
    index = root / "index" / "search.sqlite3"
    db = sqlite3.connect(index)  # as format 2 kept a call: its arguments' JSON
    with db:
        db.execute("UPDATE meta SET value = '2' WHERE key = 'format'")
        db.execute("UPDATE texts SET body = ? WHERE body LIKE '%connection%'",
                   (orjson.dumps({"path": "notes.txt", "content": CONTENT}).decode(),))
    db.close()
    result = cli("--store", str(root), "--backend", "sqlite", "search", "connection", "--json")
    assert "was made again: it is of another format" in result.err
    assert [h["snippet"].count("\\n") for h in orjson.loads(result.raw)] == [0]


def fork(kind: str, where: Path | str, sid: str, at_turn: int | None = None) -> str:
    store = SessionStore(open_backend(kind, where), clock=itertools.count(DAY0 + 9_000_000, 10).__next__)
    try:
        return str(store.fork(store.plan_fork(sid, at_turn=at_turn), cwd="/w/fork")["id"])
    finally:
        store.close()


def go_on(kind: str, where: Path | str, sid: str, first_turn: int, prompt: str, at: int) -> None:
    store = SessionStore(open_backend(kind, where), clock=itertools.count(at, 10).__next__)
    try:
        log = store.load(sid).log
        log.extend(Script(first_turn=first_turn).text_turn(prompt, "done").items)
        log.sync()
        log.close()
    finally:
        store.close()


def delete(kind: str, where: Path | str, sid: str) -> None:
    store = SessionStore(open_backend(kind, where))
    try:
        store.delete(sid)
    finally:
        store.close()


def test_a_turn_forks_copied_is_found_once(root: tuple[str, Path | str], tmp_path: Path) -> None:
    kind, where = root
    script = Script().text_turn("pelican one").text_turn("pelican two").text_turn("pelican three")
    original = add_session(where, kind, str(tmp_path), script, DAY0)
    whole = fork(kind, where, original)  # turns 1-3 copied
    early = fork(kind, where, original, at_turn=1)  # turn 1 copied
    go_on(kind, where, early, 2, "pelican in the fork", DAY0 + 10_000_000)
    deeper = fork(kind, where, early)  # turn 1 (the original's) and 2 (early's) copied
    go_on(kind, where, deeper, 3, "pelican deeper", DAY0 + 20_000_000)

    def hits(*args: str) -> dict[tuple[str, int], list[str]]:
        found = search(kind, where, *args)
        assert len(found) == len({(h["sessionId"], h["turn"]) for h in found})
        return {(h["sessionId"], h["turn"]): h["forks"] for h in found}

    assert hits("pelican") == {
        (original, 1): sorted([whole, early, deeper]), (original, 2): [whole], (original, 3): [whole],
        (early, 2): [deeper], (deeper, 3): []}
    # The original filtered out: the copy is found, naming the original among the others.
    copies = hits("pelican", "--cwd", "/w/fork")
    (first,) = [sid for sid, turn in copies if turn == 1]  # one of the three forks
    assert sorted([first, *copies.pop((first, 1))]) == sorted([original, whole, early, deeper])
    assert copies == {(whole, 2): [original], (whole, 3): [original], (early, 2): [deeper], (deeper, 3): []}
    # The table names them too.
    text = cli("--store", str(where), "--backend", kind, "search", "deeper")
    assert text.code == 0 and "also in" not in text.out
    text = cli("--store", str(where), "--backend", kind, "search", "pelican", "two")
    assert text.lines[2] == f"    also in {whole[:8]} (forks: the same turn, copied)"
    # The original gone: one copy of each of its turns, still once; a later pass keeps it so.
    delete(kind, where, original)
    for _ in range(2):
        found = hits("pelican")
        assert sorted(turn for _, turn in found) == [1, 2, 2, 3, 3]
        assert found[(early, 2)] == [deeper] and found[(deeper, 3)] == []
        (first,) = [sid for sid, turn in found if turn == 1]
        assert sorted([first, *found[(first, 1)]]) == sorted([whole, early, deeper])


def test_the_best_texts_first_then_more_when_filters_leave_too_few(root: tuple[str, Path | str], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A search takes the best texts first (a few: CANDIDATES, RANKED), then more when
    the filters leave fewer turns than asked for; equal scores newest first."""
    import session.search.fts_search
    import session.search.pg

    kind, where = root
    monkeypatch.setattr(session.search.fts_search, "CANDIDATES", 2)
    monkeypatch.setattr(session.search.fts_search, "PER_HIT", 0)
    monkeypatch.setattr(session.search.pg, "RANKED", 4)
    monkeypatch.setattr(session.search.pg, "PER_HIT", 0)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    sids = [add_session(where, kind, str(tmp_path / ("b" if i % 4 == 0 else "a")),
                        Script().text_turn("the heron waits"), DAY0 + i * 60_000) for i in range(12)]
    newest_first = sids[::-1]
    in_b = [sid for i, sid in enumerate(sids) if i % 4 == 0][::-1]
    if kind == "postgres":  # the newest 4 texts ranked (of those the filters keep)
        assert [h["sessionId"] for h in search(kind, where, "heron", "-n", "12")] == newest_first[:4]
        assert [h["sessionId"] for h in search(kind, where, "heron", "--cwd", str(tmp_path / "b"))] == in_b
        return
    assert [h["sessionId"] for h in search(kind, where, "heron", "-n", "12")] == newest_first
    assert [h["sessionId"] for h in search(kind, where, "heron", "-n", "3")] == newest_first[:3]
    assert [h["sessionId"] for h in search(kind, where, "heron", "--cwd", str(tmp_path / "b"))] == in_b
