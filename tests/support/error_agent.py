"""An ACP agent that answers each prompt with the JSON-RPC error its prompt spells out,
byte for byte, for tests/test_wrap_errors.py (a wrapped agent's error answers reach the
editor as it sent them) and tests/test_wrap_titles.py (a wrapped session is titled
whatever comes before its first prompt).

    ERROR_AGENT_UPDATES=N python tests/support/error_agent.py

- `session/new` is answered, then N (default 2) `session/update`s follow at once, before
  any prompt: an `available_commands_update`, then `current_mode_update`s (what real
  agents send between turns, and what a wrapper records before the first turn).
- `session/prompt`: one message chunk ("about to fail"), then, if the prompt's text is
  `error <JSON>`, the answer `{"jsonrpc":"2.0","id":ID,"error":<JSON>}` with <JSON>
  exactly as given (its bytes, its member order, its spelling); `result <JSON>` the same
  as a result (tests/test_prompt_usage.py: an agent's own `usage`); any other text is
  answered `end_turn`.
- `$ERROR_AGENT_COMMANDS` (comma-separated) names the commands of its
  `available_commands_update` (default `cmd0` ... `cmd7`).

Plain JSON-RPC over stdio, one message per line; enough of ACP for `acp-bridge wrap`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

SID = "error-session-1"


def send_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def send(message: dict[str, Any]) -> None:
    send_line(json.dumps(message, separators=(",", ":")))


def update(body: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": SID, "update": body}})


def between_turns(count: int) -> None:
    """What an agent says of a new session before it is prompted."""
    for n in range(count):
        if n == 0:
            names = os.environ.get("ERROR_AGENT_COMMANDS", ",".join(f"cmd{i}" for i in range(8))).split(",")
            update({"sessionUpdate": "available_commands_update", "availableCommands": [
                {"name": name, "description": f"command number {i}, " + "x" * 200} for i, name in enumerate(names)]})
        else:
            update({"sessionUpdate": "current_mode_update", "currentModeId": "ask" if n % 2 else "code"})


def prompt_text(params: dict[str, Any]) -> str:
    return "".join(b.get("text", "") for b in params.get("prompt", []) if isinstance(b, dict))


def main() -> None:
    count = int(os.environ.get("ERROR_AGENT_UPDATES", "2"))
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, rid = message.get("method"), message.get("id")
        if rid is None or method is None:
            continue  # notifications (session/cancel) and answers: nothing to do
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": 1, "agentCapabilities": {"loadSession": False},
                "agentInfo": {"name": "error-agent", "version": "1"}}})
        elif method == "session/new":
            send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": SID}})
            between_turns(count)
        elif method == "session/prompt":
            update({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "about to fail"}})
            text = prompt_text(message["params"])
            if text.startswith(("error ", "result ")):
                kind, _, body = text.partition(" ")
                send_line(f'{{"jsonrpc":"2.0","id":{json.dumps(rid)},"{kind}":{body}}}')
            else:
                send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": "end_turn"}})
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no {method} here"}})


if __name__ == "__main__":
    main()
