"""A recorded session read back for `replay:` (acp_bridge.models.replay): the model calls
it holds, one per (turn, step), and the prompts of its turns.

The log is read as `acp-bridge sessions` reads a store: read-only (no lock, no repair
written, nothing created), through the backends' own readers, with the rules of
`session/load`: the header's format version, the torn-tail rule (a torn tail is cut,
damage a later `turn/end` follows is refused, saying where), the invariants, and the
crash-repair closers of an interrupted last turn, applied in memory.

A compaction's summary call (acp_bridge.agent.compaction) is read from its step's
`context/compaction`s: a completed one's summary and usage, a failed one's error (what
the model failed with), one a cancel or a crash ended still being written: it hangs.

What a model call was is derived from the events of its step: the streamed chunks, the
tool-call blocks and usage of its `assistant/message`s, and how it ended, read from the
step that followed or from the turn's `turn/end`: a step the turn went on from ended
`tool_calls`; the last step ends as the turn did (`completed` -> `stop`, `max_tokens`,
`refusal`, `error` of that step -> the error again, `max_steps` -> `tool_calls`); a step
cut off by a cancel or a crash before the model had asked for tools was still streaming:
it hangs until cancelled.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from acp_bridge.content import has_images
from acp_bridge.errors import ModelSpecError
from acp_bridge.models.base import SUMMARY_FAILED
from session import (
    Event,
    Header,
    InvariantError,
    InvariantTracker,
    SessionError,
    interrupted_turn_closers,
    is_session_id,
)
from session.backends.base import StoredLog
from session.events import (
    ASSISTANT_CHUNK,
    ASSISTANT_MESSAGE,
    CONFIG_SET,
    CONTEXT_COMPACTION,
    STEP_START,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    USER_MESSAGE,
    Reason,
    Usage,
    tool_calls_of,
)
from session.items import CompactionData, ToolResultData
from session.loading import invariant_corruption
from session.typed import typed


@dataclass(frozen=True)
class CallError:
    message: str
    code: str | None = None
    retryable: bool | None = None


# How a recorded call ended: a finish reason, an error, or "hang" (cut off mid-stream).
CallEnd = str | CallError


@dataclass(frozen=True)
class RecordedCall:
    turn: int
    step: int
    chunks: tuple[tuple[str, str], ...]  # ("text" | "reasoning", text), as streamed
    tool_calls: tuple[tuple[str, str, str], ...]  # (id, name, arguments JSON text)
    usage: Usage | None
    end: CallEnd
    results: tuple[ToolResultData, ...]  # the step's tool/result data, in log order


@dataclass(frozen=True)
class RecordedSummary:
    """A compaction's summary call: its text, usage and end ("stop", an error, "hang")."""

    text: str
    usage: Usage | None
    end: CallEnd


@dataclass(frozen=True)
class Recording:
    source: str  # what `replay:` was given
    header: Header
    model: str | None  # the model of its first turn (`turn/start.model`)
    prompts: dict[int, Any]  # turn -> the prompt's ContentBlocks
    calls: dict[tuple[int, int], RecordedCall]
    steps: dict[int, int]  # turn -> its number of steps
    torn_records: int = 0  # records cut off as a torn tail (not written back)
    closers: int = 0  # crash-repair events added in memory
    # The models the session ran or switched to (`turn/start.model`, `config/set` of
    # `model`), in order of first sight, and what the log shows some of them took.
    models: tuple[str, ...] = ()
    reasoning: frozenset[str] = frozenset()  # a turn on it recorded a thought level
    images: frozenset[str] = frozenset()  # a prompt on it held an image
    summaries: dict[tuple[int, int], RecordedSummary] = field(default_factory=dict)  # by (turn, step)

    @property
    def cwd(self) -> str:
        return self.header["cwd"]

    def describe(self) -> str:
        """`turns 1-3 (turn 3: 2 steps)`, for errors about positions."""
        if not self.steps:
            return "no turns"
        last = max(self.steps)
        return f"turns 1-{last}; turn {last} has {self.steps[last]} step(s)"


@dataclass(frozen=True)
class ReadLog:
    """A recorded log as loading would leave it: the stored events, then the closers of
    an interrupted last turn (in memory only)."""

    header: Header
    events: list[Event]
    torn_records: int  # records cut off as a torn tail (not written back)
    closers: int  # crash-repair events added at the end


def read_log(source: str, *, store_dir: Path | str | None = None, backend: str = "jsonl") -> ReadLog:
    """The log `source` names: a session log file (JSONL, as the store keeps it), else a
    session id in the store. Raises ModelSpecError saying what is wrong, worded as
    `session/load` words it."""
    path = Path(source)
    try:
        if path.is_file():
            stored = _read_file(path)
        elif is_session_id(source):
            stored = _read_stored(source, store_dir, backend)
        else:
            hint = ("; a replay: source is taken whole, '#' included (the flags of the models it "
                    "is offered as come from $ACP_BRIDGE_REPLAY_MODELS)") if "#" in source else ""
            raise ModelSpecError(f"replay:{source}: no such session log file, and not a session id{hint}")
        sid = stored.header["id"]
        tracker = InvariantTracker(session_id=sid)
        try:
            tracker.feed_stored(stored.events)
        except InvariantError as exc:
            raise invariant_corruption(sid, exc, stored.locate) from None
    except SessionError as exc:
        raise ModelSpecError(f"replay:{source}: {exc.message}") from None
    except OSError as exc:
        raise ModelSpecError(f"replay:{source}: cannot read it: {exc.strerror or exc}") from None
    events = stored.events
    closers = interrupted_turn_closers(tracker, time=events[-1]["time"] if events else 0)
    torn = stored.torn.records if stored.torn else 0
    return ReadLog(stored.header, [*stored.events, *closers], torn, len(closers))


def read_recording(source: str, *, store_dir: Path | str | None = None, backend: str = "jsonl") -> Recording:
    """The model calls of the recording `replay:SOURCE` names (see `read_log`)."""
    log = read_log(source, store_dir=store_dir, backend=backend)
    recording = derive_calls(source, log.header, log.events)
    return replace(recording, torn_records=log.torn_records, closers=log.closers)


def _read_file(path: Path) -> StoredLog:
    from session.backends.base import read_stored
    from session.backends.jsonl_read import JsonlStream, log_opener

    with open(path, "rb") as f:
        first = f.readline(1 << 20)
    try:
        named = orjson.loads(first).get("id")
    except (orjson.JSONDecodeError, AttributeError):
        named = None
    # The header check names the session; a header without a usable id is refused by it.
    sid = named if isinstance(named, str) else path.stem
    return read_stored(JsonlStream(sid, log_opener(sid, path)))


def _read_stored(sid: str, store_dir: Path | str | None, backend: str) -> StoredLog:
    from session import default_store_dir, open_reader
    from session.backends.base import read_stored

    reader = open_reader(backend, store_dir if store_dir is not None else default_store_dir())
    try:
        return read_stored(reader.stream(sid))
    finally:
        reader.close()


@dataclass
class _Step:
    turn: int
    step: int
    chunks: list[tuple[str, str]] = field(default_factory=list)
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    usage: Usage | None = None
    results: list[ToolResultData] = field(default_factory=list)


def derive_calls(source: str, header: Header, events: Iterable[Event]) -> Recording:
    """The model calls of a closed, checked log (pure)."""
    if header.get("wrapped"):
        raise ModelSpecError(
            f"replay:{source}: this is a wrapped agent's session (acp-bridge wrap): its model "
            "calls are the wrapped agent's own; replay it as a fake agent with "
            "`acp-bridge snapshot fake-agent` (docs/snapshots.md)")
    model: str | None = None
    prompts: dict[int, Any] = {}
    calls: dict[tuple[int, int], RecordedCall] = {}
    steps: dict[int, int] = {}
    open_steps: list[_Step] = []
    models: dict[str, None] = {}  # in order of first sight
    reasoning: set[str] = set()
    images: set[str] = set()
    running: str | None = None  # the model of the open turn
    summaries: dict[tuple[int, int], RecordedSummary] = {}
    for event in events:
        ev = typed(event)
        if ev["type"] == TURN_START:
            start = ev["data"]
            open_steps = []
            running = start.get("model") if isinstance(start.get("model"), str) else None
            if model is None:
                model = running
            if running is not None:
                models.setdefault(running)
                if start.get("thoughtLevel") is not None:
                    reasoning.add(running)
        elif ev["type"] == CONFIG_SET:
            if ev["data"].get("configId") == "model" and isinstance(ev["data"].get("value"), str):
                models.setdefault(ev["data"]["value"])
        elif ev["type"] == USER_MESSAGE:
            prompts[ev["data"]["turn"]] = ev["data"]["content"]
            if running is not None and has_images(ev["data"]["content"]):
                images.add(running)
        elif ev["type"] == STEP_START:
            open_steps.append(_Step(ev["data"]["turn"], ev["data"]["step"]))
        elif ev["type"] == ASSISTANT_CHUNK:
            open_steps[-1].chunks.append((ev["data"]["chunk"]["type"], ev["data"]["chunk"]["text"]))
        elif ev["type"] == ASSISTANT_MESSAGE:
            step = open_steps[-1]
            step.calls += [(b["id"], b["name"], b["arguments"]) for b in tool_calls_of(ev["data"])]
            if ev["data"].get("usage") is not None:
                step.usage = ev["data"]["usage"]
        elif ev["type"] == TOOL_RESULT:
            open_steps[-1].results.append(ev["data"])
        elif ev["type"] == CONTEXT_COMPACTION:
            summaries[(ev["data"]["turn"], ev["data"]["step"])] = _summary_of(ev["data"])
        elif ev["type"] == TURN_END:
            turn = ev["data"]["turn"]
            steps[turn] = len(open_steps)
            for index, step in enumerate(open_steps):
                last = index == len(open_steps) - 1
                end = _end_of(step, ev["data"]["reason"]) if last else "tool_calls"
                calls[(turn, step.step)] = RecordedCall(
                    turn, step.step, tuple(step.chunks), tuple(step.calls), step.usage, end,
                    tuple(step.results))
    return Recording(source, header, model, prompts, calls, steps, models=tuple(models),
                     reasoning=frozenset(reasoning), images=frozenset(images), summaries=summaries)


def _summary_of(data: CompactionData) -> RecordedSummary:
    """A compaction's summary call, from the last of its events."""
    usage = data.get("usage")
    if data["status"] == "completed":
        text = "".join(str(b.get("text", "")) for b in data["summary"] if isinstance(b, dict))
        return RecordedSummary(text, usage, "stop")
    error = data.get("error", "")
    head, tail = SUMMARY_FAILED
    if data["status"] == "failed" and error.startswith(head) and error.endswith(tail):
        return RecordedSummary("", usage, CallError(error[len(head):-len(tail)]))
    return RecordedSummary("", None, "hang")  # in progress, or ended with its turn (a cancel, a crash)


def _end_of(step: _Step, reason: Reason) -> CallEnd:
    """How the last model call of a turn ended, from the turn's end reason."""
    if step.calls:
        # The model asked for tools; whatever ended the turn came after the call.
        return "tool_calls"
    if reason["kind"] == "completed":
        return "stop"
    if reason["kind"] == "max_tokens" or reason["kind"] == "refusal":
        return reason["kind"]
    if reason["kind"] == "error":
        return CallError(str(reason.get("message", "model error")), reason.get("code"),
                         reason.get("retryable"))
    # cancelled or interrupted while the model was still streaming (or a max_steps turn
    # whose last step asked for nothing, which the runner never writes): the call hangs.
    return "hang"
