"""The agent driven by the official ACP Python SDK (`agent-client-protocol`) as its
client: initialize, new session, a streamed prompt, cancel, and load on a second
process over the same store.

The SDK parses every message with its own pydantic models (generated from an older
schema than ours), so these tests also show that a stock client understands what the
agent sends. The SDK swallows a notification it cannot parse (it logs and drops it), so
each test counts the raw `session/update` messages with a stream observer and checks
that every one of them reached the client's `session_update` callback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
from acp.connection import StreamDirection, StreamEvent
from acp.interfaces import Agent as SdkAgent
from acp.interfaces import Client as SdkClient
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    ClientCapabilities,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    FileSystemCapabilities,
    Implementation,
    ReadTextFileResponse,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    UsageUpdate,
    UserMessageChunk,
    WriteTextFileResponse,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


class RecordingClient:
    """The client side: records every session/update the SDK delivers, grants every
    permission asked, and serves fs requests from the real file system."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.raw_updates = 0  # session/update messages seen on the wire
        self.asked: list[Any] = []  # the tool calls permission was asked for
        self.fs_calls: list[tuple[str, str]] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append((session_id, update))

    async def request_permission(self, session_id: str, tool_call: Any, options: Any,
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.asked.append(tool_call)
        (allow,) = [o for o in options if o.kind == "allow_once"]
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=allow.option_id))

    async def read_text_file(self, session_id: str, path: str, line: int | None = None, limit: int | None = None,
                             **kwargs: Any) -> ReadTextFileResponse:
        self.fs_calls.append(("read", path))
        return ReadTextFileResponse(content=Path(path).read_text())

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        self.fs_calls.append(("write", path))
        Path(path).write_text(content)
        return WriteTextFileResponse()

    def observe(self, event: StreamEvent) -> None:
        if event.direction is StreamDirection.INCOMING and event.message.get("method") == "session/update":
            self.raw_updates += 1

    def of(self, sid: str, kind: type) -> list[Any]:
        return [u for s, u in self.updates if s == sid and isinstance(u, kind)]

    def texts(self, sid: str, kind: type) -> list[str]:
        out: list[str] = []
        for update in self.of(sid, kind):
            assert isinstance(update.content, TextContentBlock), update
            out.append(update.content.text)
        return out

    async def all_delivered(self) -> None:
        """Every session/update read off the wire reached `session_update` (none was
        dropped by the SDK's validation)."""
        with anyio.move_on_after(2):
            while len(self.updates) < self.raw_updates:
                await anyio.sleep(0.01)
        assert len(self.updates) == self.raw_updates, (
            f"the SDK dropped {self.raw_updates - len(self.updates)} session/update notifications "
            "(see the 'Unhandled error while handling notification' log records)")


def agent_command(store: Path, model: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "acp_bridge", "--store", str(store), "--model", model)


def spawn(client: RecordingClient, store: Path, model: str = "echo") -> Any:
    def to_client(_agent: SdkAgent) -> SdkClient:
        return client  # type: ignore[return-value]  # a structural subset of the Client protocol

    return spawn_agent_process(to_client, *agent_command(store, model), observers=[client.observe])


def no_sdk_errors(caplog: pytest.LogCaptureFixture) -> None:
    errors = [r.getMessage() + (f": {r.exc_info[1]!r}" if r.exc_info else "")
              for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


async def initialize(conn: Any, caps: ClientCapabilities | None = None) -> None:
    init = await conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=caps or ClientCapabilities(),
                                 client_info=Implementation(name="sdk-test", version="0"))
    assert init.protocol_version == 1
    assert init.agent_capabilities is not None and init.agent_capabilities.load_session is True


async def test_sdk_prompt_then_load_in_a_second_process(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    store, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    first = RecordingClient()
    with anyio.fail_after(15):
        async with spawn(first, store) as (conn, process):
            await initialize(conn)
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            sid = session.session_id
            answer = await conn.prompt(session_id=sid, prompt=[text_block("hello from the sdk")])
            assert answer.stop_reason == "end_turn"
            await first.all_delivered()
            assert first.texts(sid, AgentMessageChunk) == ["hello ", "from ", "the ", "sdk"]
            assert first.of(sid, UserMessageChunk) == []  # the user's own words are not echoed live
            (usage,) = first.of(sid, UsageUpdate)
            assert usage.size == 1_000_000
            await conn.set_session_mode(session_id=sid, mode_id="accept_edits")
            listed = await conn.list_sessions()
            assert [s.session_id for s in listed.sessions] == [sid]
            await first.all_delivered()
            assert [u.current_mode_id for u in first.of(sid, CurrentModeUpdate)] == ["accept_edits"]
            (options,) = first.of(sid, ConfigOptionUpdate)
            assert options.config_options[0].current_value == "accept_edits"
        assert process.returncode == 0

        second = RecordingClient()
        async with spawn(second, store) as (conn, process):
            await initialize(conn)
            loaded = await conn.load_session(cwd=str(work), session_id=sid, mcp_servers=[])
            await second.all_delivered()
            assert second.texts(sid, UserMessageChunk) == ["hello from the sdk"]
            assert second.texts(sid, AgentMessageChunk) == ["hello ", "from ", "the ", "sdk"]
            meta = loaded.field_meta or {}
            assert meta["acpBridge"]["turns"] == 1
            # The loaded session takes another turn.
            again = await conn.prompt(session_id=sid, prompt=[text_block("once more")])
            assert again.stop_reason == "end_turn"
            assert (again.field_meta or {})["acpBridge"]["turn"] == 2
            await second.all_delivered()
        assert process.returncode == 0
    no_sdk_errors(caplog)


async def test_sdk_cancel_settles_the_prompt_as_cancelled(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    script = tmp_path / "script.json"
    script.write_bytes(orjson.dumps({"steps": [{"text": "a b", "hang": True}]}))
    work = tmp_path / "work"
    work.mkdir()
    client = RecordingClient()
    answers: list[Any] = []
    with anyio.fail_after(15):
        async with spawn(client, tmp_path / "store", f"script:{script}") as (conn, process):
            await initialize(conn)
            sid = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id

            async def run_prompt() -> None:
                answers.append(await conn.prompt(session_id=sid, prompt=[text_block("go")]))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run_prompt)
                while len(client.of(sid, AgentMessageChunk)) < 2:  # "a ", "b ": the model now hangs
                    await anyio.sleep(0.01)
                assert answers == []
                await conn.cancel(session_id=sid)
            (answer,) = answers
            assert answer.stop_reason == "cancelled"
            assert (answer.field_meta or {})["acpBridge"]["reason"]["kind"] == "cancelled"
            await client.all_delivered()
            # The SDK's models take the note that ends a cancelled turn as any chunk.
            assert client.texts(sid, AgentMessageChunk) == [
                "a ", "b", "\n\n[This turn was cancelled: it was stopped before it finished.]"]
        assert process.returncode == 0
    no_sdk_errors(caplog)


async def test_sdk_tool_calls_with_permission_and_client_fs(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("one\ntwo\n")
    script = tmp_path / "script.json"
    script.write_bytes(orjson.dumps({"steps": [
        {"text": "Reading.", "toolCalls": [
            {"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}},
            {"id": "w1", "name": "write_file", "arguments": {"path": "out.txt", "content": "hi\n"}}]},
        {"text": "Done."},
    ]}))
    client = RecordingClient()
    caps = ClientCapabilities(fs=FileSystemCapabilities(read_text_file=True, write_text_file=True))
    with anyio.fail_after(15):
        async with spawn(client, tmp_path / "store", f"script:{script}") as (conn, process):
            await initialize(conn, caps)
            sid = (await conn.new_session(cwd=str(work), mcp_servers=[])).session_id
            answer = await conn.prompt(session_id=sid, prompt=[text_block("go")])
            assert answer.stop_reason == "end_turn"
            await client.all_delivered()
        assert process.returncode == 0
    assert (work / "out.txt").read_text() == "hi\n"
    assert client.fs_calls == [("read", str(work / "notes.txt")), ("write", str(work / "out.txt"))]
    assert [c.tool_call_id for c in client.asked] == ["w1"]
    starts = {u.tool_call_id: u for u in client.of(sid, ToolCallStart)}
    assert set(starts) == {"r1", "w1"}
    assert starts["r1"].kind == "read" and starts["w1"].kind == "edit"
    assert all(u.status == "pending" for u in starts.values())
    final = {u.tool_call_id: u.status for u in client.of(sid, ToolCallProgress) if u.status is not None}
    assert final == {"r1": "completed", "w1": "completed"}
    assert client.texts(sid, AgentMessageChunk) == ["Reading.", "Done."]
    no_sdk_errors(caplog)
