"""`acp-bridge wrap` enforces the editor's cancel when the wrapped agent does not (issue 23,
point 1; docs/wrap.md, "The cancel grace").

In front of tests/support/unruly_agent.py, which ignores `session/cancel` and streams on,
or stops answering anything at all: after the editor's `session/cancel`,
`$/cancel_request` or `session/close` of a running prompt the child is sent
`session/cancel`; once the grace (`$ACP_BRIDGE_CANCEL_GRACE`, short here) has passed
without its answer, the wrapper answers the prompt `cancelled` itself and records
`cancelled {by, forced: true}`; nothing of that turn reaches the editor or the log after
the answer; and the next prompt works: on a restarted child, on a fresh child session
when another session's prompt runs in it, or on the same child once it has answered
the old prompt late.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from session import check_invariants
from tests.support.acp_client import AgentProcess
from tests.support.logs import loaded_events
from tests.support.processes import gone
from tests.support.unruly import (
    agent_pids,
    between_turns,
    chunks,
    one_agent,
    read_by_agent,
    turn_ends,
    unruly_command,
)
from tests.support.wrapped import WrappedProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

GRACE = 0.5
BOUND = GRACE + 1.5  # the answer's deadline after the cancel, on a loaded machine
FORCED = {"kind": "cancelled", "by": "session/cancel", "forced": True}
COMPLETED = {"kind": "completed"}
# What the wrapper logs (at info) as it drops a stuck child session's messages, and its
# late answer: the events the tests wait for.
INFO = ("--log-level", "info")
DROPPING = b"runs a turn acp-bridge ended: dropping its"
LATE = b"answered its cancelled turn late"


def ends_of(store: Path, sid: str) -> list[dict[str, Any]]:
    """How each turn of the wrapper's log of `sid` ended (the log checked whole, and
    nothing kept between its turns: the late turn's traffic is dropped)."""
    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    assert between_turns(events) == []
    return turn_ends(events)


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACP_BRIDGE_CANCEL_GRACE", str(GRACE))


async def cancel_of(agent: AgentProcess, tg: anyio.abc.TaskGroup, by: str, sid: str, prompt_id: str,
                    closed: dict[str, Any]) -> None:
    """The editor's cancel of the running prompt `prompt_id`, `by` the given message (a
    `session/close` is a request: its answer lands in `closed`, with its time)."""
    if by == "session/cancel":
        await agent.notify("session/cancel", {"sessionId": sid})
    elif by == "$/cancel_request":
        await agent.notify("$/cancel_request", {"requestId": prompt_id})
    else:
        async def close() -> None:
            closed["answer"] = await agent.request_raw("session/close", {"sessionId": sid})
            closed["at"] = time.monotonic()

        tg.start_soon(close)


@pytest.mark.parametrize("by", ["session/cancel", "$/cancel_request", "session/close"])
async def test_a_cancel_the_child_ignores_is_answered_by_the_wrapper_within_the_grace(
        tmp_path: Path, work: Path, by: str) -> None:
    record, store = tmp_path / "read.jsonl", tmp_path / "store"
    async with WrappedProcess(store, unruly_command(record), wrap_args=INFO) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        closed: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            answer = agent.prompt_soon(tg, sid, "stream 400 10", request_id="p1")  # 4 s of chunks
            await agent.wait_for(lambda: len(chunks(agent, sid)) >= 3)
            cancelled_at = time.monotonic()
            await cancel_of(agent, tg, by, sid, "p1", closed)
            await agent.wait_for(lambda: bool(answer), timeout=10)
            answered_at, shown = time.monotonic(), len(agent.updates_of(sid))
        assert GRACE * 0.8 <= answered_at - cancelled_at <= BOUND, answered_at - cancelled_at
        assert answer["result"]["stopReason"] == "cancelled"
        assert answer["result"]["_meta"]["acpBridge"]["reason"] == {**FORCED, "by": by}
        if by == "session/close":
            assert closed["answer"]["result"] == {} and closed["at"] - cancelled_at <= BOUND
        # The child streams on meanwhile: none of it is shown.
        await agent.wait_for(lambda: DROPPING in agent.stderr, why="the wrapper dropping the child's next chunk")
        assert len(agent.updates_of(sid)) == shown
        child_sid = next(m["params"]["sessionId"] for m in read_by_agent(record) if m.get("method") == "session/prompt")
        assert {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": child_sid}} in \
            read_by_agent(record)
        if by == "session/close":  # closed: the editor loads it again to go on
            await agent.load_session(sid, work)
        before = len(agent.updates_of(sid))
        again = await agent.prompt(sid, "one two")
        assert again["stopReason"] == "end_turn" and again["_meta"]["acpBridge"]["turn"] == 2
        assert [u["content"]["text"] for u in agent.updates_of(sid)[before:]
                if u["sessionUpdate"] == "agent_message_chunk"] == ["one ", "two "]
    assert agent.returncode == 0
    assert ends_of(store, sid) == [{**FORCED, "by": by}, COMPLETED]  # its late chunks kept nowhere
    if by == "session/cancel":
        show = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(store), "show", sid],
                              capture_output=True, text=True, timeout=60, check=True)
        assert "Turn 1 — cancelled (by session/cancel; the agent did not stop, acp-bridge ended the turn)" in \
            show.stdout.splitlines(), show.stdout


@pytest.mark.parametrize("by", ["session/cancel", "$/cancel_request"])
async def test_a_cancel_passed_on_is_answered_cancelled_whatever_the_child_answers(
        tmp_path: Path, work: Path, by: str) -> None:
    # The child ignores the cancel but finishes within the grace, answering `end_turn`
    # (issue 33: a 15,000-word prompt cancelled 50 ms in was answered `end_turn`). Once
    # the child has the editor's cancel the prompt is `cancelled`; its own stop reason is
    # kept beside, in the log and the answer's reason.
    record, store = tmp_path / "read.jsonl", tmp_path / "store"
    async with WrappedProcess(store, unruly_command(record)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        closed: dict[str, Any] = {}
        async with anyio.create_task_group() as tg:
            answer = agent.prompt_soon(tg, sid, "stream 6 30", request_id="p1")  # 0.18 s, then end_turn
            await agent.wait_for(lambda: len(chunks(agent, sid)) >= 1)
            await cancel_of(agent, tg, by, sid, "p1", closed)
            await agent.wait_for(lambda: bool(answer), timeout=10)
        assert answer["result"]["stopReason"] == "cancelled"
        said = {"kind": "cancelled", "by": by, "agentStopReason": "end_turn"}
        assert answer["result"]["_meta"]["acpBridge"]["reason"] == said
        child_sid = next(m["params"]["sessionId"] for m in read_by_agent(record) if m.get("method") == "session/prompt")
        assert {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": child_sid}} in \
            read_by_agent(record)
        again = await agent.prompt(sid, "one two")  # the same child, in step
        assert again["stopReason"] == "end_turn"
    assert ends_of(store, sid) == [said, COMPLETED]
    show = subprocess.run([sys.executable, "-m", "acp_bridge", "sessions", "--store", str(store), "show", sid],
                          capture_output=True, text=True, timeout=60, check=True)
    assert f"Turn 1 — cancelled (by {by}; the agent answered end_turn)" in show.stdout.splitlines(), show.stdout


async def test_an_error_answer_to_a_cancelled_prompt_is_the_cancel(tmp_path: Path, work: Path) -> None:
    # ACP has an agent answer a cancelled prompt `cancelled`; some answer it with an
    # error (-32800). The editor cancelled: the turn is cancelled {by}, not failed.
    record, store = tmp_path / "read.jsonl", tmp_path / "store"
    async with WrappedProcess(store, unruly_command(record)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        answer = await agent.cancelled_when(sid, "fail-on-cancel", lambda: len(chunks(agent, sid)) >= 1,
                                            request_id="p1")
        assert answer["result"]["stopReason"] == "cancelled"
        assert answer["result"]["_meta"]["acpBridge"]["reason"] == {"kind": "cancelled", "by": "session/cancel"}
    assert ends_of(store, sid) == [{"kind": "cancelled", "by": "session/cancel"}]


async def test_a_child_that_stops_answering_is_cancelled_closed_and_replaced(tmp_path: Path, work: Path) -> None:
    record, store = tmp_path / "read.jsonl", tmp_path / "store"
    async with WrappedProcess(store, unruly_command(record)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        other = await agent.new_session(work)
        hung = one_agent(agent.proc.pid)
        async with anyio.create_task_group() as tg:
            answer = agent.prompt_soon(tg, sid, "hang")
            await agent.wait_for(lambda: any(m.get("method") == "session/prompt" for m in read_by_agent(record)),
                                 why="the child reading the prompt that hangs it")
            cancelled_at = time.monotonic()
            await agent.notify("session/cancel", {"sessionId": sid})
        assert time.monotonic() - cancelled_at <= BOUND
        assert answer["result"]["_meta"]["acpBridge"]["reason"] == FORCED
        # It answers no session/close either: ours is answered within the same bound.
        closing_at = time.monotonic()
        assert await agent.request("session/close", {"sessionId": other}, timeout=10) == {}
        assert time.monotonic() - closing_at <= BOUND
        # The next prompt runs on a new child: the hung one could not take it.
        again = await agent.prompt(sid, "still there")
        assert again["stopReason"] == "end_turn" and chunks(agent, sid)[-2:] == ["still ", "there "]
        assert agent_pids(agent.proc.pid) != [hung]
    assert ends_of(store, sid) == [FORCED, COMPLETED]


async def test_a_child_that_answers_late_is_in_step_again_and_its_late_turn_is_dropped(
        tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with WrappedProcess(store, unruly_command(), wrap_args=INFO) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        child = one_agent(agent.proc.pid)
        answer = await agent.cancelled_when(sid, "stream 12 100",  # 1.2 s, then end_turn
                                            lambda: len(chunks(agent, sid)) >= 1)
        assert answer["result"]["_meta"]["acpBridge"]["reason"]["forced"] is True
        shown = len(agent.updates_of(sid))
        await agent.wait_for(lambda: LATE in agent.stderr, why="the child's late answer to the cancelled turn")
        assert len(agent.updates_of(sid)) == shown
        again = await agent.prompt(sid, "and now")
        assert again["stopReason"] == "end_turn"
        assert [u["content"]["text"] for u in agent.updates_of(sid)[shown:]] == ["and ", "now "]
        assert agent_pids(agent.proc.pid) == [child]  # in step again: not restarted
    assert ends_of(store, sid)[1:] == [COMPLETED]


async def test_with_another_prompt_running_the_stuck_session_gets_a_fresh_child_session(
        tmp_path: Path, work: Path) -> None:
    record, store = tmp_path / "read.jsonl", tmp_path / "store"
    async with WrappedProcess(store, unruly_command(record)) as agent:
        await agent.initialize()
        stuck, busy = await agent.new_session(work), await agent.new_session(work)
        child = one_agent(agent.proc.pid)
        async with anyio.create_task_group() as tg:
            busy_answer = agent.prompt_soon(tg, busy, "stream 30 100", timeout=30)  # 3 s, never cancelled
            answer = agent.prompt_soon(tg, stuck, "stream 400 10")
            await agent.wait_for(lambda: len(chunks(agent, stuck)) >= 2)
            await agent.notify("session/cancel", {"sessionId": stuck})
            await agent.wait_for(lambda: bool(answer))
            assert answer["result"]["_meta"]["acpBridge"]["reason"]["forced"] is True
            shown = len(agent.updates_of(stuck))
            again = await agent.prompt(stuck, "fresh start")
            assert again["stopReason"] == "end_turn"
            assert [u["content"]["text"] for u in agent.updates_of(stuck)[shown:]] == ["fresh ", "start "]
            assert not busy_answer  # the other session's turn runs on, untouched
        assert busy_answer["result"]["stopReason"] == "end_turn"
        assert chunks(agent, busy) == [f"c{n} " for n in range(1, 31)]
        assert agent_pids(agent.proc.pid) == [child]
    news = [m for m in read_by_agent(record) if m.get("method") == "session/new"]
    assert len(news) == 3  # the stuck session's fresh one on the same child
    assert ends_of(store, stuck) == [FORCED, COMPLETED]


async def test_a_cancel_while_the_child_is_restarted_is_enforced_too(tmp_path: Path, work: Path) -> None:
    # The prompt restarts a dead child, which then answers nothing (not even initialize):
    # the editor's cancel still ends the prompt within the grace, and the next prompt
    # restarts the child again.
    hang, record, store = tmp_path / "hang-now", tmp_path / "read.jsonl", tmp_path / "store"
    async with WrappedProcess(store, unruly_command(record, hang_if=hang)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        hang.touch()
        first = one_agent(agent.proc.pid)
        os.kill(first, signal.SIGKILL)
        # Dead before the prompt is sent, not dying: a reader killed in read() may still
        # take what reaches the pipe before it runs again, and the wrapper then rightly
        # counts the prompt as read (the turn interrupted, not sent again).
        await agent.wait_for(gone(first), why="the killed child's death")
        async with anyio.create_task_group() as tg:
            answer = agent.prompt_soon(tg, sid, "never reaches it")
            await agent.wait_for(lambda: agent_pids(agent.proc.pid) not in ([], [first]), timeout=10,
                                 why="the child restarted for the prompt")
            await agent.wait_for(lambda: [m.get("method") for m in read_by_agent(record)].count("initialize") == 2,
                                 why="the new child reading its initialize (it answers nothing)")
            cancelled_at = time.monotonic()
            await agent.notify("session/cancel", {"sessionId": sid})
        assert time.monotonic() - cancelled_at <= BOUND
        assert answer["result"]["_meta"]["acpBridge"]["reason"] == FORCED
        hung = one_agent(agent.proc.pid)
        hang.unlink()
        again = await agent.prompt(sid, "now it does")
        assert again["stopReason"] == "end_turn" and chunks(agent, sid)[-3:] == ["now ", "it ", "does "]
        assert agent_pids(agent.proc.pid) != [hung]
    assert ends_of(store, sid) == [FORCED, COMPLETED]


async def test_what_the_child_asks_for_a_turn_the_wrapper_ended_never_reaches_the_editor(
        tmp_path: Path, work: Path) -> None:
    # After the forced end, the child still runs the old turn and asks a permission and
    # a file read for it: the wrapper answers both itself (`cancelled`, and a refusal),
    # and the editor is asked nothing.
    record = tmp_path / "read.jsonl"
    async with WrappedProcess(tmp_path / "store", unruly_command(record)) as agent:
        await agent.initialize({"fs": {"readTextFile": True}})
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            answer = agent.prompt_soon(tg, sid, "stream 150 10 120")  # asks at 1.2 s
            await agent.wait_for(lambda: len(chunks(agent, sid)) >= 2)
            await agent.notify("session/cancel", {"sessionId": sid})
        assert answer["result"]["_meta"]["acpBridge"]["reason"]["forced"] is True
        await agent.wait_for(lambda: {"perm", "fs"} <= {m.get("id") for m in read_by_agent(record)}, timeout=10)
    answers = {m["id"]: m for m in read_by_agent(record) if m.get("id") in ("perm", "fs")}
    assert answers["perm"]["result"] == {"outcome": {"outcome": "cancelled"}}
    assert answers["fs"]["error"]["code"] == -32603 and answers["fs"]["error"]["data"]["code"] == "cancelled"
    assert [m for d, m in agent.transcript if d == "<-" and "method" in m and "id" in m] == []
