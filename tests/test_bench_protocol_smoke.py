"""Smoke test of bench/protocol.py and bench/sdk_echo_agent.py: tiny sizes, so the
side-by-side benchmark against the official SDK cannot rot."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from acp_bridge.models.echo import prompt_text
from session import Event, check_invariants

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "protocol.py"

# A guard against a hang, not a measure: on a loaded 2-core machine the two tiny runs
# together take from 10 s to several times that (the suite's 60 s was too short there).
HANG_S = 600

TINY = ["--repeat", "1", "--repeat-big", "1", "--stream-words", "120", "--turns", "10",
        "--load-chunks", "200", "--load-results", "4", "--scale", "150", "--big-mb", "0.3",
        "--diagnose-nosync", "--recorded-chunks", "60", "--repeat-recorded", "1",
        "--only", "startup,turn,stream,load,scale,big,recorded"]  # mcp: its own test below


def _bench_module(name: str) -> ModuleType:
    """bench/<name>.py, a module of the script, loaded from its file: the tests import
    nothing of bench's."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"bench_{name}"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@dataclass
class Run:
    stdout: str
    stderr: str
    scratch: Path
    json_path: Path
    prof: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The two tiny bench runs, started together (2 cores: the smoke stays fast)."""
    root = tmp_path_factory.mktemp("bench-protocol")
    argv = {
        "tiny": [*TINY, "--json", str(root / "tiny.json")],
        "profile": ["--only", "profile", "--profile", str(root / "prof"), "--backends", "jsonl",
                    "--stream-words", "50", "--load-chunks", "40", "--load-results", "2", "--json"],
    }
    procs = {}
    for name, args in argv.items():
        scratch = root / f"scratch-{name}"
        scratch.mkdir()
        procs[name] = (scratch, subprocess.Popen([sys.executable, str(SCRIPT), *args, "--tmp", str(scratch)],
                                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                 text=True))
    out: dict[str, Run] = {}
    for name, (scratch, proc) in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        assert proc.returncode == 0, stderr[-4000:]
        out[name] = Run(stdout, stderr, scratch, root / "tiny.json", root / "prof")
    return out


def _chunks_of(agent: Any, sid: str, text: str) -> tuple[list[str], Any]:
    agent.send({"jsonrpc": "2.0", "id": "p", "method": "session/prompt",
                "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}})
    texts: list[str] = []
    while True:
        message = agent.read_message()
        if message.get("id") == "p":
            return texts, message
        update = message["params"]["update"]
        if update["sessionUpdate"] == "agent_message_chunk":
            texts.append(update["content"]["text"])


@pytest.mark.integration
@pytest.mark.long
def test_the_sdk_echo_agent_streams_like_our_echo_model(tmp_path: Path) -> None:
    agents = _bench_module("protocol_agents")
    ctx = agents.Ctx(tmp_path, 30.0, iter(range(1, 100)))
    text = "hello  from\nthe bench "
    with ctx.spawn(agents.SDK) as agent:
        init = agent.initialize()
        assert init["protocolVersion"] == 1
        sid = agent.new_session()
        texts, answer = _chunks_of(agent, sid, text)
        assert answer["result"]["stopReason"] == "end_turn", answer
        status = agent.status()
        assert status["VmRSS"] > 0 and status["VmHWM"] >= status["VmRSS"]
        _, updates, chunks = agent.prompt(sid, "one two three")
        assert chunks == updates == 3
    # What acp_bridge's echo model streams for the same prompt (tests/test_sdk_client.py
    # checks the real agent's chunks against the same rule).
    expected = [word + " " for word in prompt_text([{"type": "text", "text": text}]).split()]
    assert texts == expected == ["hello ", "from ", "the ", "bench "]


def test_load_fixtures_follow_the_invariants() -> None:
    workloads = _bench_module("protocol_workloads")
    pools = workloads.Pools(256)
    items = [item for turn in workloads.session_turns(5, 10, pools) for item in turn]
    assert len(items) == 5 * (10 + 11)
    events: list[Event] = [{"type": t, "seq": i, "time": 1, "data": d} for i, (t, d) in enumerate(items)]
    check_invariants(events, closed=True)
    assert sum(t == "tool/result" for t, _ in items) == 5
    assert sum(t == "assistant/chunk" for t, _ in items) == 50


@pytest.mark.integration
@pytest.mark.long
@pytest.mark.timeout(HANG_S)
def test_bench_runs_with_tiny_sizes(runs: dict[str, Run]) -> None:
    run = runs["tiny"]
    assert "SUMMARY" in run.stdout and "STREAMING" in run.stdout and "SESSION/LOAD" in run.stdout
    assert list(run.scratch.iterdir()) == []  # scratch stores and agent stderr files are removed
    results = orjson.loads(run.json_path.read_bytes())
    machine = results["machine"]
    assert machine["cpu_count"] == os.cpu_count()
    assert {"python", "platform", "versions", "commit"} <= set(machine)
    assert set(machine["versions"]) >= {"agent-client-protocol", "pydantic", "orjson", "anyio"}
    wraps = {"wrap-sdk-jsonl", "wrap-sdk-sqlite"}  # issue 14: acp-bridge wrap -- the SDK echo agent
    assert set(results["quick"]) == {"ours-jsonl", "ours-sqlite", "ours-jsonl-nosync", "sdk",
                                     "wrap-sdk-jsonl-nosync"} | wraps
    for name, q in results["quick"].items():
        assert q["session_new_s"] >= q["initialize_s"] > 0, name
        assert q["rss_kb"] > 0 and q["turn_median_ms"] > 0 and len(q["runs"]) == 1
        assert q["tree_rss_kb"] >= q["rss_kb"], name
    for name in wraps:  # the wrapped agent (and the watchdog) count in the tree only
        assert results["quick"][name]["tree_rss_kb"] > results["quick"][name]["rss_kb"] + 10_000
    assert results["fdatasync"]["fdatasync_ms"] > 0 and len(results["fdatasync"]["runs"]) == 1
    assert "fdatasync of the scratch disk" in run.stdout
    assert results["stream"]["words"] == 120 and results["stream"]["sdk"]["chunks_per_s"] > 0
    assert results["stream"]["ours-jsonl-nosync"]["chunks_per_s"] > 0
    assert all(results["stream"][name]["chunks_per_s"] > 0 for name in wraps)
    load = results["load"]
    assert load["chunks"] == 200 and load["results"] == 4 and load["events"] == 4 * (50 + 11)
    assert {"ours-jsonl", "ours-sqlite", "bare"} | wraps <= set(load)
    assert set(results["scale"]["stream"]) == {"150"} and set(results["scale"]["load"]) == {"150"}
    assert not wraps & (set(results["scale"]["stream"]["150"]) | set(results["big"]))  # wrap: one size only
    assert results["big"]["jsonl_bytes"] >= 0.3e6 and results["big"]["ours-jsonl"]["hwm_kb"] > 0
    metrics = {(r["metric"], r["backend"]) for r in results["summary"]}
    for backend in ("jsonl", "sqlite"):
        for metric in ("startup", "turn", "memory", "stream", "load", "big_rss", "wrap_turn", "wrap_stream",
                       "wrap_startup", "wrap_memory", "wrap_memory_tree", "wrap_load", "wrap_init_added",
                       "wrap_new_added"):
            assert (metric, backend) in metrics
    added = ("wrap_init_added", "wrap_new_added")  # ms wrap adds to the SDK agent's: may be negative
    for r in results["summary"]:
        assert r["metric"] in (*added, "recorded_init_added", "recorded_new_added") or r["ratio"] > 0, r
        assert r["pass"] is None if r["metric"] in ("wrap_startup", "wrap_memory", "wrap_memory_tree", "wrap_load",
                                                     "recorded_cpu") else isinstance(r["pass"], bool), r
    for r in (r for r in results["summary"] if r["metric"] in added):
        assert r["ratio"] == pytest.approx(r["ours"] - r["reference"]) and r["target"] == "<= 30", r
    recorded = results["recorded"]  # issue 32: the recorded fast agents, alone and wrapped
    assert recorded["chunks"] == 60 and set(recorded["agents"]) == {"codex-acp", "qwen-code", "opencode"}
    for agent, r in recorded["agents"].items():
        for side in ("alone", "wrapped"):
            assert r[side]["chunks_per_s"] > 0 and r[side]["initialize_ms"] > 0 and len(r[side]["runs"]) == 1, agent
        assert r["wrapped"]["cpu_us_per_chunk"] > 0 and r["wrapped"]["child_cpu_us_per_chunk"] > 0, agent
        assert r["stream_ratio"] == pytest.approx(r["wrapped"]["chunks_per_s"] / r["alone"]["chunks_per_s"])
        for metric in ("recorded_stream", "recorded_cpu", "recorded_init_added", "recorded_new_added"):
            assert any(row["metric"] == metric and row["reference_name"] == agent for row in results["summary"])
    assert "RECORDED AGENTS through wrap" in run.stdout
    stream_cpu = results["stream"]["wrap-sdk-jsonl"]
    assert stream_cpu["cpu_us_per_chunk"] >= 0 and stream_cpu["child_cpu_us_per_chunk"] >= 0
    turn = next(r for r in results["summary"] if r["metric"] == "wrap_turn")
    sdk_ms, fsync_ms = results["quick"]["sdk"]["turn_median_ms"], results["fdatasync"]["fdatasync_ms"]
    assert turn["reference"] == pytest.approx(2 * sdk_ms + fsync_ms)
    assert turn["ratio"] == pytest.approx(results["quick"]["wrap-sdk-jsonl"]["turn_median_ms"] / turn["reference"])
    assert turn["target"] == "<= 1" and turn["parts"]["fdatasync_ms"] == fsync_ms


@pytest.mark.integration
@pytest.mark.long
@pytest.mark.timeout(HANG_S)
def test_profile_only_and_json_on_stdout(runs: dict[str, Run]) -> None:
    run = runs["profile"]
    results = orjson.loads(run.stdout)
    assert "PROFILES" in run.stderr
    assert list(run.scratch.iterdir()) == []
    assert not {"quick", "stream", "load", "scale", "big"} & set(results) and results["summary"] == []
    report = results["profile"]
    assert report["importtime-ours-jsonl"]["modules"] > 50
    assert report["importtime-sdk"]["top_cumulative"]
    for name in ("stream-ours-jsonl", "stream-sdk", "turns-ours-jsonl", "turns-wrap-sdk-jsonl", "load-ours-jsonl"):
        assert (run.prof / f"{name}.prof").stat().st_size > 0
        assert "function calls" in (run.prof / f"{name}.txt").read_text()


@pytest.mark.integration
@pytest.mark.long
@pytest.mark.timeout(HANG_S)
def test_the_mcp_section(tmp_path: Path) -> None:
    """Issue 16: what one stdio MCP server adds to `session/new`, and that a session
    without servers imports nothing of the MCP SDK."""
    out = subprocess.run([sys.executable, str(SCRIPT), "--only", "mcp", "--repeat", "1", "--no-wrap",
                          "--tmp", str(tmp_path), "--json", str(tmp_path / "mcp.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "MCP at session/new" in out.stdout
    mcp = orjson.loads((tmp_path / "mcp.json").read_bytes())["mcp"]
    # Measured, not compared: which is faster is the bench's to report (bench/README.md);
    # on a loaded machine a warm session/new may well take longer than a first one.
    assert mcp["first_ms"] > 0 and mcp["none_warm_ms"] > 0 and mcp["again_ms"] > 0
    assert mcp["sdk_modules"]["without_servers"] == 0 < mcp["sdk_modules"]["with_one_server"]


SYNC_TIMER = r"""
import os, sqlite3, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
t = time.perf_counter()
for _ in range(5):
    os.write(fd, b"x")
    os.fdatasync(fd)
python_ms = (time.perf_counter() - t) / 5 * 1e3
db = sqlite3.connect(sys.argv[1] + ".db", isolation_level=None)
db.execute("PRAGMA journal_mode = WAL"); db.execute("PRAGMA synchronous = FULL"); db.execute("CREATE TABLE t (x)")
t = time.perf_counter()
for _ in range(5):
    db.execute("INSERT INTO t VALUES (1)")
sqlite_ms = (time.perf_counter() - t) / 5 * 1e3
print(python_ms, sqlite_ms)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD shim: Linux")
@pytest.mark.integration
@pytest.mark.long
def test_slow_disk_slows_the_syncs_of_python_and_of_sqlite(tmp_path: Path) -> None:
    """--slow-disk's shim: every fdatasync of an agent process, Python's os.fdatasync and
    SQLite's own, takes at least the given time (issue 23's slow disk)."""
    protocol = _bench_module("protocol")
    env = protocol.slow_disk_env(tmp_path, 20.0)
    run = subprocess.run([sys.executable, "-c", SYNC_TIMER, str(tmp_path / "f")], env=env, capture_output=True,
                         text=True, check=True, timeout=60)
    python_ms, sqlite_ms = map(float, run.stdout.split())
    assert python_ms >= 20.0 and sqlite_ms >= 20.0


@pytest.mark.integration
@pytest.mark.long
@pytest.mark.timeout(HANG_S)
def test_the_start_up_comparison_of_checkouts(tmp_path: Path) -> None:
    """bench/startup_compare.py, one round, this checkout against itself under two
    names: each runs its own package, every figure is there."""
    out = tmp_path / "startup.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "startup_compare.py"), "--repeat", "1",
                           "--json", str(out), f"a={ROOT}", f"b={ROOT}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "wrap adds (serve): initialize " in done.stdout
    result = orjson.loads(out.read_bytes())
    assert list(result["checkouts"]) == ["a", "b"]
    for checkout in result["checkouts"].values():
        assert checkout["package"] == str(ROOT / "acp_bridge" / "__init__.py")
        for kind in ("serve", "wrap"):
            (run,) = checkout["runs"][kind]
            assert 0 < run["initialize_ms"] < run["session_new_ms"] and run["rss_mb"] > 0
