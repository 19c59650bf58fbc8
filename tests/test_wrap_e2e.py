"""`acp-bridge wrap -- acp-bridge serve`: our own agent, wrapped, as the editor sees it.

Each scenario runs twice with the same `script:` model: against `serve` alone and
through the wrapper. The editor's traffic through the wrapper is validated against the
ACP schema (the harness) and pinned by a snapshot; its prompt answers are those of
`serve` alone (settled by the wrapper from its own log); the log the wrapper wrote
passes the invariants, closed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from session import SessionStore, check_invariants, open_backend
from tests.support.acp_client import (
    CLIENT_CAPS_ALL,
    FS_AND_TERMINAL_STEP,
    WRITE_STEP,
    WRITE_TWICE_STEPS,
    AgentProcess,
    ClientPolicy,
    normalized,
    write_script,
)
from tests.support.wrapped import WrappedProcess, serve_command

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

Scenario = Callable[[AgentProcess, Path], Awaitable[list[dict[str, Any]]]]


def stored(store: Path, backend: str = "jsonl") -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(header, events) of every session in `store`, loaded (and so checked) as a load does."""
    sessions = SessionStore(open_backend(backend, store))
    try:
        out = []
        for summary in sessions.list():
            loaded = sessions.load(summary["id"])
            out.append((dict(loaded.log.header), [dict(e) for e in loaded.log.events]))
            loaded.log.close()
        return out
    finally:
        sessions.close()


async def both(tmp_path: Path, model: str, scenario: Scenario, *, caps: dict[str, Any] | None = None,
               permissions: tuple[str | None, ...] = (), serve_args: tuple[str, ...] = (),
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], WrappedProcess]:
    """The scenario's raw prompt answers from `serve` alone and through the wrapper."""
    alone_work, wrapped_work = tmp_path / "alone", tmp_path / "work"
    for folder in (alone_work, wrapped_work):
        folder.mkdir()
        (folder / "notes.txt").write_text("one\ntwo\n")
    async with AgentProcess(tmp_path / "alone-store", model=model, args=serve_args,
                            policy=ClientPolicy(permissions=list(permissions))) as alone:
        await alone.initialize(caps)
        expected = await scenario(alone, alone_work)
    child = serve_command(tmp_path / "inner-store", model, args=serve_args)
    wrapped = WrappedProcess(tmp_path / "store", child, policy=ClientPolicy(permissions=list(permissions)))
    async with wrapped:
        init = await wrapped.initialize(caps)
        assert init["agentCapabilities"]["loadSession"] is True
        assert init["_meta"]["acpBridge"]["wrapped"]["agentInfo"]["name"] == "acp-bridge"
        got = await scenario(wrapped, wrapped_work)
    assert wrapped.returncode == 0
    ((header, events),) = stored(tmp_path / "store")
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    assert header["wrapped"]["command"] == child
    return expected, got, wrapped


async def prompts(agent: AgentProcess, work: Path, *texts: str) -> list[dict[str, Any]]:
    sid = await agent.new_session(work)
    return [await agent.request_raw("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": t}]})
            for t in texts]


def results(answers: list[dict[str, Any]]) -> list[Any]:
    return [a.get("result", a.get("error")) for a in answers]


async def test_text_and_thoughts(tmp_path: Path, snapshot_json: Any) -> None:
    model = write_script(tmp_path / "script.json", {"thinking": "Let me think.", "text": "Two words."},
                         {"text": "And again."})
    expected, got, wrapped = await both(tmp_path, model, lambda a, w: prompts(a, w, "hello", "more"))
    assert results(got) == results(expected)
    assert [r["stopReason"] for r in results(got)] == ["end_turn", "end_turn"]
    kinds = [u["update"]["sessionUpdate"] for u in wrapped.updates]
    assert "agent_thought_chunk" in kinds and "agent_message_chunk" in kinds
    ((_, events),) = stored(tmp_path / "store")
    chunks = [(e["data"]["chunk"]["type"], e["data"]["chunk"]["text"]) for e in events if e["type"] == "assistant/chunk"]
    assert ("reasoning", "Let ") in chunks and ("text", "Two ") in chunks
    assert normalized(wrapped.transcript, tmp_path / "work", tmp_path) == snapshot_json


async def test_tool_call_permission_granted_and_rejected(tmp_path: Path, snapshot_json: Any) -> None:
    model = write_script(tmp_path / "script.json", *WRITE_TWICE_STEPS)
    expected, got, wrapped = await both(tmp_path, model, lambda a, w: prompts(a, w, "write it", "write another"),
                                        permissions=("allow_once", "reject_once"))
    assert results(got) == results(expected)
    assert (tmp_path / "work" / "out.txt").read_text() == "hi\n"
    assert not (tmp_path / "work" / "no.txt").exists()
    ((_, events),) = stored(tmp_path / "store")
    outcomes = {e["data"]["callId"]: (e["data"]["isError"], e["data"].get("permission"))
                for e in events if e["type"] == "tool/result"}
    assert outcomes["w1"][0] is False and outcomes["w2"][0] is True
    assert outcomes["w1"][1] == {"outcome": "selected", "optionId": "allow_once"}
    assert outcomes["w2"][1] == {"outcome": "selected", "optionId": "reject_once"}
    assert normalized(wrapped.transcript, tmp_path / "work", tmp_path) == snapshot_json


async def test_client_fs_and_terminal_served_by_the_editor(tmp_path: Path, snapshot_json: Any) -> None:
    model = write_script(
        tmp_path / "script.json",
        FS_AND_TERMINAL_STEP,
        {"text": "done"},
    )
    expected, got, wrapped = await both(tmp_path, model, lambda a, w: prompts(a, w, "go"), caps=CLIENT_CAPS_ALL,
                                        permissions=("allow_once", "allow_once"))
    assert results(got) == results(expected)
    notes = str(tmp_path / "work" / "notes.txt")
    assert ("fs/read_text_file", notes) in wrapped.policy.fs_calls
    assert ("fs/write_text_file", notes) in wrapped.policy.fs_calls
    assert (tmp_path / "work" / "notes.txt").read_text() == "one\n2\n"
    (term,) = wrapped.policy.terminals.values()
    assert term["params"]["args"] == ["-c", "cat notes.txt"] and term["released"]
    # The child's requests reached the editor with our ids, never the child's.
    asked = [m for d, m in wrapped.transcript if d == "<-" and "method" in m and "id" in m]
    assert asked and all(str(m["id"]).startswith("acp-bridge:") for m in asked)
    assert normalized(wrapped.transcript, tmp_path / "work", tmp_path) == snapshot_json


async def cancel_scenario(agent: AgentProcess, work: Path) -> list[dict[str, Any]]:
    sid = await agent.new_session(work)
    async with anyio.create_task_group() as tg:
        answer = agent.prompt_soon(tg, sid, "wait")
        # Every word streamed before the hang, so the wire's order is the same each run.
        await agent.wait_for(lambda: sum(u["update"]["sessionUpdate"] == "agent_message_chunk"
                                         for u in agent.updates) == 3)
        await agent.notify("session/cancel", {"sessionId": sid})
    return [answer]


async def test_cancel(tmp_path: Path, snapshot_json: Any) -> None:
    model = write_script(tmp_path / "script.json", {"text": "working on it", "hang": True})
    expected, got, wrapped = await both(tmp_path, model, cancel_scenario)
    assert results(got) == results(expected)
    assert results(got)[0]["_meta"]["acpBridge"]["reason"] == {"kind": "cancelled", "by": "session/cancel"}
    assert normalized(wrapped.transcript, tmp_path / "work", tmp_path) == snapshot_json


async def test_error_step(tmp_path: Path, snapshot_json: Any) -> None:
    model = write_script(tmp_path / "script.json", {"text": "about to", "error": {"message": "boom", "code": "provider"}},
                         {"text": "recovered"})
    expected, got, wrapped = await both(tmp_path, model, lambda a, w: prompts(a, w, "fail", "again"))
    (failed, ok), (alone_failed, alone_ok) = got, expected
    assert failed["error"]["code"] == alone_failed["error"]["code"] == -32603
    assert failed["error"]["data"]["code"] == "provider" and failed["error"]["data"]["turn"] == 1
    assert failed["error"]["message"] == alone_failed["error"]["message"] == "turn failed: boom"
    assert ok["result"] == alone_ok["result"]
    ((_, events),) = stored(tmp_path / "store")
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert ends[0]["kind"] == "error" and ends[0]["code"] == "provider" and ends[1] == {"kind": "completed"}
    assert normalized(wrapped.transcript, tmp_path / "work", tmp_path) == snapshot_json


async def test_max_steps(tmp_path: Path, snapshot_json: Any) -> None:
    model = write_script(tmp_path / "script.json",
                         {"toolCalls": [{"id": "l1", "name": "list_dir", "arguments": {"path": "."}}]},
                         {"text": "never reached"})
    expected, got, wrapped = await both(tmp_path, model, lambda a, w: prompts(a, w, "loop"),
                                        serve_args=("--max-steps", "1"))
    (answer,), (alone,) = results(got), results(expected)
    assert answer["stopReason"] == alone["stopReason"] == "max_turn_requests"
    # The wrapped agent's answer names no limit (ACP has no field for it).
    assert answer["_meta"]["acpBridge"] == {"turn": 1, "reason": {"kind": "max_steps", "limit": None}}
    assert normalized(wrapped.transcript, tmp_path / "work", tmp_path) == snapshot_json


async def test_a_permission_answered_cancelled_is_recorded_as_that_answer(tmp_path: Path) -> None:
    # The editor ends the turn by answering the permission `cancelled`, with no
    # session/cancel: the wrapper records that cause, as serve alone does.
    model = write_script(tmp_path / "script.json", WRITE_STEP, {"text": "next"})
    expected, got, _ = await both(tmp_path, model, lambda a, w: prompts(a, w, "write it"), permissions=(None,))
    reason = {"kind": "cancelled", "by": "session/request_permission"}
    assert results(expected)[0]["_meta"]["acpBridge"]["reason"] == reason
    assert results(got) == results(expected)
