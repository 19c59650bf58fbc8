"""`acp-bridge import` of Claude Code's transcripts (docs/import.md): the reader over the
file Claude Code 2.1.197 wrote (tests/recorded/native/), then the import on the file
stores and what `sessions show/search/stats` say of it, compared with the native file;
idempotence, incremental import, bad input."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.cli.importer import claude_code
from acp_bridge.cli.importer.main import main as import_main
from acp_bridge.cli.importer.native import NativeSession
from acp_bridge.cli.importer.store import session_id_of
from acp_bridge.cli.sessions.main import main as sessions_main
from session import open_backend
from session.backends.base import read_stored
from session.invariants import check_invariants

FIXTURE = next((Path(__file__).parent / "recorded" / "native" / "claude-code-2.1.197").glob("*.jsonl"))
RECORDS = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]


def read(path: Path = FIXTURE) -> NativeSession:
    return claude_code.read(path.read_bytes().splitlines(keepends=True), str(path))


def native_events(path: Path = FIXTURE) -> list[Any]:
    session = read(path)
    return [(kind, data) for turn in session.turns for _, (kind, data) in turn.items]


def stored(store: Path, kind: str, sid: str) -> list[Any]:
    backend = open_backend(kind, store)
    try:
        return read_stored(backend.read_stream(sid)).events
    finally:
        backend.close()


def run_import(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = import_main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def sessions(capsys: pytest.CaptureFixture[str], store: Path, kind: str, *args: str) -> str:
    assert sessions_main(["--store", str(store), "--backend", kind, *args]) == 0
    return capsys.readouterr().out


def same_story(stored: list[Any], whole: list[Any]) -> None:
    """An import made of appends holds what one import of the whole file holds: the same
    events, and every record kept raw once; only where a record the agent wrote after a
    turn sits may differ (on that turn's end, or the next turn's start: docs/import.md)."""
    def bare(events: list[Any]) -> list[Any]:
        return [(k, {f: v for f, v in d.items() if f != "native"}) for k, d in events]

    def kept(events: list[Any]) -> Counter[bytes]:
        out: Counter[bytes] = Counter()
        for _, d in events:
            value = d.get("native")
            for item in value if isinstance(value, list) else [value] if value is not None else []:
                out[orjson.dumps(item, option=orjson.OPT_SORT_KEYS)] += 1
        return out

    assert bare(stored) == bare(whole)
    assert kept(stored) == kept(whole)


def test_the_record_types_claude_code_wrote_and_what_each_became() -> None:
    # The table of the fixture's record types: what the reader reads, what it keeps raw.
    seen = Counter(r["type"] for r in RECORDS)
    assert seen == {"queue-operation": 4, "user": 3, "attachment": 2, "assistant": 5, "last-prompt": 2, "mode": 1}
    session = read()
    assert session.unknown == {} and session.problems == []
    source = session.source
    assert source is not None and (source.agent, source.version, source.session_id, source.cwd) == (
        "claude-code", "2.1.197", RECORDS[0]["sessionId"], "/tmp/acp-fixture")
    prompts = [r["message"]["content"] for r in RECORDS if r["type"] == "user" and isinstance(r["message"]["content"], str)]
    events = native_events()
    assert [d["content"][0]["text"] for k, d in events if k == "user/message"] == prompts
    check_invariants(
        [{"type": k, "seq": i, "time": 0, "data": d} for i, (k, d) in enumerate(events)], closed=True)
    # Usage: one per message id, though Claude Code wrote it once per content block.
    messages = {r["message"]["id"]: r["message"]["usage"] for r in RECORDS if r["type"] == "assistant"}
    usages = [d["usage"] for k, d in events if k == "assistant/message"]
    assert len(messages) == 3 and len(usages) == 3 < sum(r["type"] == "assistant" for r in RECORDS)
    assert sum(u["outputTokens"] for u in usages) == sum(u["output_tokens"] for u in messages.values())
    assert sum(u["inputTokens"] for u in usages) == sum(
        u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] for u in messages.values())
    # The thinking, the text, the call with its result.
    texts = [(d["chunk"]["type"], d["chunk"]["text"]) for k, d in events if k == "assistant/chunk"]
    assert texts == [("reasoning", "The user wants a short answer."), ("text", "Hello from the fake model."),
                     ("reasoning", "The user wants a short answer."),
                     ("text", "The command said: notes from the fixture")]
    call = next(d for k, d in events if k == "tool/call")
    assert (call["name"], call["arguments"], call["kind"], call["title"]) == (
        "Bash", {"command": "cat notes.txt"}, "execute", "Bash: cat notes.txt")
    result = next(d for k, d in events if k == "tool/result")
    assert result["content"] == [{"type": "text", "text": "notes from the fixture\nsecond line"}]
    assert result["native"]["toolUseResult"]["stdout"] == "notes from the fixture\nsecond line"
    # Nothing lost: every record's uuid is somewhere in the events' `native`.
    kept = orjson.dumps([d for _, d in events]).decode()
    assert all(r["uuid"] in kept for r in RECORDS if "uuid" in r)
    assert kept.count('"queue-operation"') == 4 and kept.count('"last-prompt"') == 2


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_an_import_shows_searches_and_counts_as_the_native_file_says(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    code, out, err = run_import(capsys, str(FIXTURE.parent), "--store", str(store), "--backend", kind)
    assert code == 0 and err == "" and "imported as session" in out
    sid = session_id_of(read().source)  # type: ignore[arg-type]
    events = stored(store, kind, sid)
    assert [(e["type"], e["data"]) for e in events] == native_events()
    times = {e["time"] for e in events}
    assert min(times) == 1796440900844  # the first prompt's timestamp, 2026-12-05T03:21:40.844Z
    shown = sessions(capsys, store, kind, "show", sid)
    assert "Say hello." in shown and "RUN: cat notes.txt" in shown and "Tool Bash (execute)" in shown
    assert "Total tokens: 360 in / 39 out (15 cache read, 45 cache write)" in shown
    assert f"  agent    claude-code 2.1.197, imported (its session {RECORDS[0]['sessionId']})\n" in shown
    assert f"  file     {FIXTURE}\n" in shown
    found = sessions(capsys, store, kind, "search", "fixture")
    assert sid[:8] in found
    stats = sessions(capsys, store, kind, "stats")
    assert "total           2       0            0          0         0    360      39          15           45" in stats
    by_agent = sessions(capsys, store, kind, "stats", "--by", "agent")  # the agent that wrote it
    assert "claude-code      2" in by_agent and "acp-bridge" not in by_agent
    assert sid[:8] in sessions(capsys, store, kind, "search", "hello", "--agent", "claude-code")
    listed = orjson.loads(sessions(capsys, store, kind, "list", "--json"))
    assert [(s["id"], s["imported"]["agent"]) for s in listed] == [(sid, "claude-code")]


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_importing_again_changes_nothing_and_appended_turns_add_only_themselves(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, native = tmp_path / "store", tmp_path / "native.jsonl"
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    second = next(i for i, r in enumerate(RECORDS) if r.get("message", {}).get("content") == "RUN: cat notes.txt")
    native.write_bytes(b"".join(lines[:second]))  # the file as it was after turn 1
    assert run_import(capsys, str(native), "--store", str(store), "--backend", kind)[0] == 0
    sid = session_id_of(read().source)  # type: ignore[arg-type]
    first = stored(store, kind, sid)
    assert [e["data"]["turn"] for e in first if e["type"] == "turn/end"] == [1]
    native.write_bytes(b"".join(lines))  # the agent went on
    code, out, _ = run_import(capsys, str(native), "--store", str(store), "--backend", kind)
    assert code == 0 and f"1 new turn(s) added to session {sid} (2 in all)" in out
    after = stored(store, kind, sid)
    assert after[: len(first)] == first  # what was there stays, byte for byte
    whole = tmp_path / "whole"
    run_import(capsys, str(native), "--store", str(whole), "--backend", kind)
    same_story([(e["type"], e["data"]) for e in after], [(e["type"], e["data"]) for e in stored(whole, kind, sid)])
    if kind == "jsonl":
        before = (store / "sessions" / f"{sid}.jsonl").read_bytes()
    code, out, _ = run_import(capsys, str(native), "--store", str(store), "--backend", kind)
    assert code == 0 and "nothing to add" in out
    assert stored(store, kind, sid) == after
    if kind == "jsonl":
        assert (store / "sessions" / f"{sid}.jsonl").read_bytes() == before


def test_bad_input_is_one_line_each_and_the_rest_is_imported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, store = tmp_path / "in", tmp_path / "store"
    folder.mkdir()
    (folder / "notes.jsonl").write_text("just some text\nand more\n")
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    odd = orjson.dumps({"type": "hologram", "sessionId": RECORDS[0]["sessionId"], "beam": 1}) + b"\n"
    (folder / "a.jsonl").write_bytes(b"".join([lines[0], b"{not json\n", odd, *lines[1:]]) + b'{"type": "us')
    code, out, err = run_import(capsys, str(folder), "--store", str(store))
    assert code == 0
    problems = err.splitlines()
    assert len(problems) == 3, err
    assert "a.jsonl:2: not JSON; skipped" in problems[0]
    assert "a.jsonl:20: not JSON (torn: the file ends inside it); skipped" in problems[1]
    assert "notes.jsonl: not a transcript of any agent this build reads (claude-code, " in problems[2]
    assert "a.jsonl (claude-code): imported as session" in out and "hologram x1" in out
    sid = out.split("imported as session ")[1].split()[0]
    events = stored(store, "jsonl", sid)
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/end"] == [1, 2]
    assert '"beam":1' in orjson.dumps([e["data"] for e in events]).decode()  # kept raw, not dropped
    # Nothing importable at all: exit status 1.
    code, out, err = run_import(capsys, str(folder / "notes.jsonl"), str(tmp_path / "absent"), "--store", str(store))
    assert code == 1 and out == "" and "absent: no such file or folder" in err


def test_what_claude_code_writes_besides_prompts_is_no_prompt() -> None:
    # Records of kinds the fixture does not hold, shaped as Claude Code writes them.
    sid = "11111111-2222-3333-4444-555555555555"

    def rec(kind: str, uuid: str, **fields: Any) -> bytes:
        return orjson.dumps({"type": kind, "uuid": uuid, "sessionId": sid, "cwd": "/w", "version": "1.0.0",
                             "timestamp": "2026-12-05T03:21:40.000Z", **fields})

    def user(uuid: str, content: Any, **fields: Any) -> bytes:
        return rec("user", uuid, message={"role": "user", "content": content}, **fields)

    def assistant(uuid: str, mid: str, blocks: list[Any], model: str = "claude-x") -> bytes:
        return rec("assistant", uuid, message={"id": mid, "model": model, "role": "assistant", "content": blocks,
                                               "usage": {"input_tokens": 3, "output_tokens": 2}})

    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    lines = [
        orjson.dumps({"type": "summary", "summary": "Fixing the build", "leafUuid": "u9"}),
        user("u1", "<command-name>/clear</command-name>"),
        user("u2", "Caveat: The messages below were generated by the user while running local commands."),
        user("u3", [{"type": "text", "text": "what is in this?"}, image]),
        user("u4", "context the harness adds", isMeta=True),
        assistant("u5", "m1", [{"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
                               {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/w/a"}}]),
        user("u6", [{"type": "tool_result", "tool_use_id": "t1", "is_error": True,
                     "content": [{"type": "text", "text": "no such file"}]}]),
        user("u7", "a subagent's prompt", isSidechain=True),
        assistant("u8", "m2", [{"type": "text", "text": "It failed."}], model="<synthetic>"),
        user("u9", "[Request interrupted by user]"),
    ]
    session = claude_code.read([line + b"\n" for line in lines], "f")
    assert session.title == "Fixing the build" and session.unknown == {}
    made = [(kind, data) for turn in session.turns for _, (kind, data) in turn.items]
    assert [d["content"] for k, d in made if k == "user/message"] == [
        [{"type": "text", "text": "what is in this?"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}]]
    (result,) = [d for k, d in made if k == "tool/result"]
    assert result["isError"] and result["content"] == [{"type": "text", "text": "no such file"}]
    assert [d.get("model") for k, d in made if k == "turn/start"] == ["claude-x"]  # <synthetic> is no model
    kept = orjson.dumps([d for _, d in made]).decode()
    for raw in ("/clear", "Caveat: The messages", "context the harness adds", "server_tool_use",
                "a subagent's prompt", "[Request interrupted by user]", "Fixing the build"):
        assert raw in kept, raw  # kept raw, not prompts and not lost
