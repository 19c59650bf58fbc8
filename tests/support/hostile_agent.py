"""An ACP agent whose every string a client might print carries terminal escape
sequences: mode ids and names, message and thought text, tool titles, tool output,
diffs, plans, titles, permission questions, stop reasons, error messages and listed
sessions. For tests/test_untrusted_text.py (issue 17: untrusted text is shown escaped).

    python tests/support/hostile_agent.py

Plain JSON-RPC over stdio, one message per line; enough of ACP for `acp-bridge wrap`
and `acp-bridge chat`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository on the path, for the core
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raw_agent import answer, fail, messages, send, update

HIJACK = "\u001b[2J\u001b[H\u001b]0;pwned\u0007\u009b31m"
SID = "hostile-session-1"


def modes() -> dict[str, Any]:
    return {"currentModeId": f"ask{HIJACK}",
            "availableModes": [{"id": f"ask{HIJACK}", "name": f"Ask{HIJACK}"}]}


def prompt_turn(sid: str) -> None:
    text = {"type": "text", "text": f"said{HIJACK}"}
    update(sid, {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": f"thought{HIJACK}"}})
    update(sid, {"sessionUpdate": "agent_message_chunk", "content": text})
    update(sid, {"sessionUpdate": "session_info_update", "title": f"title{HIJACK}"})
    update(sid, {"sessionUpdate": "plan", "entries": [
        {"content": f"plan{HIJACK}", "priority": "high", "status": "pending"}]})
    update(sid, {"sessionUpdate": "current_mode_update", "currentModeId": f"mode{HIJACK}"})
    diff = {"type": "diff", "path": f"/w/file{HIJACK}.txt", "oldText": "a\n", "newText": f"b{HIJACK}\n"}
    update(sid, {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": f"tool{HIJACK}",
                 "kind": "execute", "status": "pending"})
    send({"jsonrpc": "2.0", "id": 900, "method": "session/request_permission", "params": {
        "sessionId": sid, "toolCall": {"toolCallId": "t1", "title": f"asks{HIJACK}", "content": [diff]},
        "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "no", "name": "Reject", "kind": "reject_once"}]}})


def main() -> None:
    print(f"starting{HIJACK}", file=sys.stderr, flush=True)  # its log, too, is untrusted
    pending_prompt: Any = None
    for message in messages():
        method, rid = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method is None:  # the answer to our permission question: finish the turn
            sid = SID
            update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed",
                         "content": [{"type": "content", "content": {"type": "text",
                                                                      "text": f"output{HIJACK}\nexit code 0"}},
                                     {"type": "diff", "path": f"/w/file{HIJACK}.txt", "oldText": "a\n",
                                      "newText": f"b{HIJACK}\n"}]})
            answer(pending_prompt, {"stopReason": f"odd{HIJACK}"})
            continue
        if method == "initialize":
            result: Any = {"protocolVersion": 1, "agentCapabilities": {"loadSession": False},
                           "agentInfo": {"name": f"hostile{HIJACK}", "version": "1"}}
        elif method == "session/new":
            result = {"sessionId": SID, "modes": modes()}
        elif method == "session/prompt":
            pending_prompt = rid
            prompt_turn(params.get("sessionId", SID))
            continue
        elif method == "session/set_mode":
            fail(rid, -32602, f"no such mode{HIJACK}")
            continue
        elif rid is None:
            continue
        else:
            fail(rid, -32601, f"not here{HIJACK}")
            continue
        answer(rid, result)


if __name__ == "__main__":
    main()
