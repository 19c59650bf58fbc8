"""A full disk, for real: the stdio agent on a 300 KB tmpfs (DESIGN.md section 3, issue 13).

A big turn fails with `store_io` and is rolled back; a small prompt right after works
(the failed turn's events are dropped, not retried with every later write); once
space is freed the log on disk is what the client was told (the rolled-back events
never reappear, the failed turn is recorded with the reason it was answered), and
stdin EOF still ends the agent with status 0 and no traceback.

Mounting needs root; the test is skipped, saying why, where it cannot mount.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from session import SessionStore, check_invariants, open_backend
from tests.support.acp_client import AgentProcess, write_script

BIG_WORDS = 400  # words of 1,000 characters: ~400 KB of chunks, more than the tmpfs holds


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k,mode=0700", "tmpfs", str(mount_point)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


def fill(mount_point: Path, leave: int) -> Path:
    """A ballast file that leaves about `leave` bytes free."""
    ballast = mount_point / "ballast"
    stat = os.statvfs(mount_point)
    free = stat.f_bavail * stat.f_frsize
    with open(ballast, "ab") as f:
        f.write(b"\0" * max(free - leave, 0))
    return ballast


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.parametrize("external", [False, True], ids=["in-process", "external"])
def test_a_full_disk_fails_one_turn_and_the_disk_matches_the_answers(
    tiny_fs: Path, tmp_path: Path, backend: str, external: bool
) -> None:
    store, work = tiny_fs / "store", tmp_path / "work"
    work.mkdir()
    big = " ".join(f"{i:04d}" + "x" * 995 for i in range(BIG_WORDS))
    steps: list[dict[str, Any]] = [{"text": "hello there"}, {"text": big}, {"text": "small again"}]
    # An external model (a delay between chunks) makes the turn durable before it is
    # called, so the failure falls inside the turn; in-process, the whole turn goes.
    model = write_script(tmp_path / "model.json", *steps, chunk_delay_ms=1 if external else 0)
    answers: list[dict[str, Any]] = []

    async def main() -> str:
        async with AgentProcess(store, model=model, backend=backend) as agent:
            await agent.initialize()
            sid = await agent.new_session(work)
            answers.append(await agent.request_raw("session/prompt", {"sessionId": sid, "prompt": [
                {"type": "text", "text": "first"}]}))
            ballast = fill(tiny_fs, 96 << 10)
            for text in ("the big one", "a small one"):
                if text == "a small one" and backend == "sqlite" and external:
                    # The streamed rows of the failed step were committed to the WAL,
                    # one small transaction per write to the client: they hold the
                    # space until the database can checkpoint, so SQLite goes on only
                    # once space is freed (JSONL truncates its file and goes on at once).
                    ballast.unlink()
                answers.append(await agent.request_raw("session/prompt", {"sessionId": sid, "prompt": [
                    {"type": "text", "text": text}]}, timeout=30))
            ballast.unlink(missing_ok=True)
        assert agent.returncode == 0, agent.stderr.decode()[-3000:]
        assert b"Traceback" not in agent.stderr, agent.stderr.decode()[-3000:]
        return sid

    sid = anyio.run(main)
    first, failed, small = answers
    assert first["result"]["stopReason"] == "end_turn"
    assert failed["error"]["code"] == -32603 and failed["error"]["data"]["code"] == "store_io", failed
    message = failed["error"]["message"]
    assert ("No space left on device" if backend == "jsonl" else "database or disk is full") in message
    assert "rolled back to seq" in message
    assert small["result"]["stopReason"] == "end_turn", small

    sessions = SessionStore(open_backend(backend, store))
    loaded = sessions.load(sid)
    events = list(loaded.log.events)
    loaded.log.close()
    sessions.close()
    assert not loaded.report.repaired  # nothing was left open
    check_invariants(events, closed=True)
    ends = [e["data"] for e in events if e["type"] == "turn/end"]
    prompts = [e["data"]["content"][0]["text"] for e in events if e["type"] == "user/message"]
    assert not any("x" * 995 in str(e["data"]) for e in events)  # the rolled-back text is gone
    if external:
        # The prompt was durable before the model ran: the turn stays, closed as the
        # error it was answered with (settled like any failed turn).
        assert prompts == ["first", "the big one", "a small one"]
        assert ends[1]["reason"] == {"kind": "error", "step": 1, "message": message.removeprefix("turn failed: "),
                                     "code": "store_io", "retryable": True}
        if message.startswith("turn failed: "):  # closed at once: answered from its turn/end
            assert failed["error"]["data"]["turn"] == 2
        else:  # the closers did not fit either: the turn was closed before the next prompt
            closers_at = next(e["seq"] for e in events if e["type"] == "step/end" and e["data"]["turn"] == 2)
            assert failed["error"]["data"]["durableSeq"] == closers_at
        assert small["result"]["_meta"]["acpBridge"]["turn"] == 3
    else:
        # Nothing of the turn was durable: it is rolled back whole, as the answer says.
        assert prompts == ["first", "a small one"]
        assert f"rolled back to seq {seq_after_turn(events, 1)}" in message
        assert small["result"]["_meta"]["acpBridge"]["turn"] == 2
    assert [e["reason"]["kind"] for e in ends] == (["completed", "error", "completed"] if external
                                                   else ["completed", "completed"])


def seq_after_turn(events: list[Any], turn: int) -> int:
    """The next seq after `turn`'s `turn/end`."""
    return int(next(e["seq"] for e in events if e["type"] == "turn/end" and e["data"]["turn"] == turn)) + 1
