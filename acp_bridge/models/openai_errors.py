"""The failures of `openai:MODEL` as `Finish("error", ...)`, pure: an HTTP error
response (with the wait it asks for) or an error object sent inside a stream. The
messages say what to check (the key, the model name, the endpoint, the quota).
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from acp_bridge.models.base import Finish


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
