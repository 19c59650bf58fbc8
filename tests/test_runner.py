"""The turn runner, one row per way a turn can end: the exact event sequence (types and
key fields) and the invariants, over a real JSONL store and real local tools."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from acp_bridge.agent.runner import TurnRunner
from acp_bridge.agent.tool_calls import ProgressSink
from acp_bridge.errors import PromptInProgressError
from acp_bridge.host.updates import SessionUpdate, UpdateContext, updates_for
from acp_bridge.models import Model
from acp_bridge.models.echo import EchoModel
from acp_bridge.models.script import ScriptModel
from acp_bridge.tools.base import PermissionOutcome, PermissionRequest
from session import Event, SessionLog, SessionStore, check_invariants, derive_messages
from session.backends.jsonl import JsonlBackend
from session.transcript import unanswered_calls
from tests.support.services import ScriptedClient


@dataclass
class Answers:
    """Scripted permission answers, in order; records what was asked."""

    options: list[str | None] = field(default_factory=list)
    asked: list[PermissionRequest] = field(default_factory=list)
    hang: bool = False

    async def __call__(self, request: PermissionRequest) -> PermissionOutcome:
        self.asked.append(request)
        if self.hang:
            await anyio.sleep_forever()
        option = self.options.pop(0) if self.options else "reject_once"
        return PermissionOutcome("cancelled") if option is None else PermissionOutcome("selected", option)


@dataclass
class Harness:
    store: SessionStore
    log: SessionLog
    runner: TurnRunner
    answers: Answers
    seen: list[Event]
    workdir: Path


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("alpha\nbeta\n")
    return work


def script(*steps: dict[str, Any]) -> ScriptModel:
    return ScriptModel(list(steps))


def harness_run(
    workdir: Path,
    model: Model,
    body: Callable[[Harness], Any],
    *,
    mode: str = "ask",
    max_steps: int = 50,
    answers: Answers | None = None,
    on_progress: ProgressSink | None = None,
    on_update: Callable[[SessionUpdate], None] | None = None,
) -> Harness:
    """Run `body(h)` with a runner over a fresh JSONL session, in a task group that owns
    local commands; then close the log and check the invariants of what it wrote.
    `on_update` is shown each event's live `session/update`s as it is written."""
    store = SessionStore(JsonlBackend(workdir.parent / "store"))
    log = store.create(cwd=str(workdir))
    seen: list[Event] = []
    answers = answers or Answers()

    ctx = UpdateContext(replay=False)

    async def sink(event: Event) -> None:
        seen.append(event)
        if on_update is not None:
            for update in updates_for(event, ctx):
                on_update(update)

    async def main() -> Harness:
        async with anyio.create_task_group() as tg:
            services = ScriptedClient(task_group=tg, permission_answer=answers)
            runner = TurnRunner(log, model, services, mode=mode, max_steps=max_steps, on_event=sink,
                                on_progress=on_progress)
            h = Harness(store, log, runner, answers, seen, workdir)
            await body(h)
            tg.cancel_scope.cancel()
        return h

    h = anyio.run(main)
    assert seen == list(log.events)  # every event reached the sink, in order
    check_invariants(log.events)
    log.close()
    return h


def shape(events: list[Event] | Any) -> list[str]:
    """A compact, readable form of an event sequence for exact comparison."""
    out = []
    for e in events:
        d = e["data"]
        t = e["type"]
        if t == "assistant/chunk":
            out.append(f"chunk:{d['chunk']['type']}:{d['chunk']['text']}")
        elif t == "assistant/message":
            kinds = ",".join(b["type"] for b in d["content"])
            out.append(f"message[{kinds}]" + ("+usage" if "usage" in d else ""))
        elif t == "tool/call":
            out.append(f"call:{d['name']}:{d['kind']}" + (":pending" if d.get("pending") else ""))
        elif t == "tool/permission":
            out.append(f"permission:{d['callId']}:{d['permission'].get('optionId')}")
        elif t == "tool/result":
            code = d.get("error", {}).get("code", "")
            out.append(f"result:{d['callId']}:{'error' if d['isError'] else 'ok'}{':' + code if code else ''}")
        elif t == "turn/end":
            out.append(f"end:{d['reason']['kind']}")
        else:
            out.append(t)
    return out


def prompt(h: Harness, text: str) -> Any:
    return h.runner.prompt([{"type": "text", "text": text}])


READ_A = {"toolCalls": [{"id": "r1", "name": "read_file", "arguments": {"path": "a.txt"}}]}
WRITE_B = {"toolCalls": [{"id": "w1", "name": "write_file", "arguments": {"path": "b.txt", "content": "new\n"}}]}
RUN_ECHO = {"toolCalls": [{"id": "x1", "name": "run_command", "arguments": {"command": "echo hi"}}]}

# name, model steps, mode, permission answers, max_steps, expected shape, expected reason
PATHS: list[tuple[str, list[dict[str, Any]], str, list[str | None], int, list[str], dict[str, Any]]] = [
    ("completed", [{"text": "all good", "usage": {"inputTokens": 5, "outputTokens": 2}}], "ask", [], 50,
     ["step/start", "chunk:text:all ", "chunk:text:good", "message[text]+usage", "step/end", "end:completed"],
     {"kind": "completed"}),
    ("reasoning then text", [{"thinking": "hmm ok", "text": "done"}], "ask", [], 50,
     ["step/start", "chunk:reasoning:hmm ", "chunk:reasoning:ok", "chunk:text:done",
      "message[reasoning,text]", "step/end", "end:completed"], {"kind": "completed"}),
    ("read tool, two steps", [READ_A, {"text": "read it"}], "ask", [], 50,
     ["step/start", "message[tool-call]", "call:read_file:read", "result:r1:ok", "step/end",
      "step/start", "chunk:text:read ", "chunk:text:it", "message[text]", "step/end", "end:completed"],
     {"kind": "completed"}),
    ("max_tokens in step 2", [READ_A, {"text": "cut", "finish": "max_tokens"}], "ask", [], 50,
     ["step/start", "message[tool-call]", "call:read_file:read", "result:r1:ok", "step/end",
      "step/start", "chunk:text:cut", "message[text]", "step/end", "end:max_tokens"], {"kind": "max_tokens"}),
    ("usage-only message when cut off", [{"finish": "max_tokens", "usage": {"inputTokens": 9, "outputTokens": 0}}],
     "ask", [], 50, ["step/start", "message[]+usage", "step/end", "end:max_tokens"], {"kind": "max_tokens"}),
    ("max_steps", [READ_A, READ_A | {"toolCalls": [{"id": "r2", "name": "read_file", "arguments": {"path": "a.txt"}}]}],
     "ask", [], 2,
     ["step/start", "message[tool-call]", "call:read_file:read", "result:r1:ok", "step/end",
      "step/start", "message[tool-call]", "call:read_file:read", "result:r2:ok", "step/end", "end:max_steps"],
     {"kind": "max_steps", "limit": 2}),
    ("refusal", [{"text": "no", "finish": "refusal"}], "ask", [], 50,
     ["step/start", "chunk:text:no", "message[text]", "step/end", "end:refusal"], {"kind": "refusal"}),
    ("error step", [READ_A, {"text": "partial", "error": {"message": "rate limited", "code": "rate_limit", "retryable": True}}],
     "ask", [], 50,
     ["step/start", "message[tool-call]", "call:read_file:read", "result:r1:ok", "step/end",
      "step/start", "chunk:text:partial", "message[text]", "step/end", "end:error"],
     {"kind": "error", "step": 2, "message": "rate limited", "code": "rate_limit", "retryable": True}),
    ("script exhausted is a step error", [], "ask", [], 50, ["step/start", "step/end", "end:error"],
     {"kind": "error", "step": 1, "message": "the model script has 0 entries; call 1 has none",
      "code": "script_exhausted", "retryable": False}),
    ("unknown tool is an error result", [{"toolCalls": [{"id": "u1", "name": "nope", "arguments": {}}]}, {"text": "ok"}],
     "ask", [], 50,
     ["step/start", "message[tool-call]", "call:nope:other:pending", "result:u1:error:unknown_tool", "step/end",
      "step/start", "chunk:text:ok", "message[text]", "step/end", "end:completed"], {"kind": "completed"}),
    ("edit allowed once", [WRITE_B, {"text": "ok"}], "ask", ["allow_once"], 50,
     ["step/start", "message[tool-call]", "call:write_file:edit:pending", "permission:w1:allow_once",
      "result:w1:ok", "step/end",
      "step/start", "chunk:text:ok", "message[text]", "step/end", "end:completed"], {"kind": "completed"}),
    ("edit rejected", [WRITE_B, {"text": "ok"}], "ask", ["reject_once"], 50,
     ["step/start", "message[tool-call]", "call:write_file:edit:pending", "result:w1:error:rejected", "step/end",
      "step/start", "chunk:text:ok", "message[text]", "step/end", "end:completed"], {"kind": "completed"}),
    ("read_only refuses without asking", [WRITE_B, {"text": "ok"}], "read_only", [], 50,
     ["step/start", "message[tool-call]", "call:write_file:edit:pending", "result:w1:error:read_only", "step/end",
      "step/start", "chunk:text:ok", "message[text]", "step/end", "end:completed"], {"kind": "completed"}),
    ("accept_edits writes without asking", [WRITE_B, {"text": "ok"}], "accept_edits", [], 50,
     ["step/start", "message[tool-call]", "call:write_file:edit", "result:w1:ok", "step/end",
      "step/start", "chunk:text:ok", "message[text]", "step/end", "end:completed"], {"kind": "completed"}),
    ("command asks even in accept_edits", [RUN_ECHO, {"text": "ran"}], "accept_edits", ["allow_once"], 50,
     ["step/start", "message[tool-call]", "call:run_command:execute:pending", "permission:x1:allow_once",
      "result:x1:ok", "step/end",
      "step/start", "chunk:text:ran", "message[text]", "step/end", "end:completed"], {"kind": "completed"}),
]


@pytest.mark.parametrize(("name", "steps", "mode", "options", "max_steps", "expected", "end"), [
    # A path that runs a command starts a process: an integration test.
    pytest.param(*p, id=p[0], marks=[pytest.mark.integration] if RUN_ECHO in p[1] else []) for p in PATHS])
def test_turn_paths(workdir: Path, name: str, steps: list[dict[str, Any]], mode: str,
                    options: list[str | None], max_steps: int, expected: list[str], end: dict[str, Any]) -> None:
    answers = Answers(options=list(options))
    result: dict[str, Event] = {}

    async def body(h: Harness) -> None:
        result["end"] = await prompt(h, "go")

    h = harness_run(workdir, script(*steps), body, mode=mode, max_steps=max_steps, answers=answers)
    events = list(h.log.events)
    assert shape(events[2:]) == expected
    assert [e["type"] for e in events[:2]] == ["turn/start", "user/message"]
    assert events[0]["data"] == {"turn": 1, "trigger": {"kind": "prompt"}, "mode": mode, "model": "script"}
    assert result["end"] == events[-1]
    assert result["end"]["data"]["reason"] == end
    assert len(answers.asked) == len(options)
    assert unanswered_calls(derive_messages(events)) == []


def test_permission_outcome_recorded_and_always_remembered(workdir: Path) -> None:
    answers = Answers(options=["allow_always"])
    steps: list[dict[str, Any]] = [WRITE_B, {"text": "one"},
             {"toolCalls": [{"id": "w2", "name": "write_file", "arguments": {"path": "c.txt", "content": "c"}}]},
             {"text": "two"}]

    async def body(h: Harness) -> None:
        await prompt(h, "first")
        await prompt(h, "second")

    h = harness_run(workdir, script(*steps), body, answers=answers)
    results = [e["data"] for e in h.log.events if e["type"] == "tool/result"]
    assert results[0]["permission"] == {"outcome": "selected", "optionId": "allow_always"}
    assert "permission" not in results[1]  # remembered: not asked again
    assert len(answers.asked) == 1
    assert (workdir / "c.txt").read_text() == "c"
    request = answers.asked[0]
    assert request.kind == "edit" and request.content[0]["type"] == "diff"
    # Remembered across a reload too (recovered from the log).
    loaded = h.store.load(h.log.id)
    from acp_bridge.tools import permissions

    assert permissions.remembered_always(loaded.log.events) == {("write_file", None)}
    loaded.log.close()


def test_echo_model_and_multi_turn(workdir: Path) -> None:
    async def body(h: Harness) -> None:
        await prompt(h, "hello   there\nworld")
        await prompt(h, "again")

    h = harness_run(workdir, EchoModel(), body)
    events = list(h.log.events)
    chunks = [e["data"]["chunk"]["text"] for e in events if e["type"] == "assistant/chunk"]
    assert chunks == ["hello   ", "there\n", "world", "again"]  # whitespace kept as typed
    ends = [e for e in events if e["type"] == "turn/end"]
    assert [e["data"]["turn"] for e in ends] == [1, 2]
    message = next(e for e in events if e["type"] == "assistant/message")
    assert message["data"]["usage"] == {"inputTokens": 3, "outputTokens": 3}


def test_one_prompt_at_a_time(workdir: Path) -> None:
    async def body(h: Harness) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt, h, "first")
            await anyio.wait_all_tasks_blocked()  # the first prompt runs (its model hangs)
            with pytest.raises(PromptInProgressError):
                await prompt(h, "second")
            h.runner.cancel()

    h = harness_run(workdir, script({"text": "slow", "hang": True}), body)
    assert [e["data"]["reason"]["kind"] for e in h.log.events if e["type"] == "turn/end"] == ["cancelled"]


# --- cancellation at each await point ---------------------------------------------


async def end_when(h: Harness, ready: Callable[[], bool], end: Callable[[], bool]) -> Event:
    """Start a prompt, wait until `ready()`, `end()` it (a cancel, a stop: True if a
    turn was running), and return the turn/end."""
    out: dict[str, Event] = {}

    async def run() -> None:
        out["end"] = await prompt(h, "go")

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(5):
            while not ready():
                await anyio.sleep(0.01)
        assert end()
    return out["end"]


async def cancel_when(h: Harness, ready: Callable[[], bool], by: str = "session/cancel") -> Event:
    """Start a prompt, wait until `ready()`, cancel, and return the turn/end."""
    return await end_when(h, ready, lambda: h.runner.cancel(by))


def test_cancel_while_streaming(workdir: Path) -> None:
    ends: list[Event] = []

    async def body(h: Harness) -> None:
        ends.append(await cancel_when(h, lambda: any(e["type"] == "assistant/chunk" for e in h.seen)))

    h = harness_run(workdir, script({"text": "partial words here", "hang": True}), body)
    assert ends[0]["data"]["reason"] == {"kind": "cancelled", "by": "session/cancel"}
    assert shape(list(h.log.events)[2:]) == [
        "step/start", "chunk:text:partial ", "chunk:text:words ", "chunk:text:here",
        "message[text]", "step/end", "end:cancelled"]


def test_cancel_while_waiting_for_permission(workdir: Path) -> None:
    ends: list[Event] = []

    async def body(h: Harness) -> None:
        ends.append(await cancel_when(h, lambda: bool(h.answers.asked), by="session/close"))

    h = harness_run(workdir, script(WRITE_B), body, answers=Answers(hang=True))
    assert ends[0]["data"]["reason"] == {"kind": "cancelled", "by": "session/close"}
    assert shape(list(h.log.events)[2:]) == [
        "step/start", "message[tool-call]", "call:write_file:edit:pending", "result:w1:error:cancelled",
        "step/end", "end:cancelled"]
    assert not (workdir / "b.txt").exists()
    # It never ran: the permission was still open (its tool/call was on disk, though).
    result = next(e["data"] for e in h.log.events if e["type"] == "tool/result")
    assert result["content"][0]["text"] == "The tool call was cancelled (before it ran)."


@pytest.mark.integration
def test_a_reused_call_id_cancelled_before_it_ran_says_so(workdir: Path) -> None:
    # Turn 1's x1 is cancelled while its command runs; turn 2's model reuses the id for
    # a write whose permission is still open when it is cancelled.
    pid_file = workdir / "pid"
    sleeper = {"toolCalls": [{"id": "x1", "name": "run_command",
                              "arguments": {"command": f"echo $$ > {pid_file}; sleep 30"}}]}
    write = {"toolCalls": [{"id": "x1", "name": "write_file", "arguments": {"path": "b.txt", "content": "x"}}]}
    answers = Answers(options=["allow_once"])

    async def body(h: Harness) -> None:
        await cancel_when(h, lambda: pid_file.exists() and pid_file.read_text().strip() != "")
        answers.hang = True
        await cancel_when(h, lambda: len(answers.asked) == 2)

    h = harness_run(workdir, script(sleeper, write), body, answers=answers)
    texts = [e["data"]["content"][0]["text"] for e in h.log.events if e["type"] == "tool/result"]
    assert texts == ["The tool call was cancelled (while it was running).",
                     "The tool call was cancelled (before it ran)."]


@pytest.mark.parametrize("cancel_first", [True, False], ids=["cancel-then-answer", "answer-then-cancel"])
@pytest.mark.parametrize("option", [None, "allow_once"], ids=["cancelled", "allowed"])
def test_a_cancel_with_the_permission_answer_wins_in_either_order(workdir: Path, cancel_first: bool,
                                                                  option: str | None) -> None:
    # A session/cancel and the permission's answer taken in the same loop iteration, in
    # either order (ACP clients answer `cancelled` right after their session/cancel):
    # the cancel ends the turn, the answer is not recorded, the tool never runs.
    ends: list[Event] = []
    answered: list[anyio.Event] = []

    class Held(Answers):
        async def __call__(self, request: PermissionRequest) -> PermissionOutcome:
            answered.append(anyio.Event())
            await answered[0].wait()
            return PermissionOutcome("cancelled") if option is None else PermissionOutcome("selected", option)

    async def body(h: Harness) -> None:
        def both() -> bool:
            if cancel_first:
                cancelled = h.runner.cancel("session/cancel")
                answered[0].set()
                return cancelled
            answered[0].set()
            return h.runner.cancel("session/cancel")

        ends.append(await end_when(h, lambda: bool(answered), both))

    h = harness_run(workdir, script(WRITE_B, {"text": "never"}), body, answers=Held())
    assert ends[0]["data"]["reason"] == {"kind": "cancelled", "by": "session/cancel"}
    assert shape(list(h.log.events)[2:]) == [
        "step/start", "message[tool-call]", "call:write_file:edit:pending", "result:w1:error:cancelled",
        "step/end", "end:cancelled"]
    result = next(e["data"] for e in h.log.events if e["type"] == "tool/result")
    assert "permission" not in result
    assert result["content"][0]["text"] == "The tool call was cancelled (before it ran)."
    assert not (workdir / "b.txt").exists()


def test_permission_answered_cancelled_ends_the_turn(workdir: Path) -> None:
    async def body(h: Harness) -> None:
        end = await prompt(h, "go")
        # The client ended the turn through its permission answer, not a session/cancel.
        assert end["data"]["reason"] == {"kind": "cancelled", "by": "session/request_permission"}

    h = harness_run(workdir, script(WRITE_B, {"text": "never"}), body, answers=Answers(options=[None]))
    result = next(e["data"] for e in h.log.events if e["type"] == "tool/result")
    assert result["permission"] == {"outcome": "cancelled"}
    assert shape(list(h.log.events)[2:]) == [
        "step/start", "message[tool-call]", "call:write_file:edit:pending", "result:w1:error:cancelled",
        "step/end", "end:cancelled"]
    assert not (workdir / "b.txt").exists()


# --- what the client is shown of a call, in order ----------------------------------


def call_timeline(workdir: Path, steps: list[dict[str, Any]], options: list[str | None],
                  mode: str = "ask") -> list[tuple[str, str | None]]:
    """What the client is sent about the tool calls of one turn, in order, as a live
    session sends it: the updates of each event (the one mapping), the live-only updates
    of the tool calls, and the permission requests where they are asked."""
    timeline: list[tuple[str, str | None]] = []

    def note(update: SessionUpdate) -> None:
        if update["sessionUpdate"] in ("tool_call", "tool_call_update"):
            timeline.append((update["sessionUpdate"], update.get("status")))

    async def on_progress(update: SessionUpdate) -> None:
        note(update)

    class Timed(Answers):
        async def __call__(self, request: PermissionRequest) -> PermissionOutcome:
            timeline.append(("request_permission", None))
            return await super().__call__(request)

    async def body(h: Harness) -> None:
        await prompt(h, "go")

    harness_run(workdir, script(*steps), body, mode=mode, answers=Timed(options=list(options)),
                on_progress=on_progress, on_update=note)
    return timeline


CALL_TIMELINES: list[tuple[str, list[dict[str, Any]], str, list[str | None], list[tuple[str, str | None]]]] = [
    ("asked and allowed", [WRITE_B, {"text": "ok"}], "ask", ["allow_once"],
     [("tool_call", "pending"), ("request_permission", None), ("tool_call_update", "in_progress"),
      ("tool_call_update", "completed")]),
    ("asked and rejected", [WRITE_B, {"text": "ok"}], "ask", ["reject_once"],
     [("tool_call", "pending"), ("request_permission", None), ("tool_call_update", "failed")]),
    ("asked and cancelled", [WRITE_B], "ask", [None],
     [("tool_call", "pending"), ("request_permission", None), ("tool_call_update", "failed")]),
    ("not asked", [READ_A, {"text": "ok"}], "ask", [],
     [("tool_call", "pending"), ("tool_call_update", "in_progress"), ("tool_call_update", "completed")]),
    ("refused by the mode", [WRITE_B, {"text": "ok"}], "read_only", [],
     [("tool_call", "pending"), ("tool_call_update", "failed")]),
]


@pytest.mark.parametrize(("name", "steps", "mode", "options", "expected"), CALL_TIMELINES,
                         ids=[c[0] for c in CALL_TIMELINES])
def test_a_call_is_pending_until_it_may_run(workdir: Path, name: str, steps: list[dict[str, Any]],
                                           mode: str, options: list[str | None],
                                           expected: list[tuple[str, str | None]]) -> None:
    # DESIGN.md's mapping: a tool/call is `pending` (awaiting approval), `in_progress`
    # once it may run: at once, or when its permission is granted (`tool/permission`);
    # a call refused never is. The permission request's toolCall carries no status.
    assert call_timeline(workdir, steps, options, mode) == expected


@pytest.mark.integration
def test_cancel_while_a_command_runs_kills_it(workdir: Path) -> None:
    pid_file = workdir / "pid"
    long = {"toolCalls": [{"id": "s1", "name": "run_command",
                           "arguments": {"command": f"echo $$ > {pid_file}; sleep 30"}}]}
    ends: list[Event] = []

    async def body(h: Harness) -> None:
        ends.append(await cancel_when(h, lambda: pid_file.exists() and pid_file.read_text().strip() != ""))

    h = harness_run(workdir, script(long), body, answers=Answers(options=["allow_once"]))
    assert ends[0]["data"]["reason"]["kind"] == "cancelled"
    assert shape(list(h.log.events)[2:]) == [
        "step/start", "message[tool-call]", "call:run_command:execute:pending", "permission:s1:allow_once",
        "result:s1:error:cancelled",
        "step/end", "end:cancelled"]
    result = next(e["data"] for e in h.log.events if e["type"] == "tool/result")
    assert "while it was running" in result["content"][0]["text"]
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        import os

        os.kill(pid, 0)


def test_shutdown_mid_turn_closes_as_interrupted(workdir: Path) -> None:
    async def body(h: Harness) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt, h, "go")
            with anyio.fail_after(5):
                while not any(e["type"] == "tool/call" for e in h.seen):
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()  # the agent is stopping, not the client cancelling

    h = harness_run(workdir, script(WRITE_B), body, answers=Answers(hang=True))
    events = list(h.log.events)
    assert shape(events[2:]) == [
        "step/start", "message[tool-call]", "call:write_file:edit:pending", "result:w1:error:interrupted",
        "step/end", "end:interrupted"]
    assert events[-1]["data"]["reason"] == {"kind": "interrupted", "cause": "shutdown"}
    check_invariants(events, closed=True)


async def _never(*args: Any) -> AsyncIterator[Any]:
    raise RuntimeError("provider exploded")
    yield  # pragma: no cover


def test_model_exception_is_an_error_step(workdir: Path) -> None:
    class Broken:
        name = "broken"
        context_window: int | None = None
        external = True

        def stream(self, request: Any) -> AsyncIterator[Any]:
            return _never()

    async def body(h: Harness) -> None:
        end = await prompt(h, "go")
        assert end["data"]["reason"] == {"kind": "error", "step": 1,
                                         "message": "RuntimeError: provider exploded", "code": "model_error"}

    harness_run(workdir, Broken(), body)


@pytest.mark.integration
def test_multi_step_tool_turn_log_snapshot(workdir: Path, snapshot_json: Any) -> None:
    """The persisted log of a multi-step tool-call turn, byte for byte as JSON, with the
    temporary directory normalized."""
    clock = iter(range(1_700_000_000_000, 1_700_000_010_000)).__next__
    backend = JsonlBackend(workdir.parent / "store")
    store = SessionStore(backend, clock=clock)
    log = store.create(cwd=str(workdir), session_id="0f0f0f0f-0000-4000-8000-000000000002")
    model = script(
        {"thinking": "look first", "text": "Reading.", "toolCalls": [
            {"id": "r1", "name": "read_file", "arguments": {"path": "a.txt", "line": 2}},
            {"id": "l1", "name": "list_dir", "arguments": {"path": "."}}],
         "usage": {"inputTokens": 100, "outputTokens": 20}},
        {"text": "Editing.", "toolCalls": [
            {"id": "e1", "name": "edit_file", "arguments": {"path": "a.txt", "old_text": "beta", "new_text": "gamma"}},
            {"id": "x1", "name": "run_command", "arguments": {"command": "cat a.txt; exit 3"}}],
         "usage": {"inputTokens": 150, "outputTokens": 30}},
        {"text": "Done: beta is now gamma.", "usage": {"inputTokens": 200, "outputTokens": 10}},
    )

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            services = ScriptedClient(task_group=tg, permission_answer=Answers(options=["allow_once"]))
            runner = TurnRunner(log, model, services, mode="accept_edits")
            await runner.prompt([{"type": "text", "text": "change beta to gamma"}])

    anyio.run(main)
    log.close()
    text = backend.path_of(log.id).read_text().replace(str(workdir), "<work>")
    lines = [orjson.loads(line) for line in text.splitlines()]
    check_invariants(lines[1:], closed=True)
    assert (workdir / "a.txt").read_text() == "alpha\ngamma\n"
    assert lines == snapshot_json


def test_stop_closes_as_interrupted_and_returns_the_turn_end(workdir: Path) -> None:
    ends: list[Event] = []

    async def body(h: Harness) -> None:
        ends.append(await end_when(h, lambda: any(e["type"] == "assistant/chunk" for e in h.seen), h.runner.stop))

    h = harness_run(workdir, script({"text": "streaming", "hang": True}), body)
    assert ends[0]["data"]["reason"] == {"kind": "interrupted", "cause": "shutdown"}
    assert shape(list(h.log.events)[2:]) == ["step/start", "chunk:text:streaming", "step/end", "end:interrupted"]
    assert not h.runner.stop()  # nothing runs any more


def test_transcript_kept_in_step_with_the_log(workdir: Path) -> None:
    async def body(h: Harness) -> None:
        await prompt(h, "first")
        async with anyio.create_task_group() as tg:
            tg.start_soon(prompt, h, "second")
            with anyio.fail_after(5):
                while not h.answers.asked:  # the second turn waits for a permission
                    await anyio.sleep(0.01)
            h.runner.cancel()
        assert h.runner.transcript.messages == derive_messages(h.log.events)

    h = harness_run(workdir, script(READ_A, {"text": "one"}, WRITE_B), body, answers=Answers(hang=True))
    assert h.runner.transcript.messages == derive_messages(h.log.events)


def test_shutdown_while_waiting_for_permission_says_the_call_did_not_run(workdir: Path) -> None:
    # The agent stops mid-turn (stdin closed) while a permission request is open: the
    # call's tool/call is on disk, but the runner knows the tool never started.
    ends: list[Event] = []

    async def body(h: Harness) -> None:
        ends.append(await end_when(h, lambda: bool(h.answers.asked), h.runner.stop))

    h = harness_run(workdir, script(WRITE_B), body, answers=Answers(hang=True))
    assert ends[0]["data"]["reason"] == {"kind": "interrupted", "cause": "shutdown"}
    result = next(e["data"] for e in h.log.events if e["type"] == "tool/result")
    assert result["content"][0]["text"] == "The write_file call was interrupted before it started; it did not run."
    assert not (workdir / "b.txt").exists()
