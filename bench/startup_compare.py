"""Start-up of checkouts side by side: from spawn to the answer of `initialize` and of
`session/new`, for `acp-bridge serve --model echo` and for `acp-bridge wrap` in front
of it, for each checkout given (the code before and after a change), alternating, so
that the machine's load falls on all of them alike. Median of `--repeat` rounds.

    git archive BASE | tar -x -C /tmp/before       # the code before, standing alone
    .venv/bin/python bench/startup_compare.py --repeat 9 before=/tmp/before after=.

Each process runs `python -m acp_bridge` in its checkout's folder (the wrapped agent
too), so the checkout's package is the one imported, with this interpreter's
site-packages; every run has fresh JSONL stores in a scratch folder. `wrap adds` is the
median, over rounds, of the wrapper's time minus the agent's own in the same round.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
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

from bench.protocol_agents import AgentProc  # noqa: E402 (needs ROOT on sys.path)

KINDS = ("serve", "wrap")
FIGURES = ("initialize_ms", "session_new_ms", "new_round_trip_ms", "rss_mb")


def argv(kind: str, scratch: Path) -> list[str]:
    agent = [sys.executable, "-m", "acp_bridge", "serve", "--store", str(scratch / "agent"), "--backend", "jsonl",
             "--model", "echo"]
    if kind == "serve":
        return agent
    return [sys.executable, "-m", "acp_bridge", "wrap", "--store", str(scratch / "wrap"), "--backend", "jsonl",
            "--", *agent]


def one_run(kind: str, checkout: Path, scratch: Path, timeout: float) -> dict[str, float]:
    """One process: spawn, `initialize`, `session/new`, both timed from spawn; the
    process's RSS after it (the wrapper's own, without its child)."""
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with AgentProc(argv(kind, scratch), scratch / "stderr.txt", timeout, env, cwd=checkout) as agent:
        agent.initialize()
        t_init = time.perf_counter() - agent.spawned
        agent.new_session()
        t_new = time.perf_counter() - agent.spawned
        rss = agent.status()["VmRSS"]
    shutil.rmtree(scratch, ignore_errors=True)
    return {"initialize_ms": t_init * 1e3, "session_new_ms": t_new * 1e3, "new_round_trip_ms": (t_new - t_init) * 1e3,
            "rss_mb": rss / 1024}


def package_of(checkout: Path) -> str:
    """Where `python -m acp_bridge` run in `checkout` finds the package (a check that
    each checkout runs its own code)."""
    done = subprocess.run([sys.executable, "-c", "import acp_bridge; print(acp_bridge.__file__)"], cwd=checkout,
                          env={**os.environ, "PYTHONPATH": str(checkout)}, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def compare(checkouts: dict[str, Path], repeat: int, timeout: float) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, float]]]] = {name: {kind: [] for kind in KINDS} for name in checkouts}
    names = list(checkouts)
    with tempfile.TemporaryDirectory(prefix="startup-compare-") as tmp:
        for n in range(repeat):
            for name in names if n % 2 == 0 else names[::-1]:  # alternate who goes first
                for kind in KINDS:
                    runs[name][kind].append(one_run(kind, checkouts[name], Path(tmp) / f"{n}-{name}-{kind}", timeout))
    out: dict[str, Any] = {"repeat": repeat, "load_at_end": os.getloadavg(), "checkouts": {}}
    for name in names:
        serve, wrap = runs[name]["serve"], runs[name]["wrap"]
        out["checkouts"][name] = {
            "path": str(checkouts[name]), "package": package_of(checkouts[name]),
            "median": {kind: {f: statistics.median(r[f] for r in runs[name][kind]) for f in FIGURES} for kind in KINDS},
            "wrap_adds_ms": {f: statistics.median(w[f] - s[f] for w, s in zip(wrap, serve, strict=True))
                             for f in ("initialize_ms", "session_new_ms")},
            "runs": runs[name],
        }
    return out


def render(result: dict[str, Any]) -> str:
    lines = [f"median of {result['repeat']} alternating rounds; load average at the end "
             f"{' '.join(f'{x:.2f}' for x in result['load_at_end'])}", "",
             f"{'checkout':<12} {'process':<7} {'initialize ms':>13} {'session/new ms':>14} {'new RTT ms':>10} "
             f"{'RSS MB':>7}"]
    for name, c in result["checkouts"].items():
        for kind in KINDS:
            m = c["median"][kind]
            lines.append(f"{name:<12} {kind:<7} {m['initialize_ms']:>13.1f} {m['session_new_ms']:>14.1f} "
                         f"{m['new_round_trip_ms']:>10.1f} {m['rss_mb']:>7.1f}")
        adds = c["wrap_adds_ms"]
        lines.append(f"{name:<12} wrap adds: initialize +{adds['initialize_ms']:.1f} ms, "
                     f"session/new +{adds['session_new_ms']:.1f} ms")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="+", metavar="NAME=DIR", help="a checkout of acp-bridge to run")
    parser.add_argument("--repeat", type=int, default=9, help="rounds (default 9)")
    parser.add_argument("--timeout", type=float, default=60.0, help="kill a process after this (s)")
    parser.add_argument("--json", metavar="PATH", help="also write every run as JSON here")
    args = parser.parse_args()
    checkouts: dict[str, Path] = {}
    for item in args.checkouts:
        name, _, where = item.rpartition("=")
        checkouts[name or Path(where).name] = Path(where).resolve()
    result = compare(checkouts, args.repeat, args.timeout)
    print(render(result))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
