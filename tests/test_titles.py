"""A session's title (issue 25): the rule (session.titles.session_title) as a
table; JSONL's title file across a crash at each point between the `/title` event and
the file (real processes killed there); and our agent end to end over stdio, `/title`
then `session/list` and `acp-bridge sessions list`, `show` and `export` in fresh processes, on
JSONL and SQLite. The contract suite (tests/test_contract.py) has the stores' side on
every backend, PostgreSQL too."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import orjson
import pytest

from session import SessionStore, open_backend, open_reader
from session.backends.jsonl_title import read_kept, title_path
from session.titles import last_set_title, session_title, set_title
from tests.support.acp_client import AgentProcess
from tests.support.logs import Script, events_of, write


def ev(etype: str, **data: Any) -> dict[str, Any]:
    return {"type": etype, "seq": 0, "time": 0, "data": data}


def prompt(turn: int, text: str) -> dict[str, Any]:
    return ev("user/message", turn=turn, content=[{"type": "text", "text": text}])


def title(value: Any, config: str = "session/title") -> dict[str, Any]:
    return ev("config/set", configId=config, value=value, turn=2)


RULE = [
    # (header title, events, the session's title)
    (None, [], None),
    (None, [prompt(1, "first  question")], "first question"),
    (None, [prompt(1, "first"), title("Named")], "Named"),
    (None, [prompt(1, "first"), title("A"), prompt(2, "x"), title("B")], "B"),
    (None, [title("before any prompt"), prompt(1, "first")], "before any prompt"),
    ("given", [prompt(1, "first")], "given"),
    ("given", [prompt(1, "first"), title("Named")], "Named"),
    (None, [prompt(1, "first"), title("Named", config="model")], "first"),  # another setting
    (None, [prompt(1, "first"), title("")], "first"),  # an empty value names nothing
    (None, [prompt(1, "first"), title(7)], "first"),  # not text
    (None, [prompt(2, "a later prompt")], None),  # only turn 1's prompt names a session
]


@pytest.mark.parametrize(("header", "events", "expected"), RULE)
def test_the_title_rule(header: str | None, events: list[dict[str, Any]], expected: str | None) -> None:
    given = {"title": header} if header is not None else {}
    assert session_title(given, events) == expected


def test_set_titles_of_a_batch() -> None:
    assert set_title(title("T")) == "T"
    assert set_title(prompt(1, "/title T")) is None
    assert set_title("not an event") is None
    assert last_set_title([title("A"), prompt(2, "x"), title("B"), title("")]) == "B"
    assert last_set_title([prompt(1, "x")]) is None


# --- JSONL: a crash between the event and its title file -----------------------------

CRASHER = textwrap.dedent("""
    import os, sys
    from session import SessionStore, open_backend
    from session.backends import jsonl, jsonl_title
    from tests.support.logs import Script, write

    store, sid, point = sys.argv[1], sys.argv[2], sys.argv[3]
    if point == "before-append":  # the file is pending, the event not yet written
        real = jsonl.write_all
        def write_all(fd, data):
            if b'"session/title"' in data:
                os._exit(9)
            real(fd, data)
        jsonl.write_all = write_all
    else:  # "before-settle": the event is durable, the file still pending
        jsonl_title.TitleKeeper.synced = lambda self: os._exit(9) if self._pending else None
    loaded = SessionStore(open_backend("jsonl", store)).load(sid)
    write(loaded.log, Script(first_turn=3).title_turn("After"))
    print("not killed", file=sys.stderr)
""")


def sessions_cli(store: Path, backend: str, *args: str) -> str:
    """What `acp-bridge sessions ARGS` prints, run in a fresh process."""
    out = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(store),
                          "--backend", backend, *args],
                         capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode()


def cli_titles(store: Path, backend: str) -> dict[str, str | None]:
    """`acp-bridge sessions list --json`: each session's title."""
    return {row["id"]: row["title"] for row in orjson.loads(sessions_cli(store, backend, "list", "--json"))}


@pytest.mark.parametrize(("point", "expected"), [("before-append", "Before"), ("before-settle", "After")])
@pytest.mark.integration
def test_jsonl_title_file_survives_a_crash_at_each_point(tmp_path: Path, point: str, expected: str) -> None:
    """Killed after the title file is made pending and before the event is appended, the
    session keeps its old title; killed after the event is durable and before the file
    is settled, it has the new one: `list`, the reader and `acp-bridge sessions list`
    resolve the pending file from the log, and the next load settles it."""

    store = tmp_path / "store"
    s = SessionStore(open_backend("jsonl", store))
    log = s.create(cwd="/w")
    write(log, Script().text_turn("first question").title_turn("Before"))
    log.close()
    s.close()
    path = title_path(store / "titles", log.id)
    assert read_kept(path) == ("Before", None)  # settled
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    run = subprocess.run([sys.executable, "-c", CRASHER, str(store), log.id, point], env=env,
                         capture_output=True, timeout=60)
    assert run.returncode == 9, run.stderr.decode()
    kept = read_kept(path)
    assert kept is not None and kept.title == "Before" and kept.pending is not None  # left pending

    assert [x["title"] for x in SessionStore(open_backend("jsonl", store)).list()] == [expected]
    reader = open_reader("jsonl", store)
    stream = reader.stream(log.id)
    stream.close()
    assert (stream.title, reader.peek(log.id).title) == (expected, expected)
    reader.close()
    assert list(cli_titles(store, "jsonl").values()) == [expected]
    assert read_kept(path) == kept  # readers never write

    s = SessionStore(open_backend("jsonl", store))
    loaded = s.load(log.id)  # the owner settles it (and repairs the killed turn)
    loaded.log.close()
    assert read_kept(path) == (expected, None)
    assert [x["title"] for x in s.list()] == [expected]
    s.close()


def test_jsonl_list_reads_no_title_file_for_a_session_never_titled(tmp_path: Path) -> None:
    """The title folder holds a file only for a session `/title` named (and a delete
    takes it away): the others' titles come from their logs' heads as before."""

    store = tmp_path / "store"
    s = SessionStore(open_backend("jsonl", store))
    plain, named = s.create(cwd="/w"), s.create(cwd="/w")
    write(plain, Script().text_turn("plain"))
    write(named, Script().text_turn("q").title_turn("Named"))
    plain.close()
    named.close()
    assert sorted(p.name for p in (store / "titles").iterdir()) == [f"{named.id}.json"]
    s.delete(named.id)
    assert list((store / "titles").iterdir()) == []
    assert [x["title"] for x in s.list()] == ["plain"]
    s.close()


# --- end to end: our agent, then the tools -------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.integration
async def test_title_command_names_the_session_everywhere(tmp_path: Path, work: Path, backend: str) -> None:
    """`/title Foo` as a prompt: `session/list` of that agent and of a fresh one, then
    `acp-bridge sessions list` and `show` (fresh processes) all say "Foo"."""
    store = tmp_path / "store"
    async with AgentProcess(store, backend=backend) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        other = await agent.new_session(work)
        await agent.prompt(sid, "what is in notes.txt")
        await agent.prompt(other, "another question")
        listed = await agent.request("session/list", {})
        assert {s["sessionId"]: s["title"] for s in listed["sessions"]}[sid] == "what is in notes.txt"
        await agent.prompt(sid, "/title   Foo ")
        listed = await agent.request("session/list", {})
        assert {s["sessionId"]: s["title"] for s in listed["sessions"]} == {
            sid: "Foo", other: "another question"}
        await agent.prompt(sid, "and then?")  # a later prompt names nothing
    async with AgentProcess(store, backend=backend) as agent:
        await agent.initialize()
        listed = await agent.request("session/list", {"cwd": str(work)})
        assert {s["sessionId"]: s["title"] for s in listed["sessions"]} == {
            sid: "Foo", other: "another question"}
    assert cli_titles(store, backend) == {sid: "Foo", other: "another question"}
    assert "\n  title    Foo\n" in sessions_cli(store, backend, "show", sid)
    assert sessions_cli(store, backend, "export", sid, "--format", "md").startswith("# Foo\n")
    assert "<h1>Foo</h1>" in sessions_cli(store, backend, "export", sid, "--format", "html")
    sessions_cli(store, backend, "index")  # from here `list` takes the indexed rows
    assert cli_titles(store, backend) == {sid: "Foo", other: "another question"}


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_search_index_takes_the_set_title_when_it_reads_on(tmp_path: Path, backend: str) -> None:
    """The search index keeps each session's title (SessionRow.title): indexed before a
    `/title`, the session's row has the new one once the index reads the log on."""
    from tests.test_sessions_cli import cli

    store = tmp_path / "store"
    s = SessionStore(open_backend(backend, store))
    log = s.create(cwd="/w")
    write(log, Script().text_turn("zebra question"))
    log.close()

    def hit_titles() -> list[str | None]:
        res = cli("--store", str(store), "--backend", backend, "search", "zebra", "--json")
        assert res.code == 0, res.err
        return [hit["title"] for hit in orjson.loads(res.raw)]

    assert hit_titles() == ["zebra question"]
    loaded = s.load(log.id)
    write(loaded.log, Script(first_turn=2).title_turn("Striped"))
    loaded.log.close()
    s.close()
    assert hit_titles() == ["Striped"]


def test_jsonl_a_failed_write_leaves_the_title_pending_until_a_durable_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An fsync that fails rolls the log back: the pending file then still gives the old
    title (the set was cut); the batch written again and made durable settles the new."""
    from session.errors import StoreIOError
    from session.log import encode

    store = tmp_path / "store"
    backend = open_backend("jsonl", store)
    s = SessionStore(backend)
    log = s.create(cwd="/w")
    first = write(log, Script().text_turn("first question").title_turn("Before"))
    log.close()
    handle, _ = backend.open(log.id)
    batch = [encode(e) for e in events_of(Script(first_turn=3).title_turn("After"), start_seq=len(first))]

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(StoreIOError, match="rolled back"):
        handle.write(batch, sync=True)
    monkeypatch.undo()
    path = title_path(store / "titles", log.id)
    kept = read_kept(path)
    assert kept is not None and kept.pending is not None
    assert [x["title"] for x in s.list()] == ["Before"]  # the log says: the set was cut
    handle.write(batch, sync=True)
    assert read_kept(path) == ("After", None)
    assert [x["title"] for x in s.list()] == ["After"]
    handle.close()
    s.close()


def test_a_title_file_its_fork_left_behind_is_swept_by_the_next_list(tmp_path: Path) -> None:
    """A fork's title file is published before its log, locked until the log is out
    (issue 34, point 11): one left by a fork killed in between (no log, no lock) is
    removed by the next list (or fork); one whose fork is still copying (locked), and one
    whose session has its log, stay."""
    import fcntl

    from session.backends.jsonl_title import keep_for_fork

    root = tmp_path / "store"
    store = SessionStore(open_backend("jsonl", root))
    log = store.create(cwd="/w")
    log.extend(Script().text_turn("first", "answer").items)
    log.close()
    store.close()
    titles = root / "titles"
    dead, copying = "00000000-0000-4000-8000-0000000000d1", "00000000-0000-4000-8000-0000000000c2"
    os.close(keep_for_fork(titles, dead, "killed while copying"))  # its lock went with it
    held = keep_for_fork(titles, copying, "still copying")
    os.close(keep_for_fork(titles, log.id, "a fork whose log is out"))
    try:
        with pytest.raises(BlockingIOError):  # the lock is taken before the file has its name
            other = os.open(title_path(titles, copying), os.O_RDONLY)
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(other)
        listing = SessionStore(open_backend("jsonl", root))
        assert [s["id"] for s in listing.list()] == [log.id]
        assert sorted(p.name for p in titles.iterdir()) == sorted([f"{copying}.json", f"{log.id}.json"])
    finally:
        os.close(held)
    listing.list()  # its fork gone without its log: swept
    listing.close()
    assert [p.name for p in titles.iterdir()] == [f"{log.id}.json"]
