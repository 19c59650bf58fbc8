"""A raw ACP agent that misbehaves on purpose, for tests/test_wrap_unruly.py (issue 23:
`wrap` keeps its promise when the wrapped agent does not).

    python tests/support/unruly_agent.py [--record FILE] [--hang-if FILE]

What a prompt does is named by its text:

- `stream N MS [K]`: N message chunks (`c1 `, `c2 `...), one every MS milliseconds, then
  `end_turn`, whatever comes meanwhile: it ignores `session/cancel` (as the SDK echo
  agent and opencode did); with K, after chunk K it also asks a permission
  (`session/request_permission`, id `perm`) and reads a file (`fs/read_text_file`, id
  `fs`), and goes on without waiting for the answers;
- `hang`: it stops answering anything at all from then on (prompts, cancels, closes),
  while it keeps reading its stdin;
- `fail-on-cancel`: one chunk, then it waits for the `session/cancel` of its session and
  answers the prompt with a JSON-RPC error (-32800 "Request cancelled"), as several
  agents answer a cancelled prompt instead of `stopReason: cancelled`;
- anything else is echoed, one chunk per word, and answered `end_turn`.

`--record FILE` appends every message it reads, one JSON line each, so a test can see
what the wrapper sent it (its `session/cancel`); `--hang-if FILE`: if FILE exists when it
starts, it answers nothing at all, `initialize` included. It offers `session/close`. Plain
JSON-RPC over stdio, one message per line, only the standard library: it starts in a
few tens of milliseconds, so tests can restart it many times.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository on the path, for the core
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raw_agent import answer, chunk, echo, fail, messages, prompt_text, record, send

SESSIONS = itertools.count(1)


def stream(rid: Any, sid: str, count: int, every_ms: int, ask_at: int | None) -> None:
    for n in range(1, count + 1):
        time.sleep(every_ms / 1000)  # the pace the prompt asked for (`stream N MS`)
        chunk(sid, f"c{n} ")
        if n == ask_at:
            send({"jsonrpc": "2.0", "id": "perm", "method": "session/request_permission", "params": {
                "sessionId": sid, "toolCall": {"toolCallId": "t1", "title": "late tool"},
                "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"}]}})
            send({"jsonrpc": "2.0", "id": "fs", "method": "fs/read_text_file",
                  "params": {"sessionId": sid, "path": "/etc/hostname"}})
    answer(rid, {"stopReason": "end_turn"})


def main() -> None:
    path = sys.argv[sys.argv.index("--record") + 1] if "--record" in sys.argv else None
    hung = "--hang-if" in sys.argv and os.path.exists(sys.argv[sys.argv.index("--hang-if") + 1])
    failing: dict[str, Any] = {}  # session id -> the prompt that fails at its cancel
    for message in messages():
        if path is not None:
            record(path, message)
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "session/cancel" and params.get("sessionId") in failing:
            fail(failing.pop(params["sessionId"]), -32800, "Request cancelled")
            continue
        if hung or method is None or rid is None:
            continue  # answers, notifications (session/cancel: ignored), or nothing at all any more
        if method == "initialize":
            result: Any = {"protocolVersion": 1, "agentInfo": {"name": "unruly", "version": "1"},
                           "agentCapabilities": {"loadSession": False, "sessionCapabilities": {"close": {}}}}
        elif method == "session/new":
            result = {"sessionId": f"unruly-{next(SESSIONS)}"}
        elif method == "session/close":
            result = {}
        elif method == "session/prompt":
            sid, words = params.get("sessionId", ""), prompt_text(params).split()
            if words[:1] == ["hang"]:
                hung = True
                continue
            if words[:1] == ["fail-on-cancel"]:
                chunk(sid, "working ")
                failing[sid] = rid
                continue
            if words[:1] == ["stream"]:
                ask_at = int(words[3]) if len(words) > 3 else None
                threading.Thread(target=stream, args=(rid, sid, int(words[1]), int(words[2]), ask_at),
                                 daemon=True).start()
                continue
            result = echo(sid, words)
        else:
            fail(rid, -32601, f"no {method} here")
            continue
        answer(rid, result)


if __name__ == "__main__":
    main()
