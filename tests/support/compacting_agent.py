"""An ACP agent that compacts its context and tells the person things (ACP v1.25), for
tests/test_wrap_notices.py: on `session/prompt` it sends a notice, then a compaction
(in progress, two summary chunks, completed), then its answer's text, and answers
`end_turn`. It sends them whatever the client advertised (a misbehaving agent, so the
wrapper's own gate is what is tested). A prompt `die` makes it exit without answering.

What it was sent in `initialize` (the editor's, passed on by the wrapper) is appended
to the file $COMPACTING_AGENT_RECORD, one JSON line per `initialize`.

    COMPACTING_AGENT_RECORD=/tmp/init.jsonl python tests/support/compacting_agent.py
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository on the path, for the core
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raw_agent import answer, chunk, fail, messages, prompt_text, record, update

NOTICE = {"sessionUpdate": "notice", "severity": "warning", "title": "MCP server unavailable",
          "description": "Continuing without it."}


def compaction(cid: str, status: str, **more: Any) -> dict[str, Any]:
    return {"sessionUpdate": "compaction_update", "compactionId": cid, "status": status, **more}


def summary_chunk(cid: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": "compaction_summary_chunk", "compactionId": cid,
            "content": {"type": "text", "text": text}}


def turn(sid: str, n: int) -> None:
    """What one prompt sends: a notice, a compaction of its own (its n-th), the answer."""
    cid = f"cmp_{n}"
    update(sid, NOTICE)
    update(sid, compaction(cid, "in_progress"))
    update(sid, summary_chunk(cid, "Kept: "))
    update(sid, summary_chunk(cid, "the plan."))
    update(sid, compaction(cid, "completed", _meta={"vendor": {"ms": 12}}))
    chunk(sid, "Done.")


def main() -> None:
    sessions = itertools.count(1)
    prompts = itertools.count(1)
    for message in messages():
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "initialize":
            record(os.environ["COMPACTING_AGENT_RECORD"], params)
            result: Any = {"protocolVersion": 1, "agentCapabilities": {"loadSession": False},
                           "agentInfo": {"name": "compacting", "version": "1"}}
        elif method == "session/new":
            result = {"sessionId": f"compacting-{next(sessions)}"}
        elif method == "session/prompt":
            if prompt_text(params) == "die":
                sys.exit(3)
            turn(params["sessionId"], next(prompts))
            result = {"stopReason": "end_turn"}
        elif rid is None:
            continue
        else:
            fail(rid, -32601, "not here")
            continue
        answer(rid, result)


if __name__ == "__main__":
    main()
