"""`acp-bridge demo`: a scripted session end to end through the real stdio agent.

It plays the editor: launches `acp-bridge serve` with a scripted model (no network, no
keys), chats, grants a permission, kills the agent with SIGKILL in the middle of a
running command, starts a new agent on the same store, loads the session (the
interrupted turn comes back closed, not dropped) and carries on. Everything it prints
is what a person would see in their editor, plus what happens underneath. What the agent
sends is untrusted text: every line is printed with its control characters escaped
(`_say`, `_show_update`), so the demo is safe to point at any model.
"""

from __future__ import annotations

import itertools
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from acp_bridge.cli.safe_text import clean
from acp_bridge.rpc.protocol import own_request_id


class _Agent:
    """A blocking, minimal ACP client around one agent process (the demo needs no more)."""

    def __init__(self, store: Path, script: Path, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "acp_bridge", "serve", "--store", str(store), "--model", f"script:{script}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd,
        )
        self._ids = itertools.count(1)
        self._buffer = b""
        self.marker: Path | None = None  # when set, stop waiting once this file exists

    def _line(self) -> bytes | None:
        """The next line from the agent, or None if the marker appeared first."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            if self.marker is not None and self.marker.exists():
                return None
            ready, _, _ = select.select([fd], [], [], 0.05)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise RuntimeError("the agent exited")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(orjson.dumps(message) + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """Send a request and show what streams back until its answer (None if the
        marker appeared first)."""
        rid = own_request_id(next(self._ids))
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            line = self._line()
            if line is None:
                _end_line()
                return None
            message = orjson.loads(line)
            if message.get("id") == rid and "method" not in message:
                _end_line()
                return dict(message)
            if message.get("method") == "session/update":
                _show_update(message["params"]["update"])
            elif message.get("method") == "session/request_permission":
                call = message["params"]["toolCall"]
                _end_line()
                _say(f"      ? permission asked: {call['title']} -> you choose \"Allow once\"")
                self._send({"jsonrpc": "2.0", "id": message["id"],
                            "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}})

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=10)


_inline: list[str] = []  # the kind of chunk being printed on the current line, if any


def _say(text: str = "") -> None:
    _end_line()
    print(clean(text), flush=True)


def _end_line() -> None:
    if _inline:
        _inline.clear()
        print(flush=True)


def _show_update(update: dict[str, Any]) -> None:
    kind = update["sessionUpdate"]
    if kind in ("agent_message_chunk", "user_message_chunk", "agent_thought_chunk"):
        # Chunks of one message share a line, as an editor shows them.
        if _inline != [kind]:
            _end_line()
            who = {"agent_message_chunk": "agent", "user_message_chunk": "you", "agent_thought_chunk": "thinks"}
            print(f"      {who[kind]:>6}: ", end="")
            _inline.append(kind)
        print(clean(str(update["content"].get("text", ""))), end="", flush=True)
    elif kind == "tool_call":
        _say(f"      tool  : {update['title']} [{update.get('status')}]")
    elif kind == "tool_call_update" and update.get("status") in ("completed", "failed"):
        text = ""
        for block in update.get("content") or []:
            inner = block.get("content", {}) if block.get("type") == "content" else {}
            text = text or inner.get("text", "")
        first = text.strip().splitlines()[0] if text.strip() else ""
        _say(f"      tool  : {update['toolCallId']} {update['status']}{': ' + first if first else ''}")
    elif kind == "session_info_update":
        _say(f"      title : {update.get('title')}")


def _prompt(agent: _Agent, sid: str, text: str) -> dict[str, Any] | None:
    _say(f"    > {text}")
    answer = agent.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
    if answer is not None:
        result = answer.get("result", {})
        _say(f"      answer: stopReason={result.get('stopReason')} {result.get('_meta', {}).get('acpBridge')}")
    return answer


def run(store_dir: str | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="acp-bridge-demo-") as tmp:
        base = Path(store_dir or tmp)
        store, work = base / "store", base / "project"
        work.mkdir(parents=True, exist_ok=True)
        marker = work / ".tests-started"
        first = base / "model-1.json"
        first.write_bytes(orjson.dumps({"steps": [
            {"text": "Hello! I keep a durable log of everything we do."},
            {"text": "I'll write the notes.", "toolCalls": [{"id": "write-1", "name": "write_file", "arguments": {
                "path": "NOTES.md", "content": "# Notes\n\nacp-bridge never loses an acknowledged turn.\n"}}]},
            {"text": "Written."},
            {"text": "Running the test suite.", "toolCalls": [{"id": "tests-1", "name": "run_command", "arguments": {
                "command": f"touch {marker.name} && sleep 10"}}]},
        ]}))
        second = base / "model-2.json"
        second.write_bytes(orjson.dumps({"steps": [
            {"text": "The last run was interrupted by a crash; the log shows it. Shall I rerun the tests?"}]}))

        _say(f"acp-bridge demo (store: {store})\n")
        _say("1. An editor starts the agent and opens a session.")
        agent = _Agent(store, first, work)
        agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        new = agent.request("session/new", {"cwd": str(work), "mcpServers": []})
        assert new is not None
        sid = new["result"]["sessionId"]
        _say(f"    session {sid}\n")
        _say("2. A plain answer, streamed word by word:")
        _prompt(agent, sid, "hi")
        _say("\n3. A tool call that needs your permission:")
        _prompt(agent, sid, "write down what you are")
        _say(f"    NOTES.md now says: {(work / 'NOTES.md').read_text().splitlines()[-1]!r}\n")
        _say("4. A long command starts... and the agent is killed with SIGKILL mid-command.")
        agent.marker = marker
        _prompt(agent, sid, "run the tests")
        agent.proc.send_signal(signal.SIGKILL)
        agent.proc.wait()
        _say(f"    agent {agent.proc.pid} killed (exit status {agent.proc.returncode}); no answer was sent.\n")
        time.sleep(0.1)

        _say("5. The editor starts a new agent and loads the session; it replays everything:")
        agent = _Agent(store, second, work)
        agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        loaded = agent.request("session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []})
        assert loaded is not None and "result" in loaded, loaded
        repair = loaded["result"]["_meta"]["acpBridge"]["repair"]
        _say(f"\n    repair report: {repair}")
        _say("    The interrupted turn is kept and closed: its command is marked failed (it may have run).\n")
        _say("6. And the conversation goes on:")
        _prompt(agent, sid, "what happened?")
        code = agent.close()
        _say(f"\nDone: the agent exited with {code}. Nothing acknowledged was lost.")
    return 0
