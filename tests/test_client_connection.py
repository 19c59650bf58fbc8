"""The client's connection to an agent child (acp_bridge.client.connection) and the
stream adapters it reads and writes through (acp_bridge.rpc.transport): lines and the
length guard over a child's stdout, a broken stdin as BrokenPipeError, the agent's
requests served, their failures answered by the one conversion the owner hands the
connection, and our request failing with `AgentGone` when the agent exits before it
answers."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import anyio
import pytest

from acp_bridge.client.connection import AgentConnection
from acp_bridge.errors import AgentGone, ClientServiceError, MethodNotFoundError
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.rpc import StreamLineReader, StreamWriter
from acp_bridge.rpc.protocol import ClientError
from acp_bridge.rpc.transport import TooLong

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

PIPES: dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


async def test_a_childs_stdout_as_lines_with_the_length_guard() -> None:
    code = "import sys; sys.stdout.write('a\\n' + 'x' * 50 + '\\n\\nb\\n' + 'y' * 30 + 'z' * 30 + '\\nc')"
    async with await anyio.open_process(python(code), **PIPES) as proc:
        assert proc.stdout is not None
        lines = [line async for line in StreamLineReader(proc.stdout, max_line=10).lines()]
    assert lines == [b"a", TooLong(50), b"", b"b", TooLong(60), b"c"]


async def test_a_childs_stdin_written_then_broken() -> None:
    async with await anyio.open_process(python("import sys; print(sys.stdin.readline().strip())"), **PIPES) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        writer = StreamWriter(proc.stdin)
        await writer.write(b"hello\n")
        assert (await proc.stdout.receive()).strip() == b"hello"
        await proc.wait()
        with pytest.raises(BrokenPipeError):
            for _ in range(100):  # the pipe's reader is gone: a write fails, soon if not at once
                await writer.write(b"x" * 65536)
        await proc.stdin.aclose()
        with pytest.raises(BrokenPipeError):
            await writer.write(b"after close\n")


# An agent that reads our request, asks the client two things (one fails), sends what
# it read back as a notification, then exits without answering our request.
AGENT = r"""
import json, sys
def send(m): sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
ours = json.loads(sys.stdin.readline())
send({"jsonrpc": "2.0", "id": 1, "method": "fs/read_text_file", "params": {"path": "/x"}})
send({"jsonrpc": "2.0", "id": 2, "method": "terminal/create", "params": {}})
answers = [json.loads(sys.stdin.readline()) for _ in range(2)]
send({"jsonrpc": "2.0", "method": "note", "params": {"ours": ours, "answers": answers}})
"""


async def test_the_agents_requests_are_served_and_ours_fails_when_it_exits() -> None:
    notes: list[Any] = []

    async def serve(method: str, params: dict[str, Any]) -> Any:
        if method == "terminal/create":
            raise ClientServiceError("no terminals here")
        return {"content": f"read {params['path']}"}

    async with await anyio.open_process(python(AGENT), **PIPES) as proc, anyio.create_task_group() as tg:
        conn = AgentConnection(proc, serve, error_for=to_rpc_error, inline={"note": notes.append})
        tg.start_soon(conn.run)
        with anyio.fail_after(10), pytest.raises(AgentGone):
            await conn.request("session/prompt", {"sessionId": "s"})
        with pytest.raises(AgentGone):  # and every request after it
            await conn.request("session/new", {})
        assert await conn.stop(5) == 0
    (note,) = notes
    assert note["ours"] == {"jsonrpc": "2.0", "id": "acp-bridge:1", "method": "session/prompt",
                            "params": {"sessionId": "s"}}
    assert sorted(note["answers"], key=lambda a: a["id"]) == [
        {"jsonrpc": "2.0", "id": 1, "result": {"content": "read /x"}},
        # A failure of the client's services is answered in its words, without data.
        {"jsonrpc": "2.0", "id": 2, "error": {"code": -32603, "message": "no terminals here"}}]


async def test_the_agents_error_answer_is_a_client_error() -> None:
    code = r"""
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32602, "message": "no"}}) + "\n")
    sys.stdout.flush()
"""

    async def serve(method: str, params: dict[str, Any]) -> Any:
        raise MethodNotFoundError(method)

    async with await anyio.open_process(python(code), **PIPES) as proc, anyio.create_task_group() as tg:
        conn = AgentConnection(proc, serve, error_for=to_rpc_error)
        tg.start_soon(conn.run)
        with anyio.fail_after(10), pytest.raises(ClientError) as raised:
            await conn.request("session/new", {})
        assert raised.value.error == {"code": -32602, "message": "no"}
        assert await conn.stop(5) == 0


async def test_an_answer_read_just_before_the_agent_exits_is_returned() -> None:
    # The answer and the end of the agent's output come in one read: the answer counts.
    code = r"""
import json, sys
m = json.loads(sys.stdin.readline())
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {"last": True}}) + "\n")
"""

    async def serve(method: str, params: dict[str, Any]) -> Any:
        raise MethodNotFoundError(method)

    for _ in range(5):
        async with await anyio.open_process(python(code), **PIPES) as proc, anyio.create_task_group() as tg:
            conn = AgentConnection(proc, serve, error_for=to_rpc_error)
            tg.start_soon(conn.run)
            with anyio.fail_after(10):
                assert await conn.request("session/close", {}) == {"last": True}
            assert await conn.stop(5) == 0
