"""The real agent on a PostgreSQL store (tests/support/pg_server.py): two agent
processes, each with its own working folder, stand for two machines sharing one
database. The second is refused a session the first holds (-32001, naming host and
pid), loads it once the first is killed with SIGKILL mid-turn (the server dropped the
lock with the connection), with the interrupted turn closed; a server that goes away
mid-turn gives the client a clear error, and the agent reconnects on the next prompt.
The connection string carries a password, which never shows."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import pytest

from session import SessionStore, check_invariants, open_backend
from tests.support.acp_client import AgentError, AgentProcess, write_script
from tests.support.pg_server import PASSWORD, PgServer

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


@pytest.fixture
def tcp_dsn(pg_server: PgServer, pg_dsn: str) -> str:
    """The emptied test database over loopback TCP, with the password in the string."""
    return pg_server.tcp_dsn(pg_dsn.split("?")[0].rsplit("/", 1)[1])


def machine(tmp_path: Path, name: str) -> Path:
    work = tmp_path / name
    work.mkdir()
    return work


def agent(dsn: str, work: Path, model: str = "echo") -> AgentProcess:
    return AgentProcess(dsn, backend="postgres", model=model, cwd=work)


def texts(agent: AgentProcess, sid: str, kind: str = "agent_message_chunk") -> list[str]:
    return [u["content"]["text"] for u in agent.updates_of(sid) if u["sessionUpdate"] == kind]


async def load_when_free(agent: AgentProcess, params: dict[str, Any]) -> Any:
    """session/load, again while the server has not yet noticed the dead owner's
    connection is gone (it notices at once on a local socket; this is slack)."""
    for _ in range(50):
        try:
            return await agent.request("session/load", params)
        except AgentError as exc:
            if (exc.data or {}).get("code") != "session_locked":
                raise
            await anyio.sleep(0.1)
    raise AssertionError("the killed agent's lock was never released")


async def test_one_owner_across_machines_and_kill9_mid_turn(tmp_path: Path, tcp_dsn: str) -> None:
    one, two = machine(tmp_path, "laptop"), machine(tmp_path, "ci-runner")
    model = write_script(tmp_path / "script.json", {"text": "hello"},
                         {"text": "a b c", "hang": True})
    async with agent(tcp_dsn, one, model) as first, agent(tcp_dsn, two) as second:
        await first.initialize()
        await second.initialize()
        sid = await first.new_session(one)
        assert (await first.prompt(sid, "one"))["stopReason"] == "end_turn"
        params = {"sessionId": sid, "cwd": str(two), "mcpServers": []}
        with pytest.raises(AgentError) as err:
            await second.request("session/load", params)
        assert err.value.code == -32001
        data = err.value.data or {}
        assert data["code"] == "session_locked" and data["pid"] == first.proc.pid
        assert data["host"] == socket.gethostname()
        assert f"process {first.proc.pid} on {socket.gethostname()}" in str(err.value.message)
        async with anyio.create_task_group() as tg:
            first.prompt_soon(tg, sid, "remember me")
            await first.wait_for(lambda: len(texts(first, sid)) == 4)  # hello, a, b, c
            first.kill9()
            with anyio.fail_after(5):
                await first.proc.wait()
            tg.cancel_scope.cancel()
        loaded = await load_when_free(second, params)
        assert loaded["_meta"]["acpBridge"]["repair"]["interruptedTurn"] == 2
        *words, notice = texts(second, sid)
        assert len(words) == 4 and words[1:] == ["a ", "b ", "c"]  # all the client was shown
        assert "interrupted" in notice
        assert texts(second, sid, "user_message_chunk") == ["one", "remember me"]
        assert (await second.prompt(sid, "again"))["_meta"]["acpBridge"]["turn"] == 3
    for proc in (first, second):
        assert PASSWORD.encode() not in proc.stderr
    assert b"***@127.0.0.1" in second.stderr  # the start-up line shows the store, redacted


async def test_server_gone_mid_turn_answers_clearly_and_reconnects(
        tmp_path: Path, pg_server: PgServer, tcp_dsn: str) -> None:
    work = machine(tmp_path, "work")
    words = " ".join(f"w{i}" for i in range(200))  # 10 s at 50 ms a chunk: stopped well before
    model = write_script(tmp_path / "script.json", {"text": "before"}, {"text": words},
                         {"text": "after"}, chunk_delay_ms=50)
    async with agent(tcp_dsn, work, model) as live:
        await live.initialize()
        sid = await live.new_session(work)
        assert (await live.prompt(sid, "one"))["stopReason"] == "end_turn"
        async with anyio.create_task_group() as tg:
            answer = live.prompt_soon(tg, sid, "two", timeout=60)
            await live.wait_for(lambda: len(texts(live, sid)) >= 4)
            await anyio.to_thread.run_sync(pg_server.stop)
            await live.wait_for(lambda: bool(answer), timeout=30)
        try:
            assert answer["error"]["code"] == -32603, answer
            assert answer["error"]["data"]["code"] == "store_io"
            message = answer["error"]["message"]
            assert "PostgreSQL store" in message and "rolled back to seq" in message
            assert PASSWORD not in message and "***" in message
        finally:
            await anyio.to_thread.run_sync(pg_server.start)
        again = await live.prompt(sid, "three")  # reconnected; the failed turn closed first
        assert again["stopReason"] == "end_turn" and again["_meta"]["acpBridge"]["turn"] == 3
    assert PASSWORD.encode() not in live.stderr
    store = SessionStore(open_backend("postgres", tcp_dsn))
    loaded = store.load(sid)
    events = list(loaded.log.events)
    loaded.log.close()
    store.close()
    assert not loaded.report.repaired
    check_invariants(events, closed=True)
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert [r["kind"] for r in ends] == ["completed", "error", "completed"]
    assert ends[1]["code"] == "store_io"


async def test_session_list_pages_through_thousands(tmp_path: Path, pg_dsn: str) -> None:
    """`session/list` over 3,000 stored sessions: every one once, a page at a time."""
    import psycopg

    work = machine(tmp_path, "work")
    async with agent(pg_dsn, work) as live:
        await live.initialize()
        mine = await live.new_session(work)  # also creates the schema
        with psycopg.connect(pg_dsn, autocommit=True) as db:
            db.execute("INSERT INTO acp_bridge.sessions SELECT gen_random_uuid()::text, '{}', %s, "
                       "'t' || n, n, n FROM generate_series(1, 3000) n", (str(work),))
        seen: list[str] = []
        cursor = None
        with anyio.fail_after(30):
            while True:
                page = await live.request("session/list", {"cwd": str(work)} | (
                    {"cursor": cursor} if cursor else {}))
                seen += [s["sessionId"] for s in page["sessions"]]
                cursor = page.get("nextCursor")
                if cursor is None:
                    break
        assert len(seen) == len(set(seen)) == 3001 and seen[0] == mine  # newest first
