"""A raw ACP agent whose answer to `initialize` is named on its command line, for
tests/test_wrap_handshake.py (the wrapper's start-up handshake, acp_bridge.wrap.handshake,
and each of its ways back to the host's path).

    python tests/support/handshake_agent.py MODE [--record FILE] [--when FILE]

MODE, what it does with `initialize`:

- `answer`: answers it (its capabilities and agentInfo);
- `error`: answers it with an error (-32000), and every later `initialize` too;
- `die`: exits with status 3 without answering;
- `notify`: first sends a `session/update` notification for no session, then answers;
- `garbage`: first writes a line that is not JSON, then answers;
- `stderr`: first writes 200 KB to its stderr (more than a pipe holds), then answers.

`--when FILE`: it answers (or dies) only once FILE exists. Everything after `initialize`:
`session/new` is answered with a new session id, a prompt with its words back as
chunks and `end_turn`; other requests -32601. `--record FILE` appends every message it
reads, one JSON line each (`{"pid", "msg"}`). Standard library only (tests/support/raw_agent.py).
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository on the path, for the core
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raw_agent import answer, echo, fail, messages, prompt_text, record, send

INIT_ANSWER = {"protocolVersion": 1,
               "agentCapabilities": {"loadSession": False, "promptCapabilities": {"image": False},
                                     "sessionCapabilities": {"close": {}}},
               "authMethods": [], "agentInfo": {"name": "handshake-agent", "version": "1.0"},
               "_meta": {"theirs": {"kept": True}}}
SESSIONS = itertools.count(1)


def initialize(rid: Any, mode: str, when: str | None) -> None:
    while when is not None and not os.path.exists(when):
        time.sleep(0.005)
    if mode == "error":
        fail(rid, -32000, "authentication required")
        return
    if mode == "die":
        sys.exit(3)
    if mode == "notify":
        send({"jsonrpc": "2.0", "method": "session/update",
              "params": {"sessionId": "none", "update": {"sessionUpdate": "agent_message_chunk",
                                                          "content": {"type": "text", "text": "early"}}}})
    elif mode == "garbage":
        sys.stdout.write("this is not JSON\n")
        sys.stdout.flush()
    elif mode == "stderr":
        for n in range(2000):
            sys.stderr.write(f"line {n}: " + "x" * 90 + "\n")
        sys.stderr.flush()
    answer(rid, INIT_ANSWER)


def main() -> None:
    mode = sys.argv[1]
    path = sys.argv[sys.argv.index("--record") + 1] if "--record" in sys.argv else None
    when = sys.argv[sys.argv.index("--when") + 1] if "--when" in sys.argv else None
    for msg in messages():
        if path is not None:
            record(path, {"pid": os.getpid(), "msg": msg})
        method, rid = msg.get("method"), msg.get("id")
        if method is None or rid is None:
            continue
        if method == "initialize":
            initialize(rid, mode, when)
        elif method == "session/new":
            answer(rid, {"sessionId": f"child-{next(SESSIONS)}"})
        elif method == "session/prompt":
            answer(rid, echo(msg["params"]["sessionId"], prompt_text(msg["params"]).split()))
        else:
            fail(rid, -32601, f"Method not found: {method}")


if __name__ == "__main__":
    main()
