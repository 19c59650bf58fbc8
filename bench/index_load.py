"""Does a search indexer slow a running agent? (issue 26, point 1: "indexing never
blocks or slows a running agent (measure)").

    python bench/index_load.py [--backends jsonl,sqlite] [--repeat 5] [--words 20000]
                               [--turns 100] [--every 0.05] [--json PATH]

bench/protocol.py's streaming (one prompt of N words to our echo agent, every chunk
read: seconds to the answer) and per-turn (one-word prompts in one session: the median
round trip, each turn's `turn/end` fsynced) runs, each with and without `acp-bridge
sessions index --watch --every S` on the same store, interleaved (off, on, off, on...)
so drifting machine load hits both alike. The watcher catches up after every change:
during a run it reads the agent's growing log again and again, at nice 10. Medians.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import table  # noqa: E402 (needs ROOT on sys.path)
from bench.protocol_agents import Ctx, ours  # noqa: E402
from bench.protocol_measure import median, stream_once  # noqa: E402


def turns_once(ctx: Ctx, backend: str, turns: int) -> float:
    """The median round trip (ms) of `turns` one-word prompts in one session."""
    with ctx.spawn(ours(backend)) as agent:
        agent.initialize()
        sid = agent.new_session()
        for _ in range(5):
            agent.prompt(sid, "hi")
        times = []
        for _ in range(turns):
            t0 = time.perf_counter()
            agent.prompt(sid, "hi")
            times.append(time.perf_counter() - t0)
    return median(times) * 1e3


def watcher(store: Path, backend: str, every: float) -> subprocess.Popen[bytes]:
    store.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(store), "--backend",
                             backend, "index", "--watch", "--every", str(every)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=ROOT)


def stopped(proc: subprocess.Popen[bytes]) -> str:
    import signal

    proc.send_signal(signal.SIGTERM)  # (SIGINT is ignored by a job a shell started in the background)
    _, err = proc.communicate(timeout=30)
    return err.decode(errors="replace")


def measure(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    ctx = Ctx(scratch, 600.0, itertools.count())
    text = " ".join(f"w{i}" for i in range(args.words))
    out: dict[str, Any] = {"runs": []}
    for backend in args.backends.split(","):
        store = scratch / f"store-ours-{backend}"
        for _ in range(args.repeat):
            for indexer in (False, True):
                proc = watcher(store, backend, args.every) if indexer else None
                try:
                    if proc is not None:
                        time.sleep(1.0)  # its first pass done (the store holds the earlier runs' sessions)
                    streamed = stream_once(ctx, ours(backend), args.words, text)
                    turn_ms = turns_once(ctx, backend, args.turns)
                finally:
                    log = stopped(proc) if proc is not None else ""
                passes = log.count("log(s) read")
                out["runs"].append({"backend": backend, "indexer": indexer, "stream_s": streamed["seconds"],
                                    "turn_ms": turn_ms, "passes": passes})
                print(f"{backend} indexer={'on ' if indexer else 'off'} stream {streamed['seconds']:.2f} s, "
                      f"turn {turn_ms:.2f} ms, {passes} indexer passes that read", file=sys.stderr)
    return out


def render(results: dict[str, Any]) -> str:
    rows = []
    backends = sorted({r["backend"] for r in results["runs"]})
    for backend in backends:
        line = {}
        for on in (False, True):
            runs = [r for r in results["runs"] if r["backend"] == backend and r["indexer"] is on]
            line[on] = (median([r["stream_s"] for r in runs]), median([r["turn_ms"] for r in runs]),
                        sum(r["passes"] for r in runs))
        rows.append([backend, f"{line[False][0]:.2f}", f"{line[True][0]:.2f}",
                     f"{line[True][0] / line[False][0]:.2f}", f"{line[False][1]:.2f}", f"{line[True][1]:.2f}",
                     f"{line[True][1] / line[False][1]:.2f}", str(line[True][2])])
    return table(["backend", "stream s (off)", "stream s (on)", "on/off", "turn ms (off)", "turn ms (on)", "on/off",
                  "passes that read"], rows, left=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="jsonl,sqlite")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--words", type=int, default=20_000)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--every", type=float, default=0.05, help="the watcher's seconds between passes")
    parser.add_argument("--tmp", default=None)
    parser.add_argument("--json", help="JSON results to PATH")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="acp-bridge-index-load-", dir=args.tmp) as scratch:
        results = measure(args, Path(scratch))
    results["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "loadavg": os.getloadavg()}
    print(render(results))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
