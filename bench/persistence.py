"""Persistence benchmarks: append and load throughput of the session store.

    python bench/persistence.py [--events N] [--backends jsonl,sqlite] [--repeat R]
                                [--only append|load] [--json [PATH]]

Append: realistic turns written event by event through `SessionStore.create` and
`SessionLog.append`, with the real durability points (tool/call, step/end, turn/end),
and a pure streaming turn (N chunks in one step, durable only at its end).
Load: `SessionStore.load` of a large closed log and of one that ends in an open turn
(repair needed), against a bare loop that only parses the same records with orjson.
Every figure is the median of R runs. See bench/README.md.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the bench package beside it
    sys.path.insert(0, str(ROOT))

from bench import persistence_measure as measure  # noqa: E402 (needs ROOT on sys.path)
from bench.common import table, write_results  # noqa: E402
from bench.persistence_measure import bench_append, bench_load, machine_info  # noqa: E402
from bench.persistence_workloads import EVENTS_PER_TURN, realistic_items, streaming_items  # noqa: E402

BACKENDS = ("jsonl", "sqlite", "postgres")  # postgres: a local server, started here


# Report.


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    p = results["params"]
    out = [
        f"machine: {m['platform']}, {m['cpu_count']} CPUs, {m['python_impl']} {m['python']}, "
        f"orjson {m['orjson']}, SQLite {m['sqlite']}",
        f"store: {m['tmp_dir']} on {m['filesystem']}"
        + (f", bare append+fdatasync {m['fdatasync_ms']:.3f} ms" if "fdatasync_ms" in m else ""),
        f"median of {p['repeat']} runs; target {p['events']:,} events; "
        f"load average at start {' '.join(map(str, m['loadavg_at_start']))}",
    ]
    if results.get("append"):
        rows = []
        for kind, cases in results["append"].items():
            for case, r in cases.items():
                rows.append(
                    [
                        kind,
                        case,
                        f"{r['events']:,}",
                        f"{r['durable_points']:,}",
                        f"{r['seconds']:.3f}",
                        f"{r['events_per_s']:,.0f}",
                        f"{r['durable_per_s']:,.0f}",
                        f"{r['durable_ms_p50']:.3f}",
                        f"{r['durable_ms_p99']:.3f}",
                    ]
                )
        out += [
            "",
            "APPEND (SessionLog.append, one event at a time)",
            table(
                [
                    "backend",
                    "case",
                    "events",
                    "durable",
                    "seconds",
                    "events/s",
                    "durable/s",
                    "durable p50 ms",
                    "durable p99 ms",
                ],
                rows,
            ),
        ]
    if results.get("load"):
        rows = []
        for kind, cases in results["load"].items():
            for case, r in cases.items():
                rows.append(
                    [
                        kind,
                        case,
                        f"{r['events']:,}",
                        f"{r['bytes'] / 1e6:.1f}",
                        f"{r['seconds']:.3f}",
                        f"{r['events_per_s']:,.0f}",
                        f"{r['mb_per_s']:.1f}",
                        f"{r['bare_seconds']:.3f}",
                        f"{r['bare_events_per_s']:,.0f}",
                        f"{r['bare_mb_per_s']:.1f}",
                        f"{r['ratio']:.2f}x",
                    ]
                )
        out += [
            "",
            "LOAD (SessionStore.load vs a bare orjson.loads loop over the same records)",
            table(
                [
                    "backend",
                    "case",
                    "events",
                    "MB",
                    "ours s",
                    "ours ev/s",
                    "ours MB/s",
                    "bare s",
                    "bare ev/s",
                    "bare MB/s",
                    "ours/bare",
                ],
                rows,
            ),
        ]
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--events", type=int, default=100_000, help="events per log (default 100000)"
    )
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help="comma-separated: jsonl,sqlite,postgres"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per measurement (median reported)"
    )
    parser.add_argument(
        "--big-results",
        type=int,
        default=2_000,
        help="tool results with multi-KB content (default 2000)",
    )
    parser.add_argument("--only", choices=("append", "load"), help="run one half only")
    parser.add_argument("--tmp", default="/tmp", help="where scratch stores go (default /tmp)")
    parser.add_argument(
        "--profile",
        type=int,
        nargs="?",
        const=25,
        metavar="TOP",
        help="cProfile the timed calls of ours only; print the TOP (25) "
        "functions by cumulative time to stderr (timings are inflated)",
    )
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="write results as JSON to PATH; alone: JSON on stdout, table on stderr",
    )
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.backends.split(",") if k.strip()]
    bad = [k for k in kinds if k not in BACKENDS]
    if bad or not kinds:
        parser.error(f"--backends: choose from {', '.join(BACKENDS)}")
    if args.events < 100 or args.repeat < 1:
        parser.error("--events must be >= 100 and --repeat >= 1")
    if "postgres" in kinds and args.backends == ",".join(BACKENDS):
        from bench.pg_server import find_bin_dir, missing_reason

        if find_bin_dir() is None:  # asked for by default only: say so and go on
            print(f"postgres left out: {missing_reason()}", file=sys.stderr)
            kinds.remove("postgres")
    args.kinds = kinds
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "machine": machine_info(args.tmp, probe_fsync=True),
        "params": {
            "events": args.events,
            "repeat": args.repeat,
            "backends": args.kinds,
            "big_results": args.big_results,
            "events_per_turn": EVENTS_PER_TURN,
        },
        "append": {},
        "load": {},
    }
    turns = realistic_items(args.events, args.big_results)
    if args.only in (None, "append"):
        stream = streaming_items(args.events)
        for kind in args.kinds:
            results["append"][kind] = {
                "turns": bench_append(kind, args.tmp, turns, args.repeat),
                "streaming": bench_append(kind, args.tmp, stream, args.repeat),
            }
    if args.only in (None, "load"):
        for kind in args.kinds:
            results["load"][kind] = bench_load(kind, args.tmp, turns, args.repeat)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile:
        measure.PROFILER = cProfile.Profile()
    try:
        results = run(args)
    finally:
        profiler, measure.PROFILER = measure.PROFILER, None
    if profiler is not None:
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(args.profile)
        stats.sort_stats("tottime").print_stats(args.profile)
    write_results(render(results), results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
