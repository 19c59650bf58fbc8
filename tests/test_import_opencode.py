"""`acp-bridge import` of opencode's sessions (docs/import.md, "opencode"): the reader
over the database opencode 1.18.33 wrote (tests/recorded/native/), the import and what
`sessions show/stats` say against the session row's own totals, the database never
written, appended turns, and `session/load` through our agent."""

from __future__ import annotations

import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.cli.importer.main import main as import_main
from acp_bridge.cli.importer.native import NativeSession
from acp_bridge.cli.importer.opencode_db import sessions
from acp_bridge.cli.importer.store import session_id_of
from acp_bridge.cli.sessions.main import main as sessions_main
from session.invariants import check_invariants

FIXTURE = Path(__file__).parent / "recorded" / "native" / "opencode-1.18.33" / "opencode.db"


def rows(sql: str, path: Path = FIXTURE) -> list[Any]:
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def read(path: Path = FIXTURE) -> NativeSession:
    (session,) = sessions(path)
    return session


def flat(session: NativeSession) -> list[Any]:
    return [(kind, data) for turn in session.turns for _, (kind, data) in turn.items]


def test_the_rows_opencode_wrote_and_what_each_became() -> None:
    roles = Counter(orjson.loads(d)["role"] for (d,) in rows("SELECT data FROM message"))
    parts = Counter(orjson.loads(d)["type"] for (d,) in rows("SELECT data FROM part"))
    assert roles == {"user": 2, "assistant": 3}
    assert parts == {"text": 4, "step-start": 3, "step-finish": 3, "tool": 1}
    session = read()
    assert session.unknown == {} and session.problems == []
    ((sid, directory, title, version, tokens_in, tokens_out),) = rows(
        "SELECT id, directory, title, version, tokens_input, tokens_output FROM session")
    assert session.source is not None and (session.source.session_id, session.source.cwd, session.source.version) == (
        sid, directory, version)
    assert session.title == title
    events = flat(session)
    check_invariants([{"type": k, "seq": i, "time": 0, "data": d} for i, (k, d) in enumerate(events)], closed=True)
    assert [d["content"] for k, d in events if k == "user/message"] == [
        [{"type": "text", "text": "Say hello."}], [{"type": "text", "text": "RUN: cat notes.txt"}]]
    usage = [d["usage"] for k, d in events if k == "assistant/message"]
    assert (sum(u["inputTokens"] for u in usage), sum(u["outputTokens"] for u in usage)) == (tokens_in, tokens_out)
    (call,) = [d for k, d in events if k == "tool/call"]
    assert (call["name"], call["arguments"], call["kind"], call["title"]) == (
        "bash", {"command": "cat notes.txt"}, "execute", "bash: cat notes.txt")
    (result,) = [d for k, d in events if k == "tool/result"]
    assert result["content"] == [{"type": "text", "text": "notes from the fixture\nsecond line\n"}]
    assert result["native"]["state"]["metadata"]["exit"] == 0
    kept = orjson.dumps([d for _, d in events]).decode()
    assert kept.count('"step-finish"') == 3 and '"tokens_input":370' in kept  # kept raw


def test_an_import_shows_counts_never_writes_the_database_and_takes_appended_turns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, early = tmp_path / "store", tmp_path / "early" / "opencode.db"
    early.parent.mkdir()
    shutil.copyfile(FIXTURE, early)
    db = sqlite3.connect(early)  # the database as it was before the second prompt
    (cut,) = db.execute("SELECT time_created FROM message WHERE data LIKE '%\"role\":\"user\"%' "
                        "ORDER BY time_created DESC LIMIT 1").fetchone()
    db.execute("DELETE FROM part WHERE message_id IN (SELECT id FROM message WHERE time_created >= ?)", (cut,))
    db.execute("DELETE FROM message WHERE time_created >= ?", (cut,))
    db.commit()
    db.close()
    before = FIXTURE.read_bytes()
    assert import_main([str(early.parent), "--store", str(store)]) == 0
    assert "(1 turn(s))" in capsys.readouterr().out
    assert import_main([str(FIXTURE.parent), "--store", str(store)]) == 0
    assert "1 new turn(s) added" in capsys.readouterr().out
    assert import_main([str(FIXTURE), "--store", str(store)]) == 0
    assert "nothing to add" in capsys.readouterr().out
    assert FIXTURE.read_bytes() == before  # read only
    sid = session_id_of(read().source)  # type: ignore[arg-type]
    assert sessions_main(["--store", str(store), "show", sid]) == 0
    shown = capsys.readouterr().out
    assert "Total tokens: 370 in / 39 out" in shown and "Tool bash (execute)" in shown
    assert "title    Hello from the fake model." in shown


def test_a_database_that_is_not_opencode_s_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "opencode.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    assert import_main([str(tmp_path), "--store", str(tmp_path / "store")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an opencode database that can be read" in err


@pytest.mark.anyio
@pytest.mark.integration
async def test_an_imported_opencode_session_loads_as_the_database_says(
        tmp_path: Path, work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.acp_client import AgentProcess

    store = tmp_path / "store"
    assert import_main([str(FIXTURE), "--store", str(store)]) == 0
    sid = session_id_of(read().source)  # type: ignore[arg-type]
    async with AgentProcess(store) as agent:
        await agent.initialize()
        await agent.load_session(sid, work)
        updates = agent.updates_of(sid)
    assert [u["content"]["text"] for u in updates if u["sessionUpdate"] == "user_message_chunk"] == [
        "Say hello.", "RUN: cat notes.txt"]
    assert [(u["name"], u["rawInput"]) for u in updates if u["sessionUpdate"] == "tool_call"] == [
        ("bash", {"command": "cat notes.txt"})]
    usage = [u["_meta"]["acpBridge"]["usage"] for u in updates if u["sessionUpdate"] == "usage_update"]
    assert (sum(u["inputTokens"] for u in usage), sum(u["outputTokens"] for u in usage)) == (370, 39)
