"""Peak memory of `acp-bridge sessions` on a very large session (issue 17, item 4).

    python bench/sessions_memory.py [--events N] [--backends jsonl,sqlite] [--tmp DIR]
                                    [--shapes turns,streaming] [--baseline DIR] [--json [PATH]]

One session of about N events (default 1,000,000) is written per backend through the
store, with the long-session shape of bench/protocol.py's load fixtures (`--shapes
turns`; per turn: a prompt, 25 chunks, a message with a tool call, the call and its
~2 KB result, 25 more chunks, a message, 61 events), and/or as one turn whose one step
streamed N - 6 chunks (`--shapes streaming`, bench/persistence.py's streaming case). Then each command runs as its own process, its stdout
to /dev/null (`list`, `show`, `show --full`, `export --format md`, `export --format
html`, `export --format jsonl`), and its peak RSS is read from the kernel (VmHWM in /proc, at its exit) with its
wall time. The target: every command under 150 MB on both backends.

--baseline DIR runs the same commands with another tree's code (DIR holds its
`acp_bridge/` and `session/`, e.g. `git archive COMMIT | tar -x -C DIR`) for comparison.
The scratch stores go in a `tempfile.mkdtemp` under --tmp and are removed at the end.
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # measure the tree this script is in, not whatever is installed
    sys.path.insert(0, str(ROOT))

from bench.common import CWD, FIXED_TIME, table, write_results  # noqa: E402 (needs ROOT on sys.path)
from bench.persistence_workloads import streaming_items  # noqa: E402
from bench.protocol_workloads import CHUNKS_PER_TURN, EVENTS_PER_TURN, RESULT_BYTES, build_log  # noqa: E402
from session import SessionStore, open_backend  # noqa: E402

TARGET_MB = 150
COMMANDS: dict[str, list[str]] = {
    "list": ["list"],
    "show": ["show", "{sid}"],
    "show --full": ["show", "{sid}", "--full"],
    "export md": ["export", "{sid}", "--format", "md"],
    "export html": ["export", "{sid}", "--format", "html"],
    "export jsonl": ["export", "{sid}", "--format", "jsonl"],
}


# The command runs under this launcher, which writes the process's VmHWM (its peak RSS
# since exec) to a file at exit. `ru_maxrss` from wait4 would not do: Linux carries the
# parent's peak over fork and exec, and the parent here holds the fixture builder.
LAUNCHER = (
    "import atexit, runpy, sys\n"
    "out = sys.argv.pop(1)\n"
    "def peak():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            open(out, 'w').write(line.split()[1])\n"
    "atexit.register(peak)\n"
    "sys.argv[0] = 'acp-bridge'\n"
    "runpy.run_module('acp_bridge', run_name='__main__', alter_sys=True)\n"
)


def run_command(code: Path, store: Path | str, backend: str, argv: list[str]) -> dict[str, Any]:
    """One `sessions` command in a fresh interpreter running `code`'s tree, stdout to a
    scratch file: its exit status, peak RSS (MB, 10^6 bytes), wall seconds, output bytes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    env["PYTHONPATH"] = str(code)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a baseline tree stays as it was unpacked
    with tempfile.TemporaryDirectory() as tmp:
        peak_file = Path(tmp) / "peak"
        with open(Path(tmp) / "out", "wb") as out:
            start = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-c", LAUNCHER, str(peak_file), "sessions", "--store", str(store),
                 "--backend", backend, *argv], stdout=out, stderr=subprocess.PIPE, env=env, cwd=code)
            seconds = time.perf_counter() - start
            size = out.tell()
        peak_kb = int(peak_file.read_text()) if peak_file.exists() else 0
    return {"code": proc.returncode, "peak_mb": peak_kb * 1024 / 1e6, "seconds": seconds,
            "out_bytes": size, "stderr": proc.stderr.decode(errors="replace")[-400:]}


def build_streaming(backend: str, root: Path, events: int) -> dict[str, Any]:
    """One turn with one step of `events - 6` chunks (bench/persistence.py's streaming
    case): a model that streamed a very long answer."""
    store = SessionStore(open_backend(backend, root), clock=lambda: FIXED_TIME)
    try:
        log = store.create(cwd=CWD)
        items = streaming_items(events)
        log.extend(items)
        log.close()
    finally:
        store.close()
    path = root / "sessions" / f"{log.id}.jsonl" if backend == "jsonl" else root / "sessions.sqlite3"
    return {"id": log.id, "events": len(items), "bytes": path.stat().st_size}


def measure(events: int, backends: list[str], shapes: list[str], scratch: Path,
            codes: dict[str, Path]) -> dict[str, Any]:
    turns = max(1, math.ceil(events / EVENTS_PER_TURN))
    results: dict[str, Any] = {"events_target": events, "turns": turns, "runs": [], "logs": {}}
    for shape in shapes:
        for backend in backends:
            store = scratch / f"{shape}-{backend}"
            started = time.perf_counter()
            if shape == "turns":
                info = build_log(backend, store, turns, CHUNKS_PER_TURN, RESULT_BYTES)
            else:
                info = build_streaming(backend, store, events)
            info["build_seconds"] = time.perf_counter() - started
            logged = {k: info[k] for k in ("id", "events", "bytes", "build_seconds")}
            results["logs"][f"{shape}-{backend}"] = logged
            print(f"{shape} {backend}: {info['events']:,} events, {info['bytes'] / 1e6:,.0f} MB stored, "
                  f"written in {info['build_seconds']:.0f} s", file=sys.stderr)
            for code_name, code in codes.items():
                for name, argv in COMMANDS.items():
                    run = run_command(code, store, backend, [a.format(sid=info["id"]) for a in argv])
                    run.update(shape=shape, backend=backend, command=name, code_tree=code_name,
                               events=logged["events"], bytes=logged["bytes"])
                    results["runs"].append(run)
                    print(f"  {code_name:<8} {name:<13} exit {run['code']}  peak {run['peak_mb']:7.1f} MB  "
                          f"{run['seconds']:6.1f} s", file=sys.stderr)
            shutil.rmtree(store, ignore_errors=True)
    return results


def render(results: dict[str, Any]) -> str:
    rows = []
    for run in results["runs"]:
        ok = run["code"] == 0 and run["peak_mb"] < TARGET_MB
        rows.append([run["shape"], run["backend"], run["command"], run["code_tree"], f"{run['events']:,}",
                     f"{run['bytes'] / 1e6:,.0f}", f"{run['peak_mb']:,.1f}", f"{run['seconds']:,.1f}",
                     f"{run['out_bytes'] / 1e6:,.1f}", str(run["code"]),
                     "PASS" if ok else "FAIL"])
    headers = ["shape", "backend", "command", "code", "events", "store MB", "peak RSS MB", "seconds",
               "output MB", "exit", f"< {TARGET_MB} MB"]
    return table(headers, rows, left=4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the session (default 1,000,000)")
    parser.add_argument("--backends", default="jsonl,sqlite")
    parser.add_argument("--shapes", default="turns",
                        help="turns (default: many realistic turns), streaming (one turn of N chunks), or both")
    parser.add_argument("--tmp", default=None, help="where the scratch stores go (default: the system's)")
    parser.add_argument("--baseline", type=Path, help="also run another tree's code (its acp_bridge/ and session/)")
    parser.add_argument("--json", nargs="?", const="-", help="JSON results to PATH (or stdout, the table to stderr)")
    args = parser.parse_args(argv)
    codes = {"ours": ROOT}
    if args.baseline is not None:
        codes["baseline"] = args.baseline.resolve()
    scratch = Path(tempfile.mkdtemp(prefix="acp-bridge-sessions-memory-", dir=args.tmp))
    try:
        results = measure(args.events, args.backends.split(","), args.shapes.split(","), scratch, codes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    results["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version()}
    write_results(render(results), results, args.json)
    failed = [r for r in results["runs"] if r["code_tree"] == "ours" and (r["code"] or r["peak_mb"] >= TARGET_MB)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
