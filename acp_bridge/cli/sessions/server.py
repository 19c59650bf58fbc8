"""The HTTP side of `acp-bridge sessions serve` (docs/html.md), what any page of it
shares: the bounds on a connection and the answer's headers. serve.py is the site
(the token, the Host, the pages); this is how requests reach it.

- **Bounded.** A fixed pool of `Limits.workers` threads serves the connections, and
  `Limits.waiting` more wait for one; a connection beyond those is answered `503` at
  once and closed, so no number of connections makes more threads (with the standard
  library's `ThreadingHTTPServer`, 500 idle connections held 500 threads).
- **Timed.** A request (its line and headers) must arrive whole within
  `Limits.request_seconds` of its connection being accepted, however slowly it
  trickles in (a deadline over every read, not a timeout per read), and however long it
  waited for a worker (so that idle connections in the queue expire together, not one
  pool's worth at a time); past it, or idle as long, the connection is closed
  unanswered, unless what it sent is already here whole. Each piece of a page must
  then be taken by the reader within `Limits.send_seconds`.
- **Every method, after the token.** Whatever the method (GET, HEAD, TRACE, CONNECT, a
  made-up one), the request goes to the site's `answer`, which checks the token and the
  Host first: the standard library's 501 for a method it has no `do_` for is never
  sent. An error the standard library answers itself (a malformed request line, a line
  over 64 KB, too many headers) carries the same headers as every page.
"""

from __future__ import annotations

import io
import queue
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer

from acp_bridge.cli.sessions.page import CSP_HEADER

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Iterator
    from typing import Any

PROG = "acp-bridge sessions serve"
HEADERS = {
    "Content-Security-Policy": CSP_HEADER,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


@dataclass(frozen=True)
class Limits:
    """What one connection may hold of the server (the module says how each is kept)."""

    request_seconds: float = 10.0  # a browser sends its request at once; an idle socket is let go
    send_seconds: float = 30.0  # per piece of a page (a turn of a transcript)
    workers: int = 16  # requests served at once
    waiting: int = 64  # connections taken and waiting for a worker
    fields: int = 64  # fields of a query string (the search form has 9 kinds)


class _DeadlineReader(io.RawIOBase):
    """A socket read with one deadline over all its reads: a request that trickles in a
    byte at a time is cut at the deadline as one that never comes."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        # Past the deadline, what has arrived is still read (a request that waited in
        # the queue); what has not raises TimeoutError at once.
        self._sock.settimeout(max(self._deadline - time.monotonic(), 0.001))
        return self._sock.recv_into(buffer)


class Handler(BaseHTTPRequestHandler):
    """One connection: its request read under the deadline, then answered by `answer`
    (a subclass's: the site), whatever its method."""

    server_version = "acp-bridge"
    sys_version = ""
    limits = Limits()

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own reader, replaced by one with a deadline
        accepted = self.server.accepted_at() if isinstance(self.server, PooledServer) else time.monotonic()
        deadline = accepted + self.limits.request_seconds
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, deadline))

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a request line holds the token: nothing is logged per request

    def __getattr__(self, name: str) -> Callable[[], None]:
        # The standard library looks up `do_<METHOD>` and answers 501 (before any check
        # of ours, without our headers) when there is none: every method is ours.
        if name.startswith("do_"):
            return self._answer_any
        raise AttributeError(name)

    def _answer_any(self) -> None:
        self.connection.settimeout(self.limits.send_seconds)  # the request is in: now the page goes out
        self.answer(self.command != "HEAD")

    def answer(self, send_body: bool) -> None:
        raise NotImplementedError

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (a malformed request line, a line too long,
        too many headers), with the headers every page has."""
        self.close_connection = True
        text = message or self.responses.get(code, ("Error",))[0]
        self.reply(code, iter([f"{code} {text}\n"]), "text/plain", getattr(self, "command", "") != "HEAD")

    def reply(self, status: int, body: Iterator[str], kind: str, send_body: bool, *,
              location: str | None = None) -> None:
        try:
            self.send_response(status)
            if location is not None:
                self.send_header("Location", location)
            self.send_header("Content-Type", f"{kind}; charset=utf-8")
            for name, value in HEADERS.items():
                self.send_header(name, value)
            self.send_header("Connection", "close")
            self.end_headers()
            for piece in body:
                if send_body:
                    self.wfile.write(piece.encode("utf-8", "replace"))
        except OSError:
            pass  # the reader went away, or took too long to read (send_seconds)
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()  # a transcript's generator lets its store go


BUSY = ("HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in HEADERS.items())
        + "Retry-After: 5\r\nConnection: close\r\n\r\nBusy: too many connections at once.\n").encode()


class PooledServer(HTTPServer):
    """An HTTP server of `limits.workers` threads, at most `limits.waiting` connections
    waiting for one, the rest answered 503 (the module)."""

    request_queue_size = 128  # the listen backlog: connections are taken at once, then judged

    def __init__(self, address: tuple[str, int], handler: type[Handler], limits: Limits) -> None:
        self.limits = limits
        self._slots = threading.BoundedSemaphore(limits.workers + limits.waiting)
        self._queue: queue.SimpleQueue[tuple[socket.socket, Any, float] | None] = queue.SimpleQueue()
        self._accepted = threading.local()  # when the connection a worker serves was accepted
        self._workers: list[threading.Thread] = []  # none yet, for server_close on a failed bind
        super().__init__(address, handler)  # binds and listens, or closes and raises OSError
        self._workers = [threading.Thread(target=self._work, name=f"serve-{n}", daemon=True)
                         for n in range(limits.workers)]  # daemons: a page being sent holds no exit
        for worker in self._workers:
            worker.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        self._queue.put((request, client_address, time.monotonic()))

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            request, address, self._accepted.at = item
            try:
                self.finish_request(request, address)
            except Exception:
                self.handle_error(request, address)
            finally:
                self.shutdown_request(request)
                self._slots.release()

    def accepted_at(self) -> float:
        """When the connection this worker serves was accepted (time.monotonic)."""
        at: float = self._accepted.at
        return at

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line, never a traceback; a reader that went away is nothing to say."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            print(f"{PROG}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)

    def server_close(self) -> None:
        super().server_close()
        for _ in self._workers:
            self._queue.put(None)
