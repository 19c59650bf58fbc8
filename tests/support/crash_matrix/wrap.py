"""The crash matrix through `acp-bridge wrap` (issue 14): agent A is the wrapper around
our own `serve` running the matrix's scripted scenario, and the SIGKILL goes to one of
two targets.

- `wrapper`: the wrapper itself. Its child dies with it (the reaper); its log is
  repaired at the next load (`interrupted {crash}`), as for our own agent.
- `child`: the wrapped agent. The wrapper closes the cut turn at once with the crash
  closers and answers the pending prompt `cancelled` (`_meta.acpBridge.reason`
  `{interrupted, crash}`), unless the child died before it read the prompt: the
  restarted child then runs it; the next prompt, in the same wrapper, restarts the child
  if that did not (it loads its own session back from its store) and must end `end_turn`; then the
  wrapper is stopped normally (stdin EOF, exit 0), so its log ends between turns.

The wrapped command is `/bin/sh -c` choosing the script and `exec`ing
`python -m acp_bridge serve --store S2 --model script:...`: the first run plays the
scenario, a restarted one (after the child kill) answers in text only (a script model
serves its steps in order per process, so the restarted one would start the scenario
over).

Phase B is one new wrapper per backend around one new child on the same child store:
it loads every killed session over the wire (the child restored by its own
`session/load`), checks the repair report and the replay, prompts once more, closes.
Phase C is the engine's (the wrapper's log, in-process). The oracle is the engine's,
with two differences the wrapper's design names (docs/wrap.md): the replay carries the
wrapper's messageIds, statuses and rawOutput, so it is compared with the live stream
per turn by its text (message and thought text shown live is a prefix of the replay's,
and every answered turn's text is replayed exactly) rather than update by update; and
the live crash closers are stamped with the wrapper's clock, so they are compared
without `time`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import orjson

from session import Event
from tests.support.logs import closers_of
from tests.support.processes import wait_gone
from tests.support.wrapped import command_line

from .kill import (
    MatrixAgent,
    MatrixPolicy,
    check_command_gone,
    drive_failed,
    file_state,
    finish_a,
    killer,
    send_prompts,
    write_scenario,
)
from .oracle import Run, read_raw
from .scenarios import SCENARIOS

TARGETS = ("wrapper", "child")
AFTER_TEXT = "back after the child's crash"
B_TEXT = "back after the crash"

_CHOOSE = ('if [ -e "$1" ]; then s="$2"; else : > "$1"; s="$3"; fi; '
           'exec "$4" -m acp_bridge serve --store "$5" --backend "$6" --model "script:$s"')


def child_command(child_store: Path, backend: str, script: Path, *, after: Path | None = None,
                  marker: Path | None = None) -> list[str]:
    """Our own serve on `script`; with `marker`/`after`, a restarted one runs `after`."""
    if after is None or marker is None:
        return [sys.executable, "-m", "acp_bridge", "serve", "--store", str(child_store), "--backend", backend,
                "--model", f"script:{script}"]
    return ["/bin/sh", "-c", _CHOOSE, "sh", str(marker), str(after), str(script), sys.executable,
            str(child_store), backend]


class WrapMatrixAgent(MatrixAgent):
    """The wrapper as agent A; `kill()` SIGKILLs the target (the wrapper or its child)."""

    def __init__(self, store: Path, child: list[str], *, backend: str, target: str = "wrapper",
                 **kwargs: Any) -> None:
        super().__init__(store, backend=backend, **kwargs)
        self.command = [sys.executable, "-m", "acp_bridge", "wrap", "--store", str(store), "--backend", backend,
                        "--", *child]
        self.target = target
        self.child_pid: int | None = None

    def find_child(self) -> int | None:
        """The wrapper's child running `acp_bridge serve` (not its reaper's watchdog)."""
        try:
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        except OSError:
            return None
        for kid in map(int, kids):
            argv = command_line(kid)
            if "acp_bridge" in argv and "serve" in argv:
                return kid
        return None

    def kill(self) -> None:
        if self.target == "wrapper":
            super().kill()
            return
        if not self.killed.is_set():
            self.killed_at_updates = len(self.updates)
            pid = self.child_pid or self.find_child()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.killed.set()


async def run_a_wrap(run: Run, backend: str, store: Path, child_store: Path, scripts: Path, target: str,
                     timeout: float = 60) -> None:
    """Start the wrapper on a new session, drive the scenario, kill the target at the
    point; for the child target, collect the cut prompt's answer, prompt once more in
    the same wrapper and stop it normally."""
    point, scenario = run.point, SCENARIOS[run.point.scenario]
    script, after = scripts / f"a{run.index:04d}.json", scripts / f"a{run.index:04d}-after.json"
    write_scenario(script, scenario)
    # Twice: a prompt the dead child never read is sent again to the restarted one
    # (docs/wrap.md, "Restart, not loss"), before the prompt after the kill.
    after.write_bytes(orjson.dumps({"steps": [{"text": AFTER_TEXT}] * 2}))
    child = child_command(child_store, backend, script, after=after, marker=scripts / f"a{run.index:04d}.started")
    policy = MatrixPolicy(scenario.permissions, point.n if point.kind == "permission" else None)
    before = file_state(run.work)
    agent = WrapMatrixAgent(store, child, backend=backend, target=target, policy=policy,
                            kill_on_update=point.n if point.kind == "updates" else None)
    prompt_ids: dict[str, int] = {}
    run.target = target
    try:
        with anyio.fail_after(timeout):
            async with agent:
                await agent.initialize()
                agent.child_pid = agent.find_child()
                if target == "child" and agent.child_pid is None:
                    run.fail("the wrapper's child (acp_bridge serve) was not found")
                run.sid = await agent.new_session(run.work)
                first_prompt = anyio.Event()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(killer, agent, policy, run, first_prompt)
                    turn, unanswered = await send_prompts(tg, agent, run, scenario.prompts, first_prompt,
                                                          prompt_ids, backend, store, timeout)
                    pending = None if unanswered is None else (turn, unanswered)
                    agent.kill()  # "end": after the last answer (or a no-op)
                    if target == "wrapper":
                        run.returncode = await agent.proc.wait()
                        await agent.eof.wait()
                    else:
                        await _after_child_kill(run, agent, backend, store, pending, turn, prompt_ids, timeout)
                        await agent.close_stdin()
                        run.returncode = await agent.proc.wait()
                        await agent.eof.wait()
                    tg.cancel_scope.cancel()
    except Exception as exc:
        drive_failed(run, agent, "the wrapper", exc)
        if target == "child":
            with contextlib.suppress(Exception):
                agent.kill9()
    finally:
        check_command_gone(run)
    expected = -signal.SIGKILL if target == "wrapper" else 0
    if run.returncode is not None and run.returncode != expected:
        run.fail(f"the wrapper exited with {run.returncode}, expected {expected}; stderr: {agent.stderr[-2000:]!r}")
    finish_a(run, agent, prompt_ids, before, backend, store)
    if target == "child" and run.sid:
        check_cut_turns(run)


async def _after_child_kill(run: Run, agent: WrapMatrixAgent, backend: str, store: Path,
                            pending: tuple[int, anyio.Event] | None, last: int, prompt_ids: dict[str, int],
                            timeout: float) -> None:
    """The child is dead: the pending prompt is answered at once; the next prompt
    restarts it and ends `end_turn`."""
    if agent.eof.is_set():
        return
    if pending is not None:
        turn, done = pending
        with anyio.move_on_after(10):
            await done.wait()
        if not done.is_set():
            run.fail(f"the prompt of turn {turn} was not answered within 10 s of the child's death")
            return
        run.snapshots[turn] = read_raw(backend, store, run.sid)
        run.cut_prompt = turn
    # Between turns the child is dead when the next prompt comes (a prompt racing
    # the death itself is a crash of that turn).
    # The wrapper must also have seen it die: a prompt racing its reader to the child's
    # EOF is sent to the dead child and cut (a bug, pinned by
    # tests/test_crash_matrix_wrap.py::test_prompt_right_after_the_child_died_between_turns_restarts_it).
    if agent.child_pid is not None:
        await anyio.to_thread.run_sync(wait_gone, [agent.child_pid])
        mark = f"(pid {agent.child_pid}) exited".encode()
        with anyio.move_on_after(5):
            while mark not in agent.stderr:
                await anyio.sleep(0.01)
        await anyio.sleep(0.05)
    turn = last + 1
    rid = f"prompt-{turn}"
    prompt_ids[rid] = turn
    answer = await agent.request_raw("session/prompt", {"sessionId": run.sid, "prompt": [
        {"type": "text", "text": "are you back?"}]}, request_id=rid, timeout=timeout)
    run.snapshots[turn] = read_raw(backend, store, run.sid)
    result = answer.get("result") or {}
    if result.get("stopReason") != "end_turn" or result.get("_meta", {}).get("acpBridge", {}).get("turn") != turn:
        run.fail(f"the prompt after the child's death answered {answer}, expected end_turn as turn {turn}")
    run.after_kill_turn = turn
    texts = "".join(u["update"]["content"].get("text", "") for u in agent.updates
                    if u["update"]["sessionUpdate"] == "agent_message_chunk")
    if AFTER_TEXT not in texts:
        run.fail("the restarted child's answer was not streamed to the editor")


def _without_time(events: list[Event]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "time"} for e in events]


def check_cut_turns(run: Run) -> None:
    """Every turn the child's death cut is closed with exactly the crash closers of
    what was logged before them (stamped with the wrapper's clock: compared without
    `time`), and its prompt was answered `cancelled` with that reason."""
    events = run.pre_events
    starts = {e["data"]["turn"]: i for i, e in enumerate(events) if e["type"] == "turn/start"}
    for end_at, end in enumerate(events):
        if end["type"] != "turn/end" or end["data"]["reason"].get("kind") != "interrupted":
            continue
        turn = end["data"]["turn"]
        run.cut_turns.append(turn)
        if end["data"]["reason"] != {"kind": "interrupted", "cause": "crash"}:
            run.fail(f"turn {turn} ends {end['data']['reason']}, expected interrupted by a crash")
        tail = _without_time(events[: end_at + 1])
        if not any(_without_time(closers_of(events[:k])) == tail[k:]
                   for k in range(starts.get(turn, 0) + 1, end_at + 1)):
            run.fail(f"the cut turn {turn} is not closed with exactly the crash closers: "
                     f"{[e['type'] for e in events[starts.get(turn, 0):end_at + 1]][-6:]}")
        answer = run.answers.get(turn, {}).get("result")
        want = {"stopReason": "cancelled", "_meta": {"acpBridge": {"turn": turn, "reason": end["data"]["reason"]}}}
        if answer != want:
            run.fail(f"the cut turn {turn} was answered {run.answers.get(turn)}, expected {want}")
    # A prompt pending at the kill that no crash cut was answered by the child before it
    # died (its answer was in the pipe), or by the restarted child (the dead one never
    # read it): check_settlement holds it to its turn/end.


# --- phase B: a new wrapper around a new child loads every session ---------------------


async def run_b_wrap(runs: list[Run], backend: str, store: Path, child_store: Path, scripts: Path) -> None:
    from .reload import load_every_run  # (reload imports this module)

    live = [r for r in runs if r.sid]
    script = scripts / "b.json"
    script.write_bytes(orjson.dumps({"steps": [{"text": B_TEXT}] * len(live)}))
    await load_every_run(lambda: WrapMatrixAgent(store, child_command(child_store, backend, script), backend=backend),
                         live, "wrapper B", wrapped=True)


def turn_texts(updates: list[dict[str, Any]], bounds: list[int] | None = None) -> list[dict[str, str]]:
    """Per turn, the message and the thought text streamed (in order), without the
    wrapper's own note of how the turn ended (the turn's last note-shaped update: the
    host sends it live right before the answer, and it replays last). Turns are cut at
    each `user_message_chunk` run (a replay), or at the given update indexes (live: turn
    i is updates[bounds[i]:bounds[i + 1]], the last one runs to the end)."""
    if bounds is not None:
        ends = [*bounds[1:], len(updates)]
        return [_texts(_without_last_note(updates[start:end])) for start, end in zip(bounds, ends, strict=True)]
    turns: list[list[dict[str, Any]]] = []
    prompt_open = False
    for update in updates:
        if update["sessionUpdate"] == "user_message_chunk":
            if not prompt_open:
                turns.append([])
            prompt_open = True
            continue
        prompt_open = False
        if turns:
            turns[-1].append(update)
    return [_texts(_without_last_note(t)) for t in turns]


def _without_last_note(updates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    last = next((i for i in range(len(updates) - 1, -1, -1) if _wrapper_note(updates[i])), None)
    return updates if last is None else [*updates[:last], *updates[last + 1:]]


def _texts(updates: list[dict[str, Any]]) -> dict[str, str]:
    out = {"message": "", "thought": ""}
    for update in updates:
        kind = update["sessionUpdate"]
        if kind in ("agent_message_chunk", "agent_thought_chunk") and update["content"].get("type") == "text":
            out["message" if kind == "agent_message_chunk" else "thought"] += update["content"]["text"]
    return out


def _wrapper_note(update: dict[str, Any]) -> bool:
    """Our note that ends a replayed turn (acp_bridge.host.updates.end_notice): messageId
    `t{turn}-end`, the reason in `_meta.acpBridge`. A wrapped acp-bridge's own note,
    recorded as the step's text, replays under the step's messageId and stays."""
    meta = update.get("_meta") or {}
    return update["sessionUpdate"] == "agent_message_chunk" and str(update.get("messageId", "")).endswith("-end") \
        and isinstance(meta.get("acpBridge"), dict) and "reason" in meta["acpBridge"]


def check_wrapped_replay(run: Run, replay: list[dict[str, Any]]) -> None:
    """The replay against the live stream, turn by turn, by text: an answered turn's
    text is replayed exactly, the text shown of the cut one is a prefix of its replay."""
    answered = sorted(run.answers)
    bounds = [0] + [run.updates_at_answer[t] for t in answered]
    # The wrapper's own note of how a turn ended is left out of the text on both sides
    # (`turn_texts`): a cut turn's replay may hold more text than was shown before it.
    live = turn_texts(run.live_updates, bounds)
    back = turn_texts(replay)
    for i, shown in enumerate(live):
        turn = i + 1
        if not any(shown.values()) and i >= len(answered):
            continue  # nothing shown after the last answer
        got = back[i] if i < len(back) else {"message": "", "thought": ""}
        for key in ("message", "thought"):
            # A turn the crash cut (unanswered, or answered `cancelled` by the wrapper)
            # replays the text shown live, and maybe more (what reached the log, not the editor).
            exact = turn in run.answers and turn not in run.cut_turns
            ok = got[key] == shown[key] if exact else got[key].startswith(shown[key])
            if not ok:
                run.fail(f"turn {turn}: the {key} text shown live is not {'what' if exact else 'a prefix of what'} "
                         f"the replay holds: shown {len(shown[key])} characters ...{shown[key][-40:]!r}, replayed "
                         f"{len(got[key])} ...{got[key][-40:]!r}")

