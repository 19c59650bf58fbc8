"""`acp-bridge sessions serve` under hostile requests (issue 34, point 8; docs/html.md):

- every answer, whatever the method (TRACE, CONNECT, made up), comes after the token
  and Host check and carries the documented headers, the standard library's own
  refusals (a malformed line, too many headers) included; two Host headers are refused;
  a query string of more than 64 fields is 400, not 500;
- the connections are bounded: 200 idle ones hold no more than the pool's threads, the
  ones beyond the pool and its queue are answered 503 at once, and once they go the
  server answers again;
- a request must arrive whole in time, whether it never starts or trickles in a byte
  at a time (server.py's `Limits`, small here so that the test is quick).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from acp_bridge.cli.sessions.serve import HOST, Site, make_handler
from acp_bridge.cli.sessions.server import HEADERS, Limits, PooledServer
from tests.support.html_sessions import Served
from tests.support.logs import Script
from tests.support.search_store import DAY0, add_session

pytestmark = pytest.mark.integration


def exchange(port: int, data: bytes, *, timeout: float = 10.0) -> bytes:
    """What the server answers to `data`, read until it closes."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        while piece := sock.recv(65536):
            out += piece
        return out


def parsed(answer: bytes) -> tuple[int, dict[str, list[str]], str]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return int(lines[0].split()[1]), headers, body.decode("utf-8", "replace")


def with_headers(answer: bytes, status: int) -> str:
    got, headers, body = parsed(answer)
    assert got == status, answer[:300]
    for name, value in HEADERS.items():
        assert headers.get(name.lower()) == [value], (name, answer[:300])
    return body


def request(method: str, path: str, port: int, *, hosts: tuple[str, ...] | None = None, extra: str = "") -> bytes:
    shown = hosts if hosts is not None else (f"{HOST}:{port}",)
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"Host: {h}\r\n" for h in shown) + extra
    return (head + "Connection: close\r\n\r\n").encode()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    add_session(root, "jsonl", str(tmp_path), Script().text_turn("alpha question", "beta answer"), DAY0)
    return root


def test_every_answer_comes_after_the_token_and_carries_the_headers(store: Path) -> None:
    with Served(store, "jsonl") as served:
        port, token = served.port, served.token
        for method in ("TRACE", "CONNECT", "PROPFIND", "BREW", "GET", "POST"):
            # Without the token: 403, whatever the method (the standard library said 501
            # to TRACE before any check, and without the headers).
            body = with_headers(exchange(port, request(method, "/", port)), 403)
            assert body == "Forbidden.\n"
            if method != "GET":
                with_headers(exchange(port, request(method, f"/{token}/", port)), 405)
        with_headers(exchange(port, request("CONNECT", f"{HOST}:{port}", port)), 403)
        with_headers(exchange(port, request("GET", f"/{token}/", port)), 200)
        with_headers(exchange(port, request("GET", f"/{token}", port)), 301)
        # Two Host headers: refused, whichever is first.
        for hosts in ((f"{HOST}:{port}", "evil.example"), ("evil.example", f"{HOST}:{port}"),
                      (f"{HOST}:{port}", f"{HOST}:{port}")):
            with_headers(exchange(port, request("GET", f"/{token}/", port, hosts=hosts)), 403)
        # More than 64 fields in a query string: the person's mistake (400), not ours (500).
        fields = "&".join(f"f{n}=x" for n in range(65))
        body = with_headers(exchange(port, request("GET", f"/{token}/search?q=alpha&{fields}", port)), 400)
        assert "more than 64 fields" in body
        with_headers(exchange(port, request("GET", f"/{token}/search?q=alpha&{fields[:-12]}", port)), 200)
        # A query past the search's bound (docs/search.md "Bounds") is cut, and the page says so.
        words = "+".join(["alpha"] + [f"w{n}" for n in range(99)])
        body = with_headers(exchange(port, request("GET", f"/{token}/search?q={words}", port)), 200)
        assert "the query has 100 words (repeats counted once); only 64 were searched" in body
        # The standard library's own refusals carry them too. (Each sends no more than
        # the server reads before it refuses: a socket closed with bytes unread is reset,
        # and the reset may overtake the answer.)
        with_headers(exchange(port, b"GET /x extra HTTP/1.1\r\n"), 400)
        many = "".join(f"X-{n}: y\r\n" for n in range(101))
        with_headers(exchange(port, f"GET /{token}/ HTTP/1.1\r\n{many}".encode()), 431)
        with_headers(exchange(port, b"GET /" + b"a" * (65_537 - 5)), 414)
    assert served.returncode == 0
    assert "Traceback" not in served.stderr, served.stderr


def waiting(sock: socket.socket) -> bytes:
    """What the server has sent on `sock` so far, without waiting for more."""
    sock.setblocking(False)  # a socket with a timeout would wait for its timeout
    try:
        return sock.recv(1 << 16)
    except BlockingIOError:
        return b""


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count")


def test_idle_connections_hold_a_bounded_pool(store: Path) -> None:
    limits = Limits()
    with Served(store, "jsonl") as served:
        port, token = served.port, served.token
        idle = [socket.create_connection((HOST, port), timeout=10) for _ in range(200)]
        try:
            time.sleep(0.5)  # every one taken by the server
            assert threads_of(served.proc.pid) <= limits.workers + 2  # the main thread, the pool
            # Beyond the pool and its queue: answered at once, 503, with the headers.
            started = time.monotonic()
            busy = exchange(port, b"")  # nothing sent, so nothing unread when it is closed
            assert time.monotonic() - started < 2
            assert "too many connections" in with_headers(busy, 503)
            refused = [s for s in idle if waiting(s).startswith(b"HTTP/1.0 503")]
            assert len(refused) == 200 - limits.workers - limits.waiting
        finally:
            for sock in idle:
                sock.close()
        # The idle ones gone (the workers see their end at once): answered again.
        deadline = time.monotonic() + 10
        while parsed(exchange(port, request("GET", f"/{token}/", port)))[0] != 200:
            assert time.monotonic() < deadline, "still busy"
            time.sleep(0.1)
    assert served.returncode == 0
    assert "Traceback" not in served.stderr, served.stderr


@contextmanager
def in_process(store: Path, limits: Limits) -> Iterator[tuple[int, str]]:
    """The server of `sessions serve`, on a thread of this process with `limits`."""
    site = Site("jsonl", store, "t" * 22)
    holder = [0]
    server = PooledServer((HOST, 0), make_handler(site, lambda: holder[0], limits), limits)
    holder[0] = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder[0], site.token
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_request_must_arrive_in_time(store: Path) -> None:
    limits = Limits(request_seconds=1.0, workers=1, waiting=3)
    with in_process(store, limits) as (port, token):
        # Idle: let go after the deadline, unanswered.
        with socket.create_connection((HOST, port), timeout=10) as sock:
            started = time.monotonic()
            assert sock.recv(100) == b""
            assert 0.8 < time.monotonic() - started < 3
        # Trickling a byte every 0.1 s (each read well within any per-read timeout): cut
        # at the deadline all the same.
        with socket.create_connection((HOST, port), timeout=10) as sock:
            data = request("GET", f"/{token}/", port, extra="X-Pad: " + "p" * 200 + "\r\n")
            started = time.monotonic()
            with pytest.raises(OSError):
                for byte in data:
                    sock.sendall(bytes([byte]))
                    time.sleep(0.1)
                    assert time.monotonic() - started < 5, "never cut"
            assert time.monotonic() - started < 3
        # Idle connections waiting for the one worker expire together, from when each
        # was accepted (not one at a time, a deadline after another).
        queued = [socket.create_connection((HOST, port), timeout=10) for _ in range(3)]
        started = time.monotonic()
        for sock in queued:
            assert sock.recv(100) == b""
            sock.close()
        assert time.monotonic() - started < 2.5
        # A request that waited in the queue behind an idle connection is answered.
        blocker = socket.create_connection((HOST, port), timeout=10)
        time.sleep(0.2)
        late = socket.create_connection((HOST, port), timeout=10)
        late.sendall(request("GET", f"/{token}/", port))
        answer = b""
        while piece := late.recv(65536):
            answer += piece
        assert parsed(answer)[0] == 200
        blocker.close()
        late.close()
        assert parsed(exchange(port, request("GET", f"/{token}/", port)))[0] == 200
