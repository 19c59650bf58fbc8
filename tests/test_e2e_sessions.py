"""End to end over stdio: the life of sessions across prompts and processes.

Cancellation (session/cancel, $/cancel_request, session/close, stdin closing), failed
turns, the step budget, load and resume after a clean exit and after kill -9, the one
live owner per session, list/close/delete, and one prompt at a time per session. Every
message the agent sends is validated against the ACP schema by the harness.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson
import pytest

from tests.support.acp_client import (
    WRITE_STEP,
    AgentError,
    AgentProcess,
    ClientPolicy,
    normalized,
    write_script,
)

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

_ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


class Running:
    """A `session/prompt` request sent from a background task."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.response: dict[str, Any] | None = None

    @property
    def result(self) -> dict[str, Any]:
        assert self.response is not None, "the prompt has not been answered"
        assert "result" in self.response, self.response
        return dict(self.response["result"])

    @property
    def error(self) -> dict[str, Any]:
        assert self.response is not None, "the prompt has not been answered"
        assert "error" in self.response, self.response
        return dict(self.response["error"])

    async def wait(self, timeout: float = 10) -> dict[str, Any]:
        with anyio.fail_after(timeout):
            await self.done.wait()
        assert self.response is not None
        return self.response


def start_prompt(tg: anyio.abc.TaskGroup, agent: AgentProcess, sid: str, text: str, *,
                 request_id: Any = None) -> Running:
    running = Running()

    async def go() -> None:
        running.response = await agent.request_raw(
            "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]},
            request_id=request_id)
        running.done.set()

    tg.start_soon(go)
    return running


def content_updates(agent: AgentProcess, sid: str) -> list[dict[str, Any]]:
    """The session's updates but the commands it is offered when it opens (sent after
    the answer of `session/new`, `load` and `resume`: no part of its content)."""
    return [u for u in agent.updates_of(sid) if u["sessionUpdate"] != "available_commands_update"]


def chunks(agent: AgentProcess, sid: str, kind: str = "agent_message_chunk") -> list[str]:
    return [u["content"]["text"] for u in agent.updates_of(sid) if u["sessionUpdate"] == kind]


def statuses(updates: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(u["toolCallId"], u.get("status")) for u in updates
            if u["sessionUpdate"] in ("tool_call", "tool_call_update")]


def answer_index(agent: AgentProcess, method: str, nth: int = 0) -> int:
    """Where, in the transcript, the answer to the nth request of `method` is."""
    ids = [m["id"] for d, m in agent.transcript if d == "->" and m.get("method") == method and "id" in m]
    rid = ids[nth]
    return next(i for i, (d, m) in enumerate(agent.transcript)
                if d == "<-" and "method" not in m and m.get("id") == rid)


def update_indexes(agent: AgentProcess, sid: str) -> list[int]:
    return [i for i, (d, m) in enumerate(agent.transcript)
            if d == "<-" and m.get("method") == "session/update" and m["params"]["sessionId"] == sid]


@contextlib.contextmanager
def timed(limit: float) -> Iterator[None]:
    start = time.monotonic()
    yield
    elapsed = time.monotonic() - start
    assert elapsed < limit, f"took {elapsed:.2f} s (limit {limit} s)"


# --- 1. cancel mid-stream ---------------------------------------------------------------


async def test_cancel_mid_stream(tmp_path: Path, work: Path, snapshot_json: Any) -> None:
    model = write_script(tmp_path / "script.json", {"text": "a b c d e", "hang": True}, {"text": "next turn"},
                         chunk_delay_ms=5)
    async with AgentProcess(tmp_path / "store", model=model) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            running = start_prompt(tg, agent, sid, "stream then hang")
            await agent.wait_for(lambda: len(chunks(agent, sid)) >= 1)
            # The model is still inside its stream (it hangs after the words); wait
            # for all five words so the snapshot does not depend on timing.
            await agent.wait_for(lambda: len(chunks(agent, sid)) == 5)
            assert not running.done.is_set()
            await agent.notify("session/cancel", {"sessionId": sid})
            await running.wait()
        assert running.result == {"stopReason": "cancelled", "_meta": {"acpBridge": {
            "turn": 1, "reason": {"kind": "cancelled", "by": "session/cancel"}}}}
        # The ordering barrier: every update of the turn precedes the answer.
        assert max(update_indexes(agent, sid)) < answer_index(agent, "session/prompt")
        after = await agent.prompt(sid, "go on")
        assert after["stopReason"] == "end_turn" and after["_meta"]["acpBridge"]["turn"] == 2
        # The cancelled turn ends with its note, live as on every later load.
        assert chunks(agent, sid) == ["a ", "b ", "c ", "d ", "e",
                                      "\n\n[This turn was cancelled: it was stopped before it finished.]",
                                      "next ", "turn"]
    assert agent.returncode == 0
    assert normalized(agent.transcript, tmp_path) == snapshot_json


# --- 2. cancel while the permission request is open --------------------------------------


async def test_cancel_mid_permission(tmp_path: Path, work: Path, snapshot_json: Any) -> None:
    model = write_script(
        tmp_path / "script.json",
        WRITE_STEP,
        {"text": "fine"},
    )
    policy = ClientPolicy(hang_permissions=True)
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            running = start_prompt(tg, agent, sid, "write it")
            await agent.wait_for(lambda: bool(policy.asked))
            await agent.notify("session/cancel", {"sessionId": sid})
            await running.wait()
        # The client never answered the permission request; the prompt settled anyway.
        assert running.result["stopReason"] == "cancelled"
        assert running.result["_meta"]["acpBridge"]["reason"] == {"kind": "cancelled", "by": "session/cancel"}
        assert not (work / "out.txt").exists()
        # Waiting for its permission when cancelled: pending all along, reported as not run.
        assert statuses(agent.updates_of(sid)) == [("w1", "pending"), ("w1", "failed")]
        (failed,) = [u for u in agent.updates_of(sid) if u.get("status") == "failed"]
        assert failed["rawOutput"]["content"] == [{"type": "text", "text": "The tool call was cancelled (before it ran)."}]
        # The agent withdrew its permission request.
        (perm_id,) = [m["id"] for d, m in agent.transcript
                      if d == "<-" and m.get("method") == "session/request_permission"]
        assert ("<-", {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": perm_id}}) \
            in agent.transcript
        assert (await agent.prompt(sid, "ok then"))["stopReason"] == "end_turn"
    assert not (work / "out.txt").exists()
    assert agent.returncode == 0
    assert normalized(agent.transcript, tmp_path) == snapshot_json


# --- 3. $/cancel_request for a running prompt ---------------------------------------------


async def test_cancel_request_cancels_a_running_prompt(tmp_path: Path, work: Path) -> None:
    words = "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10"
    model = write_script(tmp_path / "script.json", {"text": words, "hang": True}, {"text": "again"},
                         chunk_delay_ms=20)
    async with AgentProcess(tmp_path / "store", model=model) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            running = start_prompt(tg, agent, sid, "go", request_id="prompt-1")
            await agent.wait_for(lambda: len(chunks(agent, sid)) >= 1)
            await agent.notify("$/cancel_request", {"requestId": "prompt-1"})
            await running.wait()
        assert running.result == {"stopReason": "cancelled", "_meta": {"acpBridge": {
            "turn": 1, "reason": {"kind": "cancelled", "by": "$/cancel_request"}}}}
        *streamed, note = chunks(agent, sid)
        assert streamed == [w + " " for w in words.split()][: len(streamed)]
        assert note == "\n\n[This turn was cancelled: it was stopped before it finished.]"
        # A cancel for an id that is not in flight is ignored.
        await agent.notify("$/cancel_request", {"requestId": "prompt-1"})
        assert (await agent.prompt(sid, "next"))["_meta"]["acpBridge"] == {"turn": 2, "reason": {"kind": "completed"}}
    assert agent.returncode == 0
    # The cancelled turn, partial answer included, replays in a new process as it streamed.
    async with AgentProcess(tmp_path / "store", model=model) as later:
        await later.initialize()
        await later.load_session(sid, work)
    live = [u for u in content_updates(agent, sid) if u["sessionUpdate"] != "session_info_update"]
    *replayed, named = [u for u in content_updates(later, sid) if u["sessionUpdate"] != "user_message_chunk"]
    assert replayed == live
    assert named["sessionUpdate"] == "session_info_update" and named["title"] == "go"


# --- 4. failed turns and the step budget -----------------------------------------------------


async def test_error_steps_answer_json_rpc_errors(tmp_path: Path, work: Path) -> None:
    model = write_script(
        tmp_path / "script.json",
        {"text": "partial", "error": {"message": "slow down", "code": "rate_limit", "retryable": True}},
        {"error": {"message": "bad key", "code": "auth"}},
        {"text": "recovered"},
    )
    async with AgentProcess(tmp_path / "store", model=model) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        with pytest.raises(AgentError) as err:
            await agent.prompt(sid, "first")
        assert err.value.code == -32603
        assert err.value.message == "turn failed: slow down"
        assert err.value.data == {"turn": 1, "step": 1, "code": "rate_limit", "retryable": True}
        assert chunks(agent, sid) == ["partial", "\n\n[This turn failed: slow down.]"]
        with pytest.raises(AgentError) as err:
            await agent.prompt(sid, "second")
        assert err.value.code == -32000
        assert "bad key" in str(err.value.message)
        assert err.value.data == {"turn": 2, "step": 1, "code": "auth", "retryable": None}
        assert chunks(agent, sid)[-1] == "\n\n[This turn failed: bad key.]"
        answer = await agent.prompt(sid, "third")
        assert answer["stopReason"] == "end_turn" and answer["_meta"]["acpBridge"]["turn"] == 3
    assert agent.returncode == 0


async def test_max_steps(tmp_path: Path, work: Path) -> None:
    read = {"path": "notes.txt"}
    model = write_script(tmp_path / "script.json",
                         *({"toolCalls": [{"id": f"r{n}", "name": "read_file", "arguments": read}]}
                           for n in range(1, 4)))
    async with AgentProcess(tmp_path / "store", model=model, args=("--max-steps", "2")) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        answer = await agent.prompt(sid, "read forever")
        assert answer == {"stopReason": "max_turn_requests",
                          "_meta": {"acpBridge": {"turn": 1, "reason": {"kind": "max_steps", "limit": 2}}}}
        assert statuses(agent.updates_of(sid)) == [
            ("r1", "pending"), ("r1", "in_progress"), ("r1", "completed"),
            ("r2", "pending"), ("r2", "in_progress"), ("r2", "completed")]
    assert agent.returncode == 0


# --- 5. load after a clean restart ----------------------------------------------------------


async def test_load_after_restart_replays_what_was_streamed(tmp_path: Path, work: Path, snapshot_json: Any) -> None:
    usage = {"inputTokens": 10, "outputTokens": 3}
    model1 = write_script(
        tmp_path / "script1.json",
        {"thinking": "hmm ok", "text": "Hello there.", "usage": usage},
        {"text": "Reading.", "toolCalls": [{"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}}],
         "usage": usage},
        {"text": "It says one two.", "usage": {"inputTokens": 20, "outputTokens": 5}},
    )
    store = tmp_path / "store"
    async with AgentProcess(store, model=model1) as agent1:
        await agent1.initialize()
        sid = await agent1.new_session(work)
        first = await agent1.request("session/prompt", {"sessionId": sid, "prompt": [
            {"type": "text", "text": "hi"}, {"type": "text", "text": "second block"}]})
        assert first["stopReason"] == "end_turn"
        assert (await agent1.prompt(sid, "read notes"))["stopReason"] == "end_turn"
        await agent1.close_stdin()
        with anyio.fail_after(5):
            assert await agent1.proc.wait() == 0
    live = [u for u in content_updates(agent1, sid) if u["sessionUpdate"] != "session_info_update"]
    assert {u["sessionUpdate"] for u in live} >= {"agent_message_chunk", "agent_thought_chunk", "tool_call",
                                                  "tool_call_update", "usage_update"}

    model2 = write_script(tmp_path / "script2.json", {"text": "turn three"})
    async with AgentProcess(store, model=model2) as agent2:
        await agent2.initialize()
        loaded = await agent2.load_session(sid, work)
        assert loaded["_meta"]["acpBridge"]["repair"]["repaired"] is False
        *replayed, named = content_updates(agent2, sid)
        # Named again last, as the live stream named it at the first prompt.
        assert named["sessionUpdate"] == "session_info_update" and named["title"] == "hi"
        first_named = next(u for u in agent1.updates_of(sid) if u["sessionUpdate"] == "session_info_update")
        assert first_named["title"] == "hi"
        assert named["updatedAt"] >= first_named["updatedAt"]  # its last event's time (ISO strings sort)
        users = [(u["messageId"], u["content"]) for u in replayed if u["sessionUpdate"] == "user_message_chunk"]
        assert users == [("t1-user", {"type": "text", "text": "hi"}),
                         ("t1-user", {"type": "text", "text": "second block"}),
                         ("t2-user", {"type": "text", "text": "read notes"})]
        # Exactly as streamed.
        assert [u for u in replayed if u["sessionUpdate"] != "user_message_chunk"] == live
        assert statuses(live) == [("r1", "pending"), ("r1", "in_progress"), ("r1", "completed")]
        n_replayed = len(replayed) + 1
        third = await agent2.prompt(sid, "and now")
        assert third["stopReason"] == "end_turn" and third["_meta"]["acpBridge"]["turn"] == 3
        ids = {u["messageId"] for u in agent2.updates_of(sid)[n_replayed:] if "messageId" in u}
        assert ids == {"t3s1"}
    assert agent2.returncode == 0
    assert {"agent1": normalized(agent1.transcript, tmp_path),
            "agent2": normalized(agent2.transcript, tmp_path)} == snapshot_json


# --- 6. load after kill -9 mid-turn, and the one live owner ------------------------------------


async def test_load_after_kill9_mid_tool(tmp_path: Path, work: Path, snapshot_json: Any) -> None:
    model1 = write_script(
        tmp_path / "script1.json",
        {"text": "warm up"},
        {"text": "Running.", "toolCalls": [{"id": "x1", "name": "run_command",
                                            "arguments": {"command": "echo $$ > started.pid; exec sleep 30"}}]},
    )
    store = tmp_path / "store"
    pid_file = work / "started.pid"
    policy = ClientPolicy(permissions=["allow_once"])
    async with AgentProcess(store, model=model1, policy=policy) as agent1:
        await agent1.initialize()
        sid = await agent1.new_session(work)
        assert (await agent1.prompt(sid, "first"))["stopReason"] == "end_turn"
        async with anyio.create_task_group() as tg:
            start_prompt(tg, agent1, sid, "run it")
            await agent1.wait_for(lambda: pid_file.exists() and pid_file.read_text().strip().isdigit())
            agent1.kill9()
            with anyio.fail_after(5):
                await agent1.proc.wait()
            tg.cancel_scope.cancel()
    with contextlib.suppress(ProcessLookupError):  # the command outlives the agent: end it
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)
    assert agent1.returncode == -signal.SIGKILL

    model2 = write_script(tmp_path / "script2.json", {"text": "back again"})
    async with AgentProcess(store, model=model2) as agent2:
        await agent2.initialize()
        loaded = await agent2.load_session(sid, work)
        repair = loaded["_meta"]["acpBridge"]["repair"]
        assert repair["repaired"] is True
        assert repair["interruptedTurn"] == 2 and repair["syntheticResults"] == 1
        replayed = content_updates(agent2, sid)
        assert statuses(replayed) == [("x1", "pending"), ("x1", "in_progress"), ("x1", "failed")]
        (failed,) = [u for u in replayed if u.get("status") == "failed"]
        text = orjson.dumps(failed["content"]).decode()
        assert "interrupted" in text and "may have run" in text
        assert failed["rawOutput"]["error"] == {"name": "InterruptedError", "code": "interrupted"}
        # The reader of the conversation is told, after everything else of the turn, that
        # it was cut off and why (the harness validated every message against the schema);
        # then the session is named again.
        assert replayed[-1]["sessionUpdate"] == "session_info_update"
        assert replayed[-2] == {
            "sessionUpdate": "agent_message_chunk", "messageId": "t2-end",
            "content": {"type": "text", "text": "\n\n[This turn was interrupted: the agent stopped "
                                                "unexpectedly (crash) before it finished.]"},
            "_meta": {"acpBridge": {"turn": 2, "reason": {"kind": "interrupted", "cause": "crash"}}}}
        assert not agent2.violations
        answer = await agent2.prompt(sid, "what happened?")
        assert answer["stopReason"] == "end_turn" and answer["_meta"]["acpBridge"]["turn"] == 3
    assert agent2.returncode == 0
    assert normalized(agent2.transcript, tmp_path) == snapshot_json


async def test_load_after_kill9_mid_stream_keeps_the_prompt(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "script.json", {"text": "a b c", "hang": True})
    store = tmp_path / "store"
    async with AgentProcess(store, model=model) as agent1:
        await agent1.initialize()
        sid = await agent1.new_session(work)
        async with anyio.create_task_group() as tg:
            start_prompt(tg, agent1, sid, "remember me")
            await agent1.wait_for(lambda: len(chunks(agent1, sid)) == 3)
            agent1.kill9()
            with anyio.fail_after(5):
                await agent1.proc.wait()
            tg.cancel_scope.cancel()
    async with AgentProcess(store) as agent2:
        await agent2.initialize()
        loaded = await agent2.load_session(sid, work)
        users = [u["content"] for u in agent2.updates_of(sid) if u["sessionUpdate"] == "user_message_chunk"]
        assert users == [{"type": "text", "text": "remember me"}]
        # Every word the client was shown before the kill (each reached the log before
        # its update reached stdout), then why the turn stopped there.
        *words, notice = [(u["messageId"], u["content"]["text"]) for u in agent2.updates_of(sid)
                          if u["sessionUpdate"] == "agent_message_chunk"]
        assert words == [("t1s1", w) for w in ("a ", "b ", "c")]
        assert notice == ("t1-end", "\n\n[This turn was interrupted: the agent stopped unexpectedly (crash) "
                                    "before it finished.]")
        assert loaded["_meta"]["acpBridge"]["repair"]["interruptedTurn"] == 1
        assert (await agent2.prompt(sid, "again"))["_meta"]["acpBridge"]["turn"] == 2


async def test_a_session_open_in_another_live_agent_is_locked(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with AgentProcess(store) as agent1, AgentProcess(store) as agent2:
        await agent1.initialize()
        await agent2.initialize()
        sid = await agent1.new_session(work)
        await agent1.prompt(sid, "mine")
        for method in ("session/load", "session/resume"):
            with pytest.raises(AgentError) as err:
                await agent2.request(method, {"sessionId": sid, "cwd": str(work), "mcpServers": []})
            assert err.value.code == -32001
            assert (err.value.data or {})["code"] == "session_locked"
            assert sid in str(err.value.message)
        # The owner is unaffected, and nothing of the session was replayed elsewhere.
        assert (await agent1.prompt(sid, "still mine"))["_meta"]["acpBridge"]["turn"] == 2
        assert agent2.updates_of(sid) == []
    assert agent1.returncode == 0 and agent2.returncode == 0


# --- 7. resume ------------------------------------------------------------------------------


async def test_resume_answers_without_replay(tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with AgentProcess(store) as agent1:
        await agent1.initialize()
        sid = await agent1.new_session(work)
        await agent1.prompt(sid, "before restart")
    async with AgentProcess(store) as agent2:
        await agent2.initialize()
        resumed = await agent2.request("session/resume", {"sessionId": sid, "cwd": str(work), "mcpServers": []})
        assert resumed["_meta"]["acpBridge"]["repair"]["repaired"] is False
        assert content_updates(agent2, sid) == []
        answer = await agent2.prompt(sid, "after restart")
        assert answer["stopReason"] == "end_turn" and answer["_meta"]["acpBridge"]["turn"] == 2
        assert chunks(agent2, sid) == ["after ", "restart"]
    assert agent2.returncode == 0


# --- 8. list, close, delete --------------------------------------------------------------------


async def test_list_with_cwd_filter_and_paging(tmp_path: Path) -> None:
    cwd_a, cwd_b = tmp_path / "a", tmp_path / "b"
    cwd_a.mkdir()
    cwd_b.mkdir()
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        named = {await agent.new_session(cwd_a): "alpha one", await agent.new_session(cwd_a): "alpha two",
                 await agent.new_session(cwd_b): "beta"}
        for sid, text in named.items():
            await agent.prompt(sid, text)
        listed = (await agent.request("session/list", {}))["sessions"]
        assert {s["sessionId"]: s["title"] for s in listed} == named
        assert {s["sessionId"]: s["cwd"] for s in listed} == {
            sid: str(cwd_a if text.startswith("alpha") else cwd_b) for sid, text in named.items()}
        assert all(_ISO.match(s["updatedAt"]) for s in listed)
        only_a = (await agent.request("session/list", {"cwd": str(cwd_a)}))["sessions"]
        assert {s["sessionId"] for s in only_a} == {sid for sid, t in named.items() if t.startswith("alpha")}
        assert (await agent.request("session/list", {"cwd": str(tmp_path / "nowhere")}))["sessions"] == []

        # More than one page (50): add sessions in cwd b, prompted concurrently.
        more: dict[str, str] = {}

        async def one(n: int) -> None:
            sid = await agent.new_session(cwd_b)
            more[sid] = f"extra {n}"
            await agent.prompt(sid, f"extra {n}")

        async with anyio.create_task_group() as tg:
            for n in range(50):
                tg.start_soon(one, n)
        everything = {**named, **more}
        page1 = await agent.request("session/list", {})
        assert len(page1["sessions"]) == 50 and page1.get("nextCursor")
        page2 = await agent.request("session/list", {"cursor": page1["nextCursor"]})
        assert "nextCursor" not in page2 or page2["nextCursor"] is None
        seen = [s["sessionId"] for s in page1["sessions"] + page2["sessions"]]
        assert len(seen) == len(set(seen)) == len(everything) == 53
        assert {s["sessionId"]: s["title"] for s in page1["sessions"] + page2["sessions"]} == everything
        # Newest first, across the pages (compared as times: "...:05Z" and "...:05.250Z"
        # do not sort as strings).
        times = [datetime.fromisoformat(s["updatedAt"]) for s in page1["sessions"] + page2["sessions"]]
        assert times == sorted(times, reverse=True)
        b_page = await agent.request("session/list", {"cwd": str(cwd_b)})
        b_rest = await agent.request("session/list", {"cwd": str(cwd_b), "cursor": b_page["nextCursor"]})
        assert len(b_page["sessions"]) + len(b_rest["sessions"]) == 51
        for bad in ("not a cursor!", "", "WzEsMl0="):  # the last one: valid base64 of [1,2]
            with pytest.raises(AgentError) as err:
                await agent.request("session/list", {"cursor": bad})
            assert err.value.code == -32602, bad
    assert agent.returncode == 0


async def test_a_model_that_cannot_be_made_leaves_no_empty_session(tmp_path: Path, work: Path) -> None:
    # The script is there at start-up and gone before the first session/new: the model
    # is made before the session's log, so the store keeps nothing of the failed request.
    script = tmp_path / "script.json"
    model = write_script(script, {"text": "hi"})
    async with AgentProcess(tmp_path / "store", model=model) as agent:
        await agent.initialize()
        script.unlink()
        with pytest.raises(AgentError) as err:
            await agent.new_session(work)
        assert (err.value.code, err.value.data) == (-32603, {"code": "model_spec"})
        assert (await agent.request("session/list", {}))["sessions"] == []
    assert agent.returncode == 0


async def test_close_and_delete(tmp_path: Path, work: Path) -> None:
    async with AgentProcess(tmp_path / "store") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "keep me")
        assert await agent.request("session/close", {"sessionId": sid}) == {}
        with pytest.raises(AgentError) as err:
            await agent.prompt(sid, "closed?")
        assert err.value.code == -32002 and (err.value.data or {}).get("sessionId") == sid
        loaded = await agent.load_session(sid, work)
        assert loaded["_meta"]["acpBridge"]["repair"]["repaired"] is False
        assert (await agent.prompt(sid, "open again"))["_meta"]["acpBridge"]["turn"] == 2

        doomed = await agent.new_session(work)
        await agent.prompt(doomed, "delete me")
        assert await agent.request("session/delete", {"sessionId": doomed}) == {}
        with pytest.raises(AgentError) as err:
            await agent.load_session(doomed, work)
        assert err.value.code == -32002
        assert (err.value.data or {}).get("sessionId") == doomed and doomed in str(err.value.message)
        with pytest.raises(AgentError) as err:
            await agent.prompt(doomed, "gone?")
        assert err.value.code == -32002
        listed = (await agent.request("session/list", {}))["sessions"]
        assert [s["sessionId"] for s in listed] == [sid]
        # Deleting what is not there succeeds (ACP-DELETE-002): deleted already, or an id
        # of the right shape that was never made. A malformed id is still refused.
        assert await agent.request("session/delete", {"sessionId": doomed}) == {}
        assert await agent.request("session/delete", {"sessionId": str(uuid.uuid4())}) == {}
        with pytest.raises(AgentError) as err:
            await agent.request("session/delete", {"sessionId": "../not-a-session"})
        assert err.value.code == -32602
        assert [s["sessionId"] for s in (await agent.request("session/list", {}))["sessions"]] == [sid]
    assert agent.returncode == 0


async def test_close_while_a_prompt_runs_cancels_it(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "script.json", {"text": "working", "hang": True}, {"text": "later"})
    async with AgentProcess(tmp_path / "store", model=model) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            running = start_prompt(tg, agent, sid, "long job")
            await agent.wait_for(lambda: chunks(agent, sid) == ["working"])
            assert await agent.request("session/close", {"sessionId": sid}, timeout=5) == {}
            await running.wait()
        assert running.result == {"stopReason": "cancelled", "_meta": {"acpBridge": {
            "turn": 1, "reason": {"kind": "cancelled", "by": "session/close"}}}}
        # The prompt is answered before the close is.
        assert answer_index(agent, "session/prompt") < answer_index(agent, "session/close")
        loaded = await agent.load_session(sid, work)
        assert loaded["_meta"]["acpBridge"]["repair"]["repaired"] is False
        assert (await agent.prompt(sid, "again"))["stopReason"] == "end_turn"
    assert agent.returncode == 0


# --- 9. one prompt at a time per session ---------------------------------------------------------


async def test_one_prompt_at_a_time_per_session(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "script.json", {"text": "session a", "hang": True}, {"text": "session b"},
                         {"text": "a again"})
    async with AgentProcess(tmp_path / "store", model=model) as agent:
        await agent.initialize()
        sid_a = await agent.new_session(work)
        sid_b = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            running_a = start_prompt(tg, agent, sid_a, "hang here")
            await agent.wait_for(lambda: len(chunks(agent, sid_a)) == 2)
            with pytest.raises(AgentError) as err:
                await agent.prompt(sid_a, "me too", timeout=5)
            assert err.value.code == -32001
            assert (err.value.data or {}).get("code") == "prompt_in_progress"
            assert sid_a in str(err.value.message)
            # Another session runs a whole turn while session a's prompt is running.
            answer_b = await agent.prompt(sid_b, "other", timeout=5)
            assert answer_b["stopReason"] == "end_turn"
            assert not running_a.done.is_set()
            await agent.notify("session/cancel", {"sessionId": sid_a})
            await running_a.wait()
        assert running_a.result["stopReason"] == "cancelled"
        assert chunks(agent, sid_b) == ["session ", "b"]
        # The refused prompt left no trace: session a's next turn is turn 2.
        assert (await agent.prompt(sid_a, "next"))["_meta"]["acpBridge"] == {"turn": 2, "reason": {"kind": "completed"}}
    assert agent.returncode == 0


# --- 10. stdin closed mid-turn ----------------------------------------------------------------------


async def test_stdin_closed_mid_turn(tmp_path: Path, work: Path) -> None:
    model = write_script(tmp_path / "script.json", {"text": "never ends", "hang": True})
    store = tmp_path / "store"
    async with AgentProcess(store, model=model) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            running = start_prompt(tg, agent, sid, "hang")
            await agent.wait_for(lambda: len(chunks(agent, sid)) == 2)
            with timed(2.0):
                await agent.close_stdin()
                await running.wait(timeout=2)
                with anyio.fail_after(2):
                    assert await agent.proc.wait() == 0
    assert running.result == {"stopReason": "cancelled", "_meta": {"acpBridge": {
        "turn": 1, "reason": {"kind": "interrupted", "cause": "shutdown"}}}}
    assert max(update_indexes(agent, sid)) < answer_index(agent, "session/prompt")
    shutdown_notice = "\n\n[This turn was interrupted: the agent was shut down before it finished.]"
    # Sent live too, last before the answer: the same mapping as the replay below.
    assert chunks(agent, sid) == ["never ", "ends", shutdown_notice]

    async with AgentProcess(store) as later:
        await later.initialize()
        loaded = await later.load_session(sid, work)
        assert loaded["_meta"]["acpBridge"]["repair"]["repaired"] is False
        assert loaded["_meta"]["acpBridge"]["repair"]["interruptedTurn"] is None
        assert chunks(later, sid) == ["never ", "ends", shutdown_notice]
        answer = await later.prompt(sid, "hello again")
        assert answer["_meta"]["acpBridge"] == {"turn": 2, "reason": {"kind": "completed"}}
    assert later.returncode == 0
