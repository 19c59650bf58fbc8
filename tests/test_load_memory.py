"""`session/load` of a large log in bounded memory: a real agent process replays a log
several times larger than the memory it may use, and its peak RSS (VmHWM) is read
from /proc. Loading the whole log at once, as before the streamed load, took 6-8x
the log's size."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from session import SessionStore, open_backend
from tests.support.logs import Script

pytestmark = pytest.mark.integration

LOG_MB = 60
RESULT_BYTES = 100_000  # a big tool result per turn: few events, many bytes


def build(store_dir: Path | str, backend: str) -> tuple[str, int]:
    store = SessionStore(open_backend(backend, store_dir))
    log = store.create(cwd="/home/dev/project")
    turns = LOG_MB * 1_000_000 // RESULT_BYTES
    for n in range(turns):
        script = Script(first_turn=n + 1).start_turn(f"turn {n}").start_step()
        for word in ("reading", "the", "file"):
            script.chunk(word + " ")
        script.message("reading the file", calls=(f"c{n}",)).call(f"c{n}")
        script.result(f"c{n}", f"{n:08d}" + "x" * RESULT_BYTES).end_step().end_turn()
        log.extend(script.items)
    events = log.tracker.next_seq
    log.close()
    store.close()
    return log.id, events


def vm(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} for {pid}")


UPDATE = b'{"jsonrpc":"2.0","method":"session/update"'


class RawAgent:
    """A real agent process and a minimal client: updates are counted, not parsed (a
    replay is hundreds of thousands of lines). Killed at exit, or after 120 s."""

    def __init__(self, store_dir: Path | str, backend: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "acp_bridge", "--store", str(store_dir), "--backend", backend,
             "--model", "echo"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self._killer = threading.Timer(120, self.proc.kill)
        self._killer.start()

    def __enter__(self) -> RawAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self._killer.cancel()
        self.proc.kill()
        self.proc.wait()
        self.stdin.close()
        self.stdout.close()

    def send(self, message: dict[str, Any]) -> None:
        self.stdin.write(orjson.dumps(message) + b"\n")
        self.stdin.flush()

    def answer(self, rid: int) -> tuple[dict[str, Any], int]:
        """The response to `rid`, and how many updates came before it."""
        updates = 0
        while True:
            line = self.stdout.readline()
            assert line, "the agent closed stdout"
            if line.startswith(UPDATE):
                updates += 1
                continue
            message = orjson.loads(line)
            if message.get("id") == rid:
                return message, updates

    def call(self, rid: int, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return self.answer(rid)


def stored_bytes(store: Path | str) -> int:
    if isinstance(store, str):  # a PostgreSQL store: the events' text (it stores them compressed)
        import psycopg

        with psycopg.connect(store) as db:
            row = db.execute("SELECT sum(octet_length(data::text)) FROM acp_bridge.events").fetchone()
        return int(row[0]) if row else 0
    return sum(f.stat().st_size for f in store.rglob("*") if f.is_file())


@pytest.mark.parametrize("backend", ["jsonl", "sqlite", "postgres"])
@pytest.mark.long
def test_load_of_a_large_log_stays_small(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    store_dir: Path | str = request.getfixturevalue("pg_dsn") if backend == "postgres" else tmp_path / "store"
    sid, events = build(store_dir, backend)
    size = stored_bytes(store_dir)
    assert size > LOG_MB * 1_000_000
    with RawAgent(store_dir, backend) as agent:
        agent.call(1, "initialize", {"protocolVersion": 1})
        answer, updates = agent.call(2, "session/load", {"sessionId": sid, "cwd": str(tmp_path),
                                                         "mcpServers": []})
        assert "result" in answer, answer
        assert answer["result"]["_meta"]["acpBridge"]["events"] == events
        # Per turn: the prompt, 3 chunks, usage, tool call + in progress, the result; then
        # the session's title and its command list, once each, before the answer (a load
        # ends with its answer: docs/protocol.md).
        assert updates == events // 11 * 8 + 2
        peak = vm(agent.proc.pid, "VmHWM")
    # Generous for a noisy machine, and far below the log's size.
    assert peak < 150 * 1024 * 1024, f"peak RSS {peak / 1e6:.0f} MB loading a {size / 1e6:.0f} MB log"


def test_a_cancelled_load_lets_go_of_the_session(tmp_path: Path) -> None:
    """`$/cancel_request` for a `session/load` that is still replaying: the load stops
    (the request is answered -32800, or finishes first on a fast machine), the lock is
    released and the log is untouched, so the next load succeeds."""
    store_dir = tmp_path / "store"
    sid, events = build(store_dir, "jsonl")
    log_path = store_dir / "sessions" / f"{sid}.jsonl"
    before = log_path.read_bytes()
    with RawAgent(store_dir, "jsonl") as agent:
        agent.call(1, "initialize", {"protocolVersion": 1})
        load = {"sessionId": sid, "cwd": str(store_dir), "mcpServers": []}
        agent.send({"jsonrpc": "2.0", "id": 2, "method": "session/load", "params": load})
        assert agent.stdout.readline().startswith(UPDATE)  # the replay has started
        agent.send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 2}})
        cancelled, _ = agent.answer(2)
        assert cancelled.get("error", {}).get("code") == -32800 or "result" in cancelled
        again, _ = agent.call(3, "session/load", load)
        assert again["result"]["_meta"]["acpBridge"]["events"] == events
    assert log_path.read_bytes() == before  # a closed log: nothing to repair, nothing written
