"""`acp-bridge wrap` when its child dies (issue 23, points 3 and 4; docs/wrap.md, "The
child's death and restart").

- No orphans: an npm-style launcher (tests/support/launcher.sh) starts the real agent as
  its own child; when the launcher is killed, or exits, the agent under it dies at once
  too, the prompt is answered `interrupted {crash}` at once, and nothing the agent sent
  after that reaches the editor or the log.
- Restart, not loss: a prompt sent just after the child was killed (0 to 20 ms after,
  in a loop) restarts it and runs there, answered `end_turn` from a real run; never
  `cancelled`, never recorded as a crash.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import anyio
import pytest

from session import check_invariants
from tests.support.logs import loaded_events
from tests.support.processes import alive, gone, wait_gone
from tests.support.unruly import (
    agent_pids,
    between_turns,
    chunks,
    launcher_pids,
    one_agent,
    turn_ends,
    unruly_command,
)
from tests.support.wrapped import WrappedProcess, command_line, descendants, sdk_echo_command

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROUNDS = 20


@pytest.mark.parametrize("how", ["killed", "exits", "left-its-group"])
async def test_the_agent_behind_a_launcher_dies_with_it_and_is_silent_after(
        tmp_path: Path, work: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    # left-its-group: the agent is in a session of its own (setsid), out of reach of a
    # group kill, and holds the child's pipes: it is found by them.
    exit_file = tmp_path / "exit-now"
    if how == "exits":
        monkeypatch.setenv("LAUNCHER_EXIT_ON", str(exit_file))
    if how == "left-its-group":
        monkeypatch.setenv("LAUNCHER_SETSID", "1")
    store = tmp_path / "store"
    async with WrappedProcess(store, unruly_command(launcher=True)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        (launcher,), real = launcher_pids(agent.proc.pid), one_agent(agent.proc.pid)
        async with anyio.create_task_group() as tg:
            answer = agent.prompt_soon(tg, sid, "stream 500 10")  # 5 s of chunks
            await agent.wait_for(lambda: len(chunks(agent, sid)) >= 5)
            died_at = time.monotonic()
            if how == "exits":
                exit_file.touch()
            else:
                os.kill(launcher, signal.SIGKILL)
            await agent.wait_for(lambda: bool(answer), timeout=10)
            answered_at, shown = time.monotonic(), len(agent.updates_of(sid))
        # At once: not after a grace for its stdout to end, and not at the next request.
        assert answered_at - died_at < 1.5, answered_at - died_at
        assert await anyio.to_thread.run_sync(wait_gone, [real], 1.0) == []
        assert answer["result"]["_meta"]["acpBridge"]["reason"] == {"kind": "interrupted", "cause": "crash"}
        exit_file.unlink(missing_ok=True)
        again = await agent.prompt(sid, "back again")
        assert again["stopReason"] == "end_turn"
        # Nothing after the answer: the next prompt's chunks follow it directly.
        assert [u["content"]["text"] for u in agent.updates_of(sid)[shown:]] == ["back ", "again "]
        assert one_agent(agent.proc.pid) != real
    assert agent.returncode == 0
    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    assert turn_ends(events) == [{"kind": "interrupted", "cause": "crash"}, {"kind": "completed"}]
    assert between_turns(events) == []


async def test_the_child_dying_between_turns_takes_its_children_at_once(tmp_path: Path, work: Path) -> None:
    # No request follows the death: the agent under the launcher must not wait for one.
    async with WrappedProcess(tmp_path / "store", unruly_command(launcher=True)) as agent:
        await agent.initialize()
        await agent.new_session(work)
        (launcher,), real = launcher_pids(agent.proc.pid), one_agent(agent.proc.pid)
        os.kill(launcher, signal.SIGKILL)
        assert await anyio.to_thread.run_sync(wait_gone, [real], 1.0) == []
        assert alive(agent.proc.pid)


@pytest.mark.parametrize("child", ["unruly", "sdk-echo"])
async def test_a_prompt_just_after_the_child_died_restarts_it_and_runs(
        tmp_path: Path, work: Path, child: str) -> None:
    rounds = ROUNDS if child == "unruly" else 6  # the SDK agent takes ~0.5 s to start
    rng = random.Random(f"restart-{child}")
    store = tmp_path / "store"
    command = unruly_command() if child == "unruly" else sdk_echo_command()
    async with WrappedProcess(store, command) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        for n in range(1, rounds + 1):
            pids = agent_pids(agent.proc.pid) if child == "unruly" else sdk_pids(agent.proc.pid)
            assert len(pids) == 1, pids
            os.kill(pids[0], signal.SIGKILL)
            # Dead, not dying: a reader killed in read() may still take what reaches the
            # pipe before it runs again (then the prompt counts as read, rightly).
            await agent.wait_for(gone(pids[0]), why="the killed child's death")
            await anyio.sleep(rng.uniform(0, 0.02))  # what is tested: a prompt at any moment after the death
            before = len(agent.updates_of(sid))
            answer = await agent.prompt(sid, f"round {n}")
            assert answer["stopReason"] == "end_turn", (n, answer)
            assert answer["_meta"]["acpBridge"] == {"turn": n, "reason": {"kind": "completed"}}
            assert [u["content"]["text"] for u in agent.updates_of(sid)[before:]
                    if u["sessionUpdate"] == "agent_message_chunk"] == ["round ", f"{n} "]
    assert agent.returncode == 0
    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    assert turn_ends(events) == [{"kind": "completed"}] * rounds


async def test_a_prompt_as_a_launched_agent_dies_is_not_lost(tmp_path: Path, work: Path) -> None:
    # Issue 34, point 10: the launcher (npx-style) is killed and the prompt sent at once,
    # 0 to 20 ms after. The real agent behind it may read the prompt in the moment before
    # its group is killed, saying nothing: the prompt was not acted on, and is sent to the
    # restarted agent, answered from a real run (`stream 3 50`: its first word 50 ms
    # after it reads the prompt, long after the group kill). Never a crash.
    rng = random.Random("launched")
    store = tmp_path / "store"
    async with WrappedProcess(store, unruly_command(launcher=True)) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        for n in range(1, ROUNDS + 1):
            (launcher,) = launcher_pids(agent.proc.pid)
            os.kill(launcher, signal.SIGKILL)
            await anyio.sleep(rng.uniform(0, 0.02))  # what is tested: the prompt as it dies
            before = len(agent.updates_of(sid))
            answer = await agent.prompt(sid, "stream 3 50")
            assert answer["stopReason"] == "end_turn", (n, answer)
            assert answer["_meta"]["acpBridge"] == {"turn": n, "reason": {"kind": "completed"}}, n
            assert len([u for u in agent.updates_of(sid)[before:] if u["sessionUpdate"] == "agent_message_chunk"]) == 3
            await agent.wait_for(lambda: len(launcher_pids(agent.proc.pid)) == 1, why="the restarted launcher")
    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    assert turn_ends(events) == [{"kind": "completed"}] * ROUNDS


def sdk_pids(wrapper_pid: int) -> list[int]:
    return [p for p in descendants(wrapper_pid) if "sdk_echo_agent.py" in " ".join(command_line(p))]
