"""The `recorded` section of bench/protocol.py (issue 32): `acp-bridge wrap` in front of
fast real agents, without the agents or a network.

Each agent is bench/recorded_agent.py playing its recording (tests/wrapped_agents/:
codex-acp, qwen-code, opencode, gemini-cli): it answers `initialize` and `session/new`
as the agent did and streams a prompt's N words back as N of the agent's own
`session/update` chunks (its fields and `_meta` as it sent them), as fast as it writes
(or at `--recorded-rate` chunks/s). Per agent, `repeat` rounds, each one process of the
agent alone and one of it wrapped (`acp-bridge wrap --backend B -- ...`), the two in
turn (which goes first alternates), so drifting machine load hits both alike. In each
process: spawn -> `initialize` answered (from just before the spawn), the `session/new`
round trip, then one prompt of `chunks` words: wall time to the answer (every chunk
read) and the CPU time (user + system) the process spent meanwhile, and its children's
(for a wrapper: the agent it wraps and the reaper's watchdog).

CPU time is read from /proc/PID/task/*/schedstat (nanoseconds on the CPU, every thread)
rather than /proc/PID/stat (10 ms ticks: a 5,000-chunk stream takes a few ticks); it is
what the wrapper costs a chunk whatever else runs on the machine, where the wall clock
depends on who else has the cores.

Figures per agent: the wrapped stream's chunk rate over the agent's own (the median of
the rounds' ratios, and the ratio of the medians); the wrapper's CPU per chunk; what
wrap adds to spawn -> `initialize` and to `session/new` (median wrapped - median alone).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from bench.common import ROOT
from bench.common import recording as benched
from bench.protocol_agents import AgentError, AgentProc, Ctx, Spec
from bench.protocol_workloads import stream_text

RECORDED_AGENT = ROOT / "bench" / "recorded_agent.py"
RECORDINGS = ROOT / "tests" / "wrapped_agents"
AGENTS = ("codex-acp", "qwen-code", "opencode")  # the fast ones (issue 32); gemini-cli may be named too
TARGETS = {"stream": 0.95, "init_added_ms": 20.0, "new_added_ms": 20.0}


def recording(agent: str) -> Path:
    """The benched recording of `agent` (its name without the version: bench.common)."""
    found = benched(agent)
    if found is None:
        raise SystemExit(f"--recorded-agents: no recording of {agent!r} in {RECORDINGS}")
    return found


def specs(agent: str, backend: str, rate: float) -> tuple[Spec, Spec]:
    """The agent alone, and wrapped recording in `backend`."""
    command = (sys.executable, str(RECORDED_AGENT), str(recording(agent)), *((f"{rate:g}",) if rate > 0 else ()))
    return Spec(agent, agent=command), Spec(f"wrap-{agent}-{backend}", backend, wrap=True, agent=command)


def run_s(pid: int) -> float:
    """Seconds on the CPU (user + system) of every thread of `pid` (schedstat, ns)."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with suppress(OSError), open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total / 1e9


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").iterdir():
            with suppress(OSError):
                kids = [int(c) for c in (task / "children").read_text().split()]
                found += kids
                todo += kids
    return found


def cpu(agent: AgentProc) -> tuple[float, float]:
    """CPU seconds of the process and of its descendants, so far."""
    kids = 0.0
    for pid in descendants(agent.pid):
        with suppress(OSError):
            kids += run_s(pid)
    return run_s(agent.pid), kids


def once(ctx: Ctx, spec: Spec, chunks: int, text: str) -> dict[str, Any]:
    """One process: start-up, then one streamed prompt."""
    with ctx.spawn(spec) as agent:
        agent.initialize()
        t_init = time.perf_counter() - agent.spawned
        t0 = time.perf_counter()
        sid = agent.new_session()
        t_new = time.perf_counter() - t0
        own0, kids0 = cpu(agent)
        t0 = time.perf_counter()
        result, _, got = agent.prompt(sid, text)
        elapsed = time.perf_counter() - t0
        own1, kids1 = cpu(agent)
    if result.get("stopReason") != "end_turn" or got != chunks:
        raise AgentError(f"{spec.name}: a {chunks}-word prompt answered {result} with {got} chunks")
    return {"initialize_ms": t_init * 1e3, "session_new_ms": t_new * 1e3, "seconds": elapsed,
            "chunks_per_s": chunks / elapsed, "cpu_us_per_chunk": (own1 - own0) / chunks * 1e6,
            "child_cpu_us_per_chunk": (kids1 - kids0) / chunks * 1e6}


def bench_recorded(ctx: Ctx, agents: list[str], backend: str, chunks: int, repeat: int,
                   rate: float = 0.0) -> dict[str, Any]:
    text = stream_text(chunks)
    out: dict[str, Any] = {"chunks": chunks, "repeat": repeat, "backend": backend, "rate": rate, "agents": {}}
    for agent in agents:
        alone_spec, wrapped_spec = specs(agent, backend, rate)
        alone: list[dict[str, Any]] = []
        wrapped: list[dict[str, Any]] = []
        for round_ in range(repeat):
            order = ((alone_spec, alone), (wrapped_spec, wrapped))
            for spec, runs in order if round_ % 2 == 0 else order[::-1]:
                runs.append(once(ctx, spec, chunks, text))
        out["agents"][agent] = summarize(alone, wrapped)
    return out


def summarize(alone: list[dict[str, Any]], wrapped: list[dict[str, Any]]) -> dict[str, Any]:
    def med(runs: list[dict[str, Any]], key: str) -> float:
        return float(statistics.median(r[key] for r in runs))

    return {
        "stream_ratio": statistics.median(w["chunks_per_s"] / a["chunks_per_s"] for a, w in zip(alone, wrapped,
                                                                                                   strict=True)),
        "stream_ratio_of_medians": med(wrapped, "chunks_per_s") / med(alone, "chunks_per_s"),
        "init_added_ms": med(wrapped, "initialize_ms") - med(alone, "initialize_ms"),
        "new_added_ms": med(wrapped, "session_new_ms") - med(alone, "session_new_ms"),
        "alone": {key: med(alone, key) for key in alone[0]} | {"runs": alone},
        "wrapped": {key: med(wrapped, key) for key in wrapped[0]} | {"runs": wrapped},
    }


def render_recorded(result: dict[str, Any]) -> str:
    pace = f"at {result['rate']:g} chunks/s" if result["rate"] else "as fast as it writes"
    out = ["", f"RECORDED AGENTS through wrap ({result['backend']}; bench/recorded_agent.py playing each recording, "
           f"{result['chunks']:,} chunks {pace}; median of {result['repeat']} alternating rounds)",
           f"{'agent':<10} {'alone ch/s':>11} {'wrapped ch/s':>12} {'wrap/alone':>10} {'(of medians)':>12} "
           f"{'wrapper CPU us/ch':>17} {'agent CPU us/ch':>15} {'init alone ms':>13} {'+wrap ms':>8} "
           f"{'new alone ms':>12} {'+wrap ms':>8}"]
    for agent, r in result["agents"].items():
        a, w = r["alone"], r["wrapped"]
        out.append(f"{agent:<10} {a['chunks_per_s']:>11,.0f} {w['chunks_per_s']:>12,.0f} {r['stream_ratio']:>10.2f} "
                   f"{r['stream_ratio_of_medians']:>12.2f} {w['cpu_us_per_chunk']:>17.2f} "
                   f"{a['cpu_us_per_chunk']:>15.2f} {a['initialize_ms']:>13.1f} {r['init_added_ms']:>+8.1f} "
                   f"{a['session_new_ms']:>12.2f} {r['new_added_ms']:>+8.1f}")
    verdicts = []
    for agent, r in result["agents"].items():
        verdicts.append(f"{agent}: stream {r['stream_ratio']:.2f} (>= {TARGETS['stream']:g}: "
                        f"{'PASS' if r['stream_ratio'] >= TARGETS['stream'] else 'FAIL'}), initialize "
                        f"{r['init_added_ms']:+.1f} ms (<= {TARGETS['init_added_ms']:g}: "
                        f"{'PASS' if r['init_added_ms'] <= TARGETS['init_added_ms'] else 'FAIL'}), session/new "
                        f"{r['new_added_ms']:+.1f} ms (<= {TARGETS['new_added_ms']:g}: "
                        f"{'PASS' if r['new_added_ms'] <= TARGETS['new_added_ms'] else 'FAIL'})")
    return "\n".join([*out, *verdicts])
