"""Log before send (DESIGN.md section 3): every event is handed to the OS before the
`session/update` derived from it is written to stdout, so a SIGKILL of the agent loses
nothing the client was shown.

The real stdio agent streams a long answer (slowly, from a `script:` model with a
chunk delay, and fast, from `echo`), is SIGKILLed after it sent N updates, and a new
agent loads the session: the text the client saw before the kill must be a prefix of
the text the replay gives for that turn. Before the fix the streamed chunks waited in
the log's buffer (up to 512 events) while their updates left at once, so the replay
had none of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.acp_client import AgentProcess, write_script
from tests.support.crash_matrix.kill import MatrixAgent

pytestmark = pytest.mark.integration

WORDS = 600
KILL_AFTER = (3, 40, 260)  # updates received (the first is the session title)


def seen_text(updates: list[dict[str, Any]], message_id: str) -> str:
    return "".join(u["content"]["text"] for u in updates
                   if u["sessionUpdate"] == "agent_message_chunk" and u.get("messageId") == message_id)


async def stream_and_kill(store: Path, work: Path, model: str, backend: str, prompt: str, n: int) -> tuple[str, str]:
    """Start an agent, prompt, SIGKILL it once `n` updates arrived; (session id, text seen)."""
    agent = MatrixAgent(store, model=model, backend=backend, kill_on_update=n)
    with anyio.fail_after(30):
        async with agent:
            await agent.initialize()
            sid = await agent.new_session(work)
            async with anyio.create_task_group() as tg:
                agent.prompt_soon(tg, sid, prompt)
                await agent.killed.wait()
                await agent.proc.wait()
                tg.cancel_scope.cancel()
    assert agent.returncode is not None and agent.returncode < 0, agent.stderr[-2000:]
    # Everything the agent wrote before it died has been read (the reader ran to EOF).
    return sid, seen_text(agent.updates_of(sid), "t1s1")


async def replayed(store: Path, backend: str, sids: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    async with AgentProcess(store, backend=backend) as agent:
        await agent.initialize()
        for sid in sids:
            result = await agent.request("session/load", {"sessionId": sid, "cwd": "/", "mcpServers": []})
            assert result["_meta"]["acpBridge"]["repair"]["interruptedTurn"] in (1, None)
            out[sid] = seen_text(agent.updates_of(sid), "t1s1")
    assert agent.returncode == 0
    return out


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.parametrize("speed", ["slow", "fast"])
@pytest.mark.long
def test_text_seen_before_a_kill_is_a_prefix_of_the_replay(tmp_path: Path, backend: str, speed: str) -> None:
    store, work = tmp_path / "store", tmp_path / "work"
    work.mkdir()
    text = " ".join(f"w{i}" for i in range(WORDS))
    if speed == "slow":  # a provider-like stream: a chunk every 2 ms, then it hangs
        model = write_script(tmp_path / "slow.json", {"text": text, "hang": True}, chunk_delay_ms=2)
        prompt = "go"
    else:  # echo: in-process, as fast as the agent can stream
        model, prompt = "echo", text

    async def main() -> None:
        seen: dict[str, str] = {}
        for n in KILL_AFTER:
            sid, shown = await stream_and_kill(store, work, model, backend, prompt, n)
            seen[sid] = shown
        back = await replayed(store, backend, list(seen))
        for sid, shown in seen.items():
            assert shown, "the client saw no text before the kill"
            assert back[sid].startswith(shown), (
                f"{len(shown)} characters were shown before the kill, the replay has {len(back[sid])}: "
                f"{shown[-40:]!r} vs {back[sid][-40:]!r}")

    anyio.run(main)
