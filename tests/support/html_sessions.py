"""Sessions recorded for the HTML tests (tests/test_html_export.py,
tests/test_html_browser.py): the hostile agent (tests/support/xss_agent.py) run
behind a real `acp-bridge wrap` process, turn by turn as an editor would drive it, so
every payload reaches the store the way a wrapped agent's output does."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from tests.support.acp_client import ClientPolicy
from tests.support.wrapped import WrappedProcess
from tests.support.xss_agent import TAGS

XSS_AGENT = [sys.executable, str(Path(__file__).with_name("xss_agent.py"))]
PROMPT = f"please look {TAGS}"


async def _wrapped(store: Path, backend: str, cwd: Path) -> str:
    """One wrapped session: a completed turn (an edit, allowed), a failed one, a
    cancelled one."""
    policy = ClientPolicy(permissions=["allow_once"])
    async with WrappedProcess(store, XSS_AGENT, backend=backend, policy=policy) as agent:
        await agent.initialize()
        sid = await agent.new_session(cwd)
        await agent.prompt(sid, PROMPT)
        answer = await agent.request_raw("session/prompt", {
            "sessionId": sid, "prompt": [{"type": "text", "text": f"fail {TAGS}"}]})
        assert "error" in answer, answer
        async with anyio.create_task_group() as tg:
            done = agent.prompt_soon(tg, sid, f"wait {TAGS}")
            await agent.wait_for(lambda: any("waiting" in str(u) for u in agent.updates_of(sid)))
            await agent.notify("session/cancel", {"sessionId": sid})
        assert done["result"]["stopReason"] == "cancelled", done
        return sid


async def _crashed(store: Path, backend: str, cwd: Path) -> str:
    """A wrapped session whose wrapper is killed (SIGKILL) inside its turn: open on
    disk, its owner gone (interrupted, not yet repaired)."""
    async with WrappedProcess(store, XSS_AGENT, backend=backend) as agent:
        await agent.initialize()
        sid = await agent.new_session(cwd)
        async with anyio.create_task_group() as tg:
            agent.prompt_soon(tg, sid, f"wait {TAGS}")
            await agent.wait_for(lambda: any("waiting" in str(u) for u in agent.updates_of(sid)))
            agent.kill9()
            await agent.proc.wait()
            tg.cancel_scope.cancel()
        return sid


def record_hostile(store: Path, backend: str, cwd: Path) -> dict[str, str]:
    """{"wrapped": id, "crashed": id}, recorded in `store`."""
    async def main() -> dict[str, str]:
        return {"wrapped": await _wrapped(store, backend, cwd),
                "crashed": await _crashed(store, backend, cwd)}

    return anyio.run(main)
