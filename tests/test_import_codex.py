"""`acp-bridge import` of codex's rollouts (docs/import.md, "codex"): the reader over the
rollout codex 0.171.0 wrote (tests/recorded/native/), then the import and what
`sessions show/search/stats` say of it against the file's own totals; appended turns."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from acp_bridge.cli.importer import codex
from acp_bridge.cli.importer.main import main as import_main
from acp_bridge.cli.importer.native import NativeSession
from acp_bridge.cli.importer.store import session_id_of
from acp_bridge.cli.sessions.main import main as sessions_main
from session import open_backend
from session.backends.base import read_stored
from session.invariants import check_invariants
from tests.test_import_claude import same_story

FIXTURE = next((Path(__file__).parent / "recorded" / "native" / "codex-0.171.0").glob("*.jsonl"))
RECORDS = [orjson.loads(line) for line in FIXTURE.read_bytes().splitlines()]


def read(path: Path = FIXTURE) -> NativeSession:
    return codex.read(path.read_bytes().splitlines(keepends=True), str(path))


def flat(session: NativeSession) -> list[Any]:
    return [(kind, data) for turn in session.turns for _, (kind, data) in turn.items]


def test_the_record_types_codex_wrote_and_what_each_became() -> None:
    seen = Counter((r["type"], r["payload"].get("type")) for r in RECORDS)
    assert set(seen) == {
        ("session_meta", None), ("event_msg", "task_started"), ("event_msg", "item_completed"),
        ("event_msg", "thread_settings_applied"), ("event_msg", "token_count"), ("event_msg", "task_complete"),
        ("response_item", "message"), ("response_item", "function_call"), ("response_item", "function_call_output"),
        ("world_state", None), ("turn_context", None), ("token_usage_record", None)}
    session = read()
    assert session.unknown == {} and session.problems == []
    assert session.source is not None and (session.source.agent, session.source.version, session.source.cwd) == (
        "codex", "0.171.0", "/tmp/acp-fixture")
    assert session.source.session_id == RECORDS[0]["payload"]["id"]
    events = flat(session)
    check_invariants([{"type": k, "seq": i, "time": 0, "data": d} for i, (k, d) in enumerate(events)], closed=True)
    # Prompts: the user's messages only, not codex's <environment_context> and instructions.
    users = [r["payload"] for r in RECORDS if r["type"] == "response_item" and r["payload"].get("role") == "user"]
    assert len(users) == 4
    assert [d["content"] for k, d in events if k == "user/message"] == [
        [{"type": "text", "text": "Say hello."}], [{"type": "text", "text": "RUN: cat notes.txt"}]]
    # Usage once per model response: the file's own thread total.
    usages = [d["usage"] for k, d in events if k == "assistant/message"]
    total = [r["payload"]["thread_token_usage"] for r in RECORDS if r["type"] == "token_usage_record"][-1]
    assert len(usages) == 3
    assert (sum(u["inputTokens"] for u in usages), sum(u["outputTokens"] for u in usages)) == (
        total["input_tokens"], total["output_tokens"])
    call = next(d for k, d in events if k == "tool/call")
    assert (call["callId"], call["name"], call["arguments"], call["kind"]) == (
        "call_fake_1", "exec_command", {"cmd": "cat notes.txt"}, "execute")
    result = next(d for k, d in events if k == "tool/result")
    assert not result["isError"] and "notes from the fixture\nsecond line" in result["content"][0]["text"]
    kept = orjson.dumps([d for _, d in events]).decode()
    assert kept.count('"token_count"') == 3 and '"world_state"' in kept  # kept raw


@pytest.mark.parametrize("output,failed", [
    ("Process exited with code 0\nOutput:\nok", False), ("Process exited with code 2\nOutput:\nno", True),
    ({"content": "done", "success": True}, False), ({"content": "denied", "success": False}, True), ("plain", False)])
def test_a_result_fails_as_codex_says(output: Any, failed: bool) -> None:
    lines = [orjson.dumps(r) for r in (
        {"timestamp": "2026-12-05T03:41:53.520Z", "type": "session_meta", "payload": {"id": "s", "cwd": "/w"}},
        {"timestamp": "2026-12-05T03:41:54.000Z", "type": "response_item",
         "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}},
        {"timestamp": "2026-12-05T03:41:55.000Z", "type": "response_item",
         "payload": {"type": "function_call", "name": "shell", "arguments": "{\"command\": [\"ls\"]}", "call_id": "c"}},
        {"timestamp": "2026-12-05T03:41:56.000Z", "type": "response_item",
         "payload": {"type": "function_call_output", "call_id": "c", "output": output}},
        {"timestamp": "2026-12-05T03:41:57.000Z", "type": "mystery", "payload": {}})]
    session = codex.read(lines, "f")
    result = next(d for k, d in flat(session) if k == "tool/result")
    assert result["isError"] is failed and session.unknown == {"mystery": 1}


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_an_import_shows_and_counts_as_the_rollout_says_and_takes_appended_turns(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, native = tmp_path / "store", tmp_path / "rollout.jsonl"
    lines = FIXTURE.read_bytes().splitlines(keepends=True)
    second = next(i for i, r in enumerate(RECORDS) if r["type"] == "event_msg"
                  and r["payload"]["type"] == "task_started" and i > 1)
    native.write_bytes(b"".join(lines[:second]))
    assert import_main([str(native), "--store", str(store), "--backend", kind]) == 0
    native.write_bytes(b"".join(lines))
    assert import_main([str(native), "--store", str(store), "--backend", kind]) == 0
    assert "1 new turn(s) added" in capsys.readouterr().out
    sid = session_id_of(read().source)  # type: ignore[arg-type]
    backend = open_backend(kind, store)
    try:
        stored = [(e["type"], e["data"]) for e in read_stored(backend.read_stream(sid)).events]
    finally:
        backend.close()
    same_story(stored, flat(read(native)))
    assert sessions_main(["--store", str(store), "--backend", kind, "show", sid]) == 0
    shown = capsys.readouterr().out
    assert "Tool exec_command (execute)" in shown and "Total tokens: 360 in / 27 out" in shown
    assert sessions_main(["--store", str(store), "--backend", kind, "search", "notes"]) == 0
    assert sid[:8] in capsys.readouterr().out


def test_a_session_wrap_recorded_live_is_not_imported_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # codex-acp's session id is codex's own thread id: the rollout's session_meta id.
    from session import SessionStore

    store = tmp_path / "store"
    live = SessionStore(open_backend("jsonl", store))
    log = live.create(cwd="/tmp/acp-fixture", wrapped={"command": ["codex-acp"], "sessionId": RECORDS[0]["payload"]["id"]})
    log.close()
    live.close()
    assert import_main([str(FIXTURE), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert f"recorded live by acp-bridge wrap as session {log.id}; not imported again" in out
    reader = open_backend("jsonl", store).reader()
    try:
        assert reader.ids() == [log.id]  # one session, not two
    finally:
        reader.close()


def test_an_older_rollout_without_provenance_reads_the_same() -> None:
    # Older codex: user messages carry no content_item_metadata; codex's own blocks are
    # told by their tags; reasoning items; usage only in event_msg token_count.
    def rec(kind: str, payload: dict[str, Any], second: int) -> bytes:
        return orjson.dumps({"timestamp": f"2025-06-01T10:00:{second:02d}.000Z", "type": kind, "payload": payload})

    def user(text: str, second: int) -> bytes:
        return rec("response_item", {"type": "message", "role": "user",
                                     "content": [{"type": "input_text", "text": text}]}, second)

    usage = {"input_tokens": 50, "cached_input_tokens": 20, "output_tokens": 7, "reasoning_output_tokens": 3}
    lines = [
        rec("session_meta", {"id": "old-1", "cwd": "/w", "cli_version": "0.20.0", "timestamp": "2025-06-01T10:00:00Z"},
            0),
        user("<user_instructions>\nbe brief\n</user_instructions>", 1),
        user("<environment_context>\n  <cwd>/w</cwd>\n</environment_context>", 2),
        user("fix it", 3),
        rec("event_msg", {"type": "user_message", "message": "fix it"}, 3),
        rec("turn_context", {"model": "gpt-old", "cwd": "/w"}, 4),
        rec("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Looking"}],
                              "encrypted_content": "xyz"}, 5),
        rec("response_item", {"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": "Fixed."}]}, 6),
        rec("event_msg", {"type": "token_count", "info": {"last_token_usage": usage, "total_token_usage": usage}}, 7),
        rec("event_msg", {"type": "token_count", "info": {"last_token_usage": usage, "total_token_usage": usage}}, 8),
    ]
    session = codex.read([line + b"\n" for line in lines], "f")
    made = flat(session)
    assert [d["content"] for k, d in made if k == "user/message"] == [[{"type": "text", "text": "fix it"}]]
    (message,) = [d for k, d in made if k == "assistant/message"]
    assert message["content"] == [{"type": "reasoning", "text": "Looking"}, {"type": "text", "text": "Fixed."}]
    assert message["usage"] == {"inputTokens": 50, "outputTokens": 7, "cacheReadTokens": 20, "reasoningTokens": 3}
    assert made[0][1]["model"] == "gpt-old" and session.source is not None
    assert (session.source.version, session.source.created) == ("0.20.0", 1748772000000)
    assert "be brief" in orjson.dumps(made).decode() and "encrypted_content" in orjson.dumps(made).decode()
