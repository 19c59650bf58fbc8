"""Phase A of the crash matrix: one agent per kill point runs its scenario and is
SIGKILLed at the point; what reached the client and what was on disk is recorded."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import orjson

from tests.support.acp_client import AgentProcess, ClientPolicy
from tests.support.acp_schema import validate_agent_message
from tests.support.processes import wait_gone

from .oracle import Run, check_phase_a, parse_raw, read_raw
from .scenarios import SCENARIOS, Scenario

# --- phase A: run and kill ----------------------------------------------------------


class MatrixPolicy(ClientPolicy):
    """Answers permission requests from a list; hangs on the `hang_at`-th one."""

    def __init__(self, answers: Sequence[str | None], hang_at: int | None) -> None:
        super().__init__()
        self.answers = list(answers)
        self.hang_at = hang_at
        self.hanging = anyio.Event()

    async def answer(self, method: str, params: dict[str, Any]) -> Any:
        if method == "session/request_permission":
            self.asked.append(params)
            k = len(self.asked)
            if k == self.hang_at:
                self.hanging.set()
                await anyio.sleep_forever()
            option = self.answers[k - 1] if k <= len(self.answers) else "allow_once"
            if option is None:
                return {"outcome": {"outcome": "cancelled"}}
            return {"outcome": {"outcome": "selected", "optionId": option}}
        return await super().answer(method, params)


VALIDATE_FIRST = 5
VALIDATE_EVERY = 50


class MatrixAgent(AgentProcess):
    """The harness agent, killable from inside the reader (on the Nth update)."""

    def __init__(self, *args: Any, kill_on_update: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kill_on_update = kill_on_update
        self.killed = anyio.Event()
        self.eof = anyio.Event()
        self.killed_at_updates: int | None = None
        self._shapes: dict[tuple[Any, ...], int] = {}

    async def _read(self) -> None:
        try:
            await super()._read()
        finally:
            self.eof.set()

    def _on_message(self, message: Any) -> None:
        super()._on_message(message)
        if self.kill_on_update is not None and len(self.updates) >= self.kill_on_update:
            self.kill()

    def _validate(self, item: Any) -> None:
        # Schema validation sampled: the first VALIDATE_FIRST messages of each shape
        # (update kind, method, response) and every VALIDATE_EVERY-th after (validating
        # one costs ~4 ms; a stream has hundreds). A violation raises at once.
        if isinstance(item, dict) and item.get("method") == "session/update":
            update = (item.get("params") or {}).get("update") or {}
            shape: tuple[Any, ...] = ("update", update.get("sessionUpdate"), update.get("status"))
        elif isinstance(item, dict):
            shape = ("method", item.get("method"), "id" in item, "error" in item)
        else:
            shape = ("other",)
        seen = self._shapes[shape] = self._shapes.get(shape, 0) + 1
        if seen <= VALIDATE_FIRST or seen % VALIDATE_EVERY == 0:
            validate_agent_message(item, self._requested)

    def kill(self) -> None:
        if not self.killed.is_set():
            self.killed_at_updates = len(self.updates)
            with contextlib.suppress(ProcessLookupError):
                self.kill9()
            self.killed.set()


async def first_of(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:
        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)


def file_state(work: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in work.iterdir() if p.is_file()}


def prepare_work(work: Path) -> None:
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("one\ntwo\n")
    (work / "sub").mkdir()
    (work / "sub" / "a.txt").write_text("alpha\n")


def write_scenario(script: Path, scenario: Scenario) -> None:
    """The `script:` model file of a scenario's steps."""
    doc: dict[str, Any] = {"steps": list(scenario.steps)}
    if scenario.chunk_delay_ms:
        doc["chunkDelayMs"] = scenario.chunk_delay_ms
    script.write_bytes(orjson.dumps(doc))


def drive_failed(run: Run, agent: MatrixAgent, who: str, exc: Exception) -> None:
    """A harness failure (schema violation, timeout...) is a failure too: the run says
    so, and the process is killed if the point has not killed it."""
    run.fail(f"driving {who} failed: {type(exc).__name__}: {exc}")
    if agent.killed_at_updates is None:
        with contextlib.suppress(Exception):
            agent.kill()


async def run_a(run: Run, backend: str, store: Path, scripts: Path, timeout: float = 60) -> None:
    """Start A on a new session, drive the scenario, kill it at the point."""
    point, scenario = run.point, SCENARIOS[run.point.scenario]
    script = scripts / f"a{run.index:04d}.json"
    write_scenario(script, scenario)
    policy = MatrixPolicy(scenario.permissions, point.n if point.kind == "permission" else None)
    before = file_state(run.work)
    agent = MatrixAgent(store, model=f"script:{script}", backend=backend, policy=policy,
                        kill_on_update=point.n if point.kind == "updates" else None)
    prompt_ids: dict[str, int] = {}
    try:
        with anyio.fail_after(timeout):
            async with agent:
                await agent.initialize()
                run.sid = await agent.new_session(run.work)
                first_prompt = anyio.Event()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(killer, agent, policy, run, first_prompt)
                    await send_prompts(tg, agent, run, scenario.prompts, first_prompt, prompt_ids,
                                       backend, store, timeout)
                    agent.kill()  # "end": after the last answer (or a no-op)
                    run.returncode = await agent.proc.wait()
                    await agent.eof.wait()
                    tg.cancel_scope.cancel()
    except Exception as exc:
        drive_failed(run, agent, "agent A", exc)
    finally:
        check_command_gone(run)
    if run.returncode is not None and run.returncode != -signal.SIGKILL:
        run.fail(f"agent A exited with {run.returncode} before it was killed; stderr: {agent.stderr[-2000:]!r}")
    finish_a(run, agent, prompt_ids, before, backend, store)


async def send_prompts(tg: anyio.abc.TaskGroup, agent: MatrixAgent, run: Run, prompts: Sequence[str],
                       first_prompt: anyio.Event, prompt_ids: dict[str, int], backend: str, store: Path,
                       timeout: float) -> tuple[int, anyio.Event | None]:
    """Phase A's prompts, one after the other, until the agent is killed (or dies): the
    log is read right after each answer, and a kill point of kind "answer" fires then.
    Returns the last turn prompted (0 if none) and the done-event of a prompt still
    unanswered (None if every prompt sent was answered)."""
    point = run.point
    turn, pending = 0, None
    for turn, text in enumerate(prompts, start=1):
        if agent.killed.is_set():
            return turn - 1, pending
        rid = f"prompt-{turn}"
        prompt_ids[rid] = turn
        done = pending = anyio.Event()

        async def send(rid: str = rid, text: str = text, done: anyio.Event = done) -> None:
            with contextlib.suppress(TimeoutError):
                await agent.request_raw("session/prompt", {"sessionId": run.sid, "prompt": [
                    {"type": "text", "text": text}]}, request_id=rid, timeout=timeout)
            done.set()

        tg.start_soon(send)
        first_prompt.set()
        await first_of(done, agent.killed, agent.eof)
        if agent.eof.is_set() and not agent.killed.is_set():
            break  # it died on its own: reported by the caller
        if done.is_set() and not agent.killed.is_set():
            run.snapshots[turn] = read_raw(backend, store, run.sid)
            pending = None
            if point.kind == "answer" and point.n == turn:
                agent.kill()
    return turn, pending


def check_command_gone(run: Run) -> None:
    """The command running at the kill (its shell wrote cmd.pid) is gone within 5 s."""
    pid_file = run.work / "cmd.pid"
    with contextlib.suppress(ValueError, OSError):
        shell = int(pid_file.read_text().strip() or "0")
        # Commands die with the agent, SIGKILL included (acp_bridge/tools/reaper.py).
        if shell and wait_gone([shell]):
            run.fail(f"the command (pid {shell}) outlived the agent that ran it")
            os.killpg(shell, signal.SIGKILL)


def finish_a(run: Run, agent: AgentProcess, prompt_ids: dict[str, int], before: dict[str, bytes],
             backend: str, store: Path) -> None:
    """What reached the client (prompt answers, live updates, the agent's requests),
    the files changed, the log the kill left; then the phase A checks."""
    count = 0
    for direction, message in agent.transcript:
        if direction != "<-":
            continue
        for item in message if isinstance(message, list) else [message]:
            if item.get("method") == "session/update":
                count += 1
                # Not the session's content: its title, and the commands offered once it opened.
                if item["params"]["update"]["sessionUpdate"] not in ("session_info_update",
                                                                     "available_commands_update"):
                    run.live_updates.append(item["params"]["update"])
            elif "method" in item and "id" in item:
                run.client_requests.append(item)
            elif item.get("id") in prompt_ids:
                turn = prompt_ids[item["id"]]
                run.answers[turn] = item
                run.updates_at_answer[turn] = len(run.live_updates)
    after = file_state(run.work)
    run.side_effects_seen = sorted(name for name in after if before.get(name) != after[name])
    if run.sid:
        run.pre_raw = read_raw(backend, store, run.sid)
        run.pre_events, run.pre_good, run.torn = parse_raw(run.pre_raw)
        check_phase_a(run, SCENARIOS[run.point.scenario])


async def killer(agent: MatrixAgent, policy: MatrixPolicy, run: Run, first_prompt: anyio.Event) -> None:
    point = run.point
    if point.kind == "delay":
        await first_prompt.wait()
        await anyio.sleep(point.delay)  # the kill point: this long after the event
    elif point.kind == "permission":
        await policy.hanging.wait()
        await anyio.sleep(point.delay)  # the kill point: this long after the event
    elif point.kind == "command":
        pid_file = run.work / "cmd.pid"
        while not (pid_file.exists() and pid_file.read_text().strip().isdigit()):
            await anyio.sleep(0.005)  # poll: the command's pid file (written by another process)
        await anyio.sleep(point.delay)  # the kill point: this long after the event
    else:
        return
    agent.kill()
