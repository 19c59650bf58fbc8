"""A real wrapper in front of each recorded agent (tests/wrapped_agents/, played by
bench/recorded_agent.py, which streams a prompt's words back as the agent's own chunks
as fast as it writes): the session's log and what the editor is sent are what they
were before the wrapper's fast path for streams (issue 32). The snapshots
(snapshots/test_wrap_stream_log/) were made by this test on the code before it
(dfd8f21); the stream's chunks come a few hundred to a read now, so they go through the
fast path, and must give the same events and bytes. One change since, on purpose:
opencode's turn records its starting mode, `build` (issue 35: opencode gives it only as
a config option), so its events' hash was made again.

Compared: the log's events as stored (JSONL), their times left out (the clock's), and
every line the editor read after `session/new`, our session id left out (it is random):
the events other than chunks and the first few of each in full, all of them by their
SHA-256 (the snapshots stay small)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
RECORDED_AGENT = ROOT / "bench" / "recorded_agent.py"
# The recordings there were then (those made for issue 35 add nothing to a stream).
RECORDINGS = [Path(__file__).parent / "wrapped_agents" / f"{name}.jsonl"
              for name in ("codex-acp-0.16.0", "gemini-cli-0.61.0", "opencode-1.18.33", "qwen-code-0.15.10")]
WORDS = 300


def _request(rid: int, method: str, params: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}) + b"\n"


def run_wrapped(recording: Path, store: Path, cwd: Path) -> tuple[list[bytes], str]:
    """Initialize, `session/new`, one prompt of WORDS words; the lines the editor read
    after `session/new` was answered, and our session id."""
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "wrap", "--store", str(store), "--backend", "jsonl", "--",
         sys.executable, str(RECORDED_AGENT), str(recording)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert wrapper.stdin is not None and wrapper.stdout is not None
    read: list[bytes] = []

    def until_answer(rid: int) -> Any:
        assert wrapper.stdout is not None
        while True:
            line = wrapper.stdout.readline()
            assert line, "the wrapper ended"
            read.append(line)
            message = orjson.loads(line)
            if message.get("id") == rid and "method" not in message:
                return message

    try:
        wrapper.stdin.write(_request(1, "initialize", {"protocolVersion": 1, "clientCapabilities": {}}))
        wrapper.stdin.flush()
        until_answer(1)
        wrapper.stdin.write(_request(2, "session/new", {"cwd": str(cwd), "mcpServers": []}))
        wrapper.stdin.flush()
        sid = until_answer(2)["result"]["sessionId"]
        read.clear()
        words = " ".join(f"w{n}" for n in range(WORDS))
        wrapper.stdin.write(_request(3, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text",
                                                                                           "text": words}]}))
        wrapper.stdin.flush()
        assert until_answer(3)["result"]["stopReason"] == "end_turn"
    finally:
        wrapper.stdin.close()
        wrapper.wait(timeout=30)
        wrapper.stdout.close()
    return read, sid


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda p: p.stem)
def test_a_stream_through_the_wrapper_logs_and_sends_what_it_did(recording: Path, tmp_path: Path,
                                                                 snapshot_json: Any) -> None:
    read, sid = run_wrapped(recording, tmp_path / "store", tmp_path)
    chunks = sum(b'"agent_message_chunk"' in line for line in read)
    assert chunks == WORDS  # every chunk reached the editor
    log = (tmp_path / "store" / "sessions" / f"{sid}.jsonl").read_bytes().splitlines()
    events = [line.replace(b'"time":%d,' % orjson.loads(line)["time"], b'"time":0,') for line in log[1:]]
    sent = [line.replace(sid.encode(), b"<ours>") for line in read]
    assert {
        "events": len(events), "events_sha256": hashlib.sha256(b"\n".join(events)).hexdigest(),
        "not_chunks": [orjson.loads(e) for e in events if b'"type":"assistant/chunk"' not in e],
        "first_chunks": [orjson.loads(e) for e in events if b'"type":"assistant/chunk"' in e][:4],
        "sent": len(sent), "sent_sha256": hashlib.sha256(b"".join(sent)).hexdigest(),
        "first_sent": [orjson.loads(line) for line in sent[:4]],
    } == snapshot_json
