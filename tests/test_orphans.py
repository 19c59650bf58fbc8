"""No orphans: a command the agent (or `acp-bridge chat`) started dies with it, also when
it is killed with SIGKILL; and the watchdog behind that (acp_bridge/tools/reaper.py)
kills exactly the groups still listed when its pipe closes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from acp_bridge.tools.reaper import Reaper
from tests.support.acp_client import CLIENT_CAPS_NONE, AgentProcess, ClientPolicy, write_script
from tests.support.processes import GONE_WITHIN_S, alive, wait_gone
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def tree_command(d: Path) -> str:
    """A command with a child and a grandchild, each writing its pid, all sleeping."""
    return (f"echo $$ > {d}/shell.pid; "
            f"sh -c 'sleep 60 & echo $! > {d}/grandchild.pid; wait' & echo $! > {d}/child.pid; "
            f"wait")


def tree_script(tmp_path: Path) -> tuple[Path, str]:
    """A work folder, and a `script:` model whose one tool call runs tree_command there."""
    work = tmp_path / "work"
    work.mkdir()
    return work, write_script(tmp_path / "script.json", {"toolCalls": [
        {"id": "c1", "name": "run_command", "arguments": {"command": tree_command(work)}}]})


def read_pids(d: Path, timeout: float = 20) -> list[int]:
    """The three pids, once all are written."""
    names = ("shell.pid", "child.pid", "grandchild.pid")

    def written() -> list[int]:
        texts = [(d / n).read_text().strip() if (d / n).exists() else "" for n in names]
        return [int(t) for t in texts] if all(t.isdigit() for t in texts) else []

    return wait_until(written, "the command's three pid files", timeout=timeout)


@pytest.fixture
def survivors() -> Iterator[list[int]]:
    """Pids a test saw; whatever still runs at the end is killed, so a failing test
    leaves no `sleep 60` behind."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.anyio
async def test_sigkill_of_the_agent_kills_its_command_and_the_commands_children(
    tmp_path: Path, survivors: list[int]
) -> None:
    work, model = tree_script(tmp_path)
    # No terminal capability: the agent runs the command itself (tools/local.py).
    policy = ClientPolicy(permissions=["allow_once"])
    async with AgentProcess(tmp_path / "store", model=model, policy=policy) as agent:
        await agent.initialize(CLIENT_CAPS_NONE)
        sid = await agent.new_session(work)
        async with anyio.create_task_group() as tg:
            agent.prompt_soon(tg, sid, "run it")
            pids = await anyio.to_thread.run_sync(read_pids, work)
            survivors.extend(pids)
            assert all(alive(p) for p in pids)
            agent.kill9()
            tg.cancel_scope.cancel()
    assert agent.returncode == -signal.SIGKILL
    assert wait_gone(pids) == [], "the command outlived the agent"


def test_sigkill_of_chat_kills_the_command_it_ran_for_the_agent(
    tmp_path: Path, survivors: list[int]
) -> None:
    work, model = tree_script(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACP_BRIDGE_")}
    # chat serves the agent's terminal/*: the command is chat's child, not the agent's.
    chat = subprocess.Popen(
        [sys.executable, "-m", "acp_bridge", "chat", "--store", str(tmp_path / "store"),
         "--cwd", str(work), "--model", model],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**env, "PYTHONUNBUFFERED": "1"})
    try:
        assert chat.stdin is not None
        chat.stdin.write(b"run it\na\n")  # the prompt, then "allow" at the permission question
        chat.stdin.flush()
        pids = read_pids(work)
        survivors.extend(pids)
        shell_parent = Path(f"/proc/{pids[0]}/stat").read_text().rpartition(")")[2].split()[1]
        assert int(shell_parent) == chat.pid
        chat.kill()
        assert chat.wait(timeout=10) == -signal.SIGKILL
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()
        if chat.stdin is not None:
            chat.stdin.close()
    assert wait_gone(pids) == [], "the command outlived chat"


def spawn_group(d: Path, name: str) -> tuple[subprocess.Popen[bytes], int]:
    """A process group like a terminal's: a shell leading it and a background child."""
    proc = subprocess.Popen(
        ["/bin/sh", "-c", f"sleep 60 & echo $! > {d}/{name}; wait"], start_new_session=True)
    wait_until(lambda: (d / name).exists() and (d / name).read_text().strip(), f"the group's child pid in {name}")
    return proc, int((d / name).read_text())


@contextlib.contextmanager
def two_groups(d: Path, survivors: list[int], reaper: Reaper) -> Iterator[tuple[tuple[subprocess.Popen[bytes], int], tuple[subprocess.Popen[bytes], int]]]:
    """Two groups of spawn_group's, "a" and "b", for the reaper to watch; on the way
    out, a group still running is killed, and the reaper closed."""
    groups = spawn_group(d, "a"), spawn_group(d, "b")
    survivors.extend(pid for proc, child in groups for pid in (proc.pid, child))
    try:
        yield groups
    finally:
        for proc, _ in groups:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reaper.close()


def test_the_watchdog_kills_the_groups_still_listed_when_its_pipe_closes(
    tmp_path: Path, survivors: list[int]
) -> None:
    reaper = Reaper()
    with two_groups(tmp_path, survivors, reaper) as ((listed, listed_child), (done, done_child)):
        reaper.ensure_running()
        reaper.watch(listed.pid)
        reaper.watch(done.pid)
        reaper.forget(done.pid)  # its owner ended it normally: not the watchdog's any more
        reaper.close()  # as our death would: the kernel closes our end
        assert listed.wait(timeout=GONE_WITHIN_S) == -signal.SIGKILL
        assert wait_gone([listed_child]) == []
        assert alive(done.pid) and alive(done_child)


def test_a_killed_watchdog_is_replaced_and_told_every_listed_group(
    tmp_path: Path, survivors: list[int]
) -> None:
    reaper = Reaper()
    with two_groups(tmp_path, survivors, reaper) as ((first, first_child), (second, second_child)):
        reaper.watch(first.pid)
        old = reaper.watchdog_pid
        assert old is not None
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: not alive(old), "the killed watchdog's exit", timeout=5)
        reaper.watch(second.pid)  # notices, starts a new one, re-lists `first`
        assert reaper.watchdog_pid not in (None, old)
        reaper.close()
        assert first.wait(timeout=GONE_WITHIN_S) == -signal.SIGKILL
        assert second.wait(timeout=GONE_WITHIN_S) == -signal.SIGKILL
        assert wait_gone([first_child, second_child]) == []
