"""Concurrency as a table (issue 34, "concurrency is tested, not hoped for"): N news,
loads, resumes, forks, prompts, closes and deletes at once in one agent, all of them
mixed with lists, each of them at once on one session (with a delete among them or
not), loads the store refuses, and two agents on one store, on JSONL, SQLite and PostgreSQL, through `serve` and
`wrap`, real processes, each case bounded in time.

Every case checks the same four things:
- every request is answered once, with its id;
- no answer is -32603 (an internal error is a bug, whatever the race);
- no lock is kept: after the case's sessions are closed (or their request failed),
  another agent, started while the first still runs, opens every one of them;
- every session reloads whole: the words of each of its turns are replayed.

The default run takes every operation of the table in turn in one agent per backend and
host (`test_at_once_smoke`: a smoke size, a few processes per case); the `long` marker
runs each operation as a case of its own (`test_at_once`) and the races at `SOAK`
sessions, several rounds (`test_at_once_soak`; .ci/run's long step). The phases are
tests/support/concurrency.py's."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.support.acp_client import AgentProcess, write_script
from tests.support.concurrency import OPS, Case, at_once, check_answered_once, run_ops
from tests.support.wrapped import WrappedProcess, serve_command

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SMOKE = 3
SOAK = 16
CASE_SECONDS = 50  # each case, set-up and checks included (pytest's own limit is 60)
SOAK_SECONDS = 280
BACKENDS = ("jsonl", "sqlite", "postgres")
HOSTS = ("serve", "wrap")


def make_case(host: str, backend: str, tmp_path: Path, work: Path, request: pytest.FixtureRequest) -> Case:
    store: Path | str = request.getfixturevalue("pg_dsn") if backend == "postgres" else tmp_path / "store"
    return Case(host, backend, store, tmp_path, work)


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("backend", BACKENDS)
async def test_at_once_smoke(tmp_path: Path, work: Path, backend: str, host: str,
                             request: pytest.FixtureRequest) -> None:
    """Every op of the table in turn, in one agent per backend and host."""
    case = make_case(host, backend, tmp_path, work, request)
    with anyio.fail_after(CASE_SECONDS):
        await run_ops(case, list(OPS), SMOKE)


@pytest.mark.long
@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", OPS)
async def test_at_once(tmp_path: Path, work: Path, op: str, backend: str, host: str,
                       request: pytest.FixtureRequest) -> None:
    case = make_case(host, backend, tmp_path, work, request)
    with anyio.fail_after(CASE_SECONDS):
        await run_ops(case, [op], SMOKE)


@pytest.mark.long
@pytest.mark.timeout(SOAK_SECONDS + 30)
@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["mixed", "one session deleted", "two agents"])
async def test_at_once_soak(tmp_path: Path, work: Path, op: str, backend: str, host: str,
                            request: pytest.FixtureRequest) -> None:
    for round_ in range(3):
        case = make_case(host, backend, tmp_path / f"round-{round_}", work, request)
        case.tmp.mkdir()
        if backend == "postgres" and round_:
            case.store = request.getfixturevalue("pg_server").emptied(request.getfixturevalue("pg_database"))
        with anyio.fail_after(SOAK_SECONDS / 3):
            await run_ops(case, [op], SOAK)


@pytest.mark.parametrize("second", ["session/close", "session/delete"])
@pytest.mark.parametrize("host", HOSTS)
async def test_a_second_close_while_the_first_waits_for_the_running_prompt(
        tmp_path: Path, work: Path, host: str, second: str) -> None:
    """Found by the matrix's one-session race through `wrap`: two `session/close`s (or a
    close and a delete) of a session whose prompt runs both waited for the prompt, then
    both closed the session: the wrapper's second was -32603 ("no rule for Close"). The
    second now waits for the first's close, and is answered as it is."""
    model = write_script(tmp_path / "script.json", {"text": "a b c", "hang": True}, chunk_delay_ms=5)
    if host == "wrap":
        agent: AgentProcess = WrappedProcess(tmp_path / "store", serve_command(tmp_path / "child", model))
    else:
        agent = AgentProcess(tmp_path / "store", model=model)
    with anyio.fail_after(CASE_SECONDS):
        async with agent:
            await agent.initialize()
            sid = await agent.new_session(work)
            async with anyio.create_task_group() as tg:
                running = agent.prompt_soon(tg, sid, "stream then hang", timeout=CASE_SECONDS)
                await agent.wait_for(lambda: any(u["sessionUpdate"] == "agent_message_chunk"
                                                 for u in agent.updates_of(sid)))
                answers = await at_once(agent, [("session/close", {"sessionId": sid}), (second, {"sessionId": sid})])
            assert [a.get("result") for a in answers] == [{}, {}], answers
            assert running["result"]["stopReason"] == "cancelled"
            check_answered_once(agent)
        if second == "session/close":  # no lock kept: another agent opens it
            async with AgentProcess(tmp_path / "store", model=model) as other:
                await other.initialize()
                await other.load_session(sid, work)
