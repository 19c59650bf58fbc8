"""A scripted OpenAI-compatible endpoint on 127.0.0.1 for the `openai:` provider tests.

A real HTTP/1.1 server (asyncio, in its own thread, so the same server serves a test's
event loop and an agent subprocess alike). Each request gets the next scripted `Reply`:
status, headers, body chunks written one by one (chunked transfer encoding, as the real
endpoints stream), an optional delay before each chunk, an optional abrupt close after
some chunks, or an open end that waits until the client goes away. Every request is
recorded; `disconnects` counts the open-ended replies whose client closed the connection.

    with SSEServer() as server:
        server.push(stream_reply(chunk({"content": "hi"}), chunk(finish="stop")))
        ... point OPENAI_BASE_URL at server.url ...
        server.requests[0].json["messages"]
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import orjson
import pytest


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    delay: float = 0.0  # seconds before each chunk
    cut_after: int | None = None  # close the connection abruptly after this many chunks
    hang: bool = False  # after the chunks, keep the response open until the client goes
    chunked: bool = True  # Transfer-Encoding: chunked, else Content-Length


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


# --- the wire format of streaming Chat Completions ---------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, *,
          model: str = "test-model") -> dict[str, Any]:
    """One `chat.completion.chunk`, shaped as the OpenAI API sends it."""
    return {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1700000000,
            "model": model, "system_fingerprint": "fp_test",
            "choices": [{"index": 0, "delta": delta if delta is not None else {}, "logprobs": None,
                         "finish_reason": finish}]}


def usage_chunk(prompt: int, completion: int, *, cached: int | None = None,
                reasoning: int | None = None) -> dict[str, Any]:
    """The last chunk with `stream_options.include_usage`: no choices, the usage."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning, "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0,
                                              "rejected_prediction_tokens": 0}
    return {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 1700000000,
            "model": "test-model", "choices": [], "usage": usage}


def sse_events(*payloads: dict[str, Any] | str, done: bool = True) -> list[bytes]:
    """Each payload as one `data: ...` event, then `data: [DONE]`."""
    events = [b"data: " + (p.encode() if isinstance(p, str) else orjson.dumps(p)) + b"\n\n" for p in payloads]
    return [*events, b"data: [DONE]\n\n"] if done else events


def stream_reply(*payloads: dict[str, Any] | str, done: bool = True, **kw: Any) -> Reply:
    return Reply(200, {"Content-Type": "text/event-stream; charset=utf-8"}, sse_events(*payloads, done=done), **kw)


def text_reply(*pieces: str, finish: str = "stop", usage: tuple[int, int] | None = (7, 3)) -> Reply:
    payloads: list[dict[str, Any]] = [chunk({"role": "assistant", "content": "", "refusal": None})]
    payloads += [chunk({"content": piece}) for piece in pieces]
    payloads.append(chunk({}, finish))
    if usage is not None:
        payloads.append(usage_chunk(*usage))
    return stream_reply(*payloads)


def error_reply(status: int, message: str, *, type_: str = "invalid_request_error", code: str | None = None,
                headers: dict[str, str] | None = None) -> Reply:
    body = orjson.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})
    return Reply(status, {"Content-Type": "application/json", **(headers or {})}, [body], chunked=False)


# --- the server ----------------------------------------------------------------------------


class SSEServer:
    """`responder`, if given, answers each request the script has no reply for (a model
    that decides by what it is asked: tests/support/fake_model.py)."""

    def __init__(self, responder: Callable[[Received], Reply] | None = None) -> None:
        self.responder = responder
        self.requests: list[Received] = []
        self.disconnects = 0
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def wait_disconnects(self, count: int = 1, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.disconnects >= count:
                return True
            time.sleep(0.01)
        return self.disconnects >= count

    def __enter__(self) -> SSEServer:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="sse-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the test server did not start")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await server.wait_closed()

    def _next(self, request: Received) -> Reply:
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        if self.responder is not None:
            return self.responder(request)
        return error_reply(500, "the test server has no scripted reply left", type_="server_error")

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                self.requests.append(request)
                if not await self._respond(self._next(request), reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await writer.wait_closed()

    async def _respond(self, reply: Reply, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Write one reply; False when the connection is done with."""
        phrase = HTTPStatus(reply.status).phrase if reply.status in HTTPStatus._value2member_map_ else ""
        head = [f"HTTP/1.1 {reply.status} {phrase}"]
        head += [f"{name}: {value}" for name, value in reply.headers.items()]
        if reply.chunked:
            head.append("Transfer-Encoding: chunked")
        else:
            head.append(f"Content-Length: {sum(len(c) for c in reply.chunks)}")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        await writer.drain()
        for index, data in enumerate(reply.chunks):
            if reply.cut_after is not None and index >= reply.cut_after:
                writer.transport.abort()
                return False
            if reply.delay:
                await asyncio.sleep(reply.delay)  # a slow provider, as the reply asks
            writer.write(b"%x\r\n%s\r\n" % (len(data), data) if reply.chunked else data)
            await writer.drain()
        if reply.cut_after is not None:
            writer.transport.abort()
            return False
        if reply.hang:
            while await reader.read(65536):  # until the client closes the connection
                pass
            self.disconnects += 1
            return False
        if reply.chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        return True


async def _read_request(reader: asyncio.StreamReader) -> Received | None:
    line = await reader.readline()
    if not line.strip():
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Received(method, path, headers, body)


@contextlib.contextmanager
def openai_server(monkeypatch: pytest.MonkeyPatch, responder: Callable[[Received], Reply] | None = None,
                  *, key: str = "sk-e2e") -> Iterator[SSEServer]:
    """An SSEServer the OpenAI provider of the agents a test starts is pointed at (their
    environment: the base URL, a key, and no proxy for 127.0.0.1)."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with SSEServer(responder) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", key)
        yield server
