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
import math
import os
import platform
import pstats
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from session import DURABLE_TYPES, SessionStore, open_backend
from session.backends.base import event_line
from session.log import encode

Item = tuple[str, dict[str, Any]]

BACKENDS = ("jsonl", "sqlite")
CWD = "/home/dev/project"
FIXED_TIME = 1_700_000_000_000  # the load fixtures use a fixed clock: same bytes in both backends
CHUNKS_STEP1 = 50
CHUNKS_STEP2 = 20
CALLS_PER_TURN = 2
EVENTS_PER_TURN = 2 + 1 + CHUNKS_STEP1 + 1 + 2 * CALLS_PER_TURN + 1 + 1 + CHUNKS_STEP2 + 1 + 1 + 1
# Set by --profile: collects only the timed calls of "ours" (not fixtures, not bare loops).
PROFILER: cProfile.Profile | None = None
BIG_RESULT_BYTES = (2_048, 8_192)  # multi-KB tool results: uniform in this range
SMALL_RESULT_BYTES = (40, 200)

VOCABULARY = (
    "the function returns a list of events from the log and we check each one against "
    "invariants before writing it to disk so that a crash never leaves a torn record in "
    "the committed region def load self session_id path open read bytes split lines parse "
    "import orjson return value if not isinstance dict raise error else for item in items "
    "class Store backend write sync flush close turn step tool call result message chunk"
)


# Workload generation (outside every timed region).


class Corpus:
    """A deterministic block of code-like text; slices of it are chunk and result text."""

    def __init__(self, seed: int, size: int = 1 << 17) -> None:
        rng = random.Random(seed)
        words = VOCABULARY.split()
        lines: list[str] = []
        total = 0
        while total < size:
            indent = "    " * rng.randint(0, 3)
            line = indent + " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
            if rng.random() < 0.2:
                line += ' = "' + rng.choice(words) + '"'
            lines.append(line)
            total += len(line) + 1
        self.text = "\n".join(lines)
        self.rng = rng

    def slice(self, low: int, high: int) -> str:
        length = self.rng.randint(low, high)
        start = self.rng.randrange(0, len(self.text) - length)
        return self.text[start : start + length]


def realistic_turn(turn: int, corpus: Corpus, big: tuple[bool, ...]) -> list[Item]:
    """One agent turn: prompt, a step that streams ~50 chunks and makes 2 tool calls, then
    a step of ~20 chunks that answers. `big[k]` makes the k-th tool result multi-KB."""
    items: list[Item] = [
        ("turn/start", {"turn": turn, "trigger": {"kind": "prompt"}, "mode": "code"}),
        (
            "user/message",
            {"turn": turn, "content": [{"type": "text", "text": corpus.slice(20, 300)}]},
        ),
    ]
    for step, n_chunks, calls in ((1, CHUNKS_STEP1, CALLS_PER_TURN), (2, CHUNKS_STEP2, 0)):
        items.append(("step/start", {"turn": turn, "step": step}))
        texts = [corpus.slice(4, 40) for _ in range(n_chunks)]
        for text in texts:
            items.append(
                (
                    "assistant/chunk",
                    {"turn": turn, "step": step, "chunk": {"type": "text", "text": text}},
                )
            )
        call_ids = [f"toolu_{turn:06d}_{k}" for k in range(calls)]
        paths = [f"src/module_{turn % 97}/file_{k}.py" for k in range(calls)]
        content: list[dict[str, Any]] = [{"type": "text", "text": "".join(texts)}]
        for call_id, path in zip(call_ids, paths, strict=True):
            content.append(
                {
                    "type": "tool-call",
                    "id": call_id,
                    "name": "read_file",
                    "arguments": orjson.dumps({"path": path}).decode(),
                }
            )
        usage = {
            "inputTokens": 1_000 + 37 * turn,
            "outputTokens": 12 * n_chunks,
            "cacheReadTokens": 900,
        }
        items.append(
            ("assistant/message", {"turn": turn, "step": step, "content": content, "usage": usage})
        )
        for k, (call_id, path) in enumerate(zip(call_ids, paths, strict=True)):
            items.append(
                (
                    "tool/call",
                    {
                        "turn": turn,
                        "step": step,
                        "callId": call_id,
                        "name": "read_file",
                        "arguments": {"path": path},
                        "title": f"Read {path}",
                        "kind": "read",
                        "locations": [{"path": f"{CWD}/{path}"}],
                    },
                )
            )
            size = BIG_RESULT_BYTES if big[k] else SMALL_RESULT_BYTES
            items.append(
                (
                    "tool/result",
                    {
                        "turn": turn,
                        "step": step,
                        "callId": call_id,
                        "content": [{"type": "text", "text": corpus.slice(*size)}],
                        "isError": False,
                    },
                )
            )
        items.append(("step/end", {"turn": turn, "step": step}))
    items.append(("turn/end", {"turn": turn, "reason": {"kind": "completed"}}))
    assert len(items) == EVENTS_PER_TURN
    return items


def realistic_items(events: int, big_results: int, seed: int = 1) -> list[Item]:
    """At least `events` events of realistic turns; `big_results` of the tool results
    (spread evenly) carry multi-KB content, the others a short text."""
    corpus = Corpus(seed)
    turns = max(1, math.ceil(events / EVENTS_PER_TURN))
    total = turns * CALLS_PER_TURN
    big_results = min(big_results, total)
    # Result i is big when the running share of big results steps up at i.
    flags = [(i + 1) * big_results // total > i * big_results // total for i in range(total)]
    items: list[Item] = []
    for turn in range(1, turns + 1):
        start = (turn - 1) * CALLS_PER_TURN
        items.extend(realistic_turn(turn, corpus, tuple(flags[start : start + CALLS_PER_TURN])))
    return items


def streaming_items(events: int, seed: int = 2) -> list[Item]:
    """One turn, one step, `events - 6` chunks, a message holding their text."""
    corpus = Corpus(seed)
    texts = [corpus.slice(4, 40) for _ in range(max(1, events - 6))]
    items: list[Item] = [
        ("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}}),
        ("user/message", {"turn": 1, "content": [{"type": "text", "text": "write a long essay"}]}),
        ("step/start", {"turn": 1, "step": 1}),
    ]
    items.extend(
        ("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text", "text": t}})
        for t in texts
    )
    items.append(
        (
            "assistant/message",
            {
                "turn": 1,
                "step": 1,
                "content": [{"type": "text", "text": "".join(texts)}],
                "usage": {"inputTokens": 50, "outputTokens": len(texts)},
            },
        )
    )
    items.append(("step/end", {"turn": 1, "step": 1}))
    items.append(("turn/end", {"turn": 1, "reason": {"kind": "completed"}}))
    return items


def open_turn_items(items: list[Item]) -> list[Item]:
    """`items` with its last turn cut right after its first `tool/call`: the log ends
    inside a step with one started and one unstarted call, so load must repair it."""
    last_start = max(i for i, (etype, _) in enumerate(items) if etype == "turn/start")
    first_call = next(i for i in range(last_start, len(items)) if items[i][0] == "tool/call")
    return items[: first_call + 1]


# Measurement helpers.


@contextmanager
def scratch_dir(root: str, label: str) -> Iterator[Path]:
    path = tempfile.mkdtemp(prefix=f"acp-bench-{label}-", dir=root)
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def summarize(runs: list[float]) -> dict[str, Any]:
    return {
        "seconds": statistics.median(runs),
        "best_seconds": min(runs),
        "runs": [round(r, 6) for r in runs],
    }


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fdatasync_floor_ms(root: str, count: int = 200) -> float:
    """Median latency of a bare 200-byte append + fdatasync in `root`: the disk's floor
    for one durable commit."""
    with scratch_dir(root, "fsync") as d:
        fd = os.open(d / "probe", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            lat = []
            for _ in range(count):
                t0 = time.perf_counter()
                os.write(fd, b"x" * 199 + b"\n")
                os.fdatasync(fd)
                lat.append(time.perf_counter() - t0)
        finally:
            os.close(fd)
    return statistics.median(lat) * 1e3


def filesystem_of(path: str) -> str:
    """The mount point and type holding `path` (Linux /proc/mounts), best effort."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    real = os.path.realpath(path)
    best = ("", "unknown")
    for line in mounts:
        parts = line.split()
        if len(parts) < 3 or len(parts[1]) < len(best[0]):
            continue
        if real == parts[1] or real.startswith(parts[1].rstrip("/") + "/"):
            best = (parts[1], parts[2])
    return f"{best[1]} ({best[0]})" if best[0] else "unknown"


def machine_info(root: str, probe_fsync: bool) -> dict[str, Any]:
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "orjson": getattr(orjson, "__version__", "?"),
        "sqlite": sqlite3.sqlite_version,
        "tmp_dir": root,
        "filesystem": filesystem_of(root),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    if probe_fsync:
        info["fdatasync_ms"] = round(fdatasync_floor_ms(root), 4)
    return info


# Append.


def append_once(kind: str, root: str, items: list[Item]) -> tuple[float, list[float]]:
    """Create a session and append `items` one by one; the seconds from the first
    append to the closed log, and the latency of each durable append."""
    with scratch_dir(root, f"append-{kind}") as d:
        backend = open_backend(kind, d)
        try:
            log = SessionStore(backend).create(cwd=CWD)
            durable: list[float] = []
            append = log.append
            clock = time.perf_counter
            if PROFILER is not None:
                PROFILER.enable()
            t0 = clock()
            for etype, data in items:
                if etype in DURABLE_TYPES:
                    t1 = clock()
                    append(etype, data)
                    durable.append(clock() - t1)
                else:
                    append(etype, data)
            log.close()
            elapsed = clock() - t0
            if PROFILER is not None:
                PROFILER.disable()
        finally:
            backend.close()
    return elapsed, durable


def bench_append(kind: str, root: str, items: list[Item], repeat: int) -> dict[str, Any]:
    points = sum(1 for etype, _ in items if etype in DURABLE_TYPES)
    runs: list[float] = []
    latencies: list[float] = []
    for _ in range(repeat):
        seconds, durable = append_once(kind, root, items)
        runs.append(seconds)
        latencies.extend(durable)
    out = summarize(runs)
    out.update(
        events=len(items),
        durable_points=points,
        events_per_s=len(items) / out["seconds"],
        durable_per_s=points / out["seconds"],
        durable_ms_p50=percentile(latencies, 0.50) * 1e3,
        durable_ms_p99=percentile(latencies, 0.99) * 1e3,
    )
    return out


# Load.


def build_store(kind: str, where: Path, logs: dict[str, list[Item]]) -> dict[str, dict[str, Any]]:
    """Write each item list as one session (whole turns per batch: fast, still through
    the coordinator). Returns per name: session id, event count, JSONL-equivalent bytes."""
    backend = open_backend(kind, where)
    try:
        store = SessionStore(backend, clock=lambda: FIXED_TIME)
        out: dict[str, dict[str, Any]] = {}
        for name, items in logs.items():
            log = store.create(cwd=CWD)
            batch: list[Item] = []
            for item in items:
                batch.append(item)
                if item[0] == "turn/end" and len(batch) >= 2_000:
                    log.extend(batch)
                    batch = []
            if batch:
                log.extend(batch)
            size = len(orjson.dumps(log.header)) + 1
            size += sum(len(event_line(encode(e))) for e in log.events)
            out[name] = {"id": log.id, "events": len(log.events), "bytes": size}
            log.close()
        return out
    finally:
        backend.close()


def load_once(kind: str, where: Path, sid: str, expect_events: int, repaired: bool) -> float:
    backend = open_backend(kind, where)
    try:
        store = SessionStore(backend)
        if PROFILER is not None:
            PROFILER.enable()
        t0 = time.perf_counter()
        loaded = store.load(sid)
        elapsed = time.perf_counter() - t0
        if PROFILER is not None:
            PROFILER.disable()
        try:
            if loaded.report.repaired != repaired or len(loaded.log.events) < expect_events:
                raise RuntimeError(
                    f"{kind} load of {sid}: unexpected result {loaded.report} "
                    f"with {len(loaded.log.events)} events"
                )
        finally:
            loaded.log.close()
    finally:
        backend.close()
    return elapsed


def bare_jsonl(where: Path, sid: str) -> Callable[[], int]:
    path = where / "sessions" / f"{sid}.jsonl"

    def run() -> int:
        n = 0
        loads = orjson.loads
        with open(path, "rb") as f:
            for line in f:
                loads(line)
                n += 1
        return n - 1  # the header line

    return run


def bare_sqlite(where: Path, sid: str) -> Callable[[], int]:
    path = where / "sessions.sqlite3"

    def run() -> int:
        db = sqlite3.connect(path)
        try:
            n = 0
            loads = orjson.loads
            for (data,) in db.execute(
                "SELECT data FROM events WHERE session_id = ? ORDER BY seq", (sid,)
            ):
                loads(data)
                n += 1
            return n
        finally:
            db.close()

    return run


def bench_load(kind: str, root: str, items: list[Item], repeat: int) -> dict[str, dict[str, Any]]:
    logs = {"closed": items, "open": open_turn_items(items)}
    results: dict[str, dict[str, Any]] = {}
    with scratch_dir(root, f"load-{kind}") as d:
        pristine = d / "pristine"
        built = build_store(kind, pristine, logs)
        bare_of = bare_jsonl if kind == "jsonl" else bare_sqlite
        for case, info in built.items():
            sid, events, size = info["id"], info["events"], info["bytes"]
            bare = bare_of(pristine, sid)
            ours_runs: list[float] = []
            bare_runs: list[float] = []
            for r in range(repeat):
                if case == "closed":
                    ours_runs.append(load_once(kind, pristine, sid, events, repaired=False))
                else:  # the load repairs the log: each run gets a fresh copy
                    work = d / f"work-{r}"
                    shutil.copytree(pristine, work)
                    ours_runs.append(load_once(kind, work, sid, events, repaired=True))
                    shutil.rmtree(work)
                t0 = time.perf_counter()
                parsed = bare()
                bare_runs.append(time.perf_counter() - t0)
                if parsed != events:
                    raise RuntimeError(f"bare loop read {parsed} events, expected {events}")
            ours, base = summarize(ours_runs), summarize(bare_runs)
            results[case] = {
                "events": events,
                "bytes": size,
                "seconds": ours["seconds"],
                "runs": ours["runs"],
                "events_per_s": events / ours["seconds"],
                "mb_per_s": size / 1e6 / ours["seconds"],
                "best_seconds": ours["best_seconds"],
                "bare_seconds": base["seconds"],
                "bare_best_seconds": base["best_seconds"],
                "bare_runs": base["runs"],
                "bare_events_per_s": events / base["seconds"],
                "bare_mb_per_s": size / 1e6 / base["seconds"],
                "ratio": ours["seconds"] / base["seconds"],
            }
    return results


# Report.


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [
        "  ".join(
            h.ljust(w) if i < 2 else h.rjust(w)
            for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        )
    ]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return "\n".join(lines)


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
        "--backends", default=",".join(BACKENDS), help="comma-separated: jsonl,sqlite"
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
    global PROFILER
    args = parse_args(argv)
    if args.profile:
        PROFILER = cProfile.Profile()
    try:
        results = run(args)
    finally:
        profiler, PROFILER = PROFILER, None
    if profiler is not None:
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(args.profile)
        stats.sort_stats("tottime").print_stats(args.profile)
    text = render(results)
    if args.json == "-":
        print(text, file=sys.stderr)
        sys.stdout.buffer.write(orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(text)
        if args.json:
            Path(args.json).write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
