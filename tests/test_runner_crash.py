"""A real process running a scripted turn is killed with SIGKILL while its tool runs;
loading the log closes the turn with "started" results (DESIGN.md section 2)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from session import SessionStore, check_invariants, derive_messages
from session.backends.jsonl import JsonlBackend
from session.transcript import unanswered_calls
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

# A process running a scripted two-turn session whose second turn runs a command;
# argv: backend kind, store dir, session cwd, script path. Also used by test_sessions_cli.
CHILD = r"""
import sys, anyio
from acp_bridge.models.script import ScriptModel
from acp_bridge.agent.runner import TurnRunner
from acp_bridge.tools.base import PermissionOutcome
from tests.support.services import ScriptedClient
from session import SessionStore, open_backend

kind, store_dir, work, steps = sys.argv[1:5]
log = SessionStore(open_backend(kind, store_dir)).create(cwd=work)
print(log.id, flush=True)

async def main():
    async with anyio.create_task_group() as tg:
        services = ScriptedClient(task_group=tg,
                                 permission_answer=lambda r: PermissionOutcome("selected", "allow_once"))
        runner = TurnRunner(log, ScriptModel.from_file(steps), services)
        await runner.prompt([{"type": "text", "text": "first"}])
        await runner.prompt([{"type": "text", "text": "run the slow thing"}])

anyio.run(main)
"""


def test_kill_9_mid_tool_then_load(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "started"
    steps = tmp_path / "steps.json"
    steps.write_bytes(orjson.dumps({"steps": [
        {"text": "hello"},
        {"text": "running both", "toolCalls": [
            {"id": "slow", "name": "run_command", "arguments": {"command": f"touch {marker}; sleep 20"}},
            {"id": "after", "name": "read_file", "arguments": {"path": "started"}},
        ]},
        {"text": "never reached"},
    ]}))
    child = subprocess.Popen([sys.executable, "-c", CHILD, "jsonl", str(tmp_path / "store"), str(work), str(steps)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        sid = child.stdout.readline().strip()
        wait_until(lambda: marker.exists() or child.poll() is not None, "the tool's start", timeout=20)
        assert child.poll() is None, "the child died early"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    store = SessionStore(JsonlBackend(tmp_path / "store"))
    loaded = store.load(sid)
    events = list(loaded.log.events)
    report = loaded.report
    assert report.interrupted_turn == 2
    assert report.synthetic_results == 2
    closers = events[-report.closers:]
    assert [e["type"] for e in closers] == ["tool/result", "tool/result", "step/end", "turn/end"]
    slow, after = closers[0]["data"], closers[1]["data"]
    assert slow["callId"] == "slow" and "may have run" in slow["content"][0]["text"]
    assert after["callId"] == "after" and "did not run" in after["content"][0]["text"]
    assert closers[-1]["data"]["reason"] == {"kind": "interrupted", "cause": "crash"}
    # The first turn is intact, and the tool/call of the running command was on disk.
    assert [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"] == ["completed", "interrupted"]
    assert any(e["type"] == "tool/call" and e["data"]["callId"] == "slow" for e in events)
    check_invariants(events, closed=True)
    assert unanswered_calls(derive_messages(events)) == []
    loaded.log.close()
