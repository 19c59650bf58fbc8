"""The response side of `openai:MODEL`, pure: no network, no clock.

- `SSEDecoder`: bytes of a `text/event-stream` body -> the `data` of each event.
- `StreamAssembler`: the chunk objects of a stream -> our `ModelChunk`s (deltas as they
  come; tool calls, usage and the `Finish` once the stream has ended).
- `whole_completion`: a server that ignored `stream: true` -> the data of one chunk.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from acp_bridge.models.base import (
    Finish,
    FinishReason,
    ModelChunk,
    ReasoningDelta,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
)
from acp_bridge.models.openai_errors import stream_error
from session.events import Usage


class SSEDecoder:
    """Incremental `text/event-stream` decoding: feed bytes, get each event's data
    (multi-line data joined with newlines; comments and other fields skipped)."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[str]:
        self._buffer += data
        events: list[str] = []
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                return events
            end, after = cut
            line = self._buffer[:end].decode("utf-8", errors="replace")
            self._buffer = self._buffer[after:]
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
            elif line.startswith("data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(" ") else value)

    def close(self) -> list[str]:
        """The body ended: an event still missing its blank line counts."""
        events = self.feed(b"\n\n") if self._buffer or self._data else []
        return events


def _line_end(buffer: bytes) -> tuple[int, int] | None:
    lf, cr = buffer.find(b"\n"), buffer.find(b"\r")
    if cr == -1 or (lf != -1 and lf < cr):
        return None if lf == -1 else (lf, lf + 1)
    if cr + 1 == len(buffer):
        return None  # a "\r" at the end: wait to see whether "\n" follows
    return (cr, cr + 2) if buffer[cr + 1 : cr + 2] == b"\n" else (cr, cr + 1)


_FINISH: Mapping[str, FinishReason] = {
    "stop": "stop", "tool_calls": "tool_calls", "function_call": "tool_calls",
    "length": "max_tokens", "content_filter": "refusal",
}


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAssembler:
    """The chunk objects of one streamed completion -> `ModelChunk`s. `feed` gives the
    deltas as they come; `finish` gives the tool calls, usage and `Finish` at the end."""

    done: bool = False  # "[DONE]" seen
    error: Finish | None = None  # an error object inside the stream
    finish_reason: str | None = None
    usage: Usage | None = None
    refused: bool = False
    _calls: dict[int, _Call] = field(default_factory=dict)

    def feed(self, data: str) -> Iterator[ModelChunk]:
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return  # not ours to judge: some servers send keep-alive junk
        if not isinstance(chunk, dict):
            return
        if chunk.get("error"):
            self.error = stream_error(chunk["error"])
            return
        if isinstance(chunk.get("usage"), dict):
            self.usage = map_usage(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str) and delta[key]:
                    yield ReasoningDelta(delta[key])
                    break
            if isinstance(delta.get("content"), str) and delta["content"]:
                yield TextDelta(delta["content"])
            if isinstance(delta.get("refusal"), str) and delta["refusal"]:
                self.refused = True
                yield TextDelta(delta["refusal"])
            for call in delta.get("tool_calls") or ():
                self._tool_call_delta(call)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])

    def _tool_call_delta(self, call: Any) -> None:
        if not isinstance(call, dict):
            return
        index = call.get("index")
        if not isinstance(index, int):  # some servers leave it out: match by id, else a new call
            known = [i for i, c in self._calls.items() if call.get("id") and c.id == call.get("id")]
            index = known[0] if known else len(self._calls)
        slot = self._calls.setdefault(index, _Call())
        if call.get("id") and not slot.id:
            slot.id = str(call["id"])
        function = call.get("function") or {}
        name = function.get("name")
        if name and name != slot.name:
            slot.name = name if not slot.name else slot.name + name
        if isinstance(function.get("arguments"), str):
            slot.arguments.append(function["arguments"])

    @property
    def complete(self) -> bool:
        """The model said how it finished (a missing `[DONE]` after that loses nothing)."""
        return self.done or self.finish_reason is not None

    def finish(self) -> Iterator[ModelChunk]:
        calls = [self._calls[i] for i in sorted(self._calls)]
        for call in calls:
            yield ToolCallChunk(call.id or f"call_{uuid.uuid4().hex[:24]}", call.name,
                                "".join(call.arguments) or "{}")
        if self.usage is not None:
            yield UsageChunk(self.usage)
        reason = _FINISH.get(self.finish_reason or "", "stop")
        if self.refused and reason == "stop":
            reason = "refusal"
        if reason == "stop" and calls:
            reason = "tool_calls"  # some servers say "stop" after tool calls
        yield Finish(reason)


def map_usage(raw: Mapping[str, Any]) -> Usage:
    usage: Usage = {"inputTokens": _int(raw.get("prompt_tokens")),
                    "outputTokens": _int(raw.get("completion_tokens"))}
    prompt = raw.get("prompt_tokens_details")
    if isinstance(prompt, dict) and isinstance(prompt.get("cached_tokens"), int):
        usage["cacheReadTokens"] = prompt["cached_tokens"]
    elif isinstance(raw.get("prompt_cache_hit_tokens"), int):  # DeepSeek
        usage["cacheReadTokens"] = raw["prompt_cache_hit_tokens"]
    completion = raw.get("completion_tokens_details")
    if isinstance(completion, dict) and isinstance(completion.get("reasoning_tokens"), int):
        usage["reasoningTokens"] = completion["reasoning_tokens"]
    return usage


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def whole_completion(body: bytes) -> str:
    """A non-streamed completion (a server that ignored `stream: true`) as the data of
    one stream chunk, for `StreamAssembler.feed` (which then counts it complete)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "{}"
    if not isinstance(doc, dict):
        return "{}"
    choices = [{"index": c.get("index", 0), "delta": c.get("message") or {},
                "finish_reason": c.get("finish_reason")}
               for c in doc.get("choices") or () if isinstance(c, dict)]
    chunk: dict[str, Any] = {"choices": choices}
    for key in ("usage", "error"):
        if doc.get(key):
            chunk[key] = doc[key]
    return orjson.dumps(chunk).decode()
