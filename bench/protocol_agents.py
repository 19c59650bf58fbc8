"""The agents of bench/protocol.py and the one raw NDJSON client that drives them all
(`AgentProc`): blocking pipes, buffered `readline` on the child's stdout, notifications
recognised by their prefix, responses parsed with orjson."""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import orjson

from bench import pg_store
from bench.common import CWD, ROOT

SDK_AGENT = ROOT / "bench" / "sdk_echo_agent.py"

# Every agent here (ours: orjson, the SDK: json.dumps with compact separators, the bare
# loop: orjson) writes a notification with its keys in this order, so the client counts
# them without parsing; anything else (responses, requests) is parsed.
NOTE_PREFIX = b'{"jsonrpc":"2.0","method":"session/update"'
CHUNK_MARK = b'"sessionUpdate":"agent_message_chunk"'
READ_BUFFER = 1 << 16


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


# The agents.


@dataclass(frozen=True)
class Spec:
    """An agent to run: `ours-jsonl`, `ours-sqlite`, `sdk`, `wrap-sdk-jsonl`,
    `wrap-sdk-sqlite` (`acp-bridge wrap` around the SDK echo agent), or the bare load
    loop."""

    name: str
    backend: str | None = None  # ours and wrap only
    nosync: bool = False  # diagnostic only: ours (or the wrapper) with fsync made a no-op
    wrap: bool = False  # `acp-bridge wrap --store S --backend B -- python bench/sdk_echo_agent.py`
    # Another agent's command line (bench/recorded_agent.py: protocol_recorded): run
    # alone, or wrapped with `wrap`, in place of the SDK echo agent.
    agent: tuple[str, ...] = ()

    def argv(self, store: Path, prefix: tuple[str, ...] = ()) -> list[str]:
        """The command line; `prefix` (interpreter options) applies to the process we
        spawn: for a wrap spec the wrapper, not the agent it wraps."""
        if self.name == "sdk":
            return [sys.executable, *prefix, str(SDK_AGENT)]
        if self.agent and not self.wrap:
            return list(self.agent)
        assert self.backend is not None
        where = str(pg_store.location(self.backend, store))  # postgres: the folder's database
        if self.wrap:
            agent = self.agent or (sys.executable, str(SDK_AGENT))
            args = ["wrap", "--store", where, "--backend", self.backend, "--", *agent]
        else:
            args = ["--store", where, "--backend", self.backend, "--model", "echo"]
        if self.nosync:
            return [sys.executable, *prefix, "-c", NOSYNC_LAUNCH, *args]
        return [sys.executable, *prefix, "-m", "acp_bridge", *args]


SDK = Spec("sdk")


def ours(backend: str) -> Spec:
    return Spec(f"ours-{backend}", backend)


def wrapped(backend: str) -> Spec:
    """`acp-bridge wrap` (recording in `backend`) around the SDK echo agent (issue 14)."""
    return Spec(f"wrap-sdk-{backend}", backend, wrap=True)


class AgentError(RuntimeError):
    pass


class AgentProc:
    """One agent process and the raw NDJSON client that drives it (synchronous: one
    request at a time, reading until its answer; the same code for every agent). `cwd`:
    where it runs (`python -m acp_bridge` runs the checkout there: bench/startup_compare.py)."""

    def __init__(self, argv: list[str], stderr_path: Path, timeout: float, env: dict[str, str] | None = None,
                 cwd: Path = ROOT) -> None:
        self.argv = argv
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")  # noqa: SIM115 (closed in close())
        self.spawned = time.perf_counter()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, bufsize=0, cwd=cwd, env=env)
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

    def cpu_s(self) -> tuple[float, float]:
        """CPU time (user + system, s) of the process, and of its descendants (for a
        wrapper: the wrapped agent and the watchdog), from /proc."""
        own, todo, kids = _cpu_s(self.pid), self._children(self.pid), 0.0
        while todo:
            pid = todo.pop()
            with suppress(OSError):
                kids += _cpu_s(pid)
                todo += self._children(pid)
        return own, kids

    @staticmethod
    def _children(pid: int) -> list[int]:
        found: list[int] = []
        with suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                found += [int(c) for c in (task / "children").read_text().split()]
        return found

    def tree_rss_kb(self) -> int:
        """VmRSS (kB) of the process and all its descendants (for a wrapper: itself, the
        wrapped agent and the watchdog), from /proc/PID/task/*/children."""
        total, todo = 0, [self.pid]
        while todo:
            pid = todo.pop()
            with suppress(OSError):
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1])
                            break
                for task in Path(f"/proc/{pid}/task").iterdir():
                    todo += [int(c) for c in (task / "children").read_text().split()]
        return total

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


def _cpu_s(pid: int) -> float:
    """utime + stime of `pid` (s), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Ctx:
    root: Path  # scratch root of this run
    timeout: float
    counter: itertools.count[int]
    env: dict[str, str] | None = None  # of every agent process (--slow-disk: the fsync shim)

    def spawn(self, spec: Spec, store: Path | None = None, prefix: tuple[str, ...] = ()) -> AgentProc:
        n = next(self.counter)
        store = store if store is not None else self.root / f"store-{spec.name}"
        return AgentProc(spec.argv(store, prefix), self.root / f"stderr-{n:04d}-{spec.name}.txt", self.timeout,
                         self.env)

    def spawn_bare(self, info: dict[str, Any]) -> AgentProc:
        n = next(self.counter)
        return AgentProc([sys.executable, "-c", BARE_LOOP, info["path"], info["id"]],
                         self.root / f"stderr-{n:04d}-bare.txt", self.timeout, self.env)
