"""`openai:MODEL`: any OpenAI-compatible Chat Completions endpoint, streaming
(DESIGN.md section 4; docs/openai.md says how to point it at OpenAI, DeepSeek, Ollama).

Configuration comes from the environment: `OPENAI_BASE_URL` (default the OpenAI API),
`OPENAI_API_KEY` (sent as a Bearer token; else the key `acp-bridge login` stored:
acp_bridge.models.openai_key), `ACP_BRIDGE_CONTEXT_WINDOW` (the
`usage_update.size`, else a table of known models), `ACP_BRIDGE_OPENAI_TIMEOUT` (seconds
to connect and between two reads of the stream, default 120) and
`ACP_BRIDGE_OPENAI_ATTEMPTS` (tries of one model call, default 3).

Every failure ends the stream as `Finish("error", message, code, retryable)` with code
`auth`, `rate_limit`, `server`, `network` or `bad_request`. Retryable failures are
retried with backoff (honouring Retry-After up to a cap) while nothing has been
yielded; once output has begun a failure ends the step. Closing or cancelling the
stream closes the HTTP response, and so the connection, at once.

This module is imported only when an `openai:` model is loaded: httpx stays off the
agent's start-up path.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import replace
from typing import cast

import anyio
import httpx

from acp_bridge import __version__
from acp_bridge.models.base import Finish, ModelChunk, ModelRequest, Retrying
from acp_bridge.models.openai_env import DEFAULT_BASE_URL, read_env
from acp_bridge.models.openai_errors import http_error
from acp_bridge.models.openai_key import find_key
from acp_bridge.models.openai_request import context_window, request_body, system_prompt
from acp_bridge.models.openai_stream import SSEDecoder, StreamAssembler, whole_completion

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 120.0
DEFAULT_ATTEMPTS = 3
BACKOFF_BASE = 0.5  # seconds before the 2nd try; doubles per try
BACKOFF_CAP = 8.0
RETRY_AFTER_CAP = 30.0  # a longer Retry-After ends the call instead of stalling the turn
DRAIN_TIMEOUT = 1.0  # after [DONE], how long the end of the body may take (keeps the connection)
ERROR_BODY_LIMIT = 64 * 1024


class OpenAIModel:
    external = True  # every call goes over the network (acp_bridge.models.Model)

    def __init__(self, model: str, *, base_url: str = DEFAULT_BASE_URL, api_key: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, attempts: int = DEFAULT_ATTEMPTS,
                 context_window: int | None = None, backoff_base: float = BACKOFF_BASE,
                 backoff_cap: float = BACKOFF_CAP, retry_after_cap: float = RETRY_AFTER_CAP,
                 images: bool = False) -> None:
        self.model = model
        self.images = images  # prompts' images are sent as image_url parts
        self.name = f"openai:{model}"
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.api_key = api_key or None
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.context_window = context_window
        self.backoff_base, self.backoff_cap, self.retry_after_cap = backoff_base, backoff_cap, retry_after_cap
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_env(cls, model: str, env: Mapping[str, str] | None = None, *, images: bool = False) -> OpenAIModel:
        env = os.environ if env is None else env
        settings = read_env(model, env)  # checked as at start-up (acp_bridge.models.check_spec)
        window, timeout, attempts = settings.context_window, settings.timeout, settings.attempts
        return cls(model, base_url=settings.base_url,
                   api_key=find_key(env), images=images,
                   timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
                   attempts=DEFAULT_ATTEMPTS if attempts is None else attempts,
                   context_window=window if window is not None else context_window(model))

    def client(self) -> httpx.AsyncClient:
        """One client per model: its connections are kept between steps."""
        if self._client is None:
            headers = {"User-Agent": f"acp-bridge/{__version__}"}
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            self._client = httpx.AsyncClient(
                headers=headers, timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 30.0)))
        return self._client

    def use_key(self, key: str) -> None:
        """A key that came after the model was made (`authenticate`): the next call sends it."""
        self.api_key = key
        if self._client is not None:
            self._client.headers["Authorization"] = f"Bearer {key}"

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        body = request_body(self.model, request.messages, request.tools, system=system_prompt(request.cwd),
                            images=self.images, reasoning_effort=request.reasoning_effort)
        attempt = 0
        while True:
            attempt += 1
            started = False
            failure: Finish
            wait: float | None = None
            try:
                async with self.client().stream("POST", self.url, json=body) as response:
                    if response.status_code >= 300:
                        raw = await _read_limited(response)
                        failed = http_error(response.status_code, response.reason_phrase, response.headers, raw,
                                            model=self.model, url=self.url, has_key=self.api_key is not None)
                        failure, wait = failed.finish, failed.retry_after
                    else:
                        if _is_json(response):  # a server that ignored "stream": a whole completion
                            assembler = StreamAssembler()
                            for chunk in assembler.feed(whole_completion(await _read_limited(response, None))):
                                started = True
                                yield chunk
                            unfinished = Finish("error", "the API answered with JSON that is not a completion",
                                                "server", True)
                        else:
                            assembler, decoder = StreamAssembler(), SSEDecoder()
                            error: str | None = None
                            body_chunks = cast("AsyncGenerator[bytes, None]", response.aiter_bytes())
                            async with contextlib.aclosing(body_chunks) as chunks:
                                try:
                                    async for data in chunks:
                                        for event in decoder.feed(data):
                                            for chunk in assembler.feed(event):
                                                started = True
                                                yield chunk
                                        if assembler.done or assembler.error:
                                            break
                                    else:
                                        for event in decoder.close():
                                            for chunk in assembler.feed(event):
                                                started = True
                                                yield chunk
                                except httpx.RequestError as exc:  # cut mid-way, or undecodable
                                    error = _network_message(exc, self.url, self.timeout)
                                if assembler.done and error is None:
                                    # Read the end of the body so the connection can be reused.
                                    with anyio.move_on_after(DRAIN_TIMEOUT), contextlib.suppress(httpx.RequestError):
                                        async for _ in chunks:
                                            pass
                            unfinished = Finish("error", error or "the response stream ended before the model "
                                                "finished (no finish_reason, no [DONE])", "network", True)
                        # Either way, the assembler says how the answer ended.
                        if assembler.error is not None:
                            failure = assembler.error
                        elif assembler.complete:
                            for chunk in assembler.finish():
                                yield chunk
                            return
                        else:
                            failure = unfinished
            except httpx.RequestError as exc:  # could not connect, send, or read the headers
                failure = Finish("error", _network_message(exc, self.url, self.timeout), "network", True)
            delay = self._delay(attempt, wait)
            if failure.retryable and not started and attempt < self.attempts and delay is not None:
                log.warning("model call failed (%s: %s); try %d of %d in %.1f s",
                            failure.code, self.redacted(failure.message or ""), attempt + 1, self.attempts, delay)
                yield Retrying(attempt + 1, self.attempts, delay, failure.code, self.redacted(failure.message or ""))
                await anyio.sleep(delay)
                continue
            yield self._final(failure, attempt, wait, started)
            return

    def _delay(self, attempt: int, wait: float | None) -> float | None:
        """Seconds before the next try, or None when the server asks for too long."""
        if wait is not None:
            return wait if wait <= self.retry_after_cap else None
        return min(self.backoff_base * 2.0 ** (attempt - 1), self.backoff_cap)

    def redacted(self, text: str) -> str:
        """`text` without our key: a server may quote the key it refused, and error
        messages reach the session log (`turn/end`) and the agent's log."""
        return text.replace(self.api_key, "[the API key]") if self.api_key else text

    def _final(self, failure: Finish, attempt: int, wait: float | None, started: bool) -> Finish:
        message = self.redacted(failure.message or "model error")
        if failure.retryable:
            if started:
                message += " (after output had begun: not retried)"
            elif wait is not None and wait > self.retry_after_cap:
                message += f"; the server asks to retry after {math.ceil(wait)} s"
            elif attempt > 1 and wait is not None:
                message += f" (gave up after {attempt} tries; the server asks to wait {wait:g} s)"
            elif attempt > 1:
                message += f" (gave up after {attempt} tries)"
        return replace(failure, message=message)  # with the numbers of a context-length refusal


def _is_json(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.split(";")[0].strip().lower() == "application/json"


async def _read_limited(response: httpx.Response, limit: int | None = ERROR_BODY_LIMIT) -> bytes:
    raw = b""
    try:
        async for data in response.aiter_bytes():
            raw += data
            if limit is not None and len(raw) >= limit:
                break
    except httpx.RequestError:
        pass  # the status says enough
    return raw


def _network_message(exc: httpx.RequestError, url: str, timeout: float) -> str:
    if isinstance(exc, httpx.ConnectTimeout):
        return f"cannot connect to {url}: timed out. Check OPENAI_BASE_URL and the network"
    if isinstance(exc, httpx.TimeoutException):
        return (f"the API sent nothing for {timeout:g} s ({type(exc).__name__}); "
                "raise ACP_BRIDGE_OPENAI_TIMEOUT for slow models")
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect to {url}: {exc or type(exc).__name__}. Check OPENAI_BASE_URL and the network"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return f"the response stream was cut off: {exc or type(exc).__name__}"
    return f"network error talking to {url}: {type(exc).__name__}: {exc}"
