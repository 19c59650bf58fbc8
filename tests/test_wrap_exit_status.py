"""The error of a request the wrapped agent owed when it died names its exit status,
even when its stdout ends before its exit is seen (the race that made
test_wrap_switch's failed switch answer `status: None` now and then)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.acp_client import AgentError
from tests.support.wrapped import WrappedProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

# Answers initialize, then at the next request closes its stdout and exits 3 a little
# later: the EOF always comes first.
CLOSES_THEN_EXITS = """
import json, os, sys, time
line = sys.stdin.readline()
ask = json.loads(line)
print(json.dumps({"jsonrpc": "2.0", "id": ask["id"], "result": {"protocolVersion": 1,
      "agentCapabilities": {}, "authMethods": []}}), flush=True)
sys.stdin.readline()
os.close(1)
time.sleep(0.25)  # what is tested: an agent that closes its stdout, then exits a while later
sys.exit(3)
"""


async def test_a_child_that_closes_its_stdout_then_exits_is_named_with_its_status(tmp_path: Path) -> None:
    child = [sys.executable, "-c", CLOSES_THEN_EXITS]
    work = tmp_path / "work"
    work.mkdir()
    async with WrappedProcess(tmp_path / "store", child) as agent:
        await agent.initialize()
        with pytest.raises(AgentError) as failed:
            await agent.request("session/new", {"cwd": str(work), "mcpServers": []})
        assert failed.value.code == -32603
        assert failed.value.data == {"code": "agent_exited", "status": 3}, failed.value.data
