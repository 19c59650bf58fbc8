"""The whole crash matrix on one backend: phase A for every kill point (in parallel),
then phases B and C; the report and its counts."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from session import open_backend

from .kill import prepare_work, run_a
from .oracle import Run
from .reload import run_b, run_c
from .scenarios import KillPoint
from .wrap import run_a_wrap, run_b_wrap


@dataclass
class Report:
    backend: str
    runs: list[Run]
    seconds: float
    target: str | None = None  # through `acp-bridge wrap`: "wrapper" or "child" was killed

    @property
    def failures(self) -> list[str]:
        return [f for r in self.runs for f in r.failures]

    def counts(self) -> dict[str, Any]:
        runs = self.runs
        return {
            "backend": self.backend,
            "kill_points": len(runs),
            "loads_ok": sum(1 for r in runs if r.loaded_over_wire and r.loaded_in_process),
            "failures": sum(1 for r in runs if r.failures),
            "by_kind": dict(Counter(r.point.kind for r in runs)),
            "mid_turn_by_kind": dict(Counter(r.point.kind for r in runs if r.interrupted_turn is not None)),
            "by_scenario": dict(Counter(r.point.scenario for r in runs)),
            "mid_turn": sum(1 for r in runs if r.interrupted_turn is not None),
            "between_turns": sum(1 for r in runs if r.sid and r.interrupted_turn is None),
            "torn_tails": sum(1 for r in runs if r.torn),
            "synthetic_results": sum(int(r.load_meta.get("repair", {}).get("syntheticResults") or 0) for r in runs),
            "answered_turns": sum(len(r.answers) for r in runs),
            "seconds": round(self.seconds, 1),
            **({"target": self.target,
                "cut_turns": sum(len(r.cut_turns) for r in runs),
                "prompts_after_kill": sum(1 for r in runs if r.after_kill_turn is not None),
                "restored": dict(Counter(str(r.load_meta.get("wrapped", {}).get("restored"))
                                         for r in runs if r.loaded_over_wire))}
               if self.target else {}),
        }


async def run_matrix(points: Sequence[KillPoint], backend: str, root: Path, jobs: int = 2,
                     progress: Callable[[Run], None] | None = None, wrap: str | None = None) -> Report:
    """The matrix on our own agent, or (`wrap`: "wrapper" or "child", the process
    killed) on `acp-bridge wrap` around it (crash_matrix/wrap.py)."""
    start = time.monotonic()
    store, scripts, works = root / "store", root / "scripts", root / "work"
    scripts.mkdir(parents=True, exist_ok=True)
    runs = [Run(i, p, works / f"p{i:04d}") for i, p in enumerate(points)]
    for run in runs:
        prepare_work(run.work)
    # Create the store before agents start in parallel: two agents creating one new
    # SQLite store at once race in SqliteBackend._check_schema (a bug this matrix found,
    # pinned by tests/test_crash_matrix.py::test_sqlite_store_created_by_two_processes_at_once).
    open_backend(backend, store).close()
    child_store = root / "child-store"
    if wrap:
        open_backend(backend, child_store).close()
    limiter = anyio.CapacityLimiter(jobs)

    async def one(run: Run) -> None:
        async with limiter:
            if wrap:
                await run_a_wrap(run, backend, store, child_store, scripts, wrap)
            else:
                await run_a(run, backend, store, scripts)
        if progress is not None:
            progress(run)

    async with anyio.create_task_group() as tg:
        for run in runs:
            tg.start_soon(one, run)
    if wrap:
        await run_b_wrap(runs, backend, store, child_store, scripts)
    else:
        await run_b(runs, backend, store, scripts)
    await anyio.to_thread.run_sync(run_c, runs, backend, store)
    return Report(backend, runs, time.monotonic() - start, wrap)


def run_passing(points: Sequence[KillPoint], backend: str, root: Path, wrap: str | None = None) -> Report:
    """run_matrix (two jobs) as the tests run it: its counts printed, and every kill
    point must pass and load."""
    report = anyio.run(lambda: run_matrix(points, backend, root, jobs=2, wrap=wrap))
    counts = report.counts()
    print(format_counts(counts))
    assert report.failures == [], "\n".join(report.failures)
    assert counts["loads_ok"] == counts["kill_points"] == len(points)
    return report


def format_counts(counts: dict[str, Any]) -> str:
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(counts["by_kind"].items()))
    scenarios = ", ".join(f"{k} {v}" for k, v in sorted(counts["by_scenario"].items()))
    wrapped = ""
    if counts.get("target"):
        restored = ", ".join(f"{k} {v}" for k, v in sorted(counts["restored"].items()))
        wrapped = (f"; through wrap, killed: the {counts['target']}; turns cut live {counts['cut_turns']}, "
                   f"prompts after the kill {counts['prompts_after_kill']}; child restored at load: {restored}")
    return "\n".join([
        f"backend: {counts['backend']}" + (f" (wrap, kill the {counts['target']})" if counts.get("target") else ""),
        f"kill points: {counts['kill_points']}  (by kind: {kinds}; by scenario: {scenarios})",
        f"state at the kill: mid-turn {counts['mid_turn']} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(counts['mid_turn_by_kind'].items()))}), "
        f"between turns {counts['between_turns']}; "
        f"torn tails {counts['torn_tails']}; synthetic tool results {counts['synthetic_results']}; "
        f"answered turns kept {counts['answered_turns']}{wrapped}",
        f"loads ok: {counts['loads_ok']}",
        f"failures: {counts['failures']}",
        f"elapsed: {counts['seconds']} s",
    ])
