"""An ACP agent whose every string a transcript page shows tries to run script in the
reader's browser: `<script>`, `onerror=`, `javascript:` links, and Markdown tricks (raw
HTML blocks and tags, autolinks, reference links and images with `javascript:` or
`data:` targets, HTML entities) in its name, thoughts, answers, tool titles, file
names, diffs, tool output and error messages. Every payload, if it ran, would set
`document.title` to PWNED or add an element with the id `pwned`. For
tests/test_html_browser.py and tests/test_html_export.py, recorded through `acp-bridge
wrap` (issue 26: untrusted text can never run script).

    python tests/support/xss_agent.py

Plain JSON-RPC over stdio, one message per line. A prompt whose text starts with
"fail" is answered with an error; one that starts with "wait" streams a thought and
waits for `session/cancel`; any other runs one turn: a thought, an answer in Markdown,
an edit that asks permission (the turn waits for the answer), its result with a diff,
a usage update, and `end_turn`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository on the path, for the core
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.raw_agent import answer, chunk, fail, messages, prompt_text, send, update

RUN = "document.title='PWNED'"
MAKE = "document.body.appendChild(Object.assign(document.createElement('b'),{id:'pwned'}))"
# Plain HTML: as text, in an attribute, and breaking out of one.
TAGS = (f"<script>{RUN}</script><img src=x onerror=\"{RUN}\"><svg onload=\"{MAKE}\"></svg>"
        f"\"'><iframe srcdoc=\"<script>parent.{RUN}</script>\"></iframe>")
# What a model's Markdown may try.
MARKDOWN = "\n".join([
    "# Result",
    "",
    f"Plain {TAGS} inline.",
    "",
    f"<div onmouseover=\"{RUN}\">a raw HTML block</div>",
    "",
    f"[a js link](javascript:{RUN}) and [an entity link](&#106;avascript:{RUN})",
    "",
    f"<javascript:{RUN}> an autolink, <https://example.org/ok> a good one",
    "",
    "[a reference][evil] and ![an image][evil]",
    "",
    f"[evil]: javascript:{RUN}",
    "",
    f"![an image](x.png\" onerror=\"{RUN}) ![a data image](data:image/svg+xml;base64,"
    "PHN2ZyBvbmxvYWQ9ImFsZXJ0KDEpIj48L3N2Zz4=) [a data page](data:text/html,<script>alert(1)</script>)",
    "",
    f"&lt;script&gt;{RUN}&lt;/script&gt; &#60;img src=x onerror={RUN}&#62;",
    "",
    "```html\" onload=\"" + RUN,
    f"<script>{RUN}</script>",
    "```",
    "",
    "| cell | `<b>` |",
    "|---|--:|",
    f"| <img src=x onerror=\"{RUN}\"> | right |",
])
SID = "xss-session-1"


def diff() -> dict[str, Any]:
    return {"type": "diff", "path": f"/w/<img src=x onerror=\"{RUN}\">.txt",
            "oldText": "a\n", "newText": f"b {TAGS}\n"}


def start_turn(sid: str) -> None:
    update(sid, {"sessionUpdate": "agent_thought_chunk",
                 "content": {"type": "text", "text": f"thinking **hard** {TAGS}"}})
    update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": MARKDOWN}})
    update(sid, {"sessionUpdate": "tool_call", "toolCallId": f"t1{TAGS}", "title": f"edit {TAGS}",
                 "kind": "edit", "status": "pending", "rawInput": {"path": TAGS},
                 "locations": [{"path": f"/w/{TAGS}"}]})
    send({"jsonrpc": "2.0", "id": 900, "method": "session/request_permission", "params": {
        "sessionId": sid, "toolCall": {"toolCallId": f"t1{TAGS}", "title": f"asks {TAGS}",
                                       "content": [diff()]},
        "options": [{"optionId": "allow_once", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"}]}})


def finish_turn(sid: str, prompt_id: Any) -> None:
    update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": f"t1{TAGS}", "status": "completed",
                 "content": [{"type": "content", "content": {"type": "text", "text": f"output {TAGS}"}},
                             diff()]})
    update(sid, {"sessionUpdate": "usage_update", "used": 1234, "size": 200000})
    update(sid, {"sessionUpdate": "agent_message_chunk",
                 "content": {"type": "text", "text": f"Done [here](javascript:{RUN})."}})
    # The turn's tokens come from the answer (a usage_update is the context's size: issue 35).
    answer(prompt_id, {"stopReason": "end_turn",
                       "usage": {"inputTokens": 1234, "outputTokens": 0, "totalTokens": 1234}})


def main() -> None:
    pending: Any = None
    for message in messages():
        method, rid = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method is None:  # the answer to our permission question
            if rid == 900 and pending is not None:
                finish_turn(SID, pending)
                pending = None
            continue
        if method == "initialize":
            answer(rid, {"protocolVersion": 1, "agentCapabilities": {"loadSession": False},
                         "agentInfo": {"name": f"xss {TAGS}", "version": "1<script>"}})
        elif method == "session/new":
            answer(rid, {"sessionId": SID})
        elif method == "session/prompt":
            text = prompt_text(params, joiner="")
            if text.startswith("fail"):
                fail(rid, -32603, f"failed {TAGS}")
                continue
            pending = rid
            if text.startswith("wait"):
                chunk(SID, f"waiting {TAGS}")
                continue
            start_turn(params.get("sessionId", SID))
        elif method == "session/cancel":
            if pending is not None:
                answer(pending, {"stopReason": "cancelled"})
                pending = None
        elif rid is not None:
            fail(rid, -32601, f"not here {TAGS}")


if __name__ == "__main__":
    main()
