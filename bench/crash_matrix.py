"""The kill -9 crash matrix: scripted sessions through the real stdio agent, killed
with SIGKILL at chosen and at random points, then loaded by a new agent process.

    python bench/crash_matrix.py --points 200 --backend jsonl|sqlite|both [--seed S] [--jobs J]

Each kill point runs one agent process ("A") on one scripted session (text, reasoning,
tool calls with and without permission, failed and cancelled turns, several turns) and
SIGKILLs it at the point: after the Nth `session/update` received, while a permission
request is pending, while a command runs, right after the Nth prompt answer, after a
random delay, or after the last answer. Then one new agent process ("B") per backend
loads every killed session over the wire (`session/load`), checks the repair report
and the replay, prompts it once more and closes it; finally every log is read back
in-process (`SessionStore.load`) and compared with what was on disk right after each
answer and right after the kill:

- A died of the SIGKILL (not of its own accord before it);
- every answered turn is durable, settled as its `turn/end` says, and byte-identical
  (JSONL lines / SQLite rows) from the moment its answer arrived to the end;
- no permission request and no side effect (a written file, a started command)
  without its `tool/call` on disk first;
- the load answers; the interrupted turn (if the log ended inside one) is closed with
  exactly `interrupted_turn_closers(events before the load)`, ending in
  `turn/end {interrupted, crash}`; a closed log is left untouched;
- the replay holds every turn, and starts with exactly what A streamed live for its
  answered turns;
- the next prompt is turn N+1 and ends `end_turn`; the final log passes
  `check_invariants(closed=True)` and its model transcript has no unanswered call.

Prints counts (kill points, loads ok, failures) and exits 1 if anything failed. The
engine is shared with tests/test_crash_matrix.py (the CI sample and the soak form).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the repo's packages (tests/ included)
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import anyio.abc  # noqa: E402
import orjson  # noqa: E402

from session import (  # noqa: E402
    Event,
    SessionStore,
    check_invariants,
    derive_messages,
    interrupted_turn_closers,
    open_backend,
)
from session.transcript import unanswered_calls  # noqa: E402
from tests.acp_client import AgentProcess, ClientPolicy  # noqa: E402
from tests.acp_schema import validate_agent_message  # noqa: E402

Raw = bytes | list[tuple[int, str, int, bytes]]  # JSONL file bytes | SQLite rows

# --- scenarios ----------------------------------------------------------------------


def _call(cid: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": arguments}


USAGE = {"inputTokens": 40, "outputTokens": 12}


@dataclass(frozen=True)
class Scenario:
    name: str
    prompts: tuple[str, ...]
    steps: tuple[dict[str, Any], ...]  # the model script, one entry per model call
    permissions: tuple[str | None, ...] = ()  # answers in order (None = cancelled)
    chunk_delay_ms: int = 0
    # relative path -> tool call id: if the file exists (or changed) after the kill,
    # that call's `tool/call` must be on disk
    side_effects: tuple[tuple[str, str], ...] = ()
    never: tuple[str, ...] = ()  # files no turn may create (rejected / cancelled writes)
    long_command: bool = False  # holds a 30 s command: only "command"/early points
    span: float = 0.3  # seconds from the first prompt to the last answer, roughly (measured;
    # random delays fall in it)

    @property
    def estimated_updates(self) -> int:
        """Roughly how many session/updates a full run streams (random counts fall in it)."""
        total = 1  # session_info_update
        for entry in self.steps:
            total += len(str(entry.get("thinking", "")).split()) + len(str(entry.get("text", "")).split())
            total += 3 * len(entry.get("toolCalls", ())) + ("usage" in entry)
        return total


LONG_TEXT = " ".join(f"w{n}" for n in range(600))

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "chat",
            ("hello", "think it through", "this one fails", "and the last one"),
            (
                {"thinking": "the user greets me", "text": "Hello! How can I help you today?", "usage": USAGE},
                {"thinking": "first this then that and then the rest",
                 "text": "Here is a longer answer with quite a few words in it to stream out", "usage": USAGE},
                {"text": "partial output before", "error": {"message": "provider overloaded", "code": "overloaded",
                                                            "retryable": True}},
                {"text": "goodbye for now"},
            ),
            chunk_delay_ms=6,
            span=0.33,
        ),
        Scenario(
            "tools",
            ("look around", "write a file", "edit and run", "try a rejected write"),
            (
                {"text": "Looking.", "toolCalls": [_call("r1", "read_file", path="notes.txt"),
                                                   _call("l1", "list_dir", path=".")]},
                {"text": "I see notes.txt with two lines."},
                {"thinking": "a new file", "toolCalls": [_call("w1", "write_file", path="out.txt",
                                                               content="hello\nworld\n")]},
                {"text": "Written out.txt."},
                {"toolCalls": [_call("e1", "edit_file", path="notes.txt", old_text="one", new_text="ONE"),
                               _call("x1", "run_command", command="echo ran > ran.txt; sleep 0.05")]},
                {"text": "Edited and ran.", "usage": USAGE},
                {"toolCalls": [_call("w2", "write_file", path="rejected.txt", content="no\n")]},
                {"text": "Not written, as you wish."},
            ),
            permissions=("allow_once", "allow_once", "allow_once", "reject_once"),
            chunk_delay_ms=5,
            side_effects=(("out.txt", "w1"), ("notes.txt", "e1"), ("ran.txt", "x1")),
            never=("rejected.txt",),
            span=0.3,
        ),
        Scenario(
            "steps",
            ("read in three steps", "write, then cancel the permission", "one more"),
            (
                {"text": "step one", "toolCalls": [_call("s1", "read_file", path="notes.txt", line=1, limit=1)]},
                {"text": "step two", "toolCalls": [_call("s2", "read_file", path="sub/a.txt")]},
                {"thinking": "almost there", "toolCalls": [_call("s3", "list_dir", path="sub")]},
                {"text": "All read."},
                {"toolCalls": [_call("c1", "write_file", path="cancelled.txt", content="x")]},
                {"text": "Still here after the cancel."},
            ),
            permissions=(None,),
            chunk_delay_ms=4,
            never=("cancelled.txt",),
            span=0.12,
        ),
        Scenario(
            "stream",  # one long step: more than one buffer flush (512 events) before its end
            ("stream a lot", "short"),
            ({"text": LONG_TEXT, "usage": USAGE}, {"text": "short answer"}),
            span=0.05,
        ),
        Scenario(
            "command",
            ("warm up", "run the long command"),
            (
                {"text": "ready when you are"},
                {"text": "Running it.", "toolCalls": [_call("x9", "run_command",
                                                            command="echo $$ > cmd.pid; exec sleep 30")]},
                {"text": "done"},
            ),
            permissions=("allow_once",),
            chunk_delay_ms=1,
            side_effects=(("cmd.pid", "x9"),),
            long_command=True,
        ),
    )
}

# --- kill points --------------------------------------------------------------------

KINDS = ("updates", "permission", "command", "answer", "delay", "end")


@dataclass(frozen=True)
class KillPoint:
    """Where to SIGKILL agent A. `n`: the update count (updates), the permission
    request (permission) or the prompt answer (answer) to kill at; `delay`: seconds
    after the first prompt (delay) or after the request/command was seen."""

    scenario: str
    kind: str
    n: int = 0
    delay: float = 0.0

    def label(self) -> str:
        extra = f"#{self.n}" if self.n else ""
        wait = f"+{self.delay * 1000:.0f}ms" if self.delay else ""
        return f"{self.scenario}:{self.kind}{extra}{wait}"


def chosen_points() -> list[KillPoint]:
    """The deterministic catalogue: every answer and permission request of every
    scenario, the running command, and a few update counts."""
    points: list[KillPoint] = []
    for s in SCENARIOS.values():
        answers = range(1, len(s.prompts) + 1) if not s.long_command else range(1, 2)
        points.extend(KillPoint(s.name, "answer", k) for k in answers)
        asks = len(s.permissions) if not s.long_command else 0
        points.extend(KillPoint(s.name, "permission", k) for k in range(1, asks + 1))
        if s.long_command:
            points.append(KillPoint(s.name, "command"))
            points.append(KillPoint(s.name, "permission", 1))
        else:
            points.append(KillPoint(s.name, "end"))
            est = s.estimated_updates
            points.extend(KillPoint(s.name, "updates", n) for n in sorted({1, 2, est // 3, est // 2, est - 2}) if n > 0)
    return points


CI_SAMPLE = (
    KillPoint("chat", "updates", 6),
    KillPoint("chat", "answer", 3),  # right after a failed turn's error answer
    KillPoint("tools", "permission", 1),
    KillPoint("tools", "updates", 30),
    KillPoint("steps", "updates", 9),  # inside a multi-step turn
    KillPoint("stream", "updates", 600),  # after a buffer flush, mid-step
    KillPoint("command", "command"),
)


def random_point(rng: random.Random) -> KillPoint:
    name = rng.choice([s for s in SCENARIOS if not SCENARIOS[s].long_command] + ["command"])
    s = SCENARIOS[name]
    if s.long_command:
        return KillPoint(name, "command", delay=round(rng.uniform(0, 0.1), 3))
    roll = rng.random()
    if roll < 0.5:
        return KillPoint(name, "updates", rng.randint(1, s.estimated_updates))
    if roll < 0.85:
        return KillPoint(name, "delay", delay=round(rng.uniform(0, s.span), 3))
    if s.permissions and roll < 0.95:
        return KillPoint(name, "permission", rng.randint(1, len(s.permissions)), delay=round(rng.uniform(0, 0.02), 3))
    return KillPoint(name, "answer", rng.randint(1, len(s.prompts)))


def sample_points(count: int, seed: int) -> list[KillPoint]:
    """`count` points: the chosen catalogue (cut to `count`), then random ones."""
    rng = random.Random(seed)
    points = chosen_points()[:count]
    while len(points) < count:
        points.append(random_point(rng))
    return points


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


@dataclass
class Run:
    """One kill point: what A did, what the store held, what went wrong."""

    index: int
    point: KillPoint
    work: Path
    sid: str = ""
    answers: dict[int, dict[str, Any]] = field(default_factory=dict)  # turn -> response
    updates_at_answer: dict[int, int] = field(default_factory=dict)  # turn -> live updates before it
    snapshots: dict[int, Raw] = field(default_factory=dict)  # turn -> raw log when its answer arrived
    live_updates: list[dict[str, Any]] = field(default_factory=list)
    client_requests: list[dict[str, Any]] = field(default_factory=list)
    side_effects_seen: list[str] = field(default_factory=list)  # files changed/created by A
    returncode: int | None = None
    pre_raw: Raw = b""
    pre_events: list[Event] = field(default_factory=list)
    pre_good: Raw = b""  # pre_raw without a torn tail
    torn: bool = False
    loaded_over_wire: bool = False
    loaded_in_process: bool = False
    load_meta: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.failures.append(f"[{self.index} {self.point.label()} {self.sid}] {message}")

    @property
    def interrupted_turn(self) -> int | None:
        closers = interrupted_turn_closers(self.pre_events)
        return int(closers[-1]["data"]["turn"]) if closers else None


def read_raw(backend: str, store: Path, sid: str) -> Raw:
    """The stored log as bytes (JSONL) or rows (SQLite), read without taking the lock."""
    if backend == "jsonl":
        return (store / "sessions" / f"{sid}.jsonl").read_bytes()
    db = sqlite3.connect(f"file:{store / 'sessions.sqlite3'}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute("SELECT seq, type, time, data FROM events WHERE session_id = ? ORDER BY seq",
                          (sid,)).fetchall()
    finally:
        db.close()
    return [(int(seq), str(t), int(tm), bytes(d) if not isinstance(d, str) else d.encode()) for seq, t, tm, d in rows]


def parse_raw(raw: Raw) -> tuple[list[Event], Raw, bool]:
    """(events, the raw log without a torn tail, torn?) - an independent reading of
    the stored format: complete lines (rows) that parse as events in seq order."""
    events: list[Event] = []
    if isinstance(raw, bytes):
        end = raw.find(b"\n") + 1  # after the header
        good = end
        torn = False
        while good < len(raw):
            nl = raw.find(b"\n", good)
            if nl < 0:
                torn = True
                break
            try:
                event = orjson.loads(raw[good:nl])
            except orjson.JSONDecodeError:
                torn = True
                break
            if not isinstance(event, dict) or event.get("seq") != len(events):
                torn = True
                break
            events.append(cast(Event, event))
            good = nl + 1
        return events, raw[:good], torn
    rows = list(raw)
    for i, (seq, etype, stamp, data) in enumerate(rows):
        if seq != i:
            return events, rows[:i], True
        try:
            events.append(cast(Event, {"type": etype, "seq": seq, "time": stamp, "data": orjson.loads(data)}))
        except orjson.JSONDecodeError:
            return events, rows[:i], True
    return events, rows, False


def prefix_through_turn(raw: Raw, events: list[Event], turn: int) -> Raw | None:
    """The raw log up to and including `turn`'s `turn/end` (None if it has none)."""
    idx = next((i for i, e in enumerate(events) if e["type"] == "turn/end" and e["data"]["turn"] == turn), None)
    if idx is None:
        return None
    if isinstance(raw, bytes):
        pos = raw.find(b"\n") + 1
        for _ in range(idx + 1):
            pos = raw.find(b"\n", pos) + 1
        return raw[:pos]
    return list(raw)[: idx + 1]


def is_prefix(prefix: Raw, whole: Raw) -> bool:
    if isinstance(prefix, bytes) and isinstance(whole, bytes):
        return whole.startswith(prefix)
    if isinstance(prefix, list) and isinstance(whole, list):
        return whole[: len(prefix)] == prefix
    return False


STOP_REASONS = {"completed": "end_turn", "max_tokens": "max_tokens", "max_steps": "max_turn_requests",
                "refusal": "refusal", "cancelled": "cancelled", "interrupted": "cancelled"}


def check_settlement(run: Run, turn: int, response: dict[str, Any], end: Event | None) -> None:
    """An answered turn is durable, and its answer is the settlement of its turn/end."""
    if end is None:
        run.fail(f"turn {turn} was answered ({response}) but has no turn/end on disk after the kill")
        return
    why = end["data"]["reason"]
    if "result" in response:
        expected = {"stopReason": STOP_REASONS.get(why["kind"]), "_meta": {"acpBridge": {"turn": turn,
                                                                                           "reason": why}}}
        if response["result"] != expected:
            run.fail(f"turn {turn} answered {response['result']}, its turn/end says {why}")
    else:
        data = response["error"].get("data") or {}
        if why["kind"] != "error" or data.get("turn") != turn or data.get("step") != why.get("step"):
            run.fail(f"turn {turn} answered error {response['error']}, its turn/end says {why}")


async def _first_of(*events: anyio.Event) -> None:
    async with anyio.create_task_group() as tg:
        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)


def _file_state(work: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in work.iterdir() if p.is_file()}


def prepare_work(work: Path) -> None:
    work.mkdir(parents=True)
    (work / "notes.txt").write_text("one\ntwo\n")
    (work / "sub").mkdir()
    (work / "sub" / "a.txt").write_text("alpha\n")


async def run_a(run: Run, backend: str, store: Path, scripts: Path, timeout: float = 60) -> None:
    """Start A on a new session, drive the scenario, kill it at the point."""
    point, scenario = run.point, SCENARIOS[run.point.scenario]
    script = scripts / f"a{run.index:04d}.json"
    doc: dict[str, Any] = {"steps": list(scenario.steps)}
    if scenario.chunk_delay_ms:
        doc["chunkDelayMs"] = scenario.chunk_delay_ms
    script.write_bytes(orjson.dumps(doc))
    policy = MatrixPolicy(scenario.permissions, point.n if point.kind == "permission" else None)
    before = _file_state(run.work)
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
                    tg.start_soon(_killer, agent, policy, run, first_prompt)
                    for turn, text in enumerate(scenario.prompts, start=1):
                        if agent.killed.is_set():
                            break
                        rid = f"prompt-{turn}"
                        prompt_ids[rid] = turn
                        done = anyio.Event()

                        async def send(rid: str = rid, text: str = text, done: anyio.Event = done) -> None:
                            with contextlib.suppress(TimeoutError):
                                await agent.request_raw("session/prompt", {"sessionId": run.sid, "prompt": [
                                    {"type": "text", "text": text}]}, request_id=rid, timeout=timeout)
                            done.set()

                        tg.start_soon(send)
                        first_prompt.set()
                        await _first_of(done, agent.killed, agent.eof)
                        if agent.eof.is_set() and not agent.killed.is_set():
                            break  # it died on its own: reported below
                        if done.is_set() and not agent.killed.is_set():
                            run.snapshots[turn] = read_raw(backend, store, run.sid)
                            if point.kind == "answer" and point.n == turn:
                                agent.kill()
                    agent.kill()  # "end": after the last answer (or a no-op)
                    run.returncode = await agent.proc.wait()
                    await agent.eof.wait()
                    tg.cancel_scope.cancel()
    except Exception as exc:  # a harness failure (schema violation, timeout...) is a failure too
        run.fail(f"driving agent A failed: {type(exc).__name__}: {exc}")
        if agent.killed_at_updates is None:
            with contextlib.suppress(Exception):
                agent.kill()
    finally:
        pid_file = run.work / "cmd.pid"
        if pid_file.exists():  # the 30 s command outlives the agent: end it
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(pid_file.read_text().strip() or "0"), signal.SIGKILL)
    if run.returncode is not None and run.returncode != -signal.SIGKILL:
        run.fail(f"agent A exited with {run.returncode} before it was killed; stderr: {agent.stderr[-2000:]!r}")
    # What reached the client: prompt answers, live updates, the agent's requests.
    count = 0
    for direction, message in agent.transcript:
        if direction != "<-":
            continue
        for item in message if isinstance(message, list) else [message]:
            if item.get("method") == "session/update":
                count += 1
                if item["params"]["update"]["sessionUpdate"] != "session_info_update":
                    run.live_updates.append(item["params"]["update"])
            elif "method" in item and "id" in item:
                run.client_requests.append(item)
            elif item.get("id") in prompt_ids:
                turn = prompt_ids[item["id"]]
                run.answers[turn] = item
                run.updates_at_answer[turn] = len(run.live_updates)
    after = _file_state(run.work)
    run.side_effects_seen = sorted(name for name in after if before.get(name) != after[name])
    if run.sid:
        run.pre_raw = read_raw(backend, store, run.sid)
        run.pre_events, run.pre_good, run.torn = parse_raw(run.pre_raw)
        check_phase_a(run, scenario)


async def _killer(agent: MatrixAgent, policy: MatrixPolicy, run: Run, first_prompt: anyio.Event) -> None:
    point = run.point
    if point.kind == "delay":
        await first_prompt.wait()
        await anyio.sleep(point.delay)
    elif point.kind == "permission":
        await policy.hanging.wait()
        await anyio.sleep(point.delay)
    elif point.kind == "command":
        pid_file = run.work / "cmd.pid"
        while not (pid_file.exists() and pid_file.read_text().strip().isdigit()):
            await anyio.sleep(0.005)
        await anyio.sleep(point.delay)
    else:
        return
    agent.kill()


def check_phase_a(run: Run, scenario: Scenario) -> None:
    events = run.pre_events
    try:
        check_invariants(events)
    except Exception as exc:
        run.fail(f"the log left by the kill breaks the invariants: {exc}")
    ends = {e["data"]["turn"]: e for e in events if e["type"] == "turn/end"}
    for turn, response in sorted(run.answers.items()):
        check_settlement(run, turn, response, ends.get(turn))
        prefix = prefix_through_turn(run.pre_good, events, turn)
        snap = run.snapshots.get(turn)
        if snap is not None and prefix is not None:
            snap_prefix = prefix_through_turn(snap, parse_raw(snap)[0], turn)
            if snap_prefix != prefix:
                run.fail(f"turn {turn} changed on disk between its answer and the kill")
    calls = {e["data"]["callId"] for e in events if e["type"] == "tool/call"}
    for request in run.client_requests:
        call_id = (request.get("params") or {}).get("toolCall", {}).get("toolCallId")
        if call_id is not None and call_id not in calls:
            run.fail(f"{request['method']} for {call_id} reached the client before its tool/call was on disk")
    effects = dict(scenario.side_effects)
    for name in run.side_effects_seen:
        if name in scenario.never:
            run.fail(f"{name} was written although its permission was refused")
        elif name in effects and effects[name] not in calls:
            run.fail(f"{name} changed although the tool/call of {effects[name]} is not on disk")


# --- phase B: load, replay, prompt --------------------------------------------------


async def run_b(runs: list[Run], backend: str, store: Path, scripts: Path) -> None:
    """One new agent loads every killed session, checks, prompts once more, closes."""
    live = [r for r in runs if r.sid]
    script = scripts / "b.json"
    script.write_bytes(orjson.dumps({"steps": [{"text": "back after the crash"}] * len(live)}))
    try:
        async with MatrixAgent(store, model=f"script:{script}", backend=backend) as agent:
            await agent.initialize()
            for run in live:
                await _load_one(agent, run)
        if agent.returncode != 0:
            for run in live:
                run.fail(f"agent B exited with {agent.returncode}: {agent.stderr[-2000:]!r}")
    except Exception as exc:
        for run in live:
            run.fail(f"driving agent B failed: {type(exc).__name__}: {exc}")


async def _load_one(agent: AgentProcess, run: Run) -> None:
    params = {"sessionId": run.sid, "cwd": str(run.work), "mcpServers": []}
    response = await agent.request_raw("session/load", params, timeout=30)
    if "error" in response:
        run.fail(f"session/load failed: {response['error']}")
        return
    run.loaded_over_wire = True
    meta = run.load_meta = response["result"]["_meta"]["acpBridge"]
    closers = interrupted_turn_closers(run.pre_events)
    repair = meta["repair"]
    expected = {"interruptedTurn": run.interrupted_turn, "closers": len(closers),
                "syntheticResults": sum(1 for c in closers if c["type"] == "tool/result"),
                "repaired": bool(closers) or run.torn}
    got = {k: repair.get(k) for k in expected}
    if got != expected:
        run.fail(f"load repair report {repair}, expected {expected}")
    replay = agent.updates_of(run.sid)
    users = {u.get("messageId") for u in replay if u["sessionUpdate"] == "user_message_chunk"}
    turns = {e["data"]["turn"] for e in run.pre_events if e["type"] == "user/message"}
    missing = sorted(t for t in turns if f"t{t}-user" not in users)
    if missing:
        run.fail(f"the replay lacks the prompts of turns {missing}")
    if run.answers:
        last = max(run.answers)
        live = run.live_updates[: run.updates_at_answer[last]]
        replayed = [u for u in replay if u["sessionUpdate"] != "user_message_chunk"]
        if replayed[: len(live)] != live:
            first = next((i for i, (a, b) in enumerate(zip(live, replayed, strict=False)) if a != b),
                         min(len(live), len(replayed)))
            run.fail(f"the replay differs from the live stream of the answered turns at update {first}: "
                     f"live {live[first] if first < len(live) else None}, "
                     f"replay {replayed[first] if first < len(replayed) else None}")
    if closers:
        failed = [u for u in replay if u["sessionUpdate"] in ("tool_call", "tool_call_update")
                  and u.get("status") == "failed"]
        synthetic = {c["data"]["callId"] for c in closers if c["type"] == "tool/result"}
        if not synthetic <= {u["toolCallId"] for u in failed}:
            run.fail(f"the replay does not fail the interrupted calls {sorted(synthetic)}")
    next_turn = max((e["data"]["turn"] for e in run.pre_events if e["type"] == "turn/start"), default=0) + 1
    answer = await agent.request_raw("session/prompt", {"sessionId": run.sid, "prompt": [
        {"type": "text", "text": "are you still there?"}]}, timeout=30)
    want = {"stopReason": "end_turn", "_meta": {"acpBridge": {"turn": next_turn, "reason": {"kind": "completed"}}}}
    if answer.get("result") != want:
        run.fail(f"the prompt after the load answered {answer}, expected {want}")
    closed = await agent.request_raw("session/close", {"sessionId": run.sid}, timeout=30)
    if closed.get("result") != {}:
        run.fail(f"session/close answered {closed}")


# --- phase C: the final log, in-process ----------------------------------------------


def check_final(run: Run, final_raw: Raw, final_events: list[Event]) -> None:
    """The final log against the log the kill left (independent of the agent's code
    except for the pure closers function the contract names)."""
    try:
        check_invariants(final_events, closed=True)
    except Exception as exc:
        run.fail(f"the final log breaks the invariants: {exc}")
    if unanswered_calls(derive_messages(final_events)):
        run.fail("the final model transcript has unanswered tool calls")
    if not is_prefix(run.pre_good, final_raw):
        run.fail("what was on disk before the load is not kept byte for byte (JSONL lines / SQLite rows)")
    pre = run.pre_events
    closers = interrupted_turn_closers(pre)
    if final_events[: len(pre)] != pre:
        run.fail("the events before the load changed")
    got = final_events[len(pre) : len(pre) + len(closers)]
    if got != closers:
        run.fail(f"the interrupted turn was closed with {got}, expected {closers}")
    if closers and closers[-1]["data"]["reason"] != {"kind": "interrupted", "cause": "crash"}:
        run.fail(f"the interrupted turn ends {closers[-1]}")
    rest = final_events[len(pre) + len(closers) :]
    next_turn = max((e["data"]["turn"] for e in pre if e["type"] == "turn/start"), default=0) + 1
    if not rest or rest[0]["type"] != "turn/start" or rest[0]["data"]["turn"] != next_turn \
            or rest[-1]["type"] != "turn/end" or rest[-1]["data"]["reason"] != {"kind": "completed"} \
            or any(e["type"] == "turn/start" for e in rest[1:]):
        run.fail(f"after the repair the log should hold exactly turn {next_turn} (completed): {rest[:1]}..{rest[-1:]}")
    for turn in run.answers:
        prefix = prefix_through_turn(run.pre_good, pre, turn)
        if prefix is not None and not is_prefix(prefix, final_raw):
            run.fail(f"answered turn {turn} is not byte-identical after the repair")


def run_c(runs: list[Run], backend: str, store: Path) -> None:
    b = open_backend(backend, store)
    try:
        store_ = SessionStore(b)
        for run in runs:
            if not run.sid:
                continue
            try:
                loaded = store_.load(run.sid)
            except Exception as exc:
                run.fail(f"the final log does not load in-process: {type(exc).__name__}: {exc}")
                continue
            try:
                run.loaded_in_process = True
                if loaded.report.repaired:
                    run.fail(f"the log needed a second repair: {loaded.report}")
                events = list(loaded.log.events)
            finally:
                loaded.log.close()
            check_final(run, read_raw(backend, store, run.sid), events)
    finally:
        b.close()


# --- the whole matrix ----------------------------------------------------------------


@dataclass
class Report:
    backend: str
    runs: list[Run]
    seconds: float

    @property
    def failures(self) -> list[str]:
        return [f for r in self.runs for f in r.failures]

    def counts(self) -> dict[str, Any]:
        runs = self.runs
        return {
            "backend": self.backend,
            "kill_points": len(runs),
            "loads_ok": sum(1 for r in runs if r.loaded_over_wire and r.loaded_in_process),
            "failures": sum(1 for r in runs if r.failures),
            "by_kind": dict(Counter(r.point.kind for r in runs)),
            "mid_turn_by_kind": dict(Counter(r.point.kind for r in runs if r.interrupted_turn is not None)),
            "by_scenario": dict(Counter(r.point.scenario for r in runs)),
            "mid_turn": sum(1 for r in runs if r.interrupted_turn is not None),
            "between_turns": sum(1 for r in runs if r.sid and r.interrupted_turn is None),
            "torn_tails": sum(1 for r in runs if r.torn),
            "synthetic_results": sum(int(r.load_meta.get("repair", {}).get("syntheticResults") or 0) for r in runs),
            "answered_turns": sum(len(r.answers) for r in runs),
            "seconds": round(self.seconds, 1),
        }


async def run_matrix(points: Sequence[KillPoint], backend: str, root: Path, jobs: int = 2,
                     progress: Callable[[Run], None] | None = None) -> Report:
    start = time.monotonic()
    store, scripts, works = root / "store", root / "scripts", root / "work"
    scripts.mkdir(parents=True, exist_ok=True)
    runs = [Run(i, p, works / f"p{i:04d}") for i, p in enumerate(points)]
    for run in runs:
        prepare_work(run.work)
    # Create the store before agents start in parallel: two agents creating one new
    # SQLite store at once race in SqliteBackend._check_schema (a bug this matrix found,
    # pinned by tests/test_crash_matrix.py::test_sqlite_store_created_by_two_processes_at_once).
    open_backend(backend, store).close()
    limiter = anyio.CapacityLimiter(jobs)

    async def one(run: Run) -> None:
        async with limiter:
            await run_a(run, backend, store, scripts)
        if progress is not None:
            progress(run)

    async with anyio.create_task_group() as tg:
        for run in runs:
            tg.start_soon(one, run)
    await run_b(runs, backend, store, scripts)
    await anyio.to_thread.run_sync(run_c, runs, backend, store)
    return Report(backend, runs, time.monotonic() - start)


def format_counts(counts: dict[str, Any]) -> str:
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(counts["by_kind"].items()))
    scenarios = ", ".join(f"{k} {v}" for k, v in sorted(counts["by_scenario"].items()))
    return "\n".join([
        f"backend: {counts['backend']}",
        f"kill points: {counts['kill_points']}  (by kind: {kinds}; by scenario: {scenarios})",
        f"state at the kill: mid-turn {counts['mid_turn']} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(counts['mid_turn_by_kind'].items()))}), "
        f"between turns {counts['between_turns']}; "
        f"torn tails {counts['torn_tails']}; synthetic tool results {counts['synthetic_results']}; "
        f"answered turns kept {counts['answered_turns']}",
        f"loads ok: {counts['loads_ok']}",
        f"failures: {counts['failures']}",
        f"elapsed: {counts['seconds']} s",
    ])


class Ticker:
    """Progress on stderr every 25 kill points."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0

    def __call__(self, run: Run) -> None:
        self.done += 1
        if self.done % 25 == 0 or self.done == self.total:
            print(f"  {self.done}/{self.total} killed", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--points", type=int, default=200, help="kill points per backend (default 200)")
    parser.add_argument("--backend", choices=("jsonl", "sqlite", "both"), default="both")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time based, printed)")
    parser.add_argument("--jobs", type=int, default=2, help="agents killed in parallel (default 2)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the stores under this folder")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON too")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    backends = ("jsonl", "sqlite") if args.backend == "both" else (args.backend,)
    points = sample_points(args.points, seed)
    print(f"crash matrix: {args.points} points per backend, seed {seed}, jobs {args.jobs}", flush=True)
    total_failures = 0
    for backend in backends:
        base = args.keep / backend if args.keep else Path(tempfile.mkdtemp(prefix=f"crash-{backend}-"))
        try:
            report = anyio.run(run_matrix, points, backend, base, args.jobs, Ticker(len(points)))
        finally:
            if args.keep is None:
                shutil.rmtree(base, ignore_errors=True)
        counts = report.counts()
        print(format_counts(counts), flush=True)
        if args.json:
            print(orjson.dumps(counts).decode(), flush=True)
        for failure in report.failures:
            print(f"FAIL {failure}", flush=True)
        total_failures += counts["failures"]
    return 1 if total_failures else 0


if __name__ == "__main__":
    sys.exit(main())
