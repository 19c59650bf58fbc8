"""`acp-bridge import` of gemini-cli's and qwen-code's chats (docs/import.md): each reader
over the file the real agent wrote (gemini-cli 0.61.0, qwen-code 0.24.4:
tests/recorded/native/), then the import, `sessions show/search/stats` against what
the file says, appended turns, and `session/load` through our agent."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.cli.importer import gemini, qwen
from acp_bridge.cli.importer.formats import detect
from acp_bridge.cli.importer.main import main as import_main
from acp_bridge.cli.importer.native import NativeSession
from acp_bridge.cli.importer.store import session_id_of
from acp_bridge.cli.sessions.main import main as sessions_main
from session import open_backend
from session.backends.base import read_stored
from session.invariants import check_invariants

NATIVE = Path(__file__).parent / "recorded" / "native"
GEMINI = next((NATIVE / "gemini-cli-0.61.0").glob("*.jsonl"))
QWEN = next((NATIVE / "qwen-code-0.24.4").glob("*.jsonl"))
READERS = {"gemini": gemini.read, "qwen": qwen.read}
FILES = {"gemini": GEMINI, "qwen": QWEN}


def records(agent: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in FILES[agent].read_bytes().splitlines()]


def read(agent: str, path: Path | None = None) -> NativeSession:
    path = path or FILES[agent]
    return READERS[agent](path.read_bytes().splitlines(keepends=True), str(path))


def flat(session: NativeSession) -> list[Any]:
    return [(kind, data) for turn in session.turns for _, (kind, data) in turn.items]


def native_usage(agent: str) -> tuple[int, int]:
    """The file's own token counts: one per model response (gemini-cli: its messages
    as last written, by id; qwen-code: each assistant record's usageMetadata)."""
    if agent == "gemini":
        last = {r["id"]: r["tokens"] for r in records(agent) if r.get("type") == "gemini" and "tokens" in r}
        return sum(t["input"] for t in last.values()), sum(t["output"] + t["thoughts"] for t in last.values())
    usage = [r["usageMetadata"] for r in records(agent) if r.get("type") == "assistant"]
    return sum(u["promptTokenCount"] for u in usage), sum(u["candidatesTokenCount"] for u in usage)


def test_the_record_types_each_agent_wrote() -> None:
    kinds = Counter("$set" if "$set" in r else "header" if "projectHash" in r else r["type"] for r in records("gemini"))
    assert kinds == {"header": 2, "$set": 10, "user": 3, "gemini": 4}
    kinds = Counter((r["type"], r.get("subtype")) for r in records("qwen"))
    assert kinds == {("user", None): 2, ("system", "attribution_snapshot"): 2, ("system", "ui_telemetry"): 5,
                     ("assistant", None): 3, ("tool_result", None): 1}
    for agent in FILES:
        head = FILES[agent].read_bytes().splitlines()[:5]
        assert detect(head) == agent


@pytest.mark.parametrize("agent", ["gemini", "qwen"])
def test_the_reader_says_what_the_file_says(agent: str) -> None:
    session = read(agent)
    assert session.unknown == {} and session.problems == []
    assert session.source is not None and session.source.cwd == "/tmp/acp-fixture"
    assert session.source.version == ("0.24.4" if agent == "qwen" else None)  # gemini-cli's file names none
    events = flat(session)
    check_invariants([{"type": k, "seq": i, "time": 0, "data": d} for i, (k, d) in enumerate(events)], closed=True)
    assert [d["content"] for k, d in events if k == "user/message"] == [
        [{"type": "text", "text": "Say hello."}], [{"type": "text", "text": "RUN: cat notes.txt"}]]
    usage = [d["usage"] for k, d in events if k == "assistant/message"]
    assert (sum(u["inputTokens"] for u in usage), sum(u["outputTokens"] for u in usage)) == native_usage(agent)
    (call,) = [d for k, d in events if k == "tool/call"]
    assert (call["name"], call["arguments"], call["kind"]) == ("run_shell_command", {"command": "cat notes.txt"},
                                                               "execute")
    (result,) = [d for k, d in events if k == "tool/result"]
    assert not result["isError"] and "notes from the fixture\nsecond line" in result["content"][0]["text"]
    said = [d["chunk"]["text"] for k, d in events if k == "assistant/chunk"]
    assert said[0] == "Hello from the fake model." and said[-1].startswith("The command said: ")
    kept = orjson.dumps([d for _, d in events]).decode()
    if agent == "gemini":  # its session context: kept raw, not a prompt
        assert "<session_context>" in kept
    else:
        assert kept.count('"ui_telemetry"') == 5


@pytest.mark.parametrize("agent", ["gemini", "qwen"])
def test_an_import_shows_and_takes_appended_turns(
        agent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, native = tmp_path / "store", tmp_path / FILES[agent].name
    lines = FILES[agent].read_bytes().splitlines(keepends=True)
    rows = records(agent)
    second = next(i for i, r in enumerate(rows) if i > 0 and ("projectHash" in r if agent == "gemini" else
                                                               r["type"] == "user"))
    native.write_bytes(b"".join(lines[:second]))
    assert import_main([str(native), "--store", str(store)]) == 0
    native.write_bytes(b"".join(lines))
    assert import_main([str(native), "--store", str(store)]) == 0
    assert "1 new turn(s) added" in capsys.readouterr().out
    sid = session_id_of(read(agent).source)  # type: ignore[arg-type]
    backend = open_backend("jsonl", store)
    try:
        stored = [(e["type"], e["data"]) for e in read_stored(backend.read_stream(sid)).events]
    finally:
        backend.close()
    assert [(k, {f: v for f, v in d.items() if f != "native"}) for k, d in stored] == [
        (k, {f: v for f, v in d.items() if f != "native"}) for k, d in flat(read(agent, native))]
    assert sessions_main(["--store", str(store), "show", sid]) == 0
    shown = capsys.readouterr().out
    tokens = native_usage(agent)
    assert f"Total tokens: {tokens[0]} in / {tokens[1]} out" in shown and "Tool run_shell_command" in shown
    assert sessions_main(["--store", str(store), "stats"]) == 0
    assert f"    {tokens[0]}      {tokens[1]}" in capsys.readouterr().out


@pytest.mark.anyio
@pytest.mark.integration
@pytest.mark.parametrize("agent", ["gemini", "qwen"])
async def test_an_imported_chat_loads_as_the_file_says(agent: str, tmp_path: Path, work: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.acp_client import AgentProcess

    store = tmp_path / "store"
    assert import_main([str(FILES[agent]), "--store", str(store)]) == 0
    sid = session_id_of(read(agent).source)  # type: ignore[arg-type]
    async with AgentProcess(store) as agent_process:
        await agent_process.initialize()
        await agent_process.load_session(sid, work)
        updates = agent_process.updates_of(sid)
    assert [u["content"]["text"] for u in updates if u["sessionUpdate"] == "user_message_chunk"] == [
        "Say hello.", "RUN: cat notes.txt"]
    assert [(u["name"], u["rawInput"]) for u in updates if u["sessionUpdate"] == "tool_call"] == [
        ("run_shell_command", {"command": "cat notes.txt"})]
    usage = [u["_meta"]["acpBridge"]["usage"] for u in updates if u["sessionUpdate"] == "usage_update"]
    assert (sum(u["inputTokens"] for u in usage), sum(u["outputTokens"] for u in usage)) == native_usage(agent)
