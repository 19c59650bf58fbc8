"""`replay:SOURCE`: a recorded session served again as the model (docs/snapshots.md).

SOURCE is a session log file or a session id in the store (acp_bridge.models.recording
reads it, with the rules of `session/load`). Each model call of the new run is served
from the recorded call at the same (turn, step): its thoughts and text as they were
chunked, its tool calls with their arguments, its usage and finish reason; a recorded
error is raised again with its message and code; a call that was cut off mid-stream (a
cancel, a crash) streams what it had and then hangs until cancelled. An overrides file
(acp_bridge.models.replay_overrides) replaces chosen calls by an error or a hang.

Tools run for real. What the run shows the model is checked against the recording
(unless `$ACP_BRIDGE_REPLAY_CHECK=loose`): each turn's prompt, and the tool results of
the step before each call. Paths under the session's cwd may differ (a recording made
in one temporary folder is replayed in another); nothing else may. A differing prompt or
result, or a call past the end of the recording, fails the turn (a step error naming
the turn and the step) and says to record again.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import orjson

from acp_bridge.errors import ModelSpecError
from acp_bridge.models.base import (
    Finish,
    ModelChunk,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
)
from acp_bridge.models.recording import CallError, RecordedCall, Recording, read_recording
from acp_bridge.models.replay_overrides import Override, load_overrides, overrides_path
from acp_bridge.models.windows import context_window_of
from session.transcript import Message

CHECK_ENV = "ACP_BRIDGE_REPLAY_CHECK"
RECORD_AGAIN = "record the scenario again (acp-bridge snapshot record)"
SHOWN = 160  # characters of a differing value quoted in an error


class ReplayModel:
    external = True  # it may hang, as the recorded provider kept the turn waiting

    def __init__(self, recording: Recording, overrides: Mapping[tuple[int, int], Override] | None = None,
                 *, check: bool = True, context_window: int | None = None) -> None:
        self.recording = recording
        self.overrides = dict(overrides or {})
        self.check = check
        self.name = f"replay:{recording.source}"
        self.context_window = context_window
        self.calls = 0  # model calls served, across sessions

    @classmethod
    def from_source(cls, source: str, *, store_dir: Path | str | None = None, backend: str = "jsonl",
                    env: Mapping[str, str] | None = None, stands_for: str | None = None) -> ReplayModel:
        """The model of `replay:SOURCE`; `stands_for`: the recorded model it is offered
        as (acp_bridge.models.replay_models), whose context window it shows."""
        env = os.environ if env is None else env
        if not source:
            raise ModelSpecError("replay:SOURCE needs a session log file or a session id")
        check = env.get(CHECK_ENV, "strict")
        if check not in ("strict", "loose"):
            raise ModelSpecError(f"{CHECK_ENV}={check!r}: use strict (the default) or loose")
        recording = read_recording(source, store_dir=store_dir, backend=backend)
        overrides = load_overrides(recording, overrides_path(source, env),
                                   required=bool(env.get("ACP_BRIDGE_REPLAY_OVERRIDES")))
        return cls(recording, overrides, check=check == "strict",
                   context_window=_window(stands_for or recording.model, env))

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        self.calls += 1
        turn, step = position(request)
        if request.purpose == "compaction":
            async for chunk in self._summary(turn, step):
                yield chunk
            return
        call = self.recording.calls.get((turn, step))
        if call is None:
            yield self._failed(turn, step, "replay_overrun",
                               f"the recording {self.recording.source} has no model call at turn {turn} "
                               f"step {step} ({self.recording.describe()}): the run went past the recording")
            return
        if self.check:
            problem = self._mismatch(call, request.messages, request.cwd)
            if problem is not None:
                yield self._failed(turn, step, "replay_mismatch", problem)
                return
        override = self.overrides.get((turn, step))
        if override is None or override.keep_chunks:
            for kind, text in call.chunks:
                yield ReasoningDelta(text) if kind == "reasoning" else TextDelta(text)
        end = call.end if override is None else (override.end or "hang")
        if end == "hang":
            await anyio.sleep_forever()
        if isinstance(end, CallError):
            if call.usage is not None and override is None:
                yield UsageChunk(call.usage)
            yield Finish("error", message=end.message, code=end.code, retryable=end.retryable)
            return
        for call_id, name, arguments in call.tool_calls:
            yield ToolCallChunk(call_id, name, moved(arguments, self.recording.cwd, request.cwd))
        if call.usage is not None:
            yield UsageChunk(call.usage)
        yield Finish(end)  # type: ignore[arg-type]

    async def _summary(self, turn: int, step: int) -> AsyncIterator[ModelChunk]:
        """A compaction's summary call, as recorded at (turn, step)."""
        summary = self.recording.summaries.get((turn, step))
        if summary is None:
            yield self._failed(turn, step, "replay_overrun",
                               f"the recording {self.recording.source} has no compaction at turn {turn} step {step}")
            return
        if summary.end == "hang":
            await anyio.sleep_forever()
        if summary.text:
            yield TextDelta(summary.text)
        if summary.usage is not None:
            yield UsageChunk(summary.usage)
        end = summary.end
        yield Finish("error", message=end.message, code=end.code) if isinstance(end, CallError) else Finish("stop")

    def _failed(self, turn: int, step: int, code: str, why: str) -> Finish:
        loosen = f", or set {CHECK_ENV}=loose" if code == "replay_mismatch" else ""
        return Finish("error", message=f"replay: turn {turn} step {step}: {why}; {RECORD_AGAIN}{loosen}",
                      code=code, retryable=False)

    def _mismatch(self, call: RecordedCall, messages: Sequence[Message], live_cwd: str | None) -> str | None:
        """What the run shows the model that the recording did not, or None."""
        cwd = self.recording.cwd
        recorded_prompt = self.recording.prompts.get(call.turn)
        prompt = next((m["content"] for m in reversed(messages) if m["role"] == "user"), None)
        if recorded_prompt is not None and not same_up_to_cwd(recorded_prompt, prompt, cwd, live_cwd):
            return (f"the prompt differs from the recorded one (recorded {_shown(recorded_prompt)}, "
                    f"now {_shown(prompt)})")
        if call.step == 1:
            return None
        before = self.recording.calls.get((call.turn, call.step - 1))
        results = [m for m in _after_last_assistant(messages) if m["role"] == "tool"]
        recorded = list(before.results) if before is not None else []
        for index, result in enumerate(results):
            if index >= len(recorded):
                return f"tool result {index + 1} of step {call.step - 1} was not recorded"
            want = recorded[index]
            live = {"callId": result["callId"], "content": result["content"], "isError": result["isError"]}
            wanted = {"callId": want["callId"], "content": want["content"], "isError": want["isError"]}
            if not same_up_to_cwd(wanted, live, cwd, live_cwd):
                return (f"the result of tool call {want['callId']} (step {call.step - 1}) differs from "
                        f"the recorded one (recorded {_shown(wanted)}, now {_shown(live)})")
        if len(results) < len(recorded):
            return f"step {call.step - 1} has {len(results)} tool results; {len(recorded)} were recorded"
        return None


def position(request: ModelRequest) -> tuple[int, int]:
    """(turn, step) of a call: from the runner, else counted in the transcript (turns
    by their prompts, steps by the assistant messages since the last prompt)."""
    if request.turn is not None and request.step is not None:
        return request.turn, request.step
    turns = sum(1 for m in request.messages if m["role"] == "user")
    return turns, 1 + sum(1 for m in _after_last_user(request.messages) if m["role"] == "assistant")


def _in_json(path: str) -> str:
    return orjson.dumps(path).decode()[1:-1]


def moved(arguments: str, cwd: str, live_cwd: str | None) -> str:
    """A recorded call's arguments (JSON text) with the recorded cwd replaced by the
    session's: a path the model gave under the recorded cwd names the same file now."""
    if not live_cwd or not cwd or cwd == live_cwd:
        return arguments
    return arguments.replace(_in_json(cwd), _in_json(live_cwd))


def same_up_to_cwd(recorded: Any, live: Any, cwd: str, live_cwd: str | None = None) -> bool:
    """Whether two JSON values are equal, where every occurrence of the recorded cwd
    stands for the live cwd; when that is not known, for one other path (the same one
    each time) in the live value."""
    want, got = orjson.dumps(recorded, option=orjson.OPT_SORT_KEYS).decode(), \
        orjson.dumps(live, option=orjson.OPT_SORT_KEYS).decode()
    token = _in_json(cwd)
    if want == got or not token or token not in want:
        return want == got
    if live_cwd:
        return want.replace(token, _in_json(live_cwd)) == got
    first, second, *rest = (re.escape(piece) for piece in want.split(token))
    pattern = first + "(?P<cwd>[^\"]+?)" + second + "".join("(?P=cwd)" + piece for piece in rest)
    return re.fullmatch(pattern, got) is not None


def _after_last_user(messages: Sequence[Message]) -> Sequence[Message]:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == "user":
            return messages[index + 1:]
    return messages


def _after_last_assistant(messages: Sequence[Message]) -> Sequence[Message]:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] == "assistant":
            return messages[index + 1:]
    return []


def _shown(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def _window(model: str | None, env: Mapping[str, str]) -> int | None:
    """The recorded model's context window (for `usage_update.size`):
    `$ACP_BRIDGE_CONTEXT_WINDOW` first, then the model's own."""
    if env.get("ACP_BRIDGE_CONTEXT_WINDOW", "").isdigit():
        return int(env["ACP_BRIDGE_CONTEXT_WINDOW"])
    return context_window_of(model, env)
