"""An ACP agent with a subagent (ACP's unstable `subagent_update`): on `session/prompt`
it announces a child session `sub-1` on the prompt's session, sends a message chunk of
that child session and asks a permission for it, then answers the prompt. For
tests/test_wrap_subagents.py.

    python tests/support/subagent_agent.py

Plain JSON-RPC over stdio, one message per line; enough of ACP for `acp-bridge wrap`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository on the path, for the core
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raw_agent import answer, chunk, messages, send, update

SUB = "sub-1"


def main() -> None:
    waiting: dict[Any, tuple[str, Any]] = {}  # our permission request's id -> (session, prompt id)
    for message in messages():
        method, rid = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method is None:  # the editor's answer to the subagent's permission request
            if rid in waiting:
                sid, prompt = waiting.pop(rid)
                chunk(sid, "done")
                answer(prompt, {"stopReason": "end_turn"})
            continue
        if method == "initialize":
            answer(rid, {"protocolVersion": 1, "agentCapabilities": {"loadSession": False},
                         "agentInfo": {"name": "subagents", "version": "1"}})
        elif method == "session/new":
            answer(rid, {"sessionId": "parent-1"})
        elif method == "session/prompt":
            sid = params["sessionId"]
            update(sid, {"sessionUpdate": "subagent_update", "sessionId": SUB, "title": "Researcher"})
            chunk(SUB, "looking into it")
            update(sid, {"sessionUpdate": "subagent_update", "sessionId": SUB, "state": {"state": "idle"}})
            ask = f"perm-{len(waiting) + 1}"
            waiting[ask] = (sid, rid)
            send({"jsonrpc": "2.0", "id": ask, "method": "session/request_permission",
                  "params": {"sessionId": SUB, "toolCall": {"toolCallId": "t1", "title": "Read notes"},
                             "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]}})
        elif rid is not None:
            answer(rid, {})


if __name__ == "__main__":
    main()
