"""The hand check of docs/openai.md, "Against a real llama.cpp server": the agent
(`--model openai:gemma-3-270m`, OPENAI_BASE_URL at a real llama-server) driven by the
test suite's ACP client (tests/support/acp_client.py). Not a test: run by hand.

  python -m tests.support.real_llama long STORE        a new session, one prompt whose answer fills the window
  python -m tests.support.real_llama more STORE N       N short prompts in it, after session/load
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import anyio

from tests.support.acp_client import AgentError, AgentProcess

MODEL = "openai:gemma-3-270m"


def usage_line(agent: AgentProcess, sid: str) -> str:
    ups = [u for u in agent.updates_of(sid) if u["sessionUpdate"] == "usage_update"]
    if not ups:
        return "no usage_update"
    u = ups[-1]
    raw = u.get("_meta", {}).get("acpBridge", {}).get("usage", {})
    return f"usage_update used={u['used']} size={u['size']} usage={raw}"


async def main() -> None:
    mode, store = sys.argv[1], Path(sys.argv[2])
    work = store.parent / "work"
    work.mkdir(parents=True, exist_ok=True)
    async with AgentProcess(store, model=MODEL) as agent:
        await agent.initialize()
        if mode == "long":
            sid = await agent.new_session(work)
            (store / "sid.txt").write_text(sid)
            t = time.monotonic()
            r = await agent.prompt(sid, "Write a very long story about a lighthouse keeper.", timeout=7200)
            text = "".join(u["content"].get("text", "") for u in agent.updates_of(sid)
                           if u["sessionUpdate"] == "agent_message_chunk")
            print(f"long: stopReason={r['stopReason']} chars={len(text)} in {time.monotonic() - t:.0f}s")
            print("  ", usage_line(agent, sid))
            return
        sid = (store / "sid.txt").read_text()
        count = int(sys.argv[3])
        await agent.request("session/load", {"sessionId": sid, "cwd": str(work), "mcpServers": []}, timeout=120)
        print("session/load: ok")
        for n in range(count):
            t = time.monotonic()
            before = len(agent.updates_of(sid))
            try:
                r = await agent.prompt(sid, f"Hello, question {n + 1}: what is a lighthouse?", timeout=1800)
                print(f"prompt {n + 1}: stopReason={r['stopReason']} in {time.monotonic() - t:.0f}s")
                if any(u["sessionUpdate"] == "usage_update" for u in agent.updates_of(sid)[before:]):
                    print("  ", usage_line(agent, sid))
            except AgentError as e:
                print(f"prompt {n + 1}: error {e.code}: {e.message} data={e.data} in {time.monotonic() - t:.0f}s")


if __name__ == "__main__":
    anyio.run(main)
