"""Many loads at once in one agent (issue 34, point 1): an editor that reopens its tabs at
start-up loads every session together. Each load is answered with its replay, on every
backend, and a load that fails never keeps its session's owner lock."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.support.acp_client import AgentProcess
from tests.support.wrapped import WrappedProcess, serve_command

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SESSIONS = 12


def agent(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> AgentProcess:
    """`serve` on a backend, or `wrap` (SQLite) in front of `serve` (JSONL)."""
    if kind == "postgres":
        return AgentProcess(request.getfixturevalue("pg_dsn"), backend="postgres")
    if kind == "wrap":
        return WrappedProcess(tmp_path / "store", serve_command(tmp_path / "child-store"), backend="sqlite")
    return AgentProcess(tmp_path / "store", backend=kind)


@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres", "wrap"])
async def test_twelve_loads_at_once_are_each_answered_and_leave_no_lock(
        tmp_path: Path, work: Path, kind: str, request: pytest.FixtureRequest) -> None:
    async with agent(kind, tmp_path, request) as first:
        await first.initialize()
        sids = [await first.new_session(work) for _ in range(SESSIONS)]
        for n, sid in enumerate(sids):
            await first.prompt(sid, f"words of session {n}")
    async with agent(kind, tmp_path, request) as second:
        await second.initialize()
        answers: dict[str, dict[str, object]] = {}

        async def load(sid: str) -> None:
            answers[sid] = await second.request_raw(
                "session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []}, timeout=60)

        async with anyio.create_task_group() as tg:
            for sid in sids:
                tg.start_soon(load, sid)
        failed = {sid: a["error"] for sid, a in answers.items() if "error" in a}
        assert not failed, failed
        for n, sid in enumerate(sids):
            said = [u["content"]["text"] for u in second.replayed(sid) if u["sessionUpdate"] == "agent_message_chunk"]
            assert "".join(said).strip() == f"words of session {n}", (sid, said)
        # Each closes and loads again: no lock kept anywhere.
        for sid in sids:
            assert await second.request("session/close", {"sessionId": sid}) == {}
            await second.load_session(sid, work)
