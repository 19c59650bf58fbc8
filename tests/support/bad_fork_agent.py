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
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository on the path, for the core
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raw_agent import answer, echo, fail, messages, prompt_text, record

SESSIONS = itertools.count(1)


def answer_fork(mode: str, rid: Any, params: dict[str, Any]) -> None:
    if mode == "error":
        fail(rid, -32603, "cannot fork today")
        return
    result: Any = {"no-id": {"modes": None}, "same-id": {"sessionId": params.get("sessionId")},
                   "not-object": "forked"}[mode]
    answer(rid, result)


def main() -> None:
    path, mode = sys.argv[1], sys.argv[2]
    for message in messages():
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method is None or rid is None:
            continue
        if method == "initialize":
            result: Any = {"protocolVersion": 1, "agentInfo": {"name": "bad-fork", "version": "1"},
                           "agentCapabilities": {"sessionCapabilities": {"fork": {}}}}
        elif method == "session/new":
            result = {"sessionId": f"bad-{next(SESSIONS)}"}
        elif method == "session/fork":
            record(path, {"fork": params})
            answer_fork(mode, rid, params)
            continue
        elif method == "session/prompt":
            sid, text = params.get("sessionId", ""), prompt_text(params)
            record(path, {"sessionId": sid, "text": text})
            result = echo(sid, text.split()[:20])
        else:
            fail(rid, -32601, f"no {method} here")
            continue
        answer(rid, result)


if __name__ == "__main__":
    main()
