"""End to end over stdio: what the client is told about a tool call that asks for
permission, read as a client applies it (issue 13, "the permission flow tells the
truth"). Every message the agent sends is validated against the ACP schema by the
harness.

A client keeps one status per tool call and sets it from every `tool_call`,
`tool_call_update` and from the `toolCall` of a `session/request_permission` (a
`ToolCallUpdate`). Applied in wire order, a call's status may only move forward:
pending -> in_progress -> completed | failed. DESIGN.md maps a `tool/call` to `pending`
("awaiting approval") and moves it to `in_progress` once it may run: at once, or when
its permission is granted; a call refused goes from `pending` to `failed`. The
permission request's `toolCall` carries no status, so it never moves a call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.acp_client import WRITE_STEP, AgentProcess, ClientPolicy, write_script
from tests.support.cancel_race import (
    check_cancelled_log,
    check_rounds_alike,
    permission_rounds_script,
    prompt_and_cancel_in_one_write,
    race_rounds,
)
from tests.support.logs import loaded_events

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ORDER = {"pending": 0, "in_progress": 1, "completed": 2, "failed": 2}


def status_trail(agent: AgentProcess, call_id: str) -> list[tuple[str, str]]:
    """(where, status) for `call_id`, in wire order, as a client would apply them."""
    return [(where, status) for where, status in agent.call_trail(call_id) if status is not None]


def assert_never_backwards(trail: list[tuple[str, str]]) -> None:
    ranks = [ORDER[status] for _, status in trail]
    assert ranks == sorted(ranks), f"a status moved backwards: {trail}"


@pytest.mark.parametrize(("answer", "expected", "written"), [
    ("allow_once", [("tool_call", "pending"), ("tool_call_update", "in_progress"),
                    ("tool_call_update", "completed")], True),
    ("reject_once", [("tool_call", "pending"), ("tool_call_update", "failed")], False),
])
async def test_a_permission_request_never_moves_a_call_back(tmp_path: Path, work: Path, answer: str,
                                                    expected: list[tuple[str, str]], written: bool) -> None:
    model = write_script(tmp_path / "script.json", WRITE_STEP, {"text": "done"})
    async with AgentProcess(tmp_path / "store", model=model, policy=ClientPolicy(permissions=[answer])) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "write it"))["stopReason"] == "end_turn"
    assert (work / "out.txt").exists() == written
    trail = status_trail(agent, "w1")
    assert trail == expected
    assert_never_backwards(trail)
    assert agent.returncode == 0


async def test_a_permission_answered_cancelled_ends_the_turn_by_that_answer(tmp_path: Path, work: Path) -> None:
    # The client answered the permission request `cancelled` without a session/cancel
    # (ACP's outcome for "the prompt turn was cancelled"): the turn says what ended it.
    model = write_script(tmp_path / "script.json", WRITE_STEP, {"text": "never"}, {"text": "next"})
    store = tmp_path / "store"
    async with AgentProcess(store, model=model, policy=ClientPolicy(permissions=[None])) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        answer = await agent.prompt(sid, "write it")
        assert answer == {"stopReason": "cancelled", "_meta": {"acpBridge": {
            "turn": 1, "reason": {"kind": "cancelled", "by": "session/request_permission"}}}}
        trail = status_trail(agent, "w1")
        assert trail == [("tool_call", "pending"), ("tool_call_update", "failed")]
        assert (await agent.prompt(sid, "go on"))["stopReason"] == "end_turn"
    assert not (work / "out.txt").exists()
    assert agent.returncode == 0
    # The log keeps the cause: a later load reports it (and accepts it as valid).
    async with AgentProcess(store) as later:
        await later.initialize()
        loaded = await later.load_session(sid, work)
        assert loaded["_meta"]["acpBridge"]["repair"]["repaired"] is False
        failed: list[dict[str, Any]] = [u for u in later.updates_of(sid) if u.get("status") == "failed"]
        assert [u["_meta"]["acpBridge"]["permission"] for u in failed] == [{"outcome": "cancelled"}]


async def test_a_session_cancel_during_the_permission_reports_the_call_not_run(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "script.json", WRITE_STEP)
    policy = ClientPolicy(hang_permissions=True)
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            async def go() -> None:
                answer = await agent.prompt(sid, "write it")
                assert answer["_meta"]["acpBridge"]["reason"] == {"kind": "cancelled", "by": "session/cancel"}

            tg.start_soon(go)
            await agent.wait_for(lambda: bool(policy.asked))
            await agent.notify("session/cancel", {"sessionId": sid})
    trail = status_trail(agent, "w1")
    assert trail == [("tool_call", "pending"), ("tool_call_update", "failed")]
    (failed,) = [u for u in agent.updates_of(sid) if u.get("status") == "failed"]
    text = failed["content"][0]["content"]["text"]
    assert "before it ran" in text and "running" not in text
    assert agent.returncode == 0


ROUNDS = 12


@pytest.mark.parametrize("cancel_first", [True, False], ids=["cancel-then-answer", "answer-then-cancel"])
@pytest.mark.parametrize("by", ["session/cancel", "$/cancel_request"])
async def test_a_session_cancel_and_a_cancelled_answer_read_together_end_the_turn_one_way(
        tmp_path: Path, work: Path, cancel_first: bool, by: str) -> None:
    # ACP tells a client to answer its open permission requests `cancelled` after it
    # sends session/cancel: both arrive together. Whichever the agent's reader handles
    # first, the cancel wins, no `$/cancel_request` goes out for a request the client
    # has answered, and every round leaves the same wire and the same log. The same
    # for a client that cancels the prompt by its request id (`$/cancel_request`).
    model = permission_rounds_script(tmp_path / "script.json", ROUNDS)
    store = tmp_path / "store"
    policy = ClientPolicy(hang_permissions=True)  # the test answers, with the cancel

    async with AgentProcess(store, model=model, policy=policy) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        rounds = await race_rounds(agent, policy, sid, ROUNDS, by, cancel_first=cancel_first)
    assert agent.returncode == 0
    assert not (work / "out.txt").exists()
    failed = check_rounds_alike(rounds)
    assert "permission" not in failed.get("_meta", {}).get("acpBridge", {})
    check_cancelled_log(loaded_events(store, sid), ROUNDS, by)


@pytest.mark.parametrize("by", ["session/cancel", "$/cancel_request"])
async def test_a_cancel_in_the_write_of_its_prompt_cancels_it(tmp_path: Path, work: Path, by: str) -> None:
    # The reader handles a cancel itself only for a prompt already running; one read
    # with its prompt, whose task has not started, is left to a task that runs after
    # the prompt's has: the prompt still ends cancelled, by that cancel.
    model = write_script(tmp_path / "script.json", WRITE_STEP)
    policy = ClientPolicy(hang_permissions=True)
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        answer = await prompt_and_cancel_in_one_write(agent, sid, by)
    assert answer["result"]["_meta"]["acpBridge"]["reason"] == {"kind": "cancelled", "by": by}
    assert not (work / "out.txt").exists()
