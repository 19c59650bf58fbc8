"""`acp-bridge demo`: the durable session log at work, crash included.

A child process records a conversation through the real JSONL store and is killed
with SIGKILL in the middle of a tool call; a fresh owner then loads the session,
repairs the interrupted turn, and carries on. Everything runs locally: no network, no
keys. (The full ACP demo through the stdio agent replaces this once the server lands.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from session import SessionStore, check_invariants, derive_messages, open_backend

# The child: one finished turn, then a turn that stops inside a running tool call.
_CHILD = r"""
import sys, time
from session import SessionStore, open_backend
store = SessionStore(open_backend("jsonl", sys.argv[1]))
log = store.create(cwd=sys.argv[2])
def turn(n, prompt):
    log.append("turn/start", {"turn": n, "trigger": {"kind": "prompt"}, "mode": "ask", "model": "echo"})
    log.append("user/message", {"turn": n, "content": [{"type": "text", "text": prompt}]})
    log.append("step/start", {"turn": n, "step": 1})
turn(1, "hello durable world")
for word in "hello durable world".split():
    log.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "text", "text": word + " "}})
log.append("assistant/message", {"turn": 1, "step": 1, "content": [{"type": "text", "text": "hello durable world"}],
           "usage": {"inputTokens": 3, "outputTokens": 3}})
log.append("step/end", {"turn": 1, "step": 1})
log.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
turn(2, "run the tests")
call = {"type": "tool-call", "id": "call-1", "name": "run_command", "arguments": '{"command": "pytest"}'}
log.append("assistant/message", {"turn": 2, "step": 1, "content": [{"type": "text", "text": "Running them."}, call]})
log.append("tool/call", {"turn": 2, "step": 1, "callId": "call-1", "name": "run_command",
           "arguments": {"command": "pytest"}, "title": "pytest", "kind": "execute"})
print(log.id, flush=True)   # the tool/call is durable: the "tool" may start now
time.sleep(60)
"""


def _say(text: str = "") -> None:
    print(text, flush=True)


def _show(events: Any, start: int = 0) -> None:
    for event in events[start:]:
        data = event["data"]
        detail = ""
        if event["type"] == "assistant/chunk":
            detail = repr(data["chunk"]["text"])
        elif event["type"] == "tool/result":
            detail = f"{data['callId']} error={data['isError']}: {data['content'][0]['text']}"
        elif event["type"] == "turn/end":
            detail = str(data["reason"])
        elif event["type"] == "user/message":
            detail = repr(data["content"][0]["text"])
        _say(f"  {event['seq']:>3}  {event['type']:<18} turn {data['turn']}  {detail}")


def run(store_dir: str | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="acp-bridge-demo-") as tmp:
        root = Path(store_dir or tmp) / "store"
        _say(f"acp-bridge demo: a session log in {root}\n")
        _say("1. A child process records a finished turn, then starts a tool call.")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(root), os.getcwd()],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert child.stdout is not None
        sid = child.stdout.readline().strip()
        if not sid:
            _say("   the child failed to start")
            return 1
        _say(f"   session {sid}: the tool call is on disk; the tool is 'running'.\n")
        _say(f"2. kill -9 {child.pid} (no shutdown, no flush, no goodbye).")
        child.send_signal(signal.SIGKILL)
        child.wait()
        _say(f"   exit status {child.returncode}\n")

        store = SessionStore(open_backend("jsonl", root))
        _say("3. A new owner loads the session. Repair closes the interrupted turn:")
        loaded = store.load(sid)
        log, report = loaded.log, loaded.report
        before = len(log.events) - report.closers
        _show(log.events)
        _say(f"\n   repair report: {report.to_meta()}")
        _say(f"   the first {before} events are exactly what the child wrote; the last "
             f"{report.closers} close turn {report.interrupted_turn}.\n")

        _say("4. The model transcript is valid again (every tool call has a result):")
        for message in derive_messages(log.events):
            _say(f"   {message['role']:<9} {str(message['content'])[:90]}")
        _say("\n5. The conversation goes on with turn 3, and reloads without repair:")
        n = log.tracker.turn + 1
        log.append("turn/start", {"turn": n, "trigger": {"kind": "prompt"}})
        log.append("user/message", {"turn": n, "content": [{"type": "text", "text": "what happened?"}]})
        log.append("turn/end", {"turn": n, "reason": {"kind": "completed"}})
        log.close()
        again = store.load(sid)
        check_invariants(again.log.events, closed=True)
        _show(again.log.events, start=len(again.log.events) - 3)
        _say(f"   repaired on this load: {again.report.repaired}")
        again.log.close()
        _say("\nDone: nothing acknowledged was lost, and the crashed turn is kept and closed.")
    return 0
