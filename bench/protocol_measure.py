"""The measurements of bench/protocol.py: start-up, memory and per-turn round trips,
streaming, and `session/load` against the bare loop; medians over interleaved runs."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import CWD
from bench.persistence_measure import fdatasync_floor_ms
from bench.protocol_agents import AgentError, Ctx, Spec, ours, wrapped
from bench.protocol_workloads import build_log, stream_text

WARMUP_TURNS = 5
FSYNC_PROBES = 500  # appends + fdatasync per probe of the scratch disk (one probe per repeat)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def startup_and_turns(ctx: Ctx, spec: Spec, turns: int) -> dict[str, Any]:
    """One process: spawn -> initialize -> session/new (timed from spawn), RSS after
    session/new, then `turns` one-word prompts in that session (after a warm-up)."""
    with ctx.spawn(spec) as agent:
        agent.initialize()
        t_init = time.perf_counter() - agent.spawned
        sid = agent.new_session()
        t_new = time.perf_counter() - agent.spawned
        status = agent.status()
        tree_rss = agent.tree_rss_kb()
        latencies: list[float] = []
        clock = time.perf_counter
        for i in range(WARMUP_TURNS + turns):
            t0 = clock()
            result, _, chunks = agent.prompt(sid, "hi")
            elapsed = clock() - t0
            if result.get("stopReason") != "end_turn" or chunks != 1:
                raise AgentError(f"{spec.name}: one-word prompt answered {result} with {chunks} chunks")
            if i >= WARMUP_TURNS:
                latencies.append(elapsed)
    ordered = sorted(latencies)
    fifth = max(1, len(latencies) // 5)
    return {
        "initialize_s": t_init,
        "session_new_s": t_new,
        "session_new_ms": (t_new - t_init) * 1e3,  # the session/new round trip alone
        "rss_kb": status["VmRSS"],
        "hwm_kb": status["VmHWM"],
        "tree_rss_kb": tree_rss,  # with its descendants: for a wrapper, the wrapped agent and the watchdog
        "turn_median_ms": median(latencies) * 1e3 if latencies else None,
        "turn_p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1e3 if ordered else None,
        "turn_min_ms": ordered[0] * 1e3 if ordered else None,
        # Does a turn get dearer as the session grows? Medians of the first and last fifth.
        "turn_first_ms": median(latencies[:fifth]) * 1e3 if latencies else None,
        "turn_last_ms": median(latencies[-fifth:]) * 1e3 if latencies else None,
    }


def stream_once(ctx: Ctx, spec: Spec, words: int, text: str) -> dict[str, Any]:
    """One process, one session, one prompt of `words` words: seconds from sending the
    prompt to its answer, every chunk read."""
    with ctx.spawn(spec) as agent:
        agent.initialize()
        sid = agent.new_session()
        cpu0, kids0 = agent.cpu_s()
        t0 = time.perf_counter()
        result, updates, chunks = agent.prompt(sid, text)
        elapsed = time.perf_counter() - t0
        cpu1, kids1 = agent.cpu_s()
        first = agent.first_chunk_at - t0
        status = agent.status()
    if result.get("stopReason") != "end_turn" or chunks != words:
        raise AgentError(f"{spec.name}: {words}-word prompt answered {result} with {chunks} chunks")
    # CPU per chunk (user + system, /proc; 10 ms ticks): of the process spawned (for wrap,
    # the wrapper) and of its descendants (the wrapped agent): what a busy machine's
    # other work takes from, where wall clock alone is noise.
    return {"seconds": elapsed, "chunks_per_s": words / elapsed, "first_chunk_s": first, "updates": updates,
            "cpu_us_per_chunk": (cpu1 - cpu0) / words * 1e6, "child_cpu_us_per_chunk": (kids1 - kids0) / words * 1e6,
            "rss_kb": status["VmRSS"], "hwm_kb": status["VmHWM"]}


def load_once(ctx: Ctx, spec: Spec, store: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Ours: a fresh process, initialized (and its lazy import done), then
    `session/load` timed until its answer, every replayed update read."""
    with ctx.spawn(spec, store) as agent:
        agent.initialize()
        agent.ping()
        t0 = time.perf_counter()
        result, updates, chunks = agent.request("session/load", {"sessionId": info["id"], "cwd": CWD,
                                                                 "mcpServers": []})
        elapsed = time.perf_counter() - t0
        first = agent.first_update_at - t0
        status = agent.status()
    meta = result.get("_meta", {}).get("acpBridge", {})
    if meta.get("events") != info["events"] or chunks != info["chunks"]:
        raise AgentError(f"{spec.name}: load of {info['events']} events answered {meta} with {chunks} chunks")
    return {"seconds": elapsed, "events_per_s": info["events"] / elapsed, "first_update_s": first,
            "updates": updates, "rss_kb": status["VmRSS"], "hwm_kb": status["VmHWM"]}


def bare_once(ctx: Ctx, info: dict[str, Any]) -> dict[str, Any]:
    with ctx.spawn_bare(info) as bare:
        bare.ping()
        t0 = time.perf_counter()
        result, updates, _ = bare.request("session/load", {"sessionId": info["id"]})
        elapsed = time.perf_counter() - t0
        first = bare.first_update_at - t0
        status = bare.status()
    if result["events"] != info["events"] or updates != info["events"]:
        raise AgentError(f"bare loop replayed {updates} of {info['events']} events")
    return {"seconds": elapsed, "events_per_s": info["events"] / elapsed, "first_update_s": first,
            "updates": updates,
            "rss_kb": status["VmRSS"], "hwm_kb": status["VmHWM"]}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of every numeric field over the runs, plus the runs themselves."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
        if values:
            out[key] = median(values)
    out["runs"] = [{k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()} for r in runs]
    return out


def bench_quick(ctx: Ctx, specs: list[Spec], turns: int, repeat: int,
                fsync: bool = False) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Start-up, memory and per-turn of every spec, `repeat` interleaved rounds. With
    `fsync`, each round also probes the scratch disk (`fdatasync_floor_ms`: a 200-byte
    append + fdatasync, median of FSYNC_PROBES) between the agents: the floor of one
    durable commit on the disk the stores are on, measured beside the turns."""
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in specs}
    probes: list[dict[str, Any]] = []
    for _ in range(repeat):  # interleaved, so drifting machine load hits every agent alike
        for spec in specs:
            runs[spec.name].append(startup_and_turns(ctx, spec, turns))
        if fsync:
            probes.append({"fdatasync_ms": fdatasync_floor_ms(str(ctx.root), FSYNC_PROBES)})
    agents = {name: summarize(r) for name, r in runs.items()}
    return agents, (summarize(probes) | {"probes": FSYNC_PROBES} if probes else None)


def bench_stream(ctx: Ctx, specs: list[Spec], words: int, repeat: int) -> dict[str, Any]:
    text = stream_text(words)
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in specs}
    for _ in range(repeat):
        for spec in specs:
            runs[spec.name].append(stream_once(ctx, spec, words, text))
    return {name: summarize(r) for name, r in runs.items()} | {"words": words}


@contextmanager
def stores(ctx: Ctx, label: str) -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=ctx.root))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def bench_load(ctx: Ctx, backends: list[str], turns: int, chunks_per_turn: int, result_bytes: int,
               repeat: int, label: str, wrap: bool = False) -> dict[str, Any]:
    """Build the same long session in each backend (and in JSONL for the bare loop),
    then load it `repeat` times with each, interleaved. With `wrap`, also through
    `acp-bridge wrap` around the SDK echo agent (`wrap-sdk-B`): the wrapper replays from
    our log (the SDK agent has no session/load) and opens a fresh session in the child."""
    with stores(ctx, label) as where:
        built: dict[str, dict[str, Any]] = {}
        build_s: dict[str, float] = {}
        for kind in dict.fromkeys(["jsonl", *backends]):
            t0 = time.perf_counter()
            built[kind] = build_log(kind, where / kind, turns, chunks_per_turn, result_bytes)
            build_s[kind] = time.perf_counter() - t0
        specs = [ours(k) for k in backends] + ([wrapped(k) for k in backends] if wrap else [])
        runs: dict[str, list[dict[str, Any]]] = {n: [] for n in [*(s.name for s in specs), "bare"]}
        for _ in range(repeat):
            for spec in specs:
                assert spec.backend is not None
                runs[spec.name].append(load_once(ctx, spec, where / spec.backend, built[spec.backend]))
            runs["bare"].append(bare_once(ctx, built["jsonl"]))
    info = built["jsonl"]
    out: dict[str, Any] = {name: summarize(r) for name, r in runs.items()}
    out |= {"events": info["events"], "chunks": info["chunks"], "results": info["results"],
            "turns": turns, "jsonl_bytes": info["bytes"], "build_s": build_s,
            "sqlite_bytes": built["sqlite"]["bytes"] if "sqlite" in built else None}
    return out
