"""Concurrency as a table (issue 34, "concurrency is tested, not hoped for"): N loads,
resumes, forks, prompts, closes and deletes at once in one agent, all of them mixed,
and two agents on one store, on JSONL, SQLite and PostgreSQL, through `serve` and
`wrap`, real processes, each case bounded in time.

Every case checks the same four things:
- every request is answered once, with its id;
- no answer is -32603 (an internal error is a bug, whatever the race);
- no lock is kept: after the case's sessions are closed (or their request failed),
  another agent, started while the first still runs, opens every one of them;
- every session reloads whole: the words of each of its turns are replayed.

The default run takes a smoke size (`SMOKE` sessions); the `long` marker runs the same
table at `SOAK` sessions, several rounds (.ci/run's long step)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.acp_client import AgentProcess
from tests.support.wrapped import WrappedProcess, serve_command

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SMOKE = 3
SOAK = 16
CASE_SECONDS = 50  # each case, set-up and checks included (pytest's own limit is 60)
SOAK_SECONDS = 280

OPS = ("load", "resume", "fork", "prompt", "close", "delete", "mixed", "one session", "one session deleted",
       "two agents")
# What a request on one session may be refused with while others on it run: a second
# prompt (-32001), a session closed or deleted meanwhile (-32002).
RACE_REFUSALS = {-32001, -32002}
BACKENDS = ("jsonl", "sqlite", "postgres")
HOSTS = ("serve", "wrap")
INTERNAL = -32603


@dataclass
class Case:
    host: str
    backend: str
    store: Path | str
    tmp: Path
    work: Path
    runs: int = 0

    def agent(self) -> AgentProcess:
        """A new agent on the case's store (`wrap` in front of `serve`: each wrapper has
        a child store of its own, so a second wrapper's child never meets the first's
        locks and only the wrapper's store is shared)."""
        self.runs += 1
        if self.host == "wrap":
            child = serve_command(self.tmp / f"child-store-{self.runs}")
            return WrappedProcess(self.store, child, backend=self.backend)
        return AgentProcess(self.store, backend=self.backend)


def session_params(work: Path, sid: str) -> dict[str, Any]:
    return {"sessionId": sid, "cwd": str(work), "mcpServers": []}


def prompt_params(sid: str, text: str) -> dict[str, Any]:
    return {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}


def answered_ids(agent: AgentProcess) -> Counter[Any]:
    """How many answers each request id got."""
    return Counter(m["id"] for d, m in agent.transcript if d == "<-" and "method" not in m and "id" in m)


def sent_ids(agent: AgentProcess) -> list[Any]:
    return [m["id"] for d, m in agent.transcript if d == "->" and "method" in m and "id" in m]


def check_answered_once(agent: AgentProcess) -> None:
    counts = answered_ids(agent)
    sent = sent_ids(agent)
    assert sorted(counts, key=str) == sorted(sent, key=str), (set(sent) ^ set(counts))
    assert all(n == 1 for n in counts.values()), {i: n for i, n in counts.items() if n != 1}
    internal = [m for d, m in agent.transcript if d == "<-" and m.get("error", {}).get("code") == INTERNAL]
    assert not internal, internal


async def at_once(agent: AgentProcess, calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The requests sent together, their raw answers in the same order."""
    answers: list[dict[str, Any]] = [{} for _ in calls]

    async def one(n: int, method: str, params: dict[str, Any]) -> None:
        answers[n] = await agent.request_raw(method, params, timeout=CASE_SECONDS)

    async with anyio.create_task_group() as tg:
        for n, (method, params) in enumerate(calls):
            tg.start_soon(one, n, method, params)
    return answers


def said(agent: AgentProcess, sid: str) -> str:
    return "".join(u["content"]["text"] for u in agent.replayed(sid) if u["sessionUpdate"] == "agent_message_chunk")


def words(n: int, turn: int = 0) -> str:
    return f"words {turn} of session {n}"


async def run_one_agent(case: Case, op: str, size: int) -> None:
    """`size` sessions made and prompted, then `op` on all of them at once (for
    "mixed", each session's op by its number); then each closed, and a second agent,
    started while the first still runs, loads every session that should be there."""
    work = case.work
    size = max(size, 6) if op == "mixed" else size  # each of the six ops at least once
    expect: dict[str, str] = {}  # sid -> what its replay says, for every session kept
    async with case.agent() as first:
        await first.initialize()
        sids = [await first.new_session(work) for _ in range(size)]
        for n, sid in enumerate(sids):
            await first.prompt(sid, words(n))
            expect[sid] = words(n)
        plan = {sid: (op if op != "mixed" else OPS[n % 6]) for n, sid in enumerate(sids)}
        # A load or a resume opens a stored session that is not open in this agent.
        closed = [sid for sid, what in plan.items() if what in ("load", "resume") or (what == "delete" and sids.index(sid) % 2)]
        for sid in closed:
            assert await first.request("session/close", {"sessionId": sid}) == {}
        calls: list[tuple[str, dict[str, Any]]] = []
        for n, sid in enumerate(sids):
            what = plan[sid]
            if what in ("load", "resume", "fork"):
                calls.append((f"session/{what}", session_params(work, sid)))
                if what == "fork":  # two forks of each at once
                    calls.append((f"session/{what}", session_params(work, sid)))
            elif what == "prompt":
                calls.append(("session/prompt", prompt_params(sid, words(n, 1))))
            else:
                calls.append((f"session/{what}", {"sessionId": sid}))
        answers = await at_once(first, calls)
        failed = [(c, a) for c, a in zip(calls, answers, strict=True) if "error" in a]
        assert not failed, failed
        for (method, params), answer in zip(calls, answers, strict=True):
            sid = params["sessionId"]
            if method == "session/fork":
                expect[answer["result"]["sessionId"]] = expect[sid]
            elif method == "session/prompt":
                assert answer["result"]["stopReason"] == "end_turn", answer
                expect[sid] += words(sids.index(sid), 1)
            elif method == "session/delete":
                expect.pop(sid)
        check_answered_once(first)
        # Every session this agent has open is closed: then no lock may remain.
        for sid in expect:
            assert await first.request("session/close", {"sessionId": sid}) == {}
        await check_reloads(case, expect, gone=[sid for sid in sids if sid not in expect])
        check_answered_once(first)


async def check_reloads(case: Case, expect: dict[str, str], gone: list[str]) -> None:
    """Another agent loads every session whole; a deleted one is not there."""
    async with case.agent() as other:
        await other.initialize()
        answers = await at_once(other, [("session/load", session_params(case.work, sid)) for sid in [*expect, *gone]])
        for sid, answer in zip([*expect, *gone], answers, strict=True):
            if sid in expect:
                assert "result" in answer, (sid, answer)
                assert said(other, sid).replace("\n", "") == expect[sid].replace("\n", ""), (sid, said(other, sid))
            else:
                assert answer.get("error", {}).get("code") == -32002, (sid, answer)
        listed = await other.request("session/list", {})
        assert not {s["sessionId"] for s in listed["sessions"]} & set(gone)
        check_answered_once(other)


async def run_two_agents(case: Case, size: int) -> None:
    """Two agents on one store load the same `size` sessions at once: each session has
    one winner, the other is refused (never -32603); once the winner closes it, the
    loser loads it."""
    work = case.work
    async with case.agent() as maker:
        await maker.initialize()
        sids = [await maker.new_session(work) for _ in range(size)]
        for n, sid in enumerate(sids):
            await maker.prompt(sid, words(n))
    async with case.agent() as one, case.agent() as two:
        await one.initialize()
        await two.initialize()
        answers: dict[str, list[dict[str, Any]]] = {}

        async def both(agent: AgentProcess, name: str) -> None:
            answers[name] = await at_once(agent, [("session/load", session_params(work, sid)) for sid in sids])

        async with anyio.create_task_group() as tg:
            tg.start_soon(both, one, "one")
            tg.start_soon(both, two, "two")
        for n, sid in enumerate(sids):
            pair = (answers["one"][n], answers["two"][n])
            won = [a for a in pair if "result" in a]
            assert len(won) == 1, (sid, pair)
            refusal = next(a for a in pair if "error" in a)
            assert refusal["error"]["code"] != INTERNAL, refusal
        for agent, name in ((one, "one"), (two, "two")):
            for n, sid in enumerate(sids):
                if "result" in answers[name][n]:
                    assert await agent.request("session/close", {"sessionId": sid}) == {}
        # Each loses what it won, then loads what it lost: no lock was kept by the refusal.
        for agent, name in ((one, "one"), (two, "two")):
            lost = [sid for n, sid in enumerate(sids) if "error" in answers[name][n]]
            again = await at_once(agent, [("session/load", session_params(work, sid)) for sid in lost])
            assert all("result" in a for a in again), again
            for sid in lost:
                assert said(agent, sid).replace("\n", "") == words(sids.index(sid)), (sid, said(agent, sid))
                assert await agent.request("session/close", {"sessionId": sid}) == {}
        check_answered_once(one)
        check_answered_once(two)
        await check_reloads(case, {sid: words(n) for n, sid in enumerate(sids)}, gone=[])


def make_case(host: str, backend: str, tmp_path: Path, work: Path, request: pytest.FixtureRequest) -> Case:
    store: Path | str = request.getfixturevalue("pg_dsn") if backend == "postgres" else tmp_path / "store"
    return Case(host, backend, store, tmp_path, work)


async def run_one_session(case: Case, size: int, *, delete: bool) -> None:
    """`size` of each of load, resume, fork, prompt and close on one session at once
    (and one delete among them): each is answered once, refused only as a race may
    refuse it; what survives loads whole, and no prompt answered after the delete's
    answer claims a turn the store no longer has."""
    work = case.work
    async with case.agent() as first:
        await first.initialize()
        sid = await first.new_session(work)
        await first.prompt(sid, words(0))
        assert await first.request("session/close", {"sessionId": sid}) == {}
        calls: list[tuple[str, dict[str, Any]]] = []
        for n in range(size):
            calls += [("session/load", session_params(work, sid)), ("session/resume", session_params(work, sid)),
                      ("session/fork", session_params(work, sid)),
                      ("session/prompt", prompt_params(sid, words(0, n + 1))), ("session/close", {"sessionId": sid})]
            if delete and n == size // 2:
                calls.append(("session/delete", {"sessionId": sid}))
        answers = await at_once(first, calls)
        check_answered_once(first)
        refused = [(c, a) for c, a in zip(calls, answers, strict=True)
                   if "error" in a and a["error"]["code"] not in RACE_REFUSALS]
        assert not refused, refused
        forks = [a["result"]["sessionId"] for (m, _), a in zip(calls, answers, strict=True)
                 if m == "session/fork" and "result" in a]
        done = [p["prompt"][0]["text"] for (m, p), a in zip(calls, answers, strict=True)
                if m == "session/prompt" and a.get("result", {}).get("stopReason") == "end_turn"]
        for live in [sid, *forks]:
            closed = await first.request_raw("session/close", {"sessionId": live})
            assert closed.get("result") == {} or (delete and live == sid and closed["error"]["code"] == -32002), closed
        # The order the answers were written in: a prompt answered after the delete's.
        order = [m["id"] for d, m in first.transcript if d == "<-" and "id" in m and "method" not in m]
        ids = [m["id"] for d, m in first.transcript if d == "->" and "id" in m and m.get("method") in
               {c[0] for c in calls}][-len(calls):]
        by_id = dict(zip(ids, zip(calls, answers, strict=True), strict=True))
        deleted_at = next((order.index(i) for i, ((m, _), a) in by_id.items()
                           if m == "session/delete" and "result" in a), None)
        async with case.agent() as other:
            await other.initialize()
            again = await other.request_raw("session/load", session_params(work, sid))
            if "result" in again:
                text = said(other, sid).replace("\n", "")
                assert text.startswith(words(0)), text
                for piece in done:
                    assert piece in text, (piece, text)
            else:
                assert delete and again["error"]["code"] == -32002, again
                late = [by_id[i] for i in order[deleted_at:] if by_id.get(i, (("",),))[0][0] == "session/prompt"
                        and by_id[i][1].get("result", {}).get("stopReason") == "end_turn"] if deleted_at is not None else []
                assert not late, f"prompts answered after the delete, their turns gone: {late}"
            for fork in forks:
                assert "result" in await other.request_raw("session/load", session_params(work, fork))
                assert said(other, fork).replace("\n", "").startswith(words(0))
            check_answered_once(other)


async def run_case(case: Case, op: str, size: int) -> None:
    if op.startswith("one session"):
        await run_one_session(case, size, delete=op.endswith("deleted"))
    elif op == "two agents":
        await run_two_agents(case, size)
    else:
        await run_one_agent(case, op, size)


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", OPS)
async def test_at_once(tmp_path: Path, work: Path, op: str, backend: str, host: str,
                       request: pytest.FixtureRequest) -> None:
    case = make_case(host, backend, tmp_path, work, request)
    with anyio.fail_after(CASE_SECONDS):
        await run_case(case, op, SMOKE)


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
            await run_case(case, op, SOAK)
