"""An ACP agent that sends what a client must not be sent, one of each kind the official
SDK clients' checks are for (tests/support/sdk_clients.py; the self-test in
tests/test_sdk_clients.py):

- `initialize` answered with `loadSession: "yes"`: the vendored schema refuses it, and the
  SDKs' schemas put their default (`false`) in its place rather than refuse it;
- `session/new` answered twice;
- on `session/prompt`, a chunk whose text is a number (the SDKs refuse the notification,
  so it is never delivered to the client), then `end_turn`;
- `session/list` never answered.

    python tests/support/sloppy_agent.py
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository on the path, for the core
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raw_agent import answer, messages, update

SID = "sloppy-session-1"


def main() -> None:
    for message in messages():
        method, rid = message.get("method"), message.get("id")
        if method == "initialize":
            answer(rid, {"protocolVersion": 1, "agentCapabilities": {"loadSession": "yes"}})
        elif method == "session/new":
            answer(rid, {"sessionId": SID})
            answer(rid, {"sessionId": SID})
        elif method == "session/prompt":
            update(SID, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": 7}})
            answer(rid, {"stopReason": "end_turn"})


if __name__ == "__main__":
    main()
