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

import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson

from acp_bridge.cli.safe_text import clean
from acp_bridge.client.connection import AgentConnection
from acp_bridge.errors import AgentGone
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.rpc.protocol import ClientError

EXIT_WAIT = 10.0  # seconds the agent gets to exit after its stdin closes


class _Agent:
    """One agent process and the client connection to it (the demo needs no more)."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.proc = process
        self.conn = AgentConnection(process, self._permission, error_for=to_rpc_error,
                                    inline={"session/update": self._update})

    @staticmethod
    def _update(params: Any) -> None:
        _show_update(params["update"])

    @staticmethod
    async def _permission(method: str, params: dict[str, Any]) -> Any:
        _end_line()
        _say(f"      ? permission asked: {params['toolCall']['title']} -> you choose \"Allow once\"")
        return {"outcome": {"outcome": "selected", "optionId": "allow_once"}}

    async def request(self, method: str, params: dict[str, Any], *, until: Path | None = None) -> Any:
        """Send a request and show what streams back until its answer: its result (or
        its error answer, `{"error": ...}`). With `until`, the agent is killed with
        SIGKILL once that file exists, and None is returned (no answer was sent)."""
        async with anyio.create_task_group() as tg:
            if until is not None:
                tg.start_soon(self._kill_at, until)
            try:
                result: Any = await self.conn.request(method, params)
            except ClientError as exc:
                result = {"error": exc.error}
            except AgentGone:
                result = None
            tg.cancel_scope.cancel()
        if result is None:
            await self.proc.wait()  # killed: its exit status is known
        _end_line()
        return result

    async def _kill_at(self, marker: Path) -> None:
        while not marker.exists():
            await anyio.sleep(0.05)
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()


async def _start(tg: anyio.abc.TaskGroup, store: Path, script: Path, cwd: Path) -> _Agent:
    process = await anyio.open_process(
        [sys.executable, "-m", "acp_bridge", "serve", "--store", str(store), "--model", f"script:{script}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd)
    agent = _Agent(process)
    tg.start_soon(agent.conn.run)
    return agent


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


async def _prompt(agent: _Agent, sid: str, text: str, *, until: Path | None = None) -> None:
    _say(f"    > {text}")
    result = await agent.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]},
                                 until=until)
    if result is not None:
        _say(f"      answer: stopReason={result.get('stopReason')} {result.get('_meta', {}).get('acpBridge')}")


def run(store_dir: str | None = None) -> int:
    return anyio.run(_run, store_dir)


async def _run(store_dir: str | None) -> int:
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

        async with anyio.create_task_group() as tg:
            _say(f"acp-bridge demo (store: {store})\n")
            _say("1. An editor starts the agent and opens a session.")
            agent = await _start(tg, store, first, work)
            await agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            new = await agent.request("session/new", {"cwd": str(work), "mcpServers": []})
            sid = new["sessionId"]
            _say(f"    session {sid}\n")
            _say("2. A plain answer, streamed word by word:")
            await _prompt(agent, sid, "hi")
            _say("\n3. A tool call that needs your permission:")
            await _prompt(agent, sid, "write down what you are")
            _say(f"    NOTES.md now says: {(work / 'NOTES.md').read_text().splitlines()[-1]!r}\n")
            _say("4. A long command starts... and the agent is killed with SIGKILL mid-command.")
            await _prompt(agent, sid, "run the tests", until=marker)
            _say(f"    agent {agent.proc.pid} killed (exit status {agent.proc.returncode}); no answer was sent.\n")
            await anyio.sleep(0.1)

            _say("5. The editor starts a new agent and loads the session; it replays everything:")
            agent = await _start(tg, store, second, work)
            await agent.request("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
            loaded = await agent.request("session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []})
            assert loaded is not None and "error" not in loaded, loaded
            repair = loaded["_meta"]["acpBridge"]["repair"]
            _say(f"\n    repair report: {repair}")
            _say("    The interrupted turn is kept and closed: its command is marked failed (it may have run).\n")
            _say("6. And the conversation goes on:")
            await _prompt(agent, sid, "what happened?")
            code = await agent.conn.stop(EXIT_WAIT)
            _say(f"\nDone: the agent exited with {code}. Nothing acknowledged was lost.")
            if store_dir is None:
                _say("The store was a temporary folder, now removed; to keep one and read the session "
                     "after: acp-bridge demo --store DIR, then acp-bridge sessions show ID --store DIR/store")
            else:
                _say(f"Read it again: acp-bridge sessions show {sid} --store {shlex.quote(str(store.absolute()))}")
    return 0
