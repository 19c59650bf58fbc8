"""An ACP agent that talks while its permission question waits: on `session/prompt` it
asks for permission, and once the file named by $TALKING_AGENT_GO exists (the test
creates it when the question is on the screen) it sends two message chunks, one that
ends its line and one that does not, and then writes a line to stderr, before the
answer comes. For
tests/test_chat_terminal.py (output during a question is printed above it).

    TALKING_AGENT_GO=/tmp/go python tests/support/talking_agent.py

Plain JSON-RPC over stdio, one message per line; enough of ACP for `acp-bridge wrap`
and `acp-bridge chat`.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository on the path, for the core
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raw_agent import answer, fail, messages, send, update

SID = "talking-session-1"


def chunk(text: str) -> None:
    update(SID, {"sessionUpdate": "agent_message_chunk", "messageId": "m1",
                 "content": {"type": "text", "text": text}})


def talk_when_told() -> None:
    go = Path(os.environ["TALKING_AGENT_GO"])
    deadline = time.monotonic() + 30
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.02)  # a model that streams at a pace: what the chat tests watch
    chunk("LATE LINE ONE\n")
    chunk("LATE PART TWO")
    time.sleep(0.5)  # then its log says something (relayed by the wrapper and the chat)
    print("LATE LOG LINE", file=sys.stderr, flush=True)


def main() -> None:
    pending_prompt: Any = None
    for message in messages():
        method, rid = message.get("method"), message.get("id")
        if method is None:  # the answer to the permission question: the turn ends
            answer(pending_prompt, {"stopReason": "end_turn"})
            continue
        if method == "initialize":
            result: Any = {"protocolVersion": 1, "agentCapabilities": {"loadSession": False},
                           "agentInfo": {"name": "talking", "version": "1"}}
        elif method == "session/new":
            result = {"sessionId": SID}
        elif method == "session/prompt":
            pending_prompt = rid
            send({"jsonrpc": "2.0", "id": 900, "method": "session/request_permission", "params": {
                "sessionId": SID, "toolCall": {"toolCallId": "t1", "title": "touch the file", "kind": "edit"},
                "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "no", "name": "Reject", "kind": "reject_once"}]}})
            threading.Thread(target=talk_when_told, daemon=True).start()
            continue
        elif rid is None:
            continue
        else:
            fail(rid, -32601, "not here")
            continue
        answer(rid, result)


if __name__ == "__main__":
    main()
