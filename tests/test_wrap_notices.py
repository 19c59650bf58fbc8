"""Compaction and notices through `acp-bridge wrap` (ACP v1.25; docs/wrap.md,
"Compaction and notices").

In front of tests/support/compacting_agent.py, which sends a notice and a compaction
(in progress, two summary chunks, completed) in every turn whatever it was told: the
agent is sent the editor's `initialize` as it came; an editor that advertised them is
sent them live; one that did not is sent neither (the wrapper withholds what the agent
should not have sent); the log records them all the same (the compaction as
`context/compaction` with the update as sent, its chunks and the notice as they came);
a load replays the compaction, as it was sent, only to an editor that advertised
compaction, and never the notice. The wrapper's own notices: a restarted agent, and a
cancel the agent did not honour (tests/support/unruly_agent.py), to an editor that
takes notices only.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from session import check_invariants
from tests.support.compacting_agent import NOTICE
from tests.support.logs import loaded_events
from tests.support.unruly import chunks, unruly_command
from tests.support.wrapped import WrappedProcess
from tests.test_sessions_cli import cli

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

AGENT = Path(__file__).resolve().parent / "support" / "compacting_agent.py"
COMPACTION: dict[str, Any] = {"session": {"compaction": {}}}
NOTICES: dict[str, Any] = {"session": {"notices": {}}}
BOTH: dict[str, Any] = {"session": {"compaction": {}, "notices": {}}}
SENT = [NOTICE,
        {"sessionUpdate": "compaction_update", "compactionId": "cmp_1", "status": "in_progress"},
        {"sessionUpdate": "compaction_summary_chunk", "compactionId": "cmp_1",
         "content": {"type": "text", "text": "Kept: "}},
        {"sessionUpdate": "compaction_summary_chunk", "compactionId": "cmp_1",
         "content": {"type": "text", "text": "the plan."}},
        {"sessionUpdate": "compaction_update", "compactionId": "cmp_1", "status": "completed",
         "_meta": {"vendor": {"ms": 12}}}]
EXTENSIONS = ("notice", "compaction_update", "compaction_summary_chunk")


@pytest.fixture
def agent_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("COMPACTING_AGENT_RECORD", str(tmp_path / "init.jsonl"))
    return [sys.executable, str(AGENT)]


def extensions(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u for u in updates if u["sessionUpdate"] in EXTENSIONS]


def initialized(tmp_path: Path) -> list[dict[str, Any]]:
    """The `initialize` params the agent was sent, in order."""
    return [orjson.loads(line) for line in (tmp_path / "init.jsonl").read_bytes().splitlines()]


async def test_an_agents_compaction_is_passed_on_recorded_and_replayed_to_an_editor_that_asked(
        tmp_path: Path, work: Path, agent_command: list[str]) -> None:
    store = tmp_path / "store"
    async with WrappedProcess(store, agent_command) as editor:
        await editor.initialize(BOTH)
        sid = await editor.new_session(work)
        assert (await editor.prompt(sid, "go"))["stopReason"] == "end_turn"
        assert extensions(editor.updates_of(sid)) == SENT  # live, as the agent sent them
        assert not editor.violations
    assert initialized(tmp_path)[0]["clientCapabilities"] == BOTH  # the editor's, as it came
    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    recorded = [(e["type"], e["data"].get("status"), e["data"].get("summary")) for e in events
                if e["type"] == "context/compaction"]
    kept = [{"type": "text", "text": "Kept: "}, {"type": "text", "text": "the plan."}]
    assert recorded == [("context/compaction", "in_progress", []), ("context/compaction", "completed", kept)]
    assert [e["data"]["update"]["sessionUpdate"] for e in events if e["type"] == "wrapped/update"] == [
        "notice", "compaction_summary_chunk", "compaction_summary_chunk"]
    # For the transcript: `sessions show` has the notice after the prompt, the compaction in its step.
    shown = cli("--store", str(store), "show", sid)
    assert shown.code == 0, shown.err
    lines = shown.out.splitlines()
    assert lines[lines.index("    go") + 1] == "  Notice (warning): MCP server unavailable — Continuing without it."
    assert "    Compaction, completed: nothing of this log replaced" in lines
    # A load: the compaction as it was sent, to an editor that advertised it; the notice never.
    async with WrappedProcess(store, agent_command) as editor:
        await editor.initialize(BOTH)
        await editor.load_session(sid, work)
        assert extensions(editor.replayed(sid)) == SENT[1:]
        assert not editor.violations
    async with WrappedProcess(store, agent_command) as editor:
        await editor.initialize(NOTICES)
        await editor.load_session(sid, work)
        assert extensions(editor.replayed(sid)) == []


async def test_an_editor_that_did_not_ask_is_sent_neither_and_the_log_keeps_both(
        tmp_path: Path, work: Path, agent_command: list[str]) -> None:
    store = tmp_path / "store"
    async with WrappedProcess(store, agent_command) as editor:
        await editor.initialize()
        sid = await editor.new_session(work)
        assert (await editor.prompt(sid, "go"))["stopReason"] == "end_turn"
        assert extensions(editor.updates_of(sid)) == []
        assert [u["content"]["text"] for u in editor.updates_of(sid)
                if u["sessionUpdate"] == "agent_message_chunk"] == ["Done."]
    assert initialized(tmp_path)[0]["clientCapabilities"] == {}
    events = loaded_events(store, sid)
    assert [e["data"]["status"] for e in events if e["type"] == "context/compaction"] == ["in_progress", "completed"]
    assert next(e["data"]["update"] for e in events if e["type"] == "wrapped/update") == NOTICE


async def test_a_restarted_agent_is_a_notice_to_an_editor_that_takes_them(
        tmp_path: Path, work: Path, agent_command: list[str]) -> None:
    async with WrappedProcess(tmp_path / "store", agent_command) as editor:
        await editor.initialize(NOTICES)
        sid = await editor.new_session(work)
        died = await editor.prompt(sid, "die")  # the crash closers end it
        assert died["_meta"]["acpBridge"]["reason"] == {"kind": "interrupted", "cause": "crash"}
        before = len(editor.updates_of(sid))
        assert (await editor.prompt(sid, "again"))["stopReason"] == "end_turn"
        ours = [u for u in editor.updates_of(sid)[before:]
                if u["sessionUpdate"] == "notice" and u["title"] != NOTICE["title"]]
        assert ours == [{"sessionUpdate": "notice", "severity": "warning", "title": "The agent was restarted",
                         "description": "The wrapped agent had stopped and was restarted; this session's context "
                                        "is restored in it."}]
        assert not editor.violations


@pytest.mark.parametrize("caps", [NOTICES, {}], ids=["notices", "none"])
async def test_a_cancel_the_agent_did_not_honour_is_a_notice_before_the_answer(
        tmp_path: Path, work: Path, monkeypatch: pytest.MonkeyPatch, caps: dict[str, Any]) -> None:
    monkeypatch.setenv("ACP_BRIDGE_CANCEL_GRACE", "0.5")
    async with WrappedProcess(tmp_path / "store", unruly_command(tmp_path / "read.jsonl")) as editor:
        await editor.initialize(caps)
        sid = await editor.new_session(work)
        answer = await editor.cancelled_when(sid, "stream 400 10", lambda: len(chunks(editor, sid)) >= 3,
                                             request_id="p1")
        assert answer["result"]["stopReason"] == "cancelled"
        notices = [u for u in editor.updates_of(sid) if u["sessionUpdate"] == "notice"]
        assert notices == ([{"sessionUpdate": "notice", "severity": "warning",
                             "title": "The agent did not stop when cancelled",
                             "description": "It had not answered the cancelled prompt 0.5 s later: acp-bridge ended "
                                            "the turn. What the agent still sends for it is dropped."}]
                           if caps else [])
        # Before the answer: the editor reads it with the turn it is about.
        at = next(n for n, (d, m) in enumerate(editor.transcript) if d == "<-" and m.get("id") == "p1")
        assert all(n < at for n, (d, m) in enumerate(editor.transcript)
                   if d == "<-" and m.get("method") == "session/update"
                   and m["params"]["update"]["sessionUpdate"] == "notice")
