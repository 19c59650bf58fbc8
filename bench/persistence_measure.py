"""The measurements of bench/persistence.py: appends with their durability points,
loads against a bare parse of the same records, and the machine they ran on."""

from __future__ import annotations

import cProfile
import gc
import os
import platform
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from bench import pg_store
from bench.common import CWD, FIXED_TIME, filesystem_of
from bench.persistence_workloads import Item, open_turn_items
from session import DURABLE_TYPES, SessionStore, open_backend
from session.backends.base import event_line
from session.log import encode

# Set by --profile: collects only the timed calls of "ours" (not fixtures, not bare loops).
PROFILER: cProfile.Profile | None = None


def store_at(kind: str, folder: Path) -> Path | str:
    """Where a store of `kind` goes for a scratch folder (postgres: a fresh database)."""
    return pg_store.location(kind, folder, fresh=True)


def copy_store(kind: str, source: Path | str, folder: Path) -> Path | str:
    """A copy of a built store (each repairing load gets a fresh one)."""
    if kind != "postgres":
        shutil.copytree(source, folder)
        return folder
    return pg_store.copy(source, folder)


def drop_store(kind: str, where: Path | str) -> None:
    if kind != "postgres":
        shutil.rmtree(where, ignore_errors=True)
    else:
        pg_store.drop(where)


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
        where = store_at(kind, d)
        backend = open_backend(kind, where)
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
            if kind == "postgres":
                drop_store(kind, where)
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


def build_store(kind: str, where: Path | str, logs: dict[str, list[Item]]) -> dict[str, dict[str, Any]]:
    """Write each item list as one session (whole turns per batch: fast, still through
    the session log). Returns per name: session id, event count, JSONL-equivalent bytes."""
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


def load_once(kind: str, where: Path | str, sid: str, expect_events: int, repaired: bool) -> float:
    backend = open_backend(kind, where)
    try:
        store = SessionStore(backend)
        if PROFILER is not None:
            PROFILER.enable()
        # As the agent's process policy does for a load (acp_bridge.host.tuning): parsing
        # allocates many small dicts that are never garbage.
        gc.disable()
        t0 = time.perf_counter()
        try:
            loaded = store.load(sid)
        finally:
            elapsed = time.perf_counter() - t0
            gc.enable()
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


def bare_postgres(dsn: str, sid: str) -> Callable[[], int]:
    def run() -> int:
        import psycopg

        with psycopg.connect(dsn) as db, db.cursor(name="bare", binary=True) as cursor:
            cursor.itersize = 512
            cursor.execute("SELECT data::text FROM acp_bridge.events WHERE session_id = %s "
                           "ORDER BY seq", (sid,))
            n = 0
            loads = orjson.loads
            for (data,) in cursor:
                loads(data)
                n += 1
            return n

    return run


def bench_load(kind: str, root: str, items: list[Item], repeat: int) -> dict[str, dict[str, Any]]:
    logs = {"closed": items, "open": open_turn_items(items)}
    results: dict[str, dict[str, Any]] = {}
    with scratch_dir(root, f"load-{kind}") as d:
        pristine = store_at(kind, d / "pristine")
        built = build_store(kind, pristine, logs)
        for case, info in built.items():
            sid, events, size = info["id"], info["events"], info["bytes"]
            if kind == "postgres":
                bare = bare_postgres(str(pristine), sid)
            else:
                bare = (bare_jsonl if kind == "jsonl" else bare_sqlite)(Path(pristine), sid)
            ours_runs: list[float] = []
            bare_runs: list[float] = []
            for r in range(repeat):
                if case == "closed":
                    ours_runs.append(load_once(kind, pristine, sid, events, repaired=False))
                else:  # the load repairs the log: each run gets a fresh copy
                    work = copy_store(kind, pristine, d / f"work-{r}")
                    ours_runs.append(load_once(kind, work, sid, events, repaired=True))
                    drop_store(kind, work)
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
        if kind == "postgres":
            drop_store(kind, pristine)
    return results
