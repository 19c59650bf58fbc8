"""Protocol benchmarks: acp-bridge against an echo agent on the official ACP Python SDK,
side by side, both real subprocesses over stdio.

    python bench/protocol.py [--quick] [--repeat R] [--repeat-big R] [--backends jsonl,sqlite]
                             [--only startup,turn,stream,load,scale,big,mcp | --only profile]
                             [--big-mb N] [--json [PATH]] [--profile DIR] [--no-wrap]

Ours is `python -m acp_bridge --store DIR --backend B --model echo` (every turn recorded
in the durable log); the reference is bench/sdk_echo_agent.py (the SDK's agent side,
records nothing). One small raw NDJSON client (`AgentProc`) drives every process
the same way: blocking pipes, buffered `readline` on the child's stdout, notifications
recognised by their prefix, responses parsed with orjson. Measured: start-up (spawn ->
`session/new` answered), RSS after `session/new`, the round trip of a one-word prompt,
streaming throughput (chunks/s of one long prompt), `session/load` of a long log against
a bare orjson loop that replays the same JSONL file, the peak RSS of loading a very
large log, and how streaming and loading scale; and the time MCP servers add to
`session/new` (bench/protocol_mcp.py). Medians over repeats; ratios ours/SDK
with the targets of the issue. With --wrap (the default), `acp-bridge wrap` around the
SDK echo agent (`wrap-sdk-B`) runs beside them in start-up, per-turn, streaming and load,
and each per-turn round probes one fdatasync of the scratch disk (issue 14's targets:
streaming through wrap >= 0.8 of the SDK agent's own chunk rate; a one-word turn through
wrap <= 2 x the SDK agent's own turn + one fdatasync). See bench/README.md.

This file is the command line; beside it: bench/protocol_agents.py (the agents and the
client), bench/protocol_workloads.py, bench/protocol_measure.py, bench/protocol_profile.py
(--profile) and bench/protocol_report.py (summary and tables).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import itertools
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # measure the tree this script is in, not whatever is installed
    sys.path.insert(0, str(ROOT))

from bench.common import filesystem_of  # noqa: E402 (needs ROOT on sys.path)
from bench.protocol_agents import SDK, Ctx, Spec, ours, wrapped  # noqa: E402
from bench.protocol_mcp import bench_mcp, render_mcp  # noqa: E402
from bench.protocol_measure import WARMUP_TURNS, bench_load, bench_quick, bench_stream  # noqa: E402
from bench.protocol_profile import run_profiles  # noqa: E402
from bench.protocol_recorded import AGENTS, bench_recorded, recording, render_recorded  # noqa: E402
from bench.protocol_report import TARGETS, render, summary_rows  # noqa: E402
from bench.protocol_workloads import (  # noqa: E402
    CHUNKS_PER_TURN,
    EVENTS_PER_TURN,
    MB,
    RESULT_BYTES,
    turn_bytes,
)

BACKENDS = ("jsonl", "sqlite", "postgres")  # postgres: a local server, started here
SECTIONS = ("startup", "turn", "stream", "load", "scale", "big", "mcp", "recorded")

FULL = {
    "stream_words": 20_000,
    "turns": 200,
    "load_chunks": 100_000,
    "load_results": 2_000,
    "scale": (1_000, 10_000, 100_000),
    "big_mb": 500,
}
QUICK = {
    "stream_words": 2_000,
    "turns": 50,
    "load_chunks": 10_000,
    "load_results": 200,
    "scale": (1_000, 10_000),
    "big_mb": 20,
}


def machine_info(root: str) -> dict[str, Any]:
    versions: dict[str, str] = {}
    for dist in ("acp-bridge", "agent-client-protocol", "pydantic", "pydantic_core", "anyio", "orjson",
                 "jsonrpcserver", "jsonschema"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "absent"
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip() or "unknown (not a git checkout)"
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "acp_bridge", "session"],
                               capture_output=True, text=True, check=False).stdout.strip()
        commit += " (acp_bridge/ or session/ modified)" if dirty else ""
    except OSError:
        commit = "unknown"
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "versions": versions,
        "commit": commit,
        "tmp_dir": root,
        "filesystem": filesystem_of(root),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes: 2,000-word stream, 50 turns, 10k-chunk load, scale 1k,10k, 20 MB big log")
    parser.add_argument("--repeat", type=int, default=5, help="runs of start-up/memory/per-turn (default 5)")
    parser.add_argument("--repeat-big", type=int, default=3, help="runs of streaming/load/scaling (default 3)")
    parser.add_argument("--backends", default="jsonl,sqlite", help="ours: comma-separated jsonl,sqlite,postgres (default jsonl,sqlite)")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated subset of {','.join(SECTIONS)} (default all); "
                             "'profile' alone: only the --profile runs")
    parser.add_argument("--stream-words", type=int, help="words of the streaming prompt (default 20000)")
    parser.add_argument("--turns", type=int, help="one-word prompts per per-turn run (default 200)")
    parser.add_argument("--load-chunks", type=int, help="chunks in the long session (default 100000)")
    parser.add_argument("--load-results", type=int, help="tool results in the long session (default 2000)")
    parser.add_argument("--scale", help="comma-separated sizes for the scaling tables (default 1000,10000,100000)")
    parser.add_argument("--big-mb", type=float, help="size of the big log in MB (default 500; 0 skips)")
    parser.add_argument("--big-result-kb", type=float, default=16.0,
                        help="average tool result of the big log, KB (default 16)")
    parser.add_argument("--tmp", default="/tmp", help="where scratch stores go (default /tmp)")
    parser.add_argument("--timeout", type=float, default=1_800.0, help="kill an agent process after this (s)")
    parser.add_argument("--profile", metavar="DIR",
                        help="also profile: -X importtime of both agents, cProfile of both during the stream, "
                             "cProfile (all threads) of ours during --turns one-word prompts, "
                             "cProfile (all threads) of ours during the long-session load; files in DIR")
    parser.add_argument("--diagnose-nosync", action="store_true",
                        help="also run ours (jsonl) with fsync made a no-op in the start-up/per-turn and "
                             "streaming runs (ours-jsonl-nosync; with --wrap also wrap-sdk-jsonl-nosync): "
                             "what durability costs; not a target")
    parser.add_argument("--slow-disk", type=float, default=0.0, metavar="MS",
                        help="a slow disk: every fsync/fdatasync of the agent processes (ours, the wrapper, "
                             "SQLite's) sleeps MS ms first (an LD_PRELOAD shim built with cc in the scratch "
                             "folder; issue 23 measured wrap on a disk with 2.4 ms fdatasyncs); default 0: off")
    parser.add_argument("--wrap", action=argparse.BooleanOptionalAction, default=True,
                        help="also run `acp-bridge wrap --backend B -- python bench/sdk_echo_agent.py` "
                             "(wrap-sdk-B, B in --backends) in start-up/per-turn, streaming and load "
                             "(not scale or big), and profile it with --profile (default on; --no-wrap)")
    parser.add_argument("--recorded-agents", default=",".join(AGENTS),
                        help="the `recorded` section's agents, played from tests/wrapped_agents/ by "
                             f"bench/recorded_agent.py (default {','.join(AGENTS)}; gemini-cli too)")
    parser.add_argument("--recorded-chunks", type=int, default=5_000,
                        help="chunks of the `recorded` section's streamed prompt (default 5000)")
    parser.add_argument("--repeat-recorded", type=int, default=7,
                        help="rounds of the `recorded` section, each the agent alone and wrapped (default 7)")
    parser.add_argument("--recorded-rate", type=float, default=0.0, metavar="CHUNKS_PER_S",
                        help="the recorded agents stream at this rate (default 0: as fast as they write)")
    parser.add_argument("--profile-top", type=int, default=30, help="functions per profile listing (default 30)")
    parser.add_argument("--json", nargs="?", const="-", metavar="PATH",
                        help="write results as JSON to PATH; alone: JSON on stdout, table on stderr")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    for key, value in sizes.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if isinstance(args.scale, str):
        args.scale = tuple(int(x) for x in args.scale.split(",") if x.strip())
    args.kinds = [k.strip() for k in args.backends.split(",") if k.strip()]
    if not args.kinds or any(k not in BACKENDS for k in args.kinds):
        parser.error(f"--backends: choose from {', '.join(BACKENDS)}")
    args.sections = [s.strip() for s in args.only.split(",") if s.strip()]
    profile_only = args.sections == ["profile"] and args.profile is not None
    if profile_only:
        args.sections = []
    elif not args.sections or any(s not in SECTIONS for s in args.sections):
        parser.error(f"--only: choose from {', '.join(SECTIONS)} (or 'profile' with --profile DIR)")
    if args.repeat < 1 or args.repeat_big < 1 or args.stream_words < 1 or args.turns < 1:
        parser.error("--repeat, --repeat-big, --stream-words and --turns must be >= 1")
    if args.load_results < 1 or args.load_chunks < 2 * args.load_results:
        parser.error("--load-chunks must be at least twice --load-results (>= 1)")
    args.recorded = [a.strip() for a in args.recorded_agents.split(",") if a.strip()]
    for agent in args.recorded:
        recording(agent)  # exits naming the agent if there is no recording of it
    if args.recorded_chunks < 1 or args.repeat_recorded < 1:
        parser.error("--recorded-chunks and --repeat-recorded must be >= 1")
    return args


def run_section(section: str, args: argparse.Namespace, ctx: Ctx, specs: list[Spec],
                results: dict[str, Any]) -> None:
    if section == "startup" and ("startup" in args.sections or "turn" in args.sections):
        results["quick"], results["fdatasync"] = bench_quick(ctx, specs, args.turns, args.repeat, fsync=True)
    elif section == "stream" and section in args.sections:
        results["stream"] = bench_stream(ctx, specs, args.stream_words, args.repeat_big)
    elif section == "load" and section in args.sections:
        turns = args.load_results
        results["load"] = bench_load(ctx, args.kinds, turns, args.load_chunks // turns, RESULT_BYTES,
                                     args.repeat_big, "load", wrap=args.wrap)
    elif section == "scale" and section in args.sections:
        results["scale"] = {"stream": {}, "load": {}}
        unwrapped = [s for s in specs if not s.wrap]  # wrap is measured at one size only
        for n in args.scale:
            results["scale"]["stream"][str(n)] = bench_stream(ctx, unwrapped, n, args.repeat_big)
        for n in args.scale:
            turns = max(1, round(n / EVENTS_PER_TURN))
            results["scale"]["load"][str(n)] = bench_load(ctx, args.kinds, turns, CHUNKS_PER_TURN,
                                                          RESULT_BYTES, args.repeat_big, f"scale-{n}")
    elif section == "big" and section in args.sections and args.big_mb > 0:
        result_bytes = int(args.big_result_kb * 1024)
        turns = max(1, math.ceil(args.big_mb * MB / turn_bytes(CHUNKS_PER_TURN, result_bytes)))
        results["big"] = bench_load(ctx, args.kinds, turns, CHUNKS_PER_TURN, result_bytes, args.repeat_big, "big")
    elif section == "mcp" and section in args.sections:
        results["mcp"] = bench_mcp(ctx, args.repeat)
    elif section == "recorded" and section in args.sections:
        results["recorded"] = bench_recorded(ctx, args.recorded, args.kinds[0], args.recorded_chunks,
                                             args.repeat_recorded, args.recorded_rate)
    elif section == "profile" and args.profile:
        results["profile"] = run_profiles(ctx, Path(args.profile), args)


def compile_tree() -> None:
    """Write the bytecode of our packages, as installing them does (pip compiles the
    SDK's at install time). Without it, an environment with PYTHONDONTWRITEBYTECODE=1
    and an editable install recompiles every edited module at each start of ours."""
    import compileall

    for package in ("acp_bridge", "session"):
        compileall.compile_dir(str(ROOT / package), quiet=1)


# --slow-disk: fsync and fdatasync sleep first, then do the real call. Interposed on
# libc's symbols, so Python's os.fsync/os.fdatasync and SQLite's syncs are both slowed.
SLOW_SYNC_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
static void slow(void) {
    const char *s = getenv("ACP_BENCH_SLOW_SYNC_US");
    long us = s ? atol(s) : 0;
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    if (us > 0) nanosleep(&t, 0);
}
int fsync(int fd) { static int (*real)(int); if (!real) real = dlsym(RTLD_NEXT, "fsync"); slow(); return real(fd); }
int fdatasync(int fd) { static int (*real)(int); if (!real) real = dlsym(RTLD_NEXT, "fdatasync"); slow(); return real(fd); }
"""


def slow_disk_env(scratch: Path, ms: float) -> dict[str, str]:
    """The environment of agent processes on a slow disk: the shim (built here with cc)
    preloaded, each sync `ms` longer."""
    source, library = scratch / "slow_sync.c", scratch / "slow_sync.so"
    source.write_text(SLOW_SYNC_C)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source), "-ldl"], check=True)
    preload = " ".join(filter(None, [str(library), os.environ.get("LD_PRELOAD", "")]))
    return {**os.environ, "LD_PRELOAD": preload, "ACP_BENCH_SLOW_SYNC_US": str(round(ms * 1000))}


def run(args: argparse.Namespace) -> dict[str, Any]:
    compile_tree()
    scratch = Path(tempfile.mkdtemp(prefix="acp-bench-protocol-", dir=args.tmp))
    ctx = Ctx(scratch, args.timeout, itertools.count(1),
              slow_disk_env(scratch, args.slow_disk) if args.slow_disk > 0 else None)
    specs = [*(ours(k) for k in args.kinds), SDK]
    if args.diagnose_nosync:
        specs.insert(-1, Spec("ours-jsonl-nosync", "jsonl", nosync=True))
    if args.wrap:
        specs[-1:-1] = [wrapped(k) for k in args.kinds]
        if args.diagnose_nosync:
            specs.insert(-1, Spec("wrap-sdk-jsonl-nosync", "jsonl", nosync=True, wrap=True))
    results: dict[str, Any] = {
        "machine": machine_info(args.tmp),
        "params": {key: getattr(args, key) for key in (
            "repeat", "repeat_big", "kinds", "sections", "stream_words", "turns", "load_chunks",
            "load_results", "scale", "big_mb", "big_result_kb", "quick", "wrap", "slow_disk", "recorded",
            "recorded_chunks", "repeat_recorded", "recorded_rate")} | {
            "warmup_turns": WARMUP_TURNS, "chunks_per_turn": CHUNKS_PER_TURN, "result_bytes": RESULT_BYTES},
        "targets": {k: f"{op} {v:g}" for k, (op, v) in TARGETS.items()},
    }
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    try:
        for section in (*SECTIONS, "profile"):
            t0 = time.perf_counter()
            run_section(section, args, ctx, specs, results)
            timings[section] = round(time.perf_counter() - t0, 3)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["section_seconds"] = timings
    results["seconds"] = time.perf_counter() - t_start
    results["summary"] = summary_rows(results, args.kinds, wrap=args.wrap)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = run(args)
    text = render(results) + (render_mcp(results["mcp"]) if "mcp" in results else "") \
        + (render_recorded(results["recorded"]) if "recorded" in results else "")
    data = orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    if args.json == "-":
        print(text, file=sys.stderr)
        sys.stdout.buffer.write(data)
    else:
        print(text)
        if args.json:
            Path(args.json).write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
