"""The wire side of `openai:MODEL`, pure: no network, no clock.

- `request_body`: the transcript (`session.derive_messages`) and the tool specs as a
  streaming Chat Completions request.
- `SSEDecoder`: bytes of a `text/event-stream` body -> the `data` of each event.
- `StreamAssembler`: the chunk objects of a stream -> our `ModelChunk`s (deltas as they
  come; tool calls, usage and the `Finish` once the stream has ended).
- `http_error`, `retry_after`: an error response -> `Finish("error", ...)`.
- `context_window`: a small table of known models.
"""

from __future__ import annotations

import email.utils
import math
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from acp_bridge.models import (
    Finish,
    FinishReason,
    ModelChunk,
    ReasoningDelta,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
)
from session.events import Usage
from session.transcript import Message

SYSTEM_PROMPT = (
    "You are acp-bridge, a coding agent working in the user's project through an editor. "
    "Use the tools to read, list, edit and write files and to run commands; paths are "
    "relative to the session's working directory. Keep answers short and say what you changed."
)

# Context windows (tokens) of models people commonly point this at; the longest prefix
# of the model name wins, after dropping a router prefix such as "openai/".
CONTEXT_WINDOWS: Mapping[str, int] = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "deepseek-chat": 128_000,  # 64k before DeepSeek-V3.1
    "deepseek-reasoner": 128_000,
}


def context_window(model: str) -> int | None:
    name = model.rsplit("/", 1)[-1].lower()
    best: str | None = None
    for prefix in CONTEXT_WINDOWS:
        if name.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return CONTEXT_WINDOWS[best] if best is not None else None


# --- the request ----------------------------------------------------------------------


def request_body(model: str, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]],
                 *, system: str | None = SYSTEM_PROMPT) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": openai_messages(messages, system=system),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = [{"type": "function", "function": {
            "name": t["name"], "description": t.get("description", ""),
            "parameters": t.get("parameters") or {"type": "object", "properties": {}}}} for t in tools]
    return body


def openai_messages(messages: Sequence[Message], *, system: str | None = None) -> list[dict[str, Any]]:
    """The transcript as Chat Completions messages. Reasoning is not sent back. Every
    assistant tool call is answered before the next message, as the API requires (a
    repaired log guarantees it; a placeholder covers anything else)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    pending: dict[str, None] = {}  # tool-call ids of the last assistant message not yet answered

    def answer_pending() -> None:
        for call_id in pending:
            out.append({"role": "tool", "tool_call_id": call_id,
                        "content": "Error: no result was recorded for this tool call."})
        pending.clear()

    for message in messages:
        if message["role"] == "tool":
            pending.pop(message["callId"], None)
            text = blocks_text(message["content"]) or "(no output)"
            out.append({"role": "tool", "tool_call_id": message["callId"],
                        "content": f"Error: {text}" if message["isError"] else text})
            continue
        answer_pending()
        if message["role"] == "user":
            out.append({"role": "user", "content": blocks_text(message["content"])})
            continue
        text = "".join(b["text"] for b in message["content"] if b["type"] == "text")
        calls = [{"id": b["id"], "type": "function",
                  "function": {"name": b["name"], "arguments": _arguments(b["arguments"])}}
                 for b in message["content"] if b["type"] == "tool-call"]
        if not text and not calls:
            continue  # reasoning only: nothing the API takes back
        item: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            item["tool_calls"] = calls
            pending.update((b["id"], None) for b in message["content"] if b["type"] == "tool-call")
        out.append(item)
    answer_pending()
    return out


def _arguments(text: str) -> str:
    """Arguments as the model produced them, when they are JSON (some servers reject a
    transcript whose arguments do not parse; the tool result already said why)."""
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return "{}"
    return text


def blocks_text(blocks: Sequence[Any]) -> str:
    """ACP content blocks (a prompt, a tool result) as one text."""
    parts: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource" and isinstance(block.get("resource"), dict):
            resource = block["resource"]
            uri = str(resource.get("uri", ""))
            text = resource.get("text")
            if isinstance(text, str):
                fence = "```"
                while fence in text:
                    fence += "`"
                parts.append(f"{fence}{uri}\n{text}{'' if text.endswith(chr(10)) else chr(10)}{fence}")
            else:
                parts.append(f"[binary resource {uri} ({resource.get('mimeType', 'unknown type')})]")
        elif kind == "resource_link":
            name = block.get("title") or block.get("name") or block.get("uri", "")
            parts.append(f"[{name}]({block.get('uri', '')})")
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} omitted: this model is sent text only]")
        elif kind == "content" and isinstance(block.get("content"), dict):  # ToolCallContent
            parts.append(blocks_text([block["content"]]))
        elif kind == "diff":
            parts.append(f"[diff of {block.get('path', '')}]")
    return "\n\n".join(p for p in parts if p)


# --- the response stream ---------------------------------------------------------------


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


# --- errors -----------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpFailure:
    finish: Finish
    retry_after: float | None  # seconds the server asked us to wait, if it said


def server_message(body: bytes) -> str:
    """The error message in an error body: `{"error": {"message"}}` and its cousins,
    else the body's text, short."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return " ".join(body.decode("utf-8", errors="replace").split())[:300]
    for candidate in (doc.get("error") if isinstance(doc, dict) else None, doc):
        if isinstance(candidate, str) and candidate:
            return candidate
        if isinstance(candidate, dict):
            for key in ("message", "detail", "error"):
                if isinstance(candidate.get(key), str) and candidate[key]:
                    return str(candidate[key])
    return " ".join(body.decode("utf-8", errors="replace").split())[:300]


def _error_code(body: bytes) -> str:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    return str(error.get("code") or error.get("type") or "") if isinstance(error, dict) else ""


def http_error(status: int, reason: str, headers: Mapping[str, str], body: bytes, *,
               model: str, url: str, has_key: bool, now: float | None = None) -> HttpFailure:
    said = server_message(body)
    detail = f": {said.rstrip('. ')}" if said else ""
    status_text = f"{status} {reason}".strip()
    wait = retry_after(headers, now=now)
    if status == 401:
        hint = "Check OPENAI_API_KEY" if has_key else "OPENAI_API_KEY is not set"
        return HttpFailure(Finish("error", f"the API rejected the key ({status_text}){detail}. {hint}.",
                                  "auth", False), None)
    if status == 403:
        return HttpFailure(Finish("error", f"the API refused access ({status_text}){detail}. "
                                  f"Check that the key may use model {model!r}.", "auth", False), None)
    if status == 429:
        if _error_code(body) == "insufficient_quota":
            return HttpFailure(Finish("error", f"the account is out of quota ({status_text}){detail}. "
                                      "Check the plan and billing of the API key.", "rate_limit", False), None)
        return HttpFailure(Finish("error", f"rate limited ({status_text}){detail}", "rate_limit", True), wait)
    if status >= 500 or status == 408:
        code = "network" if status == 408 else "server"
        return HttpFailure(Finish("error", f"the API failed ({status_text}){detail}", code, True), wait)
    if status == 404:
        return HttpFailure(Finish("error", f"not found ({status_text}){detail}. Check the model name "
                                  f"{model!r} and the endpoint {url} (OPENAI_BASE_URL).", "bad_request", False),
                           None)
    return HttpFailure(Finish("error", f"the API rejected the request ({status_text}){detail}",
                              "bad_request", False), None)


def stream_error(error: Any) -> Finish:
    """An error object sent inside a 200 stream (routers and local servers do this)."""
    message = error if isinstance(error, str) else server_message(orjson.dumps({"error": error}))
    code = str(error.get("code") or error.get("type") or "") if isinstance(error, dict) else ""
    if "rate" in code or code == "429":
        return Finish("error", f"rate limited: {message}", "rate_limit", True)
    return Finish("error", f"the API failed mid-stream: {message}", "server", True)


def retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """`retry-after-ms`, else `Retry-After` (seconds or an HTTP date), in seconds."""
    lower = {k.lower(): v for k, v in headers.items()}
    try:
        ms = float(lower.get("retry-after-ms", ""))
        if math.isfinite(ms) and ms >= 0:
            return ms / 1000
    except ValueError:
        pass
    value = lower.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


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
