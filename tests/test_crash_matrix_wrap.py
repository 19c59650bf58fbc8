"""The kill -9 crash matrix through `acp-bridge wrap` (issue 14): the wrapper around our
own `serve` on the matrix's scripted scenarios, SIGKILLed at chosen and random points,
and separately its wrapped child, on both backends; then every session is loaded by a
new wrapper around a new child over the wire, prompted once more, and read back
in-process (tests/support/crash_matrix/wrap.py; the checks are the engine's,
tests/support/crash_matrix/__init__.py).

A CI sample (the engine's 7 fixed points plus one seeded random point, per target and
backend) runs by default; the long form (200 points per target and backend) under
`-m soak`; `bench/crash_matrix.py --wrap` is its command line.
"""

from __future__ import annotations

import os
import random
import signal
from pathlib import Path

import anyio
import pytest

from tests.support.crash_matrix import (
    CI_SAMPLE,
    random_point,
    run_passing,
    sample_points,
)
from tests.support.crash_matrix.wrap import WrapMatrixAgent, child_command
from tests.support.processes import wait_gone
from tests.support.waiting import until

SEED = int(os.environ.get("CRASH_MATRIX_SEED", "20240611"))


@pytest.mark.parametrize("target", ["wrapper", "child"])
@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
@pytest.mark.integration
@pytest.mark.long
def test_wrap_crash_matrix_ci_sample(tmp_path: Path, backend: str, target: str) -> None:
    rng = random.Random(f"{SEED}-{backend}-{target}")
    points = [*CI_SAMPLE, random_point(rng)]
    report = run_passing(points, backend, tmp_path, target)
    counts = report.counts()
    by_label = {r.point.label(): r for r in report.runs}
    if target == "wrapper":
        assert counts["mid_turn"] >= 4 and counts["synthetic_results"] >= 2, counts
        assert by_label["tools:permission#1"].interrupted_turn == 2
    else:
        # The wrapper closed the cut turns itself, answered them, and went on.
        assert counts["cut_turns"] >= 4 and counts["prompts_after_kill"] == len(points), counts
        assert by_label["tools:permission#1"].cut_turns == [2]
        assert by_label["command:command"].cut_turns == [2]
        assert counts["mid_turn"] == 0  # the wrapper was stopped normally: nothing to repair
    assert set(counts["restored"]) == {"load"}, counts


@pytest.mark.soak
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("target", ["wrapper", "child"])
@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
def test_wrap_crash_matrix_long(tmp_path: Path, backend: str, target: str) -> None:
    points = sample_points(int(os.environ.get("CRASH_MATRIX_POINTS", "200")), SEED)
    run_passing(points, backend, tmp_path, target)


# --- found by the matrix ------------------------------------------------------------------


@pytest.mark.integration
def test_prompt_right_after_the_child_died_between_turns_restarts_it(tmp_path: Path) -> None:
    async def main() -> None:
        script = tmp_path / "s.json"
        script.write_text('{"steps": [{"text": "one"}, {"text": "two"}]}')
        after = tmp_path / "after.json"
        after.write_text('{"steps": [{"text": "back"}]}')
        (tmp_path / "work").mkdir()
        child = child_command(tmp_path / "child", "jsonl", script, after=after, marker=tmp_path / "started")
        # A grandchild holds the child's stdout open after it dies (as an npx shim's
        # children may): the wrapper knows the process exited, its stdout has not ended.
        child[2] = "sleep 30 & " + child[2]
        agent = WrapMatrixAgent(tmp_path / "store", child, backend="jsonl", target="child")
        async with agent:
            await agent.initialize()
            pid = agent.find_child()
            assert pid is not None
            sid = await agent.new_session(tmp_path / "work")
            first = await agent.prompt(sid, "hello")
            assert first["stopReason"] == "end_turn"
            os.kill(pid, signal.SIGKILL)
            assert not await anyio.to_thread.run_sync(wait_gone, [pid])  # dead before the prompt is sent
            # And the wrapper has seen it exit (its pidfd): it reaped its child.
            await until(lambda: not Path(f"/proc/{pid}").exists(), "the wrapper reaping its killed child")
            second = await agent.prompt(sid, "are you back?")
            assert second["stopReason"] == "end_turn", second

    anyio.run(main)
