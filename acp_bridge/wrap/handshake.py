"""The editor's `initialize`, answered while the wrapper imports (issue 32, start-up).

`acp-bridge wrap` spawns its child first of all (acp_bridge.wrap.spawn), then imports
the host and the engine: ~80 ms on a quiet machine, where a fast agent boots in 30-80.
So the first exchange is done here, by a thread that needs only the standard library,
orjson and the pure protocol core, while the main thread imports: the editor's first
line is read from our stdin; if it is a well-formed `initialize` request the host would
take as it stands, the child is sent an `initialize` with the editor's params under our
first request id (the bytes the engine would send), its answer is read from its stdout
(its stderr drained meanwhile, so it never blocks), and the editor is answered with the
bytes `WrapEngine.initialize` would write (acp_bridge.wrap.initialize, one copy for both;
the first answer in JSON-RPC's member order, as rpc writes it). `wrap -- COMMAND` begins
it right after the spawn, before its options are read: held, it does all that but the
answer, which it writes once the options are taken (`release`); refused, it says nothing.

Whatever is not that plain case is left to the host, as before: the thread stops and
hands over what it read (`Greeting`). Its states:

- `none`: nothing was sent to the child (the editor's first line is not such a request,
  it did not come before the host was ready, it is too long, or the child could not
  be written to); the host reads everything from the start;
- `sent`: the child was sent `initialize` and did not answer it here (an error answer,
  anything else before the answer, a line that cannot be parsed, its death, or the host
  was ready first); the host answers the editor's `initialize`, whose line it reads
  again, with the child's answer to the request already sent (`Connection.sent_before`):
  nothing is sent twice;
- `done`: the editor has its answer; the host starts with the link ready.

In each, the bytes read beyond what the handshake took, from the editor and from the
child's stdout and stderr, are read first by the host's readers (`FdLineReader`'s
`prefix`). Nothing else writes to our stdout until `finish` returns. While it runs, the
process's `Tuning` is told (`handshake_started`): the wrapper's switches threads more
often, so the thread gets the GIL from the importing main thread soon after each wake.
"""

from __future__ import annotations

import os
import select
import subprocess
import threading
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from acp_bridge.errors import AcpBridgeError
from acp_bridge.host.params import check_params
from acp_bridge.host.tuning import Tuning
from acp_bridge.rpc.protocol import envelope_error, is_id, own_request_id, request_message, response
from acp_bridge.wrap.initialize import initialized

FIRST_ID = own_request_id(1)  # the id the child's link would give its first request
MAX_LINE = 1 << 20  # a longer first line (or child answer) is left to the host's reader
READ_SIZE = 1 << 16

State = Literal["none", "sent", "done"]


@dataclass(frozen=True)
class Greeting:
    """What the handshake did (see the module docstring), for the host and the link."""

    state: State
    editor_rest: bytes  # what the editor sent that the host has not read
    child_out: bytes  # the child's stdout read and not taken
    child_err: bytes  # its stderr read (its lines are logged once logging is set up)
    child_in: int  # bytes written to its stdin
    params: dict[str, Any] | None  # the editor's `initialize` params (sent, done)
    answer: Any  # the child's result (done)
    failure: str | None  # what stopped the thread, if it was not a case foreseen (a bug)


class Handshake:
    """The thread that answers the editor's `initialize` (`start`), and its end
    (`finish`: the `Greeting`, once the thread has stopped). `held`: it answers the
    editor only once `release`d (it starts before the command line has read its
    options, and a refusal must leave stdout empty); until then it does the rest."""

    def __init__(self, proc: subprocess.Popen[bytes], agents: list[str] | None, tuning: Tuning, *,
                 held: bool = False, editor_in: int = 0, editor_out: int = 1) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._agents = agents
        self._editor_in, self._editor_out = editor_in, editor_out
        self._child_in, self._child_out = proc.stdin.fileno(), proc.stdout.fileno()
        self._child_err: int | None = proc.stderr.fileno()
        self._wake_r, self._wake_w = os.pipe()
        # What the thread has read from each (all of it, until `done` says how much it took).
        self._editor, self._child, self._err = bytearray(), bytearray(), bytearray()
        self._state: State = "none"
        self._sent = 0
        self._params: dict[str, Any] | None = None
        self._answer: Any = None
        self._took = (0, 0)  # what `done` took of the editor's bytes and of the child's
        self._failure: str | None = None
        self._released = not held
        self._may_answer = threading.Event()  # released, or stopped
        if self._released:
            self._may_answer.set()
        self._tuning = tuning
        self._thread = threading.Thread(target=self._run, name="acp-bridge-handshake", daemon=True)

    def start(self) -> None:
        self._tuning.handshake_started()
        self._thread.start()

    def release(self) -> None:
        """The editor may be answered (the options were read and taken)."""
        self._released = True
        self._may_answer.set()

    def finish(self) -> Greeting:
        """Stop the thread where it waits (a write under way is finished first), and
        what it did. A thread still held answers nothing (the options were refused: the
        child is stopped, and what it answered is in `child_out` as if unread)."""
        os.write(self._wake_w, b".")
        self._may_answer.set()
        self._thread.join()
        self._tuning.handshake_ended()
        os.close(self._wake_r)
        os.close(self._wake_w)
        editor, child = self._took
        return Greeting(self._state, bytes(self._editor[editor:]), bytes(self._child[child:]), bytes(self._err),
                        self._sent, self._params, self._answer, self._failure)

    def _run(self) -> None:
        try:
            self._greet()
        except Exception as exc:  # unforeseen: the host takes over from where it stands, and logs it
            self._failure = f"{type(exc).__name__}: {exc}"

    def _greet(self) -> None:
        line = self._line(self._editor_in, self._editor, 0)
        if line is None:
            return
        asked = _initialize_request(line[1])
        if asked is None:
            return
        rid, params = asked
        data = orjson.dumps(request_message(FIRST_ID, "initialize", params)) + b"\n"
        if len(data) > select.PIPE_BUF:  # written whole at once only up to it
            return
        try:
            self._sent = os.write(self._child_in, data)  # a fresh pipe: all of it, at once
        except OSError:  # it died already: the host meets that as before
            return
        self._state, self._params = "sent", params
        answer = self._child_answer()
        if answer is None:
            return
        taken, result = answer
        out = orjson.dumps(response(rid, initialized(result, self._agents).answer)) + b"\n"
        self._may_answer.wait()
        if not self._released:
            return
        _write_all(self._editor_out, out)
        self._state, self._answer, self._took = "done", result, (line[0], taken)

    def _child_answer(self) -> tuple[int, Any] | None:
        """The child's result, if its first line (blank ones passed over) is the answer
        to our `initialize`, and where that line ends in what was read."""
        start = 0
        while True:
            found = self._line(self._child_out, self._child, start)
            if found is None:
                return None
            end, line = found
            if line.strip():
                break
            start = end
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if type(message) is not dict or "method" in message or message.get("id") != FIRST_ID \
                or "error" in message or "result" not in message:
            return None
        return end, message["result"]

    def _line(self, fd: int, buffer: bytearray, start: int) -> tuple[int, bytes] | None:
        """The next line in `buffer` from `start` (reading `fd` into it until there is
        one): where it ends, and the line with its newline. None at EOF, past
        `MAX_LINE`, or when `finish` stops the wait."""
        while True:
            end = buffer.find(b"\n", start)
            if end >= 0:
                return end + 1, bytes(buffer[start:end + 1])
            if len(buffer) - start > MAX_LINE or not self._wait(fd):
                return None
            chunk = _read(fd)
            if chunk is None:
                continue  # (not readable after all)
            if not chunk:
                return None
            buffer += chunk

    def _wait(self, fd: int) -> bool:
        """Until `fd` is readable (True) or `finish` is called (False), the child's
        stderr read meanwhile."""
        while True:
            poller = select.poll()  # (any descriptor number, unlike select)
            for watched in (fd, self._wake_r, self._child_err):
                if watched is not None:
                    poller.register(watched, select.POLLIN)
            ready = {ready_fd for ready_fd, _ in poller.poll()}  # (a hang-up or an error counts: the read tells)
            if self._wake_r in ready:
                return False
            if self._child_err is not None and self._child_err in ready:
                chunk = _read(self._child_err)
                if chunk == b"":
                    self._child_err = None  # its end: the host's reader meets it too
                elif chunk:
                    self._err += chunk
            if fd in ready:
                return True


def _initialize_request(line: bytes) -> tuple[Any, dict[str, Any]] | None:
    """The id and params of `line` if it is an `initialize` request the host would pass
    to the engine as it stands (its envelope and params checked as the host checks
    them); None for anything else."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if type(message) is not dict or message.get("method") != "initialize" or "id" not in message:
        return None
    params = message.get("params")
    if not is_id(message["id"]) or type(params) is not dict or envelope_error(message) is not None:
        return None
    try:
        check_params("initialize", params)
    except AcpBridgeError:
        return None
    return message["id"], params


def _read(fd: int) -> bytes | None:
    """What `fd` has (b"" at its end; None if it has nothing after all: a descriptor
    the editor gave us may be non-blocking)."""
    try:
        return os.read(fd, READ_SIZE)
    except BlockingIOError:
        return None


def _write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd`, waiting while it is full (it may be non-blocking). An
    editor that stopped reading: nothing more can reach it (the host sees its stdin
    end)."""
    view = memoryview(data)
    try:
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                poller = select.poll()
                poller.register(fd, select.POLLOUT)
                poller.poll()
    except OSError:
        return
