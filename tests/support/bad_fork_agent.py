"""A raw ACP agent that offers `session/fork` and answers it badly on purpose, for
tests/test_fork_wrap.py (docs/wrap.md, "Fork": the wrapper emulates the fork then).

    python tests/support/bad_fork_agent.py RECORD MODE

MODE is how it answers `session/fork`: `error` (-32603), `no-id` (a result without a
`sessionId`), `same-id` (the id of the session it was asked to fork), `not-object` (a
result that is a string). Prompts are echoed, one chunk per word; each prompt's session
and text, and each `session/fork`'s params (`{"fork": params}`), are recorded as a JSON
line in RECORD. Plain JSON-RPC over stdio, only the
standard library.
"""

from __future__ import annotations

import itertools
import json
import sys
from typing import Any

SESSIONS = itertools.count(1)


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def fork_answer(mode: str, rid: Any, params: dict[str, Any]) -> dict[str, Any]:
    if mode == "error":
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "cannot fork today"}}
    result: Any = {"no-id": {"modes": None}, "same-id": {"sessionId": params.get("sessionId")},
                   "not-object": "forked"}[mode]
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def main() -> None:
    record, mode = sys.argv[1], sys.argv[2]
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method is None or rid is None:
            continue
        if method == "initialize":
            result: Any = {"protocolVersion": 1, "agentInfo": {"name": "bad-fork", "version": "1"},
                           "agentCapabilities": {"sessionCapabilities": {"fork": {}}}}
        elif method == "session/new":
            result = {"sessionId": f"bad-{next(SESSIONS)}"}
        elif method == "session/fork":
            with open(record, "a", encoding="utf-8") as out:
                out.write(json.dumps({"fork": params}) + "\n")
            send(fork_answer(mode, rid, params))
            continue
        elif method == "session/prompt":
            sid = params.get("sessionId", "")
            text = " ".join(b.get("text", "") for b in params.get("prompt") or [] if isinstance(b, dict))
            with open(record, "a", encoding="utf-8") as out:
                out.write(json.dumps({"sessionId": sid, "text": text}) + "\n")
            for word in text.split()[:20]:
                send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": sid, "update": {
                    "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": word + " "}}}})
            result = {"stopReason": "end_turn"}
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no {method} here"}})
            continue
        send({"jsonrpc": "2.0", "id": rid, "result": result})


if __name__ == "__main__":
    main()
