"""The ledger (issue 35, point 1): `sessions stats` counts every turn once, in the
session that ran it. Each case of the table is work done on a store, an operation at a
time, as agents do it (a prompt's turn on a loaded session, a slash command's, a crash,
a compaction (its summary's model call is the turn's work), a fork at any turn, a fork
of a fork, a wrapped session moved to another agent): the
test keeps its own ledger of the turns it ran, and the stats (`--by none`, and `--by
session`, each session with its forks folded in) must say exactly that, on JSONL,
SQLite and PostgreSQL. A fork's copies of its original's turns, the wrapper's seed of a
moved session (not a turn of ours: nothing in the log) and a command are never counted
as new prompts' turns."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from session import SessionStore, open_backend
from tests.support.logs import Script
from tests.test_sessions_cli import cli

TOKENS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "reasoningTokens")


@dataclass
class Ran:
    """One turn as it ran: where, how it ended, what it cost."""

    session: str
    kind: str  # "prompt" or "command"
    state: str  # completed, error, cancelled, interrupted
    usage: dict[str, int]
    cost: float | None = None  # what a wrapped agent said the turn cost (usage_update.cost)


@dataclass
class Work:
    """A store and the ledger of what ran in it: each operation does what an agent does
    to the store and notes the turns that ran (never the copies a fork holds)."""

    root: str
    backend: str
    names: dict[str, str] = field(default_factory=dict)  # the case's name -> session id
    ran: list[Ran] = field(default_factory=list)
    clock: Any = field(default_factory=lambda: itertools.count(1_767_000_000_000, 1_000).__next__)
    counter: Any = field(default_factory=lambda: itertools.count(1))
    agent: dict[str, str] = field(default_factory=dict)  # a wrapped session's agent now
    # What each wrapped agent's own session has cost so far (ACP's cumulative cost), by
    # (our session, agent): a native fork goes on from its original's; a move to
    # another agent starts that agent's at zero (the seed's cost is not recorded).
    spent: dict[tuple[str, str], float] = field(default_factory=dict)

    def _store(self) -> SessionStore:
        return SessionStore(open_backend(self.backend, self.root), clock=self.clock)

    def _usage(self) -> dict[str, int]:
        n = next(self.counter)  # every turn's figures differ: a turn counted twice shows
        return {"inputTokens": 1000 * n + 7, "outputTokens": 10 * n + 1, "cacheReadTokens": n}

    def new(self, name: str, *, wrapped: bool = False) -> None:
        store = self._store()
        try:
            info = {"command": ["some-agent"], "agentInfo": {"name": "some-agent", "version": "1"}}
            log = store.create(cwd="/w", wrapped=info if wrapped else None)  # type: ignore[arg-type]
            self.names[name] = log.id
            if wrapped:
                self.agent[name] = "some-agent"
            log.close()
        finally:
            store.close()

    def _append(self, name: str, build: Any) -> None:
        """Load the session (a restart: repairs a crashed last turn), append a turn."""
        store = self._store()
        try:
            log = store.load(self.names[name]).log
            turn = max((e["data"].get("turn", 0) for e in log.events if e["type"] == "turn/start"), default=0)
            script = Script(first_turn=turn + 1)
            build(script)
            log.extend(script.items)
            log.sync()
            log.close()
        finally:
            store.close()

    def prompt(self, name: str, end: str = "completed") -> None:
        usage = self._usage()
        fields: dict[str, Any] = {}
        if end == "error":
            fields = {"step": 1, "message": "rate limited", "code": "rate_limit", "retryable": True}
        elif end == "cancelled":
            fields = {"by": "session/cancel"}

        compaction = self._usage() if end == "compacted" else None  # the summary's own model call
        cost: float | None = None
        cumulative = 0.0
        if name in self.agent:
            key = (name, self.agent[name])
            cost = round(0.1 * usage["cacheReadTokens"], 6)  # each turn its own, more than the last
            cumulative = self.spent[key] = round(self.spent.get(key, 0.0) + cost, 6)

        def build(s: Script) -> None:
            s.start_turn("work").start_step().chunk("ok")
            if compaction is not None:  # the history before this turn summarized (context/compaction)
                s.add("context/compaction", {"turn": s.turn, "step": 1, "compactionId": f"k{s.turn}",
                                             "replaces": {"fromTurn": 1, "toTurn": s.turn - 1},
                                             "summary": [{"type": "text", "text": "so far"}], "status": "completed",
                                             "usage": compaction})
            if cost is not None:
                s.add("wrapped/update", {"turn": s.turn, "update": {
                    "sessionUpdate": "usage_update", "used": 1000, "size": 200000,
                    "cost": {"amount": cumulative, "currency": "USD"}}})
            s.add("assistant/message", {"turn": s.turn, "step": 1, "content": [{"type": "text", "text": "ok"}],
                                        "usage": usage})
            s.end_step()
            if end != "crash":
                s.end_turn("completed" if end == "compacted" else end, **fields)

        self._append(name, build)
        state = {"crash": "interrupted", "compacted": "completed"}.get(end, end)
        spent = usage if compaction is None else {k: usage.get(k, 0) + compaction.get(k, 0) for k in TOKENS}
        self.ran.append(Ran(self.names[name], "prompt", state, spent, cost))

    def command(self, name: str, *, ok: bool) -> None:
        def build(s: Script) -> None:
            s.turn += 1
            s.add("turn/start", {"turn": s.turn, "trigger": {"kind": "command", "name": "mode"}, "mode": "ask"})
            s.add("user/message", {"turn": s.turn, "content": [{"type": "text", "text": "/mode nope"}]})
            if ok:
                s.start_step().message("Mode: ask", usage=False).end_step().end_turn()
            else:
                s.end_turn("error", step=0, message="unknown mode 'nope'", code="command_failed", retryable=False)

        self._append(name, build)
        self.ran.append(Ran(self.names[name], "command", "completed" if ok else "error", {}))

    def switch(self, name: str, agent: str) -> None:
        """A wrapped session moved to another agent between turns: the move is recorded
        (`config/set agent`); the new agent's seed is the wrapper's, not a turn."""
        self._append(name, lambda s: s.add("config/set", {"configId": "agent", "value": agent,
                                                           "wrapped": {"command": [agent]}}))
        self.agent[name] = agent

    def fork(self, name: str, source: str, at: int | None = None) -> None:
        store = self._store()
        try:
            header = store.fork(store.plan_fork(self.names[source], at_turn=at), cwd="/w")
            self.names[name] = header["id"]
            if source in self.agent:  # a native fork: its agent's session goes on from the original's
                assert at is None
                self.agent[name] = self.agent[source]
                self.spent[(name, self.agent[name])] = self.spent.get((source, self.agent[source]), 0.0)
        finally:
            store.close()


def run(work: Work, steps: list[tuple[Any, ...]]) -> None:
    for op, *args in steps:
        kwargs = args.pop() if args and isinstance(args[-1], dict) else {}
        getattr(work, op)(*args, **kwargs)


# (the case, its operations, each session's root for `--by session`)
CASES: list[tuple[str, list[tuple[Any, ...]], dict[str, str]]] = [
    ("the issue: three turns, a fork, one more", [
        ("new", "a"), ("prompt", "a"), ("prompt", "a"), ("prompt", "a"), ("fork", "b", "a"), ("prompt", "b"),
    ], {"b": "a"}),
    ("at-turn forks and a fork of a fork", [
        ("new", "a"), ("prompt", "a"), ("prompt", "a", "error"), ("prompt", "a", "cancelled"), ("prompt", "a"),
        ("fork", "b", "a", 2), ("prompt", "b"), ("fork", "c", "b", 3), ("prompt", "c"), ("prompt", "c"),
        ("fork", "d", "a", 0), ("prompt", "d"), ("fork", "e", "c"),
    ], {"b": "a", "c": "a", "d": "a", "e": "a"}),
    ("crashes, restarts, a fork of a crashed session", [
        ("new", "a"), ("prompt", "a"), ("prompt", "a", "crash"), ("prompt", "a"), ("prompt", "a", "crash"),
        ("fork", "b", "a"), ("prompt", "b"), ("prompt", "b", "crash"),
    ], {"b": "a"}),
    ("commands, failed or not, beside prompts and in a fork", [
        ("new", "a"), ("command", "a", {"ok": False}), ("prompt", "a"), ("command", "a", {"ok": True}),
        ("prompt", "a", "error"), ("fork", "b", "a"), ("command", "b", {"ok": False}), ("prompt", "b"),
    ], {"b": "a"}),
    ("compactions, in the original and in a fork", [
        ("new", "a"), ("prompt", "a"), ("prompt", "a"), ("prompt", "a", "compacted"), ("prompt", "a"),
        ("fork", "b", "a", 3), ("prompt", "b", "compacted"), ("fork", "c", "b"), ("prompt", "c"),
    ], {"b": "a", "c": "a"}),
    ("a wrapped session moved between agents, forked, moved again", [
        ("new", "w", {"wrapped": True}), ("prompt", "w"), ("prompt", "w"), ("switch", "w", "other"),
        ("prompt", "w"), ("prompt", "w"), ("fork", "f", "w"), ("prompt", "f"), ("switch", "f", "third"),
        ("prompt", "f"), ("prompt", "w", "cancelled"), ("new", "x"), ("prompt", "x"),
    ], {"f": "w"}),
]


def expected(ran: list[Ran]) -> dict[str, Any]:
    prompts = [r for r in ran if r.kind == "prompt"]
    costed = [r.cost for r in prompts if r.cost is not None]
    commands = [r for r in ran if r.kind == "command"]
    return {"turns": len(prompts), "commands": len(commands),
            "failedCommands": sum(1 for r in commands if r.state == "error"),
            "errors": sum(1 for r in prompts if r.state == "error"),
            "interrupted": sum(1 for r in prompts if r.state == "interrupted"),
            "cancelled": sum(1 for r in prompts if r.state == "cancelled"),
            "tokens": {k: sum(r.usage.get(k, 0) for r in ran) for k in TOKENS},
            "cost": [{"amount": round(sum(costed), 6), "currency": "USD"}] if costed else [],
            "turnsWithoutCost": sum(1 for r in prompts if r.cost is None)}


def counted(group: dict[str, Any]) -> dict[str, Any]:
    return {k: group[k] for k in ("turns", "commands", "failedCommands", "errors", "interrupted", "cancelled",
                                  "tokens", "cost", "turnsWithoutCost")}


def stats(work: Work, *args: str) -> dict[str, Any]:
    result = cli("--store", work.root, "--backend", work.backend, "stats", *args, "--json")
    assert result.code == 0, result.err
    out: dict[str, Any] = orjson.loads(result.raw)
    return out


def check(work: Work, steps: list[tuple[Any, ...]], roots: dict[str, str]) -> None:
    run(work, steps)
    assert counted(stats(work, "--by", "none")["total"]) == expected(work.ran)
    folded: dict[str, list[Ran]] = {}
    for r in work.ran:
        name = next(n for n, sid in work.names.items() if sid == r.session)
        folded.setdefault(work.names[roots.get(name, name)], []).append(r)
    by_session = {g["group"]: counted(g) for g in stats(work, "--by", "session")["groups"]}
    assert by_session == {sid: expected(ran) for sid, ran in folded.items()}


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.parametrize(("case", "steps", "roots"), CASES, ids=[c[0] for c in CASES])
def test_each_turn_is_counted_once_where_it_ran(tmp_path: Path, backend: str, case: str,
                                                steps: list[tuple[Any, ...]], roots: dict[str, str]) -> None:
    check(Work(str(tmp_path / "store"), backend), steps, roots)


def test_the_ledger_on_postgres(pg_dsn: str) -> None:
    for _, steps, roots in CASES:  # one database: the cases add up, as a store's history does
        work = Work(pg_dsn, "postgres")
        check(work, steps, roots)
        store = SessionStore(open_backend("postgres", pg_dsn))
        try:
            for sid in work.names.values():
                store.delete(sid)
        finally:
            store.close()


def test_the_issue_numbers(tmp_path: Path) -> None:
    """Three turns of 150 input tokens, a fork, one more turn of 3: 4 turns, 453 tokens."""
    work = Work(str(tmp_path / "store"), "jsonl")
    usage = iter([150, 150, 150, 3])
    work._usage = lambda: {"inputTokens": next(usage), "outputTokens": 1}  # type: ignore[method-assign]
    run(work, CASES[0][1])
    total = stats(work, "--by", "none")["total"]
    assert (total["turns"], total["tokens"]["inputTokens"]) == (4, 453)
