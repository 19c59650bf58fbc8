"""`script:PATH`: a scripted model for tests and demos. The format is documented in
docs/script-model.md (it is shared with tests outside this repo: keep the two in step).

    {"steps": [entry, ...], "chunkDelayMs"?: int}

One entry per model call, served in order across the process's turns. Entry fields,
all optional: `thinking` (streamed as reasoning), `text` (streamed a word at a time,
whitespace kept exactly), `toolCalls` ([{id, name, arguments: object}]), `usage`,
`finish` (default `tool_calls` with toolCalls, else `stop`), `error` ({message, code?,
retryable?}: the call fails after streaming what came before), `hang: true` (stream the
text, then wait until cancelled), `summary` (the entry serves a compaction's summary
call, and only that: its text). Running out of entries is a step error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, get_args

import anyio
import orjson

from acp_bridge.errors import ModelSpecError
from acp_bridge.models.base import (
    Finish,
    FinishReason,
    ModelChunk,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
    word_chunks,
)

_TOP_FIELDS = {"steps", "chunkDelayMs"}
_FIELDS = {"thinking", "text", "toolCalls", "usage", "finish", "error", "hang", "summary"}


class ScriptModel:
    context_window: int | None = 200_000

    def __init__(self, steps: list[dict[str, Any]], *, chunk_delay_ms: int = 0, name: str = "script") -> None:
        self.steps = steps
        self.chunk_delay = chunk_delay_ms / 1000
        self.name = name
        self.calls = 0  # model calls served so far, across turns and sessions
        # A script that sleeps between chunks or hangs keeps the turn waiting like a
        # remote model would, so the runner makes the prompt durable before calling it
        # (acp_bridge.models.Model.external); an instant script is in-process work.
        self.external = bool(self.chunk_delay) or any(entry.get("hang") for entry in steps)

    @classmethod
    def from_file(cls, path: str) -> ScriptModel:
        steps, delay = read_script(path)
        return cls(steps, chunk_delay_ms=delay, name=f"script:{path}")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        index = self.calls
        self.calls += 1
        if index >= len(self.steps):
            yield Finish(
                "error",
                message=f"the model script has {len(self.steps)} entries; call {index + 1} has none",
                code="script_exhausted",
                retryable=False,
            )
            return
        entry = self.steps[index]
        summary = "summary" in entry
        if summary != (request.purpose == "compaction"):
            # A script says which calls summarize: one out of place is a wrong script.
            asked = "a compaction's summary" if request.purpose == "compaction" else "a step"
            yield Finish("error", message=f"the model script's entry {index + 1} is "
                         f"{'a summary' if summary else 'a step'}; call {index + 1} asks for {asked}",
                         code="script_mismatch", retryable=False)
            return
        for chunk in word_chunks(str(entry.get("thinking", ""))):
            await self._pause()
            yield ReasoningDelta(chunk)
        for chunk in word_chunks(str(entry.get("summary" if summary else "text", ""))):
            await self._pause()
            yield TextDelta(chunk)
        if entry.get("hang"):
            await anyio.sleep_forever()
        error = entry.get("error")
        if error is not None:
            if "usage" in entry:
                yield UsageChunk(entry["usage"])
            yield Finish("error", message=error["message"], code=error.get("code"),
                         retryable=error.get("retryable"))
            return
        calls = entry.get("toolCalls", [])
        for call in calls:
            yield ToolCallChunk(call["id"], call["name"], orjson.dumps(call.get("arguments", {})).decode())
        if "usage" in entry:
            yield UsageChunk(entry["usage"])
        yield Finish(entry.get("finish", "tool_calls" if calls else "stop"))

    async def _pause(self) -> None:
        if self.chunk_delay:
            await anyio.sleep(self.chunk_delay)


def read_script(path: str) -> tuple[list[dict[str, Any]], int]:
    """The steps and chunk delay of the script at `path`, checked whole (the CLI calls
    this at start-up, so a bad script is refused before anything is served). Relative
    paths resolve against the process's working directory."""
    resolved = Path(path).resolve()
    try:
        doc = orjson.loads(resolved.read_bytes())
    except OSError as exc:
        raise ModelSpecError(f"cannot read model script {resolved}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise ModelSpecError(f"model script {resolved} is not JSON: {exc}") from None
    return _validate(doc, resolved)


def _validate(doc: Any, path: Path) -> tuple[list[dict[str, Any]], int]:
    def bad(why: str) -> ModelSpecError:
        return ModelSpecError(f"model script {path}: {why}")

    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise bad('expected {"steps": [...], "chunkDelayMs"?: int}')
    if set(doc) - _TOP_FIELDS:
        raise bad(f"unknown fields {sorted(set(doc) - _TOP_FIELDS)}; "
                  'expected {"steps": [...], "chunkDelayMs"?: int}')
    delay = doc.get("chunkDelayMs", 0)
    if type(delay) is not int or delay < 0:
        raise bad("chunkDelayMs must be a non-negative integer")
    for n, entry in enumerate(doc["steps"], start=1):
        if not isinstance(entry, dict):
            raise bad(f"entry {n} is not an object")
        if set(entry) - _FIELDS:
            raise bad(f"entry {n} has unknown fields {sorted(set(entry) - _FIELDS)}")
        if "finish" in entry and entry["finish"] not in get_args(FinishReason):
            raise bad(f"entry {n}: finish must be one of {list(get_args(FinishReason))}")
        if not isinstance(entry.get("toolCalls", []), list):
            raise bad(f"entry {n}: toolCalls must be a list")
        for call in entry.get("toolCalls", []):
            if not (isinstance(call, dict) and isinstance(call.get("id"), str)
                    and isinstance(call.get("name"), str)):
                raise bad(f"entry {n}: each tool call needs a string id and name")
            if not isinstance(call.get("arguments", {}), dict):
                raise bad(f"entry {n}: the arguments of tool call {call['id']!r} must be an object")
        error = entry.get("error")
        if error is not None and not (isinstance(error, dict) and isinstance(error.get("message"), str)):
            raise bad(f"entry {n}: error must be {{message, code?, retryable?}}")
        if "summary" in entry and (not isinstance(entry["summary"], str) or "text" in entry or "toolCalls" in entry):
            raise bad(f"entry {n}: a summary is a string, in an entry without text or toolCalls")
    return doc["steps"], delay
