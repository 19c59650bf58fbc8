"""The failures of `openai:MODEL` as `Finish("error", ...)`, pure: an HTTP error
response (with the wait it asks for) or an error object sent inside a stream. The
messages say what to check (the key, the model name, the endpoint, the quota).

A request longer than the model's context is its own failure, `context_length`
(`context_error`), whatever the status, in the words of OpenAI, llama.cpp, vLLM,
Ollama and Anthropic-style servers, with the request's size and the context's as the
server counted them where it said: the runner answers it by sending less.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from acp_bridge.models.base import CONTEXT_LENGTH, Finish


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
    error = _error_object(body)
    return str(error.get("code") or error.get("type") or "") if isinstance(error, dict) else ""


# How servers say a request is longer than the context (lower-cased message, code or
# type): OpenAI ("This model's maximum context length is 8192 tokens. However, your
# messages resulted in 8233 tokens", code context_length_exceeded; "Your input exceeds
# the context window of this model"), llama.cpp ("request (8233 tokens) exceeds the
# available context size (8192 tokens)", type exceed_context_size_error; "input (N
# tokens) is larger than the max context size"), vLLM ("maximum context length is 4096
# tokens. However, you requested 5000 tokens (4000 in the messages, ...)", "... longer
# than the maximum model length"), Ollama ("input length exceeds the context length"),
# Anthropic-style routers ("prompt is too long: 210000 tokens > 200000 maximum").
_CONTEXT_WORDS = ("context_length_exceeded", "exceed_context_size", "context length", "context size",
                  "context window", "maximum context", "max context", "maximum model length", "max_model_len",
                  "prompt is too long", "too many tokens", "reduce the length of the messages")
# (request tokens, context tokens) in the message, in the orders servers use.
_CONTEXT_NUMBERS = (
    (re.compile(r"(?:request|input) \((\d+) tokens\) (?:exceeds|is larger than) [^(]*\((\d+) tokens\)"), 1, 2),
    (re.compile(r"maximum context length is (\d+) tokens.*?(?:resulted in|requested|has) (\d+)"
                r"(?: tokens \((\d+) in the messages)?", re.S), 2, 1),
    (re.compile(r"prompt is too long: (\d+) tokens > (\d+)"), 1, 2),
    (re.compile(r"input length \((\d+) tokens\) exceeds [^(]*\((\d+) tokens\)"), 1, 2),
)


def context_error(message: str, error: object = None) -> Finish | None:
    """`Finish("error", code=CONTEXT_LENGTH)` when `message` (what the server said) or
    its error object says the request is longer than the model's context, with the
    request's and the context's tokens where it gives them; else None."""
    fields = error if isinstance(error, Mapping) else {}
    said = " ".join(str(part) for part in (message, fields.get("code"), fields.get("type")) if part).lower()
    if not any(word in said for word in _CONTEXT_WORDS):
        return None
    request, context = _int_field(fields, "n_prompt_tokens"), _int_field(fields, "n_ctx")
    for pattern, request_group, context_group in _CONTEXT_NUMBERS:
        found = pattern.search(said)
        if found is None:
            continue
        in_messages = found.group(3) if pattern.groups >= 3 else None
        request = request or int(in_messages or found.group(request_group))
        context = context or int(found.group(context_group))
        break
    return Finish("error", f"the request is longer than the model's context: {message.rstrip('. ')}",
                  CONTEXT_LENGTH, False, request, context)


def _int_field(fields: Mapping[str, object], name: str) -> int | None:
    value = fields.get(name)
    return value if type(value) is int and value > 0 else None


def _error_object(body: bytes) -> object:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return doc.get("error") if isinstance(doc, dict) else None


def http_error(status: int, reason: str, headers: Mapping[str, str], body: bytes, *,
               model: str, url: str, has_key: bool, now: float | None = None) -> HttpFailure:
    said = server_message(body)
    detail = f": {said.rstrip('. ')}" if said else ""
    status_text = f"{status} {reason}".strip()
    if status in (400, 413, 422) or status >= 500:
        too_long = context_error(said, _error_object(body))
        if too_long is not None:
            return HttpFailure(too_long, None)
    wait = retry_after(headers, now=now)
    if status == 401:
        hint = ("Check OPENAI_API_KEY (or the key `acp-bridge login` stored)" if has_key
                else "OPENAI_API_KEY is not set")
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
    too_long = context_error(message, error)
    if too_long is not None:
        return too_long
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
