"""A raw ACP agent that speaks after its own `session/load` answer, for tests/test_load_ends.py
(a load or resume through `acp-bridge wrap` ends with the wrapper's answer, whatever
the child sends after its own).

    python tests/support/late_agent.py

- `session/new`: a session, then (after the answer, as our own agent offers its
  commands) `available_commands_update` with `COMMANDS`.
- `session/load` of any session id: its replay (each prompt it was sent in this
  process and its answer), the answer, then right behind it `available_commands_update`
  with `LATE_COMMANDS` and `session_info_update` titled `LATE_TITLE`.
- `_late/poke` (a request naming no session): for each session it loaded, a
  `session_info_update` titled `POKED_TITLE` and an `agent_message_chunk` `POKED_TEXT`,
  then the answer `{}`: what it sends for a session at a moment the test chooses, after
  the wrapper answered the editor's load.
- `session/prompt`: the prompt's text back in one chunk, `end_turn`.

`loadSession` is advertised; nothing else. Standard library only: it starts fast.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raw_agent import answer, chunk, fail, messages, prompt_text, update

COMMANDS = [{"name": "late", "description": "the late agent's own command"}]
LATE_COMMANDS = [{"name": "late", "description": "the late agent's own command, sent after a load"}]
LATE_TITLE = "named after the load"
POKED_TITLE = "named when poked"
POKED_TEXT = "said when poked"


def commands(sid: str, listed: list[dict[str, Any]]) -> None:
    update(sid, {"sessionUpdate": "available_commands_update", "availableCommands": listed})


def main() -> None:
    ids = itertools.count(1)
    said: dict[str, list[tuple[str, str]]] = {}  # session -> (prompt, answer) of each turn here
    loaded: list[str] = []
    for message in messages():
        method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
        if method == "initialize":
            answer(rid, {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}, "authMethods": [],
                         "agentInfo": {"name": "late-agent", "version": "1.0"}})
        elif method == "session/new":
            sid = f"late-{next(ids)}"
            said[sid] = []
            answer(rid, {"sessionId": sid})
            commands(sid, COMMANDS)
        elif method == "session/load":
            sid = params["sessionId"]
            for asked, told in said.setdefault(sid, []):
                update(sid, {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": asked}})
                chunk(sid, told)
            loaded.append(sid)
            answer(rid, {})
            commands(sid, LATE_COMMANDS)
            update(sid, {"sessionUpdate": "session_info_update", "title": LATE_TITLE})
        elif method == "_late/poke":
            for sid in loaded:
                update(sid, {"sessionUpdate": "session_info_update", "title": POKED_TITLE})
                chunk(sid, POKED_TEXT)
            answer(rid, {})
        elif method == "session/prompt":
            sid, text = params["sessionId"], prompt_text(params)
            said.setdefault(sid, []).append((text, text))
            chunk(sid, text)
            answer(rid, {"stopReason": "end_turn"})
        elif method == "session/cancel":
            continue
        elif rid is not None:
            fail(rid, -32601, f"no method {method}")


if __name__ == "__main__":
    main()
