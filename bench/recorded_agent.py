"""A fast fake of a real ACP agent for bench/protocol.py's `recorded` section: it
answers as a recording of that agent did (tests/wrapped_agents/, the traffic of
codex-acp, qwen-code, opencode and gemini-cli with a client), and streams as fast as it
can, so `acp-bridge wrap` can be measured against a real agent's message shapes without
the agent or a network.

    python bench/recorded_agent.py RECORDING [CHUNKS_PER_S]

Standard library and orjson only, no ACP library: it reads one JSON-RPC line at a time
from stdin and writes each message with its own write, as the real agents do.

- `initialize` and `session/new`: the recording's answers (its session id, modes,
  options), with the request's id.
- `session/prompt` of N words: N `session/update`s, one write each, taken in turn from
  the recording's own `agent_message_chunk` and `agent_thought_chunk` updates (the
  agent's fields and `_meta` as it sent them: opencode's `messageId`, qwen-code's empty
  chunks carrying `_meta.usage`), as fast as it writes; then the recording's answer to
  its first prompt. With CHUNKS_PER_S, it keeps to that rate instead (it sleeps when
  ahead: a real agent's pace, the wrapper woken for a chunk or a few at a time).
- `session/cancel` and other notifications: ignored; any other request: -32601.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import orjson

CHUNK_KINDS = ("agent_message_chunk", "agent_thought_chunk")


class Recording:
    """What the fake answers with, read from a recording (tests/support/record_agent.py's
    format: one `{"from": "agent" | "client", "msg": ...}` per line)."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            entries = [orjson.loads(line) for line in f if line.strip()]
        asked = {e["msg"]["id"]: e["msg"]["method"] for e in entries
                 if e["from"] == "client" and "method" in e["msg"] and "id" in e["msg"]}
        answers: dict[str, Any] = {}
        self.chunks: list[dict[str, Any]] = []
        for entry in entries:
            msg = entry["msg"]
            if entry["from"] != "agent":
                continue
            if "method" not in msg and "result" in msg and msg.get("id") in asked:
                answers.setdefault(asked[msg["id"]], msg["result"])
            elif msg.get("method") == "session/update" \
                    and msg["params"]["update"].get("sessionUpdate") in CHUNK_KINDS:
                self.chunks.append(msg)
        self.initialize = answers["initialize"]
        self.new_session = answers["session/new"]
        self.prompt = answers["session/prompt"]
        if not self.chunks:
            raise SystemExit(f"{path}: no agent_message_chunk to stream")


def main(path: str, rate: float = 0.0) -> int:
    recording = Recording(path)
    # Each update's line encoded once, ahead: the fake spends its time writing.
    lines = [orjson.dumps(msg) + b"\n" for msg in recording.chunks]
    out = sys.stdout.buffer.raw if hasattr(sys.stdout.buffer, "raw") else sys.stdout.buffer
    fd = out.fileno()

    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def answer(rid: Any, result: Any) -> None:
        write(orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + b"\n")

    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        msg = orjson.loads(raw)
        method, rid = msg.get("method"), msg.get("id")
        if rid is None or method is None:
            continue  # a notification (session/cancel), or an answer: nothing to do
        if method == "initialize":
            answer(rid, recording.initialize)
        elif method == "session/new":
            answer(rid, recording.new_session)
        elif method == "session/prompt":
            words = sum(len(block.get("text", "").split()) for block in msg["params"]["prompt"]
                        if isinstance(block, dict))
            count = len(lines)
            if rate <= 0:
                for i in range(words):
                    write(lines[i % count])
            else:
                start = time.perf_counter()
                for i in range(words):
                    ahead = start + i / rate - time.perf_counter()
                    if ahead > 0:
                        time.sleep(ahead)
                    write(lines[i % count])
            answer(rid, recording.prompt)
        else:
            write(orjson.dumps({"jsonrpc": "2.0", "id": rid,
                                "error": {"code": -32601, "message": f"Method not found: {method}"}}) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.0))
