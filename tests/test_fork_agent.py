"""`session/fork` on our agent, over stdio (docs/protocol.md, "Fork"): the capability,
the request and answer checked against the vendored unstable schema (the harness
validates every message: tests/support/acp_schema.py, UNSTABLE_METHODS), the turns a
fork holds (all, or up to `_meta.acpBridge.atTurn`) as the model sees them, its header,
the original untouched, the fork loaded, replayed and continued in another process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from session import open_backend
from session.backends.base import read_stored
from tests.support.acp_client import AgentError, AgentProcess
from tests.support.acp_schema import validate_def
from tests.support.logs import loaded_events
from tests.support.sse_server import SSEServer, text_reply

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


def stored(store: Path, sid: str) -> list[Any]:
    backend = open_backend("jsonl", store)
    try:
        return list(read_stored(backend.read_stream(sid)).events)
    finally:
        backend.close()


def header_of(store: Path, sid: str) -> dict[str, Any]:
    backend = open_backend("jsonl", store)
    try:
        stream = backend.read_stream(sid)
        stream.close()
        return dict(stream.header)
    finally:
        backend.close()


def user_texts(body: dict[str, Any]) -> list[str]:
    """The user messages of a Chat Completions request, in order."""
    return [m["content"] if isinstance(m["content"], str) else "".join(p.get("text", "") for p in m["content"])
            for m in body["messages"] if m["role"] == "user"]


async def fork(agent: AgentProcess, sid: str, work: Path, **ours: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"sessionId": sid, "cwd": str(work), "mcpServers": []}
    if ours:
        params["_meta"] = {"acpBridge": ours}
    result = await agent.request("session/fork", params)
    assert isinstance(result, dict)
    return result



def history(agent: AgentProcess, sid: str) -> list[dict[str, Any]]:
    """The session's updates but the commands it is offered once it is open (after the
    answer of a fork, before a load's: docs/protocol.md, "Slash commands")."""
    return history_of(agent.updates_of(sid))


def history_of(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [u for u in updates if u["sessionUpdate"] != "available_commands_update"]


async def test_our_agent_offers_fork_in_the_unstable_schema(tmp_path: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        answer = await agent.initialize()
    assert answer["agentCapabilities"]["sessionCapabilities"]["fork"] == {}
    validate_def("InitializeResponse", answer, unstable=True)


async def test_a_fork_holds_the_turns_and_goes_on_apart(
        tmp_path: Path, work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fork")
    with SSEServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        server.push(*(text_reply(f"answer {n}") for n in range(1, 7)))
        async with AgentProcess(store, model="openai:gpt-4o") as agent:
            await agent.initialize()
            sid = await agent.new_session(work)
            await agent.prompt(sid, "first question")
            await agent.prompt(sid, "second question")
            before = stored(store, sid)
            whole = await fork(agent, sid, work)
            forked = whole["sessionId"]
            assert forked != sid
            ours = whole["_meta"]["acpBridge"]
            assert ours["forkedFrom"] == {"sessionId": sid, "turn": 2}
            assert (ours["turns"], ours["events"], ours["repair"]["repaired"]) == (2, len(before), False)
            assert {o["id"] for o in whole["configOptions"]} >= {"model", "mode"}
            assert not history(agent, forked)  # no replay unless asked
            # The fork goes on with the original's turns as its context; the original too, apart.
            assert (await agent.prompt(forked, "in the fork"))["_meta"]["acpBridge"]["turn"] == 3
            assert (await agent.prompt(sid, "in the original"))["_meta"]["acpBridge"]["turn"] == 3
            first = await fork(agent, sid, work, atTurn=1)
            assert first["_meta"]["acpBridge"]["forkedFrom"] == {"sessionId": sid, "turn": 1}
            assert (await agent.prompt(first["sessionId"], "after turn one"))["_meta"]["acpBridge"]["turn"] == 2
            with pytest.raises(AgentError) as past:
                await fork(agent, sid, work, atTurn=9)
            assert past.value.code == -32602 and past.value.data == {
                "code": "fork_turn", "sessionId": sid, "turn": 9, "turns": 3, "field": "_meta.acpBridge.atTurn"}
            with pytest.raises(AgentError) as missing:
                await fork(agent, "00000000-0000-4000-8000-000000000000", work)
            assert missing.value.code == -32002
        seen = [user_texts(r.json) for r in server.requests]
    assert seen[2] == ["first question", "second question", "in the fork"]
    assert seen[3] == ["first question", "second question", "in the original"]
    assert seen[4] == ["first question", "after turn one"]
    assert stored(store, sid)[: len(before)] == before  # the original: what it had, then its own turn 3
    header = header_of(store, forked)
    assert header["forkedFrom"] == {"sessionId": sid, "turn": 2} and header["cwd"] == str(work)
    assert "in the fork" not in str(stored(store, sid))
    # A fork loads and replays like any session, in another process.
    async with AgentProcess(store) as again:
        await again.initialize()
        loaded = await again.load_session(forked, work)
        assert loaded["_meta"]["acpBridge"]["turns"] == 3
        users = ["".join(u["content"]["text"] for u in again.replayed(forked) if u["sessionUpdate"] ==
                         "user_message_chunk" and u["content"]["type"] == "text")]
        assert users == ["first questionsecond questionin the fork"]


async def test_a_fork_can_replay_its_history_before_the_answer(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with AgentProcess(store) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "one two")
        await agent.prompt(sid, "three")
        replayed = await fork(agent, sid, work, replay=True)
        forked = replayed["sessionId"]
        sent = history(agent, forked)  # before the answer: the answer is what `request` waited for
        with pytest.raises(AgentError) as bad:
            await fork(agent, sid, work, replay="yes")
        assert bad.value.code == -32602 and (bad.value.data or {}).get("field") == "_meta.acpBridge.replay"
    async with AgentProcess(store) as again:
        await again.initialize()
        await again.load_session(sid, work)
        original = history_of(again.replayed(sid))
    # The fork's replay is the original's, as a load of it replays it (the commands
    # end a load before its answer, and follow a fork's).
    assert sent == original and any(u["sessionUpdate"] == "user_message_chunk" for u in sent)


async def test_a_fork_of_a_session_another_agent_owns_leaves_it_alone(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with AgentProcess(store) as owner, AgentProcess(store) as other:
        await owner.initialize()
        await other.initialize()
        sid = await owner.new_session(work)
        await owner.prompt(sid, "owned here")
        forked = await fork(other, sid, work)  # read as stored, without the owner's lock
        assert forked["_meta"]["acpBridge"]["turns"] == 1
        assert (await other.prompt(forked["sessionId"], "elsewhere"))["_meta"]["acpBridge"]["turn"] == 2
        assert (await owner.prompt(sid, "still mine"))["_meta"]["acpBridge"]["turn"] == 2
    assert [e["data"]["turn"] for e in loaded_events(store, sid) if e["type"] == "turn/end"] == [1, 2]
