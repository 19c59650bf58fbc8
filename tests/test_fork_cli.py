"""Forks from a terminal: `acp-bridge sessions fork ID [--at-turn N]` (prints the new id;
the fork loads in an agent) and chat's `/fork [TURN]` (the chat goes on in the fork),
as real processes, on both file backends."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from session import SessionStore, open_backend
from session.backends.base import read_stored
from tests.support.acp_client import AgentProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    return subprocess.run([sys.executable, "-m", "acp_bridge", *args], input=stdin, capture_output=True, text=True,
                          encoding="utf-8", env={**env, "PYTHONUNBUFFERED": "1"}, timeout=30, check=False)


def events(store: Path, kind: str, sid: str) -> list[Any]:
    backend = open_backend(kind, store)
    try:
        return [(e["type"], e["data"]) for e in read_stored(backend.read_stream(sid)).events]
    finally:
        backend.close()


def sessions(store: Path, kind: str) -> dict[str, dict[str, Any]]:
    s = SessionStore(open_backend(kind, store))
    try:
        return {summary["id"]: dict(summary) for summary in s.list()}
    finally:
        s.close()


@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
async def test_sessions_fork_prints_a_fork_that_loads(kind: str, tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with AgentProcess(store, backend=kind) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        for text in ("one", "two", "three"):
            await agent.prompt(sid, text)
        original = events(store, kind, sid)
        # While the agent has it open: forked without its lock, and left alone.
        made = run("sessions", "--store", str(store), "--backend", kind, "fork", sid[:8], "--at-turn", "2")
        assert made.returncode == 0, made.stderr
        fid = made.stdout.strip()
        assert fid in sessions(store, kind) and fid != sid
        assert (await agent.prompt(sid, "four"))["_meta"]["acpBridge"]["turn"] == 4
    cut = next(i for i, (t, d) in enumerate(original) if t == "turn/start" and d["turn"] == 3)
    assert events(store, kind, fid) == original[:cut]
    assert events(store, kind, sid)[: len(original)] == original
    whole = run("sessions", "--store", str(store), "--backend", kind, "fork", sid).stdout.strip()
    assert [d["turn"] for t, d in events(store, kind, whole) if t == "turn/end"] == [1, 2, 3, 4]
    past = run("sessions", "--store", str(store), "--backend", kind, "fork", sid, "--at-turn", "7")
    assert past.returncode == 2 and "a fork can be made at turn 0..4, not 7" in past.stderr and not past.stdout
    negative = run("sessions", "--store", str(store), "--backend", kind, "fork", sid, "--at-turn", "-1")
    assert negative.returncode == 2 and not negative.stdout
    assert len(sessions(store, kind)) == 3  # the original and its two forks: nothing of the refused ones
    shown = run("sessions", "--store", str(store), "--backend", kind, "show", fid)
    assert f"  forked   from {sid} at turn 2\n" in shown.stdout, shown.stdout
    listed = orjson.loads(run("sessions", "--store", str(store), "--backend", kind, "list", "--json").stdout)
    assert {s["id"]: s.get("forkedFrom") for s in listed} == {
        sid: None, fid: {"sessionId": sid, "turn": 2}, whole: {"sessionId": sid, "turn": 4}}
    async with AgentProcess(store, backend=kind) as again:
        await again.initialize()
        loaded = await again.load_session(fid, work)
        assert loaded["_meta"]["acpBridge"]["turns"] == 2
        assert (await again.prompt(fid, "after two"))["_meta"]["acpBridge"]["turn"] == 3


def test_chat_fork_goes_on_in_the_fork(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    chat = run("chat", "--store", str(store), "--cwd", str(work),
               stdin="first words\nsecond words\n/fork 1\nin the fork\n/fork 9\n/fork x\n/quit\n")
    assert chat.returncode == 0, chat.stderr
    listed = sessions(store, "jsonl")
    assert len(listed) == 2
    fid = next(s for s in listed if f"now in session {s}]" in chat.stdout)
    sid = next(s for s in listed if s != fid)
    assert f"[forked session {sid} at turn 1: now in session {fid}]" in chat.stdout
    assert [d["turn"] for t, d in events(store, "jsonl", fid) if t == "turn/end"] == [1, 2]
    said = [d["content"][0]["text"] for t, d in events(store, "jsonl", fid) if t == "user/message"]
    assert said == ["first words", "in the fork"]
    assert [d["content"][0]["text"] for t, d in events(store, "jsonl", sid) if t == "user/message"] == [
        "first words", "second words"]
    assert "a fork can be made at turn 0..2, not 9" in chat.stderr and "usage: /fork [TURN]" in chat.stderr
