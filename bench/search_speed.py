"""How fast a search answers on a store of many sessions (issue 35, "search at the
anchors' speed": cass answers under 100 ms on 10,000+ conversations).

    python bench/search_speed.py [--sessions 10000] [--backends jsonl,sqlite,postgres]
                                 [--repeat 5] [--requests 40] [--tmp DIR] [--keep DIR]
                                 [--json PATH]

The store is bench/sessions_scale.py's (N copies of a 2-turn template session, each
prompt naming a word of its own, `w00042`), indexed once by `sessions index`. Then, for
each query (a word of every session's prompt, a word of every session's tool output,
one session's own word, a phrase with filters):

- **served (warm)**: one `acp-bridge sessions serve` process, asked
  `GET /TOKEN/search?q=...` over HTTP, `--requests` times per query in turn after two
  answers to warm it: the time from sending the request to the last byte of the page,
  p50 and p99 over every request (targets 50 ms and 150 ms);
- **command (fresh)**: `acp-bridge sessions search QUERY` in its own interpreter
  (bench/sessions_memory.py's launcher), `--repeat` times: the median and the worst
  (target 0.2 s, the interpreter's start included).

Each brings the index up to date first (nothing new here: what every search pays). The
load average is printed with each figure: the machine's other work is in them.
`--keep DIR` keeps the JSONL and SQLite stores there (and reuses them on the next run);
PostgreSQL's server is one per run (bench/pg_store.py), its store built each time.
"""

from __future__ import annotations

import argparse
import http.client
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # measure the tree this script is in, not whatever is installed
    sys.path.insert(0, str(ROOT))

from bench import pg_store  # noqa: E402 (needs ROOT on sys.path)
from bench.common import CWD, table  # noqa: E402
from bench.sessions_memory import run_command  # noqa: E402
from bench.sessions_scale import build_store  # noqa: E402

QUERIES: list[tuple[str, list[str]]] = [
    ("common (prompt)", ["timeout"]),
    ("common (output)", ["connection"]),
    ("rare", ["w00042"]),
    ("phrase+filters", ['"connection refused"', "--cwd", CWD + "3", "--ended", "completed",
                        "--since", "2023-01-01"]),
]
SERVED_P50, SERVED_P99, COMMAND = 0.050, 0.150, 0.2  # seconds


def url_query(argv: list[str]) -> str:
    """A `sessions search` argument list as the served search's query string."""
    params, words, args = [], [], list(argv)
    while args:
        arg = args.pop(0)
        if arg.startswith("--"):
            params.append(f"{arg[2:]}={quote(args.pop(0), safe='')}")
        else:
            words.append(arg)
    return "&".join([f"q={quote(' '.join(words), safe='')}", *params])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def served(where: Path | str, kind: str, requests: int) -> dict[str, Any]:
    """Every query's latencies (s) in one warm `sessions serve`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    proc = subprocess.Popen([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(where), "--backend",
                             kind, "serve"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)(/[A-Za-z0-9_-]+/)", line)
    if found is None:
        proc.kill()
        raise RuntimeError(f"no URL from serve: {line}{proc.communicate()[1]}")
    port, base = int(found.group(1)), found.group(2)
    out: dict[str, Any] = {}
    try:
        def get(path: str) -> float:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            start = time.perf_counter()
            conn.request("GET", path)
            answer = conn.getresponse()
            body = answer.read()
            took = time.perf_counter() - start
            conn.close()
            if answer.status != 200 or b"<ol class=\"hits\">" not in body:
                raise RuntimeError(f"{path}: {answer.status} {body[:300]!r}")
            return took

        paths = {name: f"{base}search?{url_query(argv)}" for name, argv in QUERIES}
        for path in paths.values():  # warm: imports, the index opened, pages cached by the OS
            get(path)
            get(path)
        times: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(requests):
            for name, path in paths.items():
                times[name].append(get(path))
        for name, values in times.items():
            out[name] = {"p50": percentile(values, 50), "p99": percentile(values, 99), "max": max(values),
                         "all": values, "load1": os.getloadavg()[0]}
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    return out


def command(where: Path | str, kind: str, repeat: int) -> dict[str, Any]:
    out = {}
    for name, argv in QUERIES:
        runs = [run_command(ROOT, where, kind, ["search", *argv]) for _ in range(repeat)]
        bad = [r for r in runs if r["code"]]
        if bad:
            raise RuntimeError(f"search {argv}: exit {bad[0]['code']}: {bad[0]['stderr']}")
        seconds = sorted(r["seconds"] for r in runs)
        out[name] = {"median": seconds[(len(seconds) - 1) // 2], "max": seconds[-1], "all": seconds,
                     "peak_mb": max(r["peak_mb"] for r in runs), "load1": os.getloadavg()[0]}
    return out


def build(kind: str, folder: Path, n: int, keep: bool) -> tuple[Path | str, float]:
    """The store (reused if `keep` and it was built for n sessions), and seconds spent."""
    marker = folder / f".built-{n}"
    if keep and kind != "postgres" and marker.exists():
        return folder, 0.0
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    where, seconds = build_store(kind, folder, n)
    marker.touch()
    return where, seconds


def measure(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"sessions": args.sessions, "backends": {}, "machine": platform.platform(),
                               "cpus": os.cpu_count()}
    for kind in args.backends.split(","):
        folder = (Path(args.keep) if args.keep else scratch) / kind
        where, built = build(kind, folder, args.sessions, bool(args.keep))
        started = time.perf_counter()
        index = run_command(ROOT, where, kind, ["index"])
        print(f"{kind}: built in {built:.0f} s, indexed in {time.perf_counter() - started:.1f} s "
              f"(exit {index['code']})", file=sys.stderr)
        one: dict[str, Any] = {"served": served(where, kind, args.requests), "command": command(where, kind,
                                                                                                 args.repeat)}
        for name, _ in QUERIES:
            s, c = one["served"][name], one["command"][name]
            print(f"  {name:<16} served p50 {s['p50'] * 1e3:6.1f} ms p99 {s['p99'] * 1e3:6.1f} ms   "
                  f"command {c['median']:.3f} s (max {c['max']:.3f})  load {c['load1']:.1f}", file=sys.stderr)
        results["backends"][kind] = one
        if kind == "postgres":
            pg_store.drop(where)
        elif not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return results


def render(results: dict[str, Any]) -> str:
    rows = []
    for kind, one in results["backends"].items():
        for name, _ in QUERIES:
            s, c = one["served"][name], one["command"][name]
            ok = s["p50"] <= SERVED_P50 and s["p99"] <= SERVED_P99 and c["median"] <= COMMAND
            rows.append([kind, name, f"{s['p50'] * 1e3:.1f}", f"{s['p99'] * 1e3:.1f}", f"{c['median']:.3f}",
                         f"{c['max']:.3f}", f"{c['load1']:.1f}", "PASS" if ok else "FAIL"])
    return table(["backend", "query", "served p50 ms", "served p99 ms", "command s", "command max s",
                  "load", f"verdict (<= {SERVED_P50 * 1e3:g} / {SERVED_P99 * 1e3:g} ms, {COMMAND:g} s)"],
                 rows, left=2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--backends", default="jsonl,sqlite,postgres")
    parser.add_argument("--repeat", type=int, default=5, help="fresh `sessions search` runs per query")
    parser.add_argument("--requests", type=int, default=40, help="served requests per query")
    parser.add_argument("--tmp", help="scratch folder (default: the system's)")
    parser.add_argument("--keep", help="keep the file stores here and reuse them")
    parser.add_argument("--json", help="write every figure here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.tmp) as scratch:
        results = measure(args, Path(scratch))
    print(render(results))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
