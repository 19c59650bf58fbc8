"""The concurrency matrix's phases (tests/test_concurrency_matrix.py): each runs one
operation of the table at once in a running agent and says what another agent must
find after it (`Expected`); `check_reloads` is that other agent's check, and
`check_answered_once` the check of every agent's transcript."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from session import open_backend
from session.events import SESSION_FORMAT_VERSION
from tests.support import tamper
from tests.support.acp_client import AgentProcess
from tests.support.wrapped import WrappedProcess, serve_command

# The operations each session of "mixed" takes one of, by its number.
EACH = ("load", "resume", "fork", "prompt", "close", "delete")
OPS = (*EACH, "mixed", "new", "one session", "one session deleted", "refused", "two agents")
# What a request on one session may be refused with while others on it run: a second
# prompt (-32001), a session closed or deleted meanwhile (-32002).
RACE_REFUSALS = {-32001, -32002}
INTERNAL = -32603
ANSWER_SECONDS = 50  # the longest a request of a case may wait for its answer


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
        answers[n] = await agent.request_raw(method, params, timeout=ANSWER_SECONDS)

    async with anyio.create_task_group() as tg:
        for n, (method, params) in enumerate(calls):
            tg.start_soon(one, n, method, params)
    return answers


def said(agent: AgentProcess, sid: str) -> str:
    """The agent's words in the replay of `sid`'s last load (line ends left out)."""
    return "".join(u["content"]["text"] for u in agent.replayed(sid)
                   if u["sessionUpdate"] == "agent_message_chunk").replace("\n", "")


def words(tag: str, n: int, turn: int = 0) -> str:
    return f"words {turn} of {tag} {n}"


@dataclass
class Expected:
    """What another agent must find once the agent under test closed its sessions."""

    whole: dict[str, str] = field(default_factory=dict)  # sid -> the replay's words, exactly
    # sid -> (how its words start, words each in them): a session raced on by prompts
    # and closes, whose turns ran in some order and may have been cancelled.
    holds: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    gone: list[str] = field(default_factory=list)
    # sid -> prompts answered `end_turn` after its delete was answered: it may be gone
    # only if there are none (an answered turn is never lost).
    maybe_gone: dict[str, list[Any]] = field(default_factory=dict)

    def add(self, other: Expected) -> None:
        self.whole |= other.whole
        self.holds |= other.holds
        self.gone += other.gone
        self.maybe_gone |= other.maybe_gone


async def made(agent: AgentProcess, work: Path, tag: str, size: int) -> list[str]:
    """`size` new sessions, made at once, each prompted once (`words(tag, n)`), at once."""
    answers = await at_once(agent, [("session/new", {"cwd": str(work), "mcpServers": []})] * size)
    sids = [a["result"]["sessionId"] for a in answers]
    assert len(set(sids)) == size, answers
    answers = await at_once(agent, [("session/prompt", prompt_params(sid, words(tag, n))) for n, sid in enumerate(sids)])
    assert all(a.get("result", {}).get("stopReason") == "end_turn" for a in answers), answers
    return sids


async def close_all(agent: AgentProcess, sids: list[str], *, gone_ok: frozenset[str] = frozenset()) -> None:
    answers = await at_once(agent, [("session/close", {"sessionId": sid}) for sid in sids])
    for sid, answer in zip(sids, answers, strict=True):
        assert answer.get("result") == {} or (sid in gone_ok and answer["error"]["code"] == -32002), (sid, answer)


async def each_at_once(agent: AgentProcess, work: Path, op: str, size: int) -> Expected:
    """`size` sessions made and prompted, then `op` on all of them at once (for
    "mixed", each session's op by its number); every session closed after."""
    size = max(size, 6) if op == "mixed" else size  # each of the six ops at least once
    sids = await made(agent, work, op, size)
    expect = Expected(whole={sid: words(op, n) for n, sid in enumerate(sids)})
    plan = {sid: (op if op != "mixed" else EACH[n % 6]) for n, sid in enumerate(sids)}
    # A load or a resume opens a stored session that is not open in this agent; half
    # the deletes find their session open, half closed.
    closed = [sid for n, sid in enumerate(sids) if plan[sid] in ("load", "resume") or (plan[sid] == "delete" and n % 2)]
    await close_all(agent, closed)
    calls: list[tuple[str, dict[str, Any]]] = []
    for n, sid in enumerate(sids):
        what = plan[sid]
        if what in ("load", "resume", "fork"):
            calls.append((f"session/{what}", session_params(work, sid)))
            if what == "fork":  # two forks of each at once
                calls.append((f"session/{what}", session_params(work, sid)))
        elif what == "prompt":
            calls.append(("session/prompt", prompt_params(sid, words(op, n, 1))))
        else:
            calls.append((f"session/{what}", {"sessionId": sid}))
    if op == "mixed":  # the store listed while sessions are forked and deleted
        calls += [("session/list", {})] * 2
    answers = await at_once(agent, calls)
    failed = [(c, a) for c, a in zip(calls, answers, strict=True) if "error" in a]
    assert not failed, failed
    for (method, params), answer in zip(calls, answers, strict=True):
        sid = params.get("sessionId", "")
        if method == "session/fork":
            expect.whole[answer["result"]["sessionId"]] = expect.whole[sid]
        elif method == "session/prompt":
            assert answer["result"]["stopReason"] == "end_turn", answer
            expect.whole[sid] += words(op, sids.index(sid), 1)
        elif method == "session/delete":
            expect.whole.pop(sid)
            expect.gone.append(sid)
    # Every session this agent has open is closed: then no lock may remain.
    await close_all(agent, list(expect.whole))
    return expect


async def new_at_once(agent: AgentProcess, work: Path, size: int) -> Expected:
    """`size` sessions made at once, prompted at once (`made`), closed at once."""
    sids = await made(agent, work, "new", size)
    await close_all(agent, sids)
    return Expected(whole={sid: words("new", n) for n, sid in enumerate(sids)})


async def one_session(agent: AgentProcess, work: Path, size: int, *, delete: bool) -> Expected:
    """`size` of each of load, resume, fork, prompt and close on one session at once
    (and one delete among them): each is refused only as a race may refuse it."""
    tag = "one session deleted" if delete else "one session"
    [sid] = await made(agent, work, tag, 1)
    await close_all(agent, [sid])
    calls: list[tuple[str, dict[str, Any]]] = []
    for n in range(size):
        calls += [("session/load", session_params(work, sid)), ("session/resume", session_params(work, sid)),
                  ("session/fork", session_params(work, sid)),
                  ("session/prompt", prompt_params(sid, words(tag, 0, n + 1))), ("session/close", {"sessionId": sid}),
                  ("session/list", {})]
        if delete and n == size // 2:
            calls.append(("session/delete", {"sessionId": sid}))
    first_id = len(agent.transcript)
    answers = await at_once(agent, calls)
    refused = [(c, a) for c, a in zip(calls, answers, strict=True)
               if "error" in a and a["error"]["code"] not in RACE_REFUSALS]
    assert not refused, refused
    forks = [a["result"]["sessionId"] for (m, _), a in zip(calls, answers, strict=True)
             if m == "session/fork" and "result" in a]
    done = [(a["id"], p["prompt"][0]["text"]) for (m, p), a in zip(calls, answers, strict=True)
            if m == "session/prompt" and a.get("result", {}).get("stopReason") == "end_turn"]
    # A fork holds the turns that ended before it was planned: the first, and any of
    # the raced prompts, answered or cancelled by a close.
    expect = Expected(holds={sid: (words(tag, 0), [t for _, t in done]), **{fork: (words(tag, 0), []) for fork in forks}})
    if delete:
        # The order the answers were written in: the prompts answered after the delete's.
        order = [m["id"] for d, m in agent.transcript[first_id:] if d == "<-" and "id" in m and "method" not in m]
        deleted = [a["id"] for (m, _), a in zip(calls, answers, strict=True) if m == "session/delete" and "result" in a]
        after = order[order.index(deleted[0]):] if deleted else []
        expect.maybe_gone[sid] = [(i, t) for i, t in done if i in after]
    await close_all(agent, [sid, *forks], gone_ok=frozenset({sid} if delete else ()))
    return expect


async def refused(agent: AgentProcess, case: Case, size: int) -> Expected:
    """Loads, resumes and forks at once of `size` sessions the store refuses (a header
    of a format version from the future): each is answered with its refusal, not
    -32603, and keeps no lock: once the header is put back, another agent opens each."""
    sids = await made(agent, case.work, "refused", size)
    await close_all(agent, sids)
    backend = open_backend(case.backend, case.store)
    try:
        for sid in sids:
            tamper.set_header_version(backend, sid, SESSION_FORMAT_VERSION + 1)
        calls = [(f"session/{what}", session_params(case.work, sid)) for sid in sids
                 for what in ("load", "resume", "fork")]
        answers = await at_once(agent, calls)
        assert all("error" in a and a["error"]["code"] != INTERNAL for a in answers), answers
        for sid in sids:
            tamper.set_header_version(backend, sid, SESSION_FORMAT_VERSION)
    finally:
        backend.close()
    return Expected(whole={sid: words("refused", n) for n, sid in enumerate(sids)})


async def two_agents(one: AgentProcess, two: AgentProcess, work: Path, size: int) -> Expected:
    """Two agents on one store load the same `size` sessions at once: each session has
    one winner, the other is refused (never -32603); once the winner closes it, the
    loser loads it."""
    sids = await made(one, work, "two agents", size)
    await close_all(one, sids)
    answers: dict[str, list[dict[str, Any]]] = {}

    async def both(agent: AgentProcess, name: str) -> None:
        answers[name] = await at_once(agent, [("session/load", session_params(work, sid)) for sid in sids])

    async with anyio.create_task_group() as tg:
        tg.start_soon(both, one, "one")
        tg.start_soon(both, two, "two")
    for n, sid in enumerate(sids):
        pair = (answers["one"][n], answers["two"][n])
        assert len([a for a in pair if "result" in a]) == 1, (sid, pair)
        refusal = next(a for a in pair if "error" in a)
        assert refusal["error"]["code"] != INTERNAL, refusal
    for agent, name in ((one, "one"), (two, "two")):
        await close_all(agent, [sid for n, sid in enumerate(sids) if "result" in answers[name][n]])
    # Each loads what it lost: no lock was kept by the refusal.
    for agent, name in ((one, "one"), (two, "two")):
        lost = [sid for n, sid in enumerate(sids) if "error" in answers[name][n]]
        again = await at_once(agent, [("session/load", session_params(work, sid)) for sid in lost])
        assert all("result" in a for a in again), again
        for sid in lost:
            assert said(agent, sid) == words("two agents", sids.index(sid)), (sid, said(agent, sid))
        await close_all(agent, lost)
    return Expected(whole={sid: words("two agents", n) for n, sid in enumerate(sids)})


async def listed(agent: AgentProcess) -> set[str]:
    """Every session `session/list` gives, page after page."""
    ids: set[str] = set()
    params: dict[str, Any] = {}
    while True:
        page = await agent.request("session/list", params)
        ids |= {s["sessionId"] for s in page["sessions"]}
        if not page.get("nextCursor"):
            return ids
        params = {"cursor": page["nextCursor"]}


async def check_reloads(other: AgentProcess, work: Path, expect: Expected) -> None:
    """Another agent, started while the first still runs, loads every session whole; a
    deleted one is not there."""
    sids = list(dict.fromkeys([*expect.whole, *expect.holds, *expect.gone, *expect.maybe_gone]))
    answers = await at_once(other, [("session/load", session_params(work, sid)) for sid in sids])
    for sid, answer in zip(sids, answers, strict=True):
        if "error" in answer and sid in expect.maybe_gone:
            assert answer["error"]["code"] == -32002, (sid, answer)
            late = expect.maybe_gone[sid]
            assert not late, f"prompts answered after the delete, their turns gone: {late}"
        elif sid in expect.gone:
            assert answer.get("error", {}).get("code") == -32002, (sid, answer)
        else:
            assert "result" in answer, (sid, answer)
            text = said(other, sid)
            if sid in expect.whole:
                assert text == expect.whole[sid], (sid, text)
            if sid in expect.holds:
                start, pieces = expect.holds[sid]
                assert text.startswith(start) and all(p in text for p in pieces), (sid, text, pieces)
    assert not await listed(other) & set(expect.gone)


async def run_ops(case: Case, ops: list[str], size: int) -> None:
    """Each op of `ops` in turn in one agent (a second one beside it for "two agents"),
    then a third, started while they still run, loads what they left."""
    async with case.agent() as first, case.agent() as second:
        await first.initialize()
        await second.initialize()
        expect = Expected()
        for op in ops:
            if op == "two agents":
                expect.add(await two_agents(first, second, case.work, size))
            elif op == "new":
                expect.add(await new_at_once(first, case.work, size))
            elif op == "refused":
                expect.add(await refused(first, case, size))
            elif op.startswith("one session"):
                expect.add(await one_session(first, case.work, size, delete=op.endswith("deleted")))
            else:
                expect.add(await each_at_once(first, case.work, op, size))
        async with case.agent() as other:
            await other.initialize()
            await check_reloads(other, case.work, expect)
            check_answered_once(other)
        check_answered_once(first)
        check_answered_once(second)
