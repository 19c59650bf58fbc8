"""Protocol benchmarks: acp-bridge against an echo agent on the official ACP Python SDK,
side by side, both real subprocesses over stdio.

    python bench/protocol.py [--quick] [--repeat R] [--repeat-big R] [--backends jsonl,sqlite]
                             [--only startup,turn,stream,load,scale,big | --only profile]
                             [--big-mb N] [--json [PATH]] [--profile DIR]

Ours is `python -m acp_bridge --store DIR --backend B --model echo` (every turn recorded
in the durable log); the reference is bench/sdk_echo_agent.py (the SDK's agent side,
records nothing). One small raw NDJSON client (below, `AgentProc`) drives every process
the same way: blocking pipes, buffered `readline` on the child's stdout, notifications
recognised by their prefix, responses parsed with orjson. Measured: start-up (spawn ->
`session/new` answered), RSS after `session/new`, the round trip of a one-word prompt,
streaming throughput (chunks/s of one long prompt), `session/load` of a long log against
a bare orjson loop that replays the same JSONL file, the peak RSS of loading a very
large log, and how streaming and loading scale. Medians over repeats; ratios ours/SDK
with the targets of the issue. See bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import itertools
import math
import os
import platform
import pstats
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # measure the tree this script is in, not whatever is installed
    sys.path.insert(0, str(ROOT))

from bench.common import VOCABULARY, filesystem_of  # noqa: E402 (needs ROOT on sys.path)
from session import SessionStore, open_backend  # noqa: E402

Item = tuple[str, dict[str, Any]]

SDK_AGENT = ROOT / "bench" / "sdk_echo_agent.py"
BACKENDS = ("jsonl", "sqlite")
SECTIONS = ("startup", "turn", "stream", "load", "scale", "big")
CWD = "/home/dev/project"
FIXED_TIME = 1_700_000_000_000  # the load fixtures use a fixed clock: same events in both backends
MB = 1_000_000

# Every agent here (ours: orjson, the SDK: json.dumps with compact separators, the bare
# loop: orjson) writes a notification with its keys in this order, so the client counts
# them without parsing; anything else (responses, requests) is parsed.
NOTE_PREFIX = b'{"jsonrpc":"2.0","method":"session/update"'
CHUNK_MARK = b'"sessionUpdate":"agent_message_chunk"'
READ_BUFFER = 1 << 16

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
WARMUP_TURNS = 5
CHUNKS_PER_TURN = 50  # load fixtures: 25 chunks, a tool call and its result, then 25 chunks
EVENTS_PER_TURN = CHUNKS_PER_TURN + 11
RESULT_BYTES = 2_048  # tool result text in the load fixtures: uniform in [0.5x, 1.5x]
BIG_RSS_LIMIT_MB = 200.0

# (comparison, threshold) per summary metric: ratio ours/reference, or MB for big_rss.
TARGETS: dict[str, tuple[str, float]] = {
    "startup": ("<=", 0.4),
    "stream": (">=", 2.0),
    "turn": ("<=", 2.0),
    "memory": ("<=", 0.8),
    "load": (">=", 0.5),
    "big_rss": ("<=", BIG_RSS_LIMIT_MB),
}


# The bare baseline of `session/load`: a process that answers the client's ping (so its
# start-up is not timed), then on `session/load` reads the JSONL log, parses each event
# line with orjson and writes one update line per event to stdout (buffered), then the
# answer. No checks, no state, no mapping.
BARE_LOOP = r"""
import sys
import orjson
path, sid = sys.argv[1], sys.argv[2]
out = sys.stdout.buffer
loads, dumps, write = orjson.loads, orjson.dumps, out.write
for raw in sys.stdin.buffer:
    request = loads(raw)
    if request["method"] != "session/load":  # the client's ping: ready
        write(dumps({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "no"}}) + b"\n")
        out.flush()
        continue
    count = 0
    with open(path, "rb") as f:
        f.readline()  # the header
        for line in f:
            event = loads(line)
            write(dumps({"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": sid, "update": {"sessionUpdate": event["type"], "event": event}}}) + b"\n")
            count += 1
    write(dumps({"jsonrpc": "2.0", "id": request["id"], "result": {"events": count}}) + b"\n")
    out.flush()
"""

# Diagnostic only (`--diagnose-nosync`): our agent with fsync and fdatasync made no-ops,
# to show what durability costs a turn. Not a configuration anyone should run.
NOSYNC_LAUNCH = r"""
import os, runpy, sys
os.fsync = os.fdatasync = lambda fd: None
sys.argv = ["acp_bridge", *sys.argv[1:]]
runpy.run_module("acp_bridge", run_name="__main__", alter_sys=True)
"""

# Our agent under cProfile in every thread (`python -m cProfile` sees only the main
# thread, but `store.load` and the fsyncs run in anyio worker threads).
PROFILE_ALL_THREADS = r"""
import cProfile, pstats, runpy, sys, threading
out, argv = sys.argv[1], sys.argv[2:]
profiles = []
_inner = threading.Thread._bootstrap_inner
def inner(self):
    p = cProfile.Profile()
    profiles.append(p)
    p.enable()
    try:
        _inner(self)
    finally:
        p.disable()
threading.Thread._bootstrap_inner = inner
main = cProfile.Profile()
sys.argv = ["acp_bridge", *argv]
main.enable()
try:
    runpy.run_module("acp_bridge", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    main.disable()
    stats = pstats.Stats(main)
    for p in profiles:
        stats.add(p)
    stats.dump_stats(out)
"""


# The agents.


@dataclass(frozen=True)
class Spec:
    """An agent to run: `ours-jsonl`, `ours-sqlite`, `sdk`, or the bare load loop."""

    name: str
    backend: str | None = None  # ours only
    nosync: bool = False  # diagnostic only: ours with fsync made a no-op

    def argv(self, store: Path, prefix: tuple[str, ...] = ()) -> list[str]:
        if self.name == "sdk":
            return [sys.executable, *prefix, str(SDK_AGENT)]
        assert self.backend is not None
        args = ["--store", str(store), "--backend", self.backend, "--model", "echo"]
        if self.nosync:
            return [sys.executable, *prefix, "-c", NOSYNC_LAUNCH, *args]
        return [sys.executable, *prefix, "-m", "acp_bridge", *args]


SDK = Spec("sdk")


def ours(backend: str) -> Spec:
    return Spec(f"ours-{backend}", backend)


class AgentError(RuntimeError):
    pass


class AgentProc:
    """One agent process and the raw NDJSON client that drives it (synchronous: one
    request at a time, reading until its answer; the same code for every agent)."""

    def __init__(self, argv: list[str], stderr_path: Path, timeout: float) -> None:
        self.argv = argv
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")  # noqa: SIM115 (closed in close())
        self.spawned = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, bufsize=0, cwd=ROOT)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._stdin: IO[bytes] = self.proc.stdin
        raw = cast(io.RawIOBase, self.proc.stdout)
        self._readline = io.BufferedReader(raw, buffer_size=READ_BUFFER).readline
        self._ids = itertools.count(1)
        self._watchdog = threading.Timer(timeout, self.proc.kill)
        self._watchdog.daemon = True
        self._watchdog.start()
        self.pid = self.proc.pid
        # When the first session/update (and agent_message_chunk) of the last request was read.
        self.first_update_at = self.first_chunk_at = 0.0

    def send(self, message: dict[str, Any]) -> None:
        view = memoryview(orjson.dumps(message) + b"\n")
        write = self._stdin.write
        while view:
            view = view[write(view) or 0 :]

    def request(self, method: str, params: Any, *, errors_ok: bool = False) -> tuple[Any, int, int]:
        """Send a request and read until its answer: (result, updates, chunks), where
        updates counts the `session/update`s read before the answer and chunks those of
        kind `agent_message_chunk`."""
        rid = next(self._ids)
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        readline = self._readline
        updates = chunks = 0
        self.first_update_at = self.first_chunk_at = 0.0
        while True:
            line = readline()
            if line.startswith(NOTE_PREFIX):
                updates += 1
                if updates == 1:
                    self.first_update_at = time.perf_counter()
                if CHUNK_MARK in line:
                    chunks += 1
                    if chunks == 1:
                        self.first_chunk_at = time.perf_counter()
                continue
            if not line:
                raise AgentError(f"{self.argv[:4]}... ended while answering {method}: {self.stderr_tail()}")
            message = orjson.loads(line)
            if message.get("method") == "session/update":
                updates += 1
                if updates == 1:
                    self.first_update_at = time.perf_counter()
                if message["params"]["update"].get("sessionUpdate") == "agent_message_chunk":
                    chunks += 1
                    if chunks == 1:
                        self.first_chunk_at = time.perf_counter()
                continue
            if "method" in message:
                raise AgentError(f"unexpected request from the agent: {line[:200]!r}")
            if message.get("id") != rid:
                continue
            if "error" in message and not errors_ok:
                raise AgentError(f"{method} failed: {message['error']}: {self.stderr_tail()}")
            return message.get("result"), updates, chunks

    def read_message(self) -> Any:
        """The next message, parsed (for tests; the timed paths use `request`)."""
        line = self._readline()
        if not line:
            raise AgentError(f"{self.argv[:4]}... ended: {self.stderr_tail()}")
        return orjson.loads(line)

    def ping(self) -> None:
        """A request every agent answers (with method-not-found): ours has finished
        its lazy jsonrpcserver import once this is answered."""
        self.request("_bench/ping", {}, errors_ok=True)

    def initialize(self) -> Any:
        return self.request("initialize", {"protocolVersion": 1, "clientCapabilities": {},
                                           "clientInfo": {"name": "bench", "version": "0"}})[0]

    def new_session(self) -> str:
        return str(self.request("session/new", {"cwd": CWD, "mcpServers": []})[0]["sessionId"])

    def prompt(self, sid: str, text: str) -> tuple[Any, int, int]:
        return self.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})

    def status(self) -> dict[str, int]:
        """VmRSS, VmHWM (kB) of the process, from /proc."""
        out: dict[str, int] = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
        return out

    def stderr_tail(self) -> str:
        self._stderr.flush()
        try:
            return self.stderr_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def close(self) -> int:
        with suppress(OSError):
            self._stdin.close()
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._watchdog.cancel()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._stderr.close()
        return code

    def __enter__(self) -> AgentProc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Workloads (deterministic; generated outside every timed region).


def stream_text(words: int, seed: int = 3) -> str:
    rng = random.Random(seed)
    vocab = VOCABULARY.split()
    return " ".join(rng.choice(vocab) for _ in range(words))


class Pools:
    """Shared text objects for the load fixtures (a 500 MB log must not need GBs of
    distinct strings in the builder): code-like chunks of 4-40 characters and tool
    results of about `result_bytes`."""

    def __init__(self, result_bytes: int, seed: int = 7) -> None:
        rng = random.Random(seed)
        vocab = VOCABULARY.split()
        corpus = " ".join(rng.choice(vocab) for _ in range(60_000))
        self.chunks = [self._slice(rng, corpus, 4, 40) for _ in range(1_024)]
        high = max(16, result_bytes * 3 // 2)
        text = corpus
        while len(text) < high + 1:
            text += "\n" + corpus
        self.results = [self._slice(rng, text, max(8, result_bytes // 2), high) for _ in range(64)]
        self.rng = rng

    @staticmethod
    def _slice(rng: random.Random, text: str, low: int, high: int) -> str:
        length = rng.randint(low, high)
        start = rng.randrange(0, len(text) - length)
        return text[start : start + length]


def session_turns(turns: int, chunks_per_turn: int, pools: Pools) -> Iterator[list[Item]]:
    """Whole turns of a long session: prompt, a step of chunks that makes one tool call,
    its `tool/call` and `tool/result`, then a step of chunks that answers."""
    rng = random.Random(11)
    first = chunks_per_turn // 2
    for turn in range(1, turns + 1):
        items: list[Item] = [
            ("turn/start", {"turn": turn, "trigger": {"kind": "prompt"}, "mode": "ask", "model": "echo"}),
            ("user/message", {"turn": turn, "content": [{"type": "text", "text": pools.chunks[turn % 1024]}]}),
        ]
        for step, n_chunks in ((1, first), (2, chunks_per_turn - first)):
            items.append(("step/start", {"turn": turn, "step": step}))
            texts = [pools.chunks[rng.randrange(1024)] for _ in range(n_chunks)]
            items.extend(("assistant/chunk", {"turn": turn, "step": step,
                                              "chunk": {"type": "text", "text": t}}) for t in texts)
            content: list[dict[str, Any]] = [{"type": "text", "text": "".join(texts)}]
            call_id = f"call_{turn:07d}"
            path = f"src/module_{turn % 97}.py"
            if step == 1:
                content.append({"type": "tool-call", "id": call_id, "name": "read_file",
                                "arguments": orjson.dumps({"path": path}).decode()})
            usage = {"inputTokens": 1_000 + turn, "outputTokens": n_chunks}
            items.append(("assistant/message", {"turn": turn, "step": step, "content": content, "usage": usage}))
            if step == 1:
                items.append(("tool/call", {"turn": turn, "step": step, "callId": call_id, "name": "read_file",
                                            "arguments": {"path": path}, "title": f"Read {path}", "kind": "read",
                                            "locations": [{"path": f"{CWD}/{path}"}]}))
                result = pools.results[rng.randrange(len(pools.results))]
                items.append(("tool/result", {"turn": turn, "step": step, "callId": call_id,
                                              "content": [{"type": "text", "text": result}], "isError": False}))
            items.append(("step/end", {"turn": turn, "step": step}))
        items.append(("turn/end", {"turn": turn, "reason": {"kind": "completed"}}))
        yield items


def turn_bytes(chunks_per_turn: int, result_bytes: int, sample: int = 20) -> float:
    """The JSONL bytes of an average turn (for sizing the big log)."""
    pools = Pools(result_bytes)
    total = 0
    for items in session_turns(sample, chunks_per_turn, pools):
        for seq, (etype, data) in enumerate(items):
            total += len(orjson.dumps({"type": etype, "seq": 100_000 + seq, "time": FIXED_TIME,
                                       "data": data})) + 1
    return total / sample


def build_log(kind: str, root: Path, turns: int, chunks_per_turn: int, result_bytes: int) -> dict[str, Any]:
    """Write one long session through the store (`SessionStore.create`, one
    `SessionLog.extend` per turn: the batch form of `append`, one durability point per
    turn). Returns its id, event count and JSONL path/bytes (jsonl only)."""
    backend = open_backend(kind, root)
    try:
        store = SessionStore(backend, clock=lambda: FIXED_TIME)
        log = store.create(cwd=CWD)
        pools = Pools(result_bytes)
        for items in session_turns(turns, chunks_per_turn, pools):
            log.extend(items)
        info: dict[str, Any] = {"id": log.id, "events": len(log.events), "turns": turns,
                                "chunks": turns * chunks_per_turn, "results": turns}
        log.close()
    finally:
        backend.close()
    if kind == "jsonl":
        path = root / "sessions" / f"{info['id']}.jsonl"
        info["path"] = str(path)
        info["bytes"] = path.stat().st_size
    else:
        info["bytes"] = (root / "sessions.sqlite3").stat().st_size
    return info


# Measurements.


@dataclass
class Ctx:
    root: Path  # scratch root of this run
    timeout: float
    counter: itertools.count[int]

    def spawn(self, spec: Spec, store: Path | None = None, prefix: tuple[str, ...] = ()) -> AgentProc:
        n = next(self.counter)
        store = store if store is not None else self.root / f"store-{spec.name}"
        return AgentProc(spec.argv(store, prefix), self.root / f"stderr-{n:04d}-{spec.name}.txt", self.timeout)

    def spawn_bare(self, info: dict[str, Any]) -> AgentProc:
        n = next(self.counter)
        return AgentProc([sys.executable, "-c", BARE_LOOP, info["path"], info["id"]],
                         self.root / f"stderr-{n:04d}-bare.txt", self.timeout)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def startup_and_turns(ctx: Ctx, spec: Spec, turns: int) -> dict[str, Any]:
    """One process: spawn -> initialize -> session/new (timed from spawn), RSS after
    session/new, then `turns` one-word prompts in that session (after a warm-up)."""
    with ctx.spawn(spec) as agent:
        agent.initialize()
        t_init = time.perf_counter() - agent.spawned
        sid = agent.new_session()
        t_new = time.perf_counter() - agent.spawned
        status = agent.status()
        latencies: list[float] = []
        clock = time.perf_counter
        for i in range(WARMUP_TURNS + turns):
            t0 = clock()
            result, _, chunks = agent.prompt(sid, "hi")
            elapsed = clock() - t0
            if result.get("stopReason") != "end_turn" or chunks != 1:
                raise AgentError(f"{spec.name}: one-word prompt answered {result} with {chunks} chunks")
            if i >= WARMUP_TURNS:
                latencies.append(elapsed)
    ordered = sorted(latencies)
    fifth = max(1, len(latencies) // 5)
    return {
        "initialize_s": t_init,
        "session_new_s": t_new,
        "rss_kb": status["VmRSS"],
        "hwm_kb": status["VmHWM"],
        "turn_median_ms": median(latencies) * 1e3 if latencies else None,
        "turn_p90_ms": ordered[int(0.9 * (len(ordered) - 1))] * 1e3 if ordered else None,
        "turn_min_ms": ordered[0] * 1e3 if ordered else None,
        # Does a turn get dearer as the session grows? Medians of the first and last fifth.
        "turn_first_ms": median(latencies[:fifth]) * 1e3 if latencies else None,
        "turn_last_ms": median(latencies[-fifth:]) * 1e3 if latencies else None,
    }


def stream_once(ctx: Ctx, spec: Spec, words: int, text: str) -> dict[str, Any]:
    """One process, one session, one prompt of `words` words: seconds from sending the
    prompt to its answer, every chunk read."""
    with ctx.spawn(spec) as agent:
        agent.initialize()
        sid = agent.new_session()
        t0 = time.perf_counter()
        result, updates, chunks = agent.prompt(sid, text)
        elapsed = time.perf_counter() - t0
        first = agent.first_chunk_at - t0
        status = agent.status()
    if result.get("stopReason") != "end_turn" or chunks != words:
        raise AgentError(f"{spec.name}: {words}-word prompt answered {result} with {chunks} chunks")
    return {"seconds": elapsed, "chunks_per_s": words / elapsed, "first_chunk_s": first, "updates": updates,
            "rss_kb": status["VmRSS"], "hwm_kb": status["VmHWM"]}


def load_once(ctx: Ctx, spec: Spec, store: Path, info: dict[str, Any]) -> dict[str, Any]:
    """Ours: a fresh process, initialized (and its lazy import done), then
    `session/load` timed until its answer, every replayed update read."""
    with ctx.spawn(spec, store) as agent:
        agent.initialize()
        agent.ping()
        t0 = time.perf_counter()
        result, updates, chunks = agent.request("session/load", {"sessionId": info["id"], "cwd": CWD,
                                                                 "mcpServers": []})
        elapsed = time.perf_counter() - t0
        first = agent.first_update_at - t0
        status = agent.status()
    meta = result.get("_meta", {}).get("acpBridge", {})
    if meta.get("events") != info["events"] or chunks != info["chunks"]:
        raise AgentError(f"{spec.name}: load of {info['events']} events answered {meta} with {chunks} chunks")
    return {"seconds": elapsed, "events_per_s": info["events"] / elapsed, "first_update_s": first,
            "updates": updates, "rss_kb": status["VmRSS"], "hwm_kb": status["VmHWM"]}


def bare_once(ctx: Ctx, info: dict[str, Any]) -> dict[str, Any]:
    with ctx.spawn_bare(info) as bare:
        bare.ping()
        t0 = time.perf_counter()
        result, updates, _ = bare.request("session/load", {"sessionId": info["id"]})
        elapsed = time.perf_counter() - t0
        first = bare.first_update_at - t0
        status = bare.status()
    if result["events"] != info["events"] or updates != info["events"]:
        raise AgentError(f"bare loop replayed {updates} of {info['events']} events")
    return {"seconds": elapsed, "events_per_s": info["events"] / elapsed, "first_update_s": first,
            "updates": updates,
            "rss_kb": status["VmRSS"], "hwm_kb": status["VmHWM"]}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of every numeric field over the runs, plus the runs themselves."""
    out: dict[str, Any] = {}
    for key in runs[0]:
        values = [r[key] for r in runs if isinstance(r.get(key), int | float)]
        if values:
            out[key] = median(values)
    out["runs"] = [{k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()} for r in runs]
    return out


def bench_quick(ctx: Ctx, specs: list[Spec], turns: int, repeat: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in specs}
    for _ in range(repeat):  # interleaved, so drifting machine load hits every agent alike
        for spec in specs:
            runs[spec.name].append(startup_and_turns(ctx, spec, turns))
    return {name: summarize(r) for name, r in runs.items()}


def bench_stream(ctx: Ctx, specs: list[Spec], words: int, repeat: int) -> dict[str, Any]:
    text = stream_text(words)
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in specs}
    for _ in range(repeat):
        for spec in specs:
            runs[spec.name].append(stream_once(ctx, spec, words, text))
    return {name: summarize(r) for name, r in runs.items()} | {"words": words}


@contextmanager
def stores(ctx: Ctx, label: str) -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=ctx.root))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def bench_load(ctx: Ctx, backends: list[str], turns: int, chunks_per_turn: int, result_bytes: int,
               repeat: int, label: str) -> dict[str, Any]:
    """Build the same long session in each backend (and in JSONL for the bare loop),
    then load it `repeat` times with each, interleaved."""
    with stores(ctx, label) as where:
        built: dict[str, dict[str, Any]] = {}
        build_s: dict[str, float] = {}
        for kind in dict.fromkeys(["jsonl", *backends]):
            t0 = time.perf_counter()
            built[kind] = build_log(kind, where / kind, turns, chunks_per_turn, result_bytes)
            build_s[kind] = time.perf_counter() - t0
        runs: dict[str, list[dict[str, Any]]] = {n: [] for n in [*(f"ours-{k}" for k in backends), "bare"]}
        for _ in range(repeat):
            for kind in backends:
                runs[f"ours-{kind}"].append(load_once(ctx, ours(kind), where / kind, built[kind]))
            runs["bare"].append(bare_once(ctx, built["jsonl"]))
    info = built["jsonl"]
    out: dict[str, Any] = {name: summarize(r) for name, r in runs.items()}
    out |= {"events": info["events"], "chunks": info["chunks"], "results": info["results"],
            "turns": turns, "jsonl_bytes": info["bytes"], "build_s": build_s,
            "sqlite_bytes": built["sqlite"]["bytes"] if "sqlite" in built else None}
    return out


# Profiles (--profile DIR): where the time goes, for bench/README.md.


def importtime_summary(path: Path, top: int = 12) -> dict[str, Any]:
    """Parse `python -X importtime` output: the slowest top-level imports (cumulative),
    and own import time summed per top-level package. (Imports made by a worker thread,
    like our lazy jsonrpcserver, interleave with the main thread's and skew the nesting
    and the self times of the modules around them; the per-package sums of positive self
    times stay a fair account.)"""
    rows: list[tuple[int, int, int, str]] = []
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"import time:\s+(-?\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m:
            rows.append((int(m.group(1)), int(m.group(2)), len(m.group(3)) // 2, m.group(4)))
    top_level = sorted((r for r in rows if r[2] == 0), key=lambda r: -r[1])
    packages: dict[str, int] = {}
    for own, _, _, name in rows:
        key = name.split(".")[0]
        packages[key] = packages.get(key, 0) + max(own, 0)
    return {
        "total_ms": sum(max(r[0], 0) for r in rows) / 1e3,
        "modules": len(rows),
        "top_cumulative": [(name, cum / 1e3) for _, cum, _, name in top_level[:top]],
        "by_package": [(name, us / 1e3) for name, us in sorted(packages.items(), key=lambda kv: -kv[1])[:top]],
    }


def stats_text(prof: Path, top: int) -> str:
    buf = io.StringIO()
    stats = pstats.Stats(str(prof), stream=buf)
    stats.strip_dirs().sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def run_profiles(ctx: Ctx, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"dir": str(out)}
    # 1. Start-up imports.
    for spec in (ours("jsonl"), SDK):
        n = next(ctx.counter)
        argv = spec.argv(ctx.root / f"store-prof-{n}", ("-X", "importtime"))
        log = out / f"importtime-{spec.name}.txt"
        agent = AgentProc(argv, log, ctx.timeout)
        agent.initialize()
        agent.new_session()
        t_new = time.perf_counter() - agent.spawned
        agent.close()
        report[f"importtime-{spec.name}"] = importtime_summary(log) | {"session_new_s": t_new}
    # 2. The stream of args.stream_words words, `python -m cProfile -o FILE` (main thread).
    text = stream_text(args.stream_words)
    for spec in (ours("jsonl"), SDK):
        prof = out / f"stream-{spec.name}.prof"
        with ctx.spawn(spec, ctx.root / "store-prof-stream", ("-m", "cProfile", "-o", str(prof))) as agent:
            agent.initialize()
            sid = agent.new_session()
            t0 = time.perf_counter()
            agent.prompt(sid, text)
            report[f"stream-{spec.name}"] = {"seconds_profiled": time.perf_counter() - t0, "prof": str(prof)}
        (out / f"stream-{spec.name}.txt").write_text(stats_text(prof, args.profile_top))
    # 3. args.turns one-word prompts in one session, every thread profiled (the fsyncs
    # run in worker threads).
    prof = out / "turns-ours-jsonl.prof"
    n = next(ctx.counter)
    argv = [sys.executable, "-c", PROFILE_ALL_THREADS, str(prof), "--store", str(ctx.root / "store-prof-turns"),
            "--backend", "jsonl", "--model", "echo"]
    with AgentProc(argv, ctx.root / f"stderr-{n:04d}-prof-turns.txt", ctx.timeout) as agent:
        agent.initialize()
        sid = agent.new_session()
        t0 = time.perf_counter()
        for _ in range(args.turns):
            agent.prompt(sid, "hi")
        report["turns-ours-jsonl"] = {"seconds_profiled": time.perf_counter() - t0, "turns": args.turns,
                                      "prof": str(prof)}
    (out / "turns-ours-jsonl.txt").write_text(stats_text(prof, args.profile_top))
    # 4. The load of the long session, every thread profiled.
    for kind in args.kinds:
        with stores(ctx, f"prof-load-{kind}") as where:
            turns = max(1, args.load_results)
            info = build_log(kind, where, turns, max(2, args.load_chunks // turns), RESULT_BYTES)
            prof = out / f"load-ours-{kind}.prof"
            n = next(ctx.counter)
            argv = [sys.executable, "-c", PROFILE_ALL_THREADS, str(prof), "--store", str(where),
                    "--backend", kind, "--model", "echo"]
            with AgentProc(argv, ctx.root / f"stderr-{n:04d}-prof-load.txt", ctx.timeout) as agent:
                agent.initialize()
                agent.ping()
                t0 = time.perf_counter()
                agent.request("session/load", {"sessionId": info["id"], "cwd": CWD, "mcpServers": []})
                report[f"load-ours-{kind}"] = {"seconds_profiled": time.perf_counter() - t0,
                                               "events": info["events"], "prof": str(prof)}
            (out / f"load-ours-{kind}.txt").write_text(stats_text(prof, args.profile_top))
    return report


# Report.


def verdict(metric: str, value: float) -> bool:
    op, threshold = TARGETS[metric]
    return value <= threshold if op == "<=" else value >= threshold


def summary_rows(results: dict[str, Any], backends: list[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(metric: str, label: str, backend: str, ours_v: float, ref_v: float | None, unit: str,
            ratio: float, ref_name: str = "sdk") -> None:
        op, threshold = TARGETS[metric]
        rows.append({"metric": metric, "label": label, "backend": backend, "ours": ours_v, "reference": ref_v,
                     "reference_name": ref_name, "unit": unit, "ratio": ratio,
                     "target": f"{op} {threshold:g}", "pass": verdict(metric, ratio)})

    quick = results.get("quick")
    if quick:
        sdk = quick["sdk"]
        for b in backends:
            q = quick[f"ours-{b}"]
            add("startup", "start-up: spawn -> session/new answered", b, q["session_new_s"],
                sdk["session_new_s"], "s", q["session_new_s"] / sdk["session_new_s"])
        for b in backends:
            q = quick[f"ours-{b}"]
            add("turn", "per-turn: one-word prompt round trip (median)", b, q["turn_median_ms"],
                sdk["turn_median_ms"], "ms", q["turn_median_ms"] / sdk["turn_median_ms"])
        for b in backends:
            q = quick[f"ours-{b}"]
            add("memory", "memory: VmRSS after session/new", b, q["rss_kb"] / 1024, sdk["rss_kb"] / 1024,
                "MB", q["rss_kb"] / sdk["rss_kb"])
    stream = results.get("stream")
    if stream:
        for b in backends:
            s = stream[f"ours-{b}"]
            add("stream", f"streaming: chunks/s, one {stream['words']:,}-word prompt", b, s["chunks_per_s"],
                stream["sdk"]["chunks_per_s"], "chunks/s", s["chunks_per_s"] / stream["sdk"]["chunks_per_s"])
    load = results.get("load")
    if load:
        for b in backends:
            s = load[f"ours-{b}"]
            add("load", f"session/load: events/s, {load['events']:,} events "
                f"({load['chunks']:,} chunks, {load['results']:,} results)", b, s["events_per_s"],
                load["bare"]["events_per_s"], "events/s", s["events_per_s"] / load["bare"]["events_per_s"], "bare")
    big = results.get("big")
    if big:
        for b in backends:
            s = big[f"ours-{b}"]
            hwm = s["hwm_kb"] / 1024
            add("big_rss", f"peak RSS loading a {big['jsonl_bytes'] / MB:,.0f} MB log "
                f"({big['events']:,} events)", b, hwm, big["bare"]["hwm_kb"] / 1024, "MB", hwm, "bare")
            add("load", f"session/load: events/s, the {big['jsonl_bytes'] / MB:,.0f} MB log", b,
                s["events_per_s"], big["bare"]["events_per_s"], "events/s",
                s["events_per_s"] / big["bare"]["events_per_s"], "bare")
    return rows


def table(headers: list[str], rows: list[list[str]], left: int = 2) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([fmt(headers), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)])


def num(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit == "s":
        return f"{value:.3f}"
    if unit in ("ms",):
        return f"{value:.3f}"
    if unit == "MB":
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def render(results: dict[str, Any]) -> str:
    m, p = results["machine"], results["params"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    out = [
        f"machine: {m['platform']}, {m['cpu_count']} CPUs, {m['cpu_model']}, {m['python_impl']} {m['python']}",
        f"versions: {versions}",
        f"code: {m['commit']}; scratch {m['tmp_dir']} on {m['filesystem']}; "
        f"load average at start {' '.join(map(str, m['loadavg_at_start']))}",
        f"repeats: {p['repeat']} (start-up, memory, per-turn), {p['repeat_big']} (streaming, load, scaling, "
        f"big log); medians",
    ]
    rows = results.get("summary") or []
    if rows:
        out += ["", "SUMMARY (ours = acp-bridge --model echo; reference = the SDK echo agent, or the bare loop)",
                table(["metric", "backend", "ours", "reference", "unit", "ours/ref", "target", "result"],
                      [[r["label"], r["backend"], num(r["ours"], r["unit"]),
                        f"{num(r['reference'], r['unit'])} ({r['reference_name']})", r["unit"],
                        f"{r['ratio']:.2f}" if r["unit"] != "MB" or r["metric"] != "big_rss" else "-",
                        r["target"] + (" MB" if r["metric"] == "big_rss" else "x"),
                        "PASS" if r["pass"] else "FAIL"] for r in rows])]
    quick = results.get("quick")
    if quick:
        out += ["", "START-UP, MEMORY, PER-TURN (one process per run: spawn, initialize, session/new, "
                f"{WARMUP_TURNS} + {p['turns']} one-word prompts)",
                table(["agent", "", "initialize s", "session/new s", "RSS MB", "HWM MB", "turn p50 ms",
                       "turn p90 ms", "turn min ms", "first 1/5 p50", "last 1/5 p50"],
                      [[name, "", num(q["initialize_s"], "s"), num(q["session_new_s"], "s"),
                        num(q["rss_kb"] / 1024, "MB"), num(q["hwm_kb"] / 1024, "MB"),
                        num(q["turn_median_ms"], "ms"), num(q["turn_p90_ms"], "ms"),
                        num(q["turn_min_ms"], "ms"), num(q["turn_first_ms"], "ms"),
                        num(q["turn_last_ms"], "ms")] for name, q in quick.items()])]
    scale = results.get("scale")
    stream = results.get("stream")
    if stream or (scale and scale.get("stream")):
        points = dict(scale["stream"]) if scale and scale.get("stream") else {}
        if stream:
            points[str(stream["words"])] = stream
        rows_s = []
        for words, s in sorted(points.items(), key=lambda kv: int(kv[0])):
            for name in (k for k in s if k.startswith(("ours", "sdk"))):
                r = s[name]
                rows_s.append([f"{int(words):,}", name, num(r["chunks_per_s"]),
                               f"{r['chunks_per_s'] / s['sdk']['chunks_per_s']:.2f}x", num(r["seconds"], "s"),
                               num(r["first_chunk_s"] * 1e3, "ms"), num(r["rss_kb"] / 1024, "MB"),
                               num(r["hwm_kb"] / 1024, "MB")])
        out += ["", "STREAMING (one prompt of N words -> N agent_message_chunk, fresh process and session; "
                "first chunk = read by the client, from sending the prompt; RSS/HWM after the turn)",
                table(["chunks", "agent", "chunks/s", "vs sdk", "seconds", "first chunk ms", "RSS MB", "HWM MB"],
                      rows_s)]
    load = results.get("load")
    if load or (scale and scale.get("load")) or results.get("big"):
        points_l: list[tuple[str, dict[str, Any]]] = []
        if scale and scale.get("load"):
            points_l += [("", s) for s in scale["load"].values()]
        if load:
            points_l.append(("long session", load))
        if results.get("big"):
            points_l.append(("big log", results["big"]))
        rows_l = []
        for label, s in sorted(points_l, key=lambda kv: kv[1]["events"]):
            for name in (k for k in s if k.startswith("ours") or k == "bare"):
                r = s[name]
                rows_l.append([f"{s['events']:,}" + (f" ({label})" if label else ""), name,
                               num(s["jsonl_bytes"] / MB, "MB"), num(r["events_per_s"]),
                               f"{r['events_per_s'] / s['bare']['events_per_s']:.2f}", num(r["seconds"], "s"),
                               num(r["first_update_s"], "s"), num(r["hwm_kb"] / 1024, "MB")])
        out += ["", "SESSION/LOAD (fresh process; events/s of the log until the answer, every update read; "
                "vs bare = rate ratio; HWM = peak RSS of the process)",
                table(["events", "agent", "JSONL MB", "events/s", "vs bare", "seconds", "first update s",
                       "HWM MB"], rows_l)]
    prof = results.get("profile")
    if prof:
        out += ["", f"PROFILES in {prof['dir']}"]
        for key, value in prof.items():
            if key.startswith("importtime-"):
                out.append(f"{key}: {value['modules']} modules, {value['total_ms']:.0f} ms of imports, "
                           f"session/new answered at {value['session_new_s']:.3f} s; ms per package: "
                           + ", ".join(f"{n} {ms:.0f}" for n, ms in value["by_package"][:10]))
            elif isinstance(value, dict):
                out.append(f"{key}: {value.get('seconds_profiled', 0):.2f} s under the profiler -> "
                           f"{Path(value['prof']).with_suffix('.txt')}")
    return "\n".join(out)


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
    parser.add_argument("--backends", default=",".join(BACKENDS), help="ours: comma-separated jsonl,sqlite")
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
                             "streaming runs (ours-jsonl-nosync): what durability costs; not a target")
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
    return args


def run_section(section: str, args: argparse.Namespace, ctx: Ctx, specs: list[Spec],
                results: dict[str, Any]) -> None:
    if section == "startup" and ("startup" in args.sections or "turn" in args.sections):
        results["quick"] = bench_quick(ctx, specs, args.turns, args.repeat)
    elif section == "stream" and section in args.sections:
        results["stream"] = bench_stream(ctx, specs, args.stream_words, args.repeat_big)
    elif section == "load" and section in args.sections:
        turns = args.load_results
        results["load"] = bench_load(ctx, args.kinds, turns, args.load_chunks // turns, RESULT_BYTES,
                                     args.repeat_big, "load")
    elif section == "scale" and section in args.sections:
        results["scale"] = {"stream": {}, "load": {}}
        for n in args.scale:
            results["scale"]["stream"][str(n)] = bench_stream(ctx, specs, n, args.repeat_big)
        for n in args.scale:
            turns = max(1, round(n / EVENTS_PER_TURN))
            results["scale"]["load"][str(n)] = bench_load(ctx, args.kinds, turns, CHUNKS_PER_TURN,
                                                          RESULT_BYTES, args.repeat_big, f"scale-{n}")
    elif section == "big" and section in args.sections and args.big_mb > 0:
        result_bytes = int(args.big_result_kb * 1024)
        turns = max(1, math.ceil(args.big_mb * MB / turn_bytes(CHUNKS_PER_TURN, result_bytes)))
        results["big"] = bench_load(ctx, args.kinds, turns, CHUNKS_PER_TURN, result_bytes, args.repeat_big, "big")
    elif section == "profile" and args.profile:
        results["profile"] = run_profiles(ctx, Path(args.profile), args)


def compile_tree() -> None:
    """Write the bytecode of our packages, as installing them does (pip compiles the
    SDK's at install time). Without it, an environment with PYTHONDONTWRITEBYTECODE=1
    and an editable install recompiles every edited module at each start of ours."""
    import compileall

    for package in ("acp_bridge", "session"):
        compileall.compile_dir(str(ROOT / package), quiet=1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    compile_tree()
    scratch = Path(tempfile.mkdtemp(prefix="acp-bench-protocol-", dir=args.tmp))
    ctx = Ctx(scratch, args.timeout, itertools.count(1))
    specs = [*(ours(k) for k in args.kinds), SDK]
    if args.diagnose_nosync:
        specs.insert(-1, Spec("ours-jsonl-nosync", "jsonl", nosync=True))
    results: dict[str, Any] = {
        "machine": machine_info(args.tmp),
        "params": {key: getattr(args, key) for key in (
            "repeat", "repeat_big", "kinds", "sections", "stream_words", "turns", "load_chunks",
            "load_results", "scale", "big_mb", "big_result_kb", "quick")} | {
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
    results["summary"] = summary_rows(results, args.kinds)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = run(args)
    text = render(results)
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
