"""Start-up of checkouts side by side: from spawn to the answer of `initialize` and of
`session/new`, for an agent alone and for `acp-bridge wrap` in front of it, for each
checkout given (the code before and after a change), alternating, so that the machine's
load falls on all of them alike. Median of `--repeat` rounds.

    git archive BASE | tar -x -C /tmp/before       # the code before, standing alone
    .venv/bin/python bench/startup_compare.py --repeat 9 before=/tmp/before after=.
    .venv/bin/python bench/startup_compare.py --repeat 9 --children serve,codex-acp,qwen-code,opencode \
        --floor before=/tmp/before after=.

The agents (`--children`): `serve` is `acp-bridge serve --model echo` of the checkout;
a recording's name (codex-acp, qwen-code, opencode, gemini-cli) is bench/recorded_agent.py
playing it (tests/wrapped_agents/: a fast real agent's answers, standard library and
orjson only, the same for every checkout). Each process runs `python -m acp_bridge` in
its checkout's folder (the wrapped `serve` too), so the checkout's package is the one
imported, with this interpreter's site-packages; every run has fresh JSONL stores in a
scratch folder. `wrap adds` is the median, over rounds, of the wrapper's time minus the
agent's own in the same round.

`--floor`: what Python's own start costs here, spawn to exit, once a round: the bare
interpreter (`-S -c pass`), the interpreter with `site` (the venv's `.pth` files: an
editable install's finder among them), and the console script's start
(`acp-bridge --version`).
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

from bench.common import recording  # noqa: E402 (needs ROOT on sys.path)
from bench.protocol_agents import AgentProc  # noqa: E402 (needs ROOT on sys.path)

FIGURES = ("initialize_ms", "session_new_ms", "new_round_trip_ms", "rss_mb")
RECORDED_AGENT = ROOT / "bench" / "recorded_agent.py"
RECORDINGS = ROOT / "tests" / "wrapped_agents"
CONSOLE_SCRIPT = Path(sys.executable).parent / "acp-bridge"


def floor_argvs() -> dict[str, list[str]]:
    found = {"python -S -c pass": [sys.executable, "-S", "-c", "pass"],
             "python -c pass (site)": [sys.executable, "-c", "pass"]}
    if CONSOLE_SCRIPT.exists():
        found["acp-bridge --version"] = [str(CONSOLE_SCRIPT), "--version"]
    return found


def kinds_of(child: str) -> tuple[str, str]:
    """The names of a child's two runs: alone, wrapped (`serve`, `wrap` for ours)."""
    return (child, "wrap") if child == "serve" else (child, f"wrap {child}")


def agent_argv(child: str, scratch: Path) -> list[str]:
    if child == "serve":
        return [sys.executable, "-m", "acp_bridge", "serve", "--store", str(scratch / "agent"), "--backend", "jsonl",
                "--model", "echo"]
    found = recording(child)
    if found is None:
        raise SystemExit(f"--children: no recording of {child!r} in {RECORDINGS}")
    return [sys.executable, str(RECORDED_AGENT), str(found)]


def argv(child: str, wrapped: bool, scratch: Path) -> list[str]:
    agent = agent_argv(child, scratch)
    if not wrapped:
        return agent
    return [sys.executable, "-m", "acp_bridge", "wrap", "--store", str(scratch / "wrap"), "--backend", "jsonl",
            "--", *agent]


def one_run(child: str, wrapped: bool, checkout: Path, scratch: Path, timeout: float) -> dict[str, float]:
    """One process: spawn, `initialize`, `session/new`, both timed from spawn; the
    process's RSS after it (the wrapper's own, without its child)."""
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    with AgentProc(argv(child, wrapped, scratch), scratch / "stderr.txt", timeout, env, cwd=checkout) as agent:
        agent.initialize()
        t_init = time.perf_counter() - agent.spawned
        agent.new_session()
        t_new = time.perf_counter() - agent.spawned
        rss = agent.status()["VmRSS"]
    shutil.rmtree(scratch, ignore_errors=True)
    return {"initialize_ms": t_init * 1e3, "session_new_ms": t_new * 1e3, "new_round_trip_ms": (t_new - t_init) * 1e3,
            "rss_mb": rss / 1024}


def floor_run(command: list[str]) -> float:
    """Spawn to exit of `command`, ms."""
    t0 = time.perf_counter()
    subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t0) * 1e3


def compile_checkout(checkout: Path) -> None:
    """Byte-compile the checkout's packages first: with PYTHONDONTWRITEBYTECODE set (as
    in some shells and CI images) nothing else writes the .pyc files, and every start
    would compile ~100 modules from source (~70 ms), which an installed package never
    does."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout / "acp_bridge"), str(checkout / "session")],
                   check=True, stdout=subprocess.DEVNULL)


def package_of(checkout: Path) -> str:
    """Where `python -m acp_bridge` run in `checkout` finds the package (a check that
    each checkout runs its own code)."""
    done = subprocess.run([sys.executable, "-c", "import acp_bridge; print(acp_bridge.__file__)"], cwd=checkout,
                          env={**os.environ, "PYTHONPATH": str(checkout)}, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def compare(checkouts: dict[str, Path], repeat: int, timeout: float, children: list[str],
            floor: bool = False) -> dict[str, Any]:
    kinds = [kind for child in children for kind in kinds_of(child)]
    runs: dict[str, dict[str, list[dict[str, float]]]] = {name: {kind: [] for kind in kinds} for name in checkouts}
    floors: dict[str, list[float]] = {name: [] for name in floor_argvs()} if floor else {}
    names = list(checkouts)
    for checkout in checkouts.values():
        compile_checkout(checkout)
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="startup-compare-") as tmp:
        for n in range(repeat):
            for name in names if n % 2 == 0 else names[::-1]:  # alternate who goes first
                for child in children:
                    pair = list(zip(kinds_of(child), (False, True), strict=True))
                    for kind, wrapped in pair if n % 2 == 0 else pair[::-1]:
                        runs[name][kind].append(one_run(child, wrapped, checkouts[name],
                                                        Path(tmp) / f"{n}-{name}-{kind.replace(' ', '-')}", timeout))
            for what, command in floor_argvs().items() if floor else ():
                floors[what].append(floor_run(command))
    out: dict[str, Any] = {"repeat": repeat, "children": children, "load_at_start": load_at_start,
                           "load_at_end": os.getloadavg(), "checkouts": {},
                           "floor_ms": {what: statistics.median(t) for what, t in floors.items()},
                           "floor_runs": floors}
    for name in names:
        adds: dict[str, dict[str, float]] = {}
        for child in children:
            alone, wrap = (runs[name][kind] for kind in kinds_of(child))
            adds[child] = {f: statistics.median(w[f] - s[f] for w, s in zip(wrap, alone, strict=True))
                           for f in ("initialize_ms", "session_new_ms", "new_round_trip_ms")}
        out["checkouts"][name] = {
            "path": str(checkouts[name]), "package": package_of(checkouts[name]),
            "median": {kind: {f: statistics.median(r[f] for r in runs[name][kind]) for f in FIGURES} for kind in kinds},
            "wrap_adds_ms": adds,
            "runs": runs[name],
        }
    return out


def render(result: dict[str, Any]) -> str:
    load = result["load_at_start"] + result["load_at_end"]
    lines = [f"median of {result['repeat']} alternating rounds; load average at the start "
             f"{' '.join(f'{x:.2f}' for x in load[:3])}, at the end {' '.join(f'{x:.2f}' for x in load[3:])}", "",
             f"{'checkout':<12} {'process':<16} {'initialize ms':>13} {'session/new ms':>14} {'new RTT ms':>10} "
             f"{'RSS MB':>7}"]
    for name, c in result["checkouts"].items():
        for kind, m in c["median"].items():
            lines.append(f"{name:<12} {kind:<16} {m['initialize_ms']:>13.1f} {m['session_new_ms']:>14.1f} "
                         f"{m['new_round_trip_ms']:>10.1f} {m['rss_mb']:>7.1f}")
        for child, adds in c["wrap_adds_ms"].items():
            lines.append(f"{name:<12} wrap adds ({child}): initialize {adds['initialize_ms']:+.1f} ms, "
                         f"session/new {adds['session_new_ms']:+.1f} ms (its round trip "
                         f"{adds['new_round_trip_ms']:+.1f})")
    if result["floor_ms"]:
        lines += ["", "the floor, spawn to exit (median):"]
        lines += [f"  {what:<24} {ms:>7.1f} ms" for what, ms in result["floor_ms"].items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="+", metavar="NAME=DIR", help="a checkout of acp-bridge to run")
    parser.add_argument("--repeat", type=int, default=9, help="rounds (default 9)")
    parser.add_argument("--children", default="serve",
                        help="the agents, alone and wrapped: serve and/or recordings' names, comma-separated")
    parser.add_argument("--floor", action="store_true", help="also time Python's own start, once a round")
    parser.add_argument("--timeout", type=float, default=60.0, help="kill a process after this (s)")
    parser.add_argument("--json", metavar="PATH", help="also write every run as JSON here")
    args = parser.parse_args()
    checkouts: dict[str, Path] = {}
    for item in args.checkouts:
        name, _, where = item.rpartition("=")
        checkouts[name or Path(where).name] = Path(where).resolve()
    result = compare(checkouts, args.repeat, args.timeout, [c for c in args.children.split(",") if c], args.floor)
    print(render(result))
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
