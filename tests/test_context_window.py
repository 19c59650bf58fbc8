"""A session is never wedged by its own history: the real stdio agent against a loopback
server that enforces its context size as llama.cpp does (tests/support/llama_like.py).

What the model is shown is measured in tokens (the provider's counts of earlier
answers, an estimate for the rest) and leaves room for the prompt and an answer; a
refusal as too long is answered by sending fewer older turns; the log keeps
everything, and a `session/load` in a new process measures the same way; history that
outgrows the window is summarized by the model (a compaction), unless not even one of
its turns fits the summary's own call; and `usage_update.used` counts each token once,
as the server counted it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.agent.compaction import INSTRUCTION
from session import derive_messages
from tests.support.acp_client import AgentError, AgentProcess
from tests.support.llama_like import LlamaLike
from tests.support.logs import loaded_events
from tests.support.sse_server import openai_server

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

N_CTX = 8192


@pytest.fixture
def llama(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[LlamaLike]:
    model = LlamaLike(N_CTX, chars_per_token=getattr(request, "param", 4))
    with openai_server(monkeypatch, model, key="sk-local"):
        monkeypatch.setenv("ACP_BRIDGE_CONTEXT_WINDOW", str(N_CTX))
        monkeypatch.setenv("ACP_BRIDGE_OPENAI_ATTEMPTS", "1")
        yield model


def usage_updates(agent: AgentProcess, sid: str) -> list[dict[str, Any]]:
    return [u for u in agent.updates_of(sid) if u["sessionUpdate"] == "usage_update"]


async def test_an_answer_that_fills_the_window_does_not_wedge_the_session(
        tmp_path: Path, work: Path, llama: LlamaLike) -> None:
    store = tmp_path / "store"
    async with AgentProcess(store, model="openai:gemma-3-270m") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        # The answer runs until the context is full, as llama.cpp stops there.
        assert (await agent.prompt(sid, "WRITE 8090"))["stopReason"] == "max_tokens"
        long_answer = llama.prompts[0]
        assert N_CTX - long_answer > 7000  # the answer alone is nearly the whole window
        for n in range(6):  # before: six refusals in a row ("request (8233 tokens) exceeds ...")
            assert (await agent.prompt(sid, f"hello {n}"))["stopReason"] == "end_turn"
        assert llama.refused == []
        # Every request's system message names the session's working directory.
        assert len(llama.systems) == len(llama.prompts)
        assert {s.rsplit(" The session's working directory is ", 1)[-1] for s in llama.systems} == {f"{work}."}
        # The answer was left out (the first request and each of these carry the same
        # system message and tools): every request is far below the window.
        assert all(p < long_answer + 200 for p in llama.prompts[1:])
        # used: each token once, as the server counted it (its prompt_tokens holds the
        # cached tokens, which it also reports): not prompt + output + cached.
        last = usage_updates(agent, sid)[-1]
        usage = last["_meta"]["acpBridge"]["usage"]
        assert usage["cacheReadTokens"] > 0
        assert last["used"] == llama.prompts[-1] + llama.text_tokens("Fine, thanks.")
        assert last["used"] == usage["inputTokens"] + usage["outputTokens"]
        assert last["size"] == N_CTX
    # The log keeps everything, the long answer too.
    events = loaded_events(store, sid)
    messages = derive_messages(events)  # type: ignore[arg-type]
    assert len(messages) == 14
    answer: list[dict[str, Any]] = messages[1]["content"]  # type: ignore[assignment]
    assert len(answer[0]["text"]) > 7000 * 4
    # A new process measures the loaded history the same way, from the log's counts.
    async with AgentProcess(store, model="openai:gemma-3-270m") as agent:
        await agent.initialize()
        await agent.load_session(sid, work)
        assert (await agent.prompt(sid, "and now?"))["stopReason"] == "end_turn"
    assert llama.refused == []
    assert llama.prompts[-1] < long_answer + 200


@pytest.mark.parametrize("llama", [2], indirect=True)  # two characters a token: denser than estimated
async def test_a_history_that_outgrows_the_window_is_compacted_and_a_refusal_answered(
        tmp_path: Path, work: Path, llama: LlamaLike, monkeypatch: pytest.MonkeyPatch) -> None:
    store, padding = tmp_path / "store", "pad " * 600  # 2,400 characters: 1,200 tokens here, estimated 800
    async with AgentProcess(store, model="openai:gemma-3-270m") as agent:
        await agent.initialize({"session": {"compaction": {}}})
        sid = await agent.new_session(work)
        for n in range(8):  # 9,600 tokens of prompts: the history outgrows the window
            assert (await agent.prompt(sid, f"{n} {padding}"))["stopReason"] == "end_turn"
        # The editor that asked for compaction saw each one, its summary the server's answer.
        completed = [u for u in agent.updates_of(sid)
                     if u["sessionUpdate"] == "compaction_update" and u["status"] == "completed"]
        assert completed and all(u["summary"] == [{"type": "text", "text": "Fine, thanks."}] for u in completed)
    # What the server counted calibrated the estimates: nothing was refused, the window
    # was used, not starved, and the older turns were summarized (the server's short
    # answer is the summary), not dropped.
    assert llama.refused == []
    assert max(llama.prompts) > N_CTX // 2
    summaries = [n for n, text in enumerate(llama.asked) if text == INSTRUCTION]
    assert summaries
    assert all(llama.asked[n + 1].startswith(f"{turn} pad") for n, turn in zip(summaries, [3, 6], strict=False))
    # A new process that does not know the window (128,000 assumed): the history grows
    # until the server refuses a request; the same step goes on with the older turns
    # compacted, sized by the numbers the server gave (its window, its count).
    monkeypatch.delenv("ACP_BRIDGE_CONTEXT_WINDOW")
    async with AgentProcess(store, model="openai:gemma-3-270m") as agent:
        await agent.initialize()
        await agent.load_session(sid, work)
        n = 8
        while not llama.refused and n < 16:
            assert (await agent.prompt(sid, f"{n} {padding}"))["stopReason"] == "end_turn"
            n += 1
        assert len(llama.refused) == 1
        refused = llama.prompts.index(llama.refused[0])
        assert llama.asked[refused + 1] == INSTRUCTION
        assert llama.prompts[refused + 2] < N_CTX
        # From then on the estimates are scaled by what the server counted: no refusal.
        for m in range(n, n + 3):
            assert (await agent.prompt(sid, f"{m} {padding}"))["stopReason"] == "end_turn"
        assert len(llama.refused) == 1


@pytest.mark.parametrize("llama", [2], indirect=True)
async def test_a_turn_too_long_by_itself_fails_and_the_next_prompt_works(
        tmp_path: Path, work: Path, llama: LlamaLike) -> None:
    async with AgentProcess(tmp_path / "store", model="openai:gemma-3-270m") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "hi"))["stopReason"] == "end_turn"
        with pytest.raises(AgentError) as failed:
            await agent.prompt(sid, "x " * 9000)  # 9,000 tokens: more than the window alone
        assert failed.value.data == {"turn": 2, "step": 1, "code": "context_length", "retryable": False}
        message = str(failed.value.message)
        assert "request (" in message and f"({N_CTX} tokens)" in message
        assert "this turn alone is longer than the model's context" in message
        # The refused prompt is history now, and history is what gets left out.
        assert (await agent.prompt(sid, "shorter then"))["stopReason"] == "end_turn"
    assert llama.prompts[-1] < N_CTX // 2


async def test_without_a_window_setting_the_servers_refusal_teaches_the_window(
        tmp_path: Path, work: Path, llama: LlamaLike, monkeypatch: pytest.MonkeyPatch) -> None:
    # As a new user runs it: no ACP_BRIDGE_CONTEXT_WINDOW, a model name with no known
    # window (128,000 assumed), a server with 8,192.
    monkeypatch.delenv("ACP_BRIDGE_CONTEXT_WINDOW")
    store = tmp_path / "store"
    async with AgentProcess(store, model="openai:gemma-3-270m") as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        assert (await agent.prompt(sid, "WRITE 8090"))["stopReason"] == "max_tokens"
        # The next request shows the long answer and is refused; the same step is sent
        # again without it, sized by the server's n_ctx, and the turn ends well.
        assert (await agent.prompt(sid, "hello"))["stopReason"] == "end_turn"
        assert len(llama.refused) == 1 and llama.refused[0] > N_CTX
        assert llama.prompts[-1] < N_CTX // 2
        # The window is known from then on: no more refusals.
        for n in range(3):
            assert (await agent.prompt(sid, f"hello {n}"))["stopReason"] == "end_turn"
        assert len(llama.refused) == 1
        # The editor's meter shows the server's window, not the 128,000 guessed.
        assert [u["size"] for u in usage_updates(agent, sid)] == [128_000] + [N_CTX] * 4
    # A new process learns it again, at the cost of one refused request.
    async with AgentProcess(store, model="openai:gemma-3-270m") as agent:
        await agent.initialize()
        await agent.load_session(sid, work)
        for n in range(2):
            assert (await agent.prompt(sid, f"again {n}"))["stopReason"] == "end_turn"
    assert len(llama.refused) == 2
