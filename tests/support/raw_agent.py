"""The core the raw ACP agents of tests/support share (bad_fork_agent.py, unruly_agent.py,
hostile_agent.py, xss_agent.py, memory_agent.py, talking_agent.py): JSON-RPC over stdio,
one message per line, standard library only, so each agent starts in a few tens of
milliseconds and keeps to its own behaviour.

An agent run as a script puts the repository on `sys.path` before it imports this.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from typing import Any

# One writer of a line at a time: several agents answer from threads.
LOCK = threading.Lock()


def send(message: dict[str, Any]) -> None:
    with LOCK:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def answer(rid: Any, result: Any) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def fail(rid: Any, code: int, message: str) -> None:
    send({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}})


def update(sid: str, body: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": body}})


def chunk(sid: str, text: str) -> None:
    update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})


def echo(sid: str, words: list[str]) -> dict[str, Any]:
    """The words back, one chunk each; the prompt's `end_turn` result."""
    for word in words:
        chunk(sid, word + " ")
    return {"stopReason": "end_turn"}


def prompt_text(params: dict[str, Any], joiner: str = " ") -> str:
    """The text blocks of a `session/prompt`'s params, joined."""
    return joiner.join(b.get("text", "") for b in params.get("prompt") or [] if isinstance(b, dict))


def messages() -> Iterator[dict[str, Any]]:
    """Every message on stdin, blank lines passed over, until stdin closes."""
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def record(path: str, entry: dict[str, Any]) -> None:
    """Append one JSON line to a test's record file."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")
