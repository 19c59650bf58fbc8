"""The profiles of bench/protocol.py (--profile DIR): where the time goes, for
bench/README.md."""

from __future__ import annotations

import argparse
import io
import pstats
import re
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import CWD
from bench.protocol_agents import SDK, SDK_AGENT, AgentProc, Ctx, ours
from bench.protocol_measure import stores
from bench.protocol_workloads import RESULT_BYTES, build_log, stream_text

# Our agent under cProfile in every thread (`python -m cProfile` sees only the main
# thread, but `store.load` and the fsyncs run in anyio worker threads).
PROFILE_ALL_THREADS = r"""
import cProfile, pstats, runpy, sys, threading
out, argv = sys.argv[1], sys.argv[2:]
profiles = []
_inner = threading.Thread._bootstrap_inner
def inner(self):
    p = cProfile.Profile()
    profiles.append(p)
    p.enable()
    try:
        _inner(self)
    finally:
        p.disable()
threading.Thread._bootstrap_inner = inner
main = cProfile.Profile()
sys.argv = ["acp_bridge", *argv]
main.enable()
try:
    runpy.run_module("acp_bridge", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    main.disable()
    stats = pstats.Stats(main)
    for p in profiles:
        stats.add(p)
    stats.dump_stats(out)
"""


def importtime_summary(path: Path, top: int = 12) -> dict[str, Any]:
    """Parse `python -X importtime` output: the slowest top-level imports (cumulative),
    and own import time summed per top-level package. (Imports made by a worker thread,
    like our lazy jsonrpcserver, interleave with the main thread's and skew the nesting
    and the self times of the modules around them; the per-package sums of positive self
    times stay a fair account.)"""
    rows: list[tuple[int, int, int, str]] = []
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"import time:\s+(-?\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m:
            rows.append((int(m.group(1)), int(m.group(2)), len(m.group(3)) // 2, m.group(4)))
    top_level = sorted((r for r in rows if r[2] == 0), key=lambda r: -r[1])
    packages: dict[str, int] = {}
    for own, _, _, name in rows:
        key = name.split(".")[0]
        packages[key] = packages.get(key, 0) + max(own, 0)
    return {
        "total_ms": sum(max(r[0], 0) for r in rows) / 1e3,
        "modules": len(rows),
        "top_cumulative": [(name, cum / 1e3) for _, cum, _, name in top_level[:top]],
        "by_package": [(name, us / 1e3) for name, us in sorted(packages.items(), key=lambda kv: -kv[1])[:top]],
    }


def stats_text(prof: Path, top: int) -> str:
    buf = io.StringIO()
    stats = pstats.Stats(str(prof), stream=buf)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def run_profiles(ctx: Ctx, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"dir": str(out)}
    # 1. Start-up imports.
    for spec in (ours("jsonl"), SDK):
        n = next(ctx.counter)
        argv = spec.argv(ctx.root / f"store-prof-{n}", ("-X", "importtime"))
        log = out / f"importtime-{spec.name}.txt"
        agent = AgentProc(argv, log, ctx.timeout)
        agent.initialize()
        agent.new_session()
        t_new = time.perf_counter() - agent.spawned
        agent.close()
        report[f"importtime-{spec.name}"] = importtime_summary(log) | {"session_new_s": t_new}
    # 2. The stream of args.stream_words words, `python -m cProfile -o FILE` (main thread).
    text = stream_text(args.stream_words)
    for spec in (ours("jsonl"), SDK):
        prof = out / f"stream-{spec.name}.prof"
        with ctx.spawn(spec, ctx.root / "store-prof-stream", ("-m", "cProfile", "-o", str(prof))) as agent:
            agent.initialize()
            sid = agent.new_session()
            t0 = time.perf_counter()
            agent.prompt(sid, text)
            report[f"stream-{spec.name}"] = {"seconds_profiled": time.perf_counter() - t0, "prof": str(prof)}
        (out / f"stream-{spec.name}.txt").write_text(stats_text(prof, args.profile_top))
    # 3. args.turns one-word prompts in one session, every thread profiled (the fsyncs
    # run in worker threads).
    profile_turns(ctx, args, out, report, "turns-ours-jsonl",
                  ["--store", str(ctx.root / "store-prof-turns"), "--backend", "jsonl", "--model", "echo"])
    # 3b. The same turns through `acp-bridge wrap` around the SDK echo agent: the wrapper
    # profiled in every thread (the wrapped agent is not profiled).
    if args.wrap:
        profile_turns(ctx, args, out, report, "turns-wrap-sdk-jsonl",
                      ["wrap", "--store", str(ctx.root / "store-prof-wrap-turns"), "--backend", "jsonl", "--",
                       sys.executable, str(SDK_AGENT)])
    # 4. The load of the long session, every thread profiled.
    for kind in args.kinds:
        with stores(ctx, f"prof-load-{kind}") as where:
            turns = max(1, args.load_results)
            info = build_log(kind, where, turns, max(2, args.load_chunks // turns), RESULT_BYTES)
            prof = out / f"load-ours-{kind}.prof"
            n = next(ctx.counter)
            argv = [sys.executable, "-c", PROFILE_ALL_THREADS, str(prof), "--store", str(where),
                    "--backend", kind, "--model", "echo"]
            with AgentProc(argv, ctx.root / f"stderr-{n:04d}-prof-load.txt", ctx.timeout) as agent:
                agent.initialize()
                agent.ping()
                t0 = time.perf_counter()
                agent.request("session/load", {"sessionId": info["id"], "cwd": CWD, "mcpServers": []})
                report[f"load-ours-{kind}"] = {"seconds_profiled": time.perf_counter() - t0,
                                               "events": info["events"], "prof": str(prof)}
            (out / f"load-ours-{kind}.txt").write_text(stats_text(prof, args.profile_top))
    return report


def profile_turns(ctx: Ctx, args: argparse.Namespace, out: Path, report: dict[str, Any], name: str,
                  agent_args: list[str]) -> None:
    """`args.turns` one-word prompts in one session of `python -m acp_bridge AGENT_ARGS`,
    every thread of it profiled into `out/NAME.prof` (and a listing in NAME.txt)."""
    prof = out / f"{name}.prof"
    n = next(ctx.counter)
    argv = [sys.executable, "-c", PROFILE_ALL_THREADS, str(prof), *agent_args]
    with AgentProc(argv, ctx.root / f"stderr-{n:04d}-{name}.txt", ctx.timeout) as agent:
        agent.initialize()
        sid = agent.new_session()
        t0 = time.perf_counter()
        for _ in range(args.turns):
            agent.prompt(sid, "hi")
        report[name] = {"seconds_profiled": time.perf_counter() - t0, "turns": args.turns, "prof": str(prof)}
    (out / f"{name}.txt").write_text(stats_text(prof, args.profile_top))
