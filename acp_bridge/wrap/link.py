"""`ChildLink`: the JSON-RPC connection to one run of the wrapped agent.

A link lives as long as one child process: it serves the child's requests and
notifications (the proxy's handlers, as the connection's fallback and inline
notifications), carries our requests to it, and sees it die. When the child dies (its
stdout ends, or the process exits), every request still waiting on it (an editor's
request we passed on) fails with `AgentExitedError`, and every request of the child still
waiting on the editor is cancelled, which tells the editor with `$/cancel_request`
(rpc.Connection.request does that for a cancelled wait). A restart makes a new link.

The child's own `$/cancel_request` of a request it made of us is rpc's: it names the
child's id, never the editor's, so it is not passed on; it cancels that request's task,
which cancels our request to the editor in the same way.

Errors the child answers are `ClientError`s, passed on unchanged: to_rpc_error
(acp_bridge.host.errors) answers the editor with the child's error as it came.

Death is final for what the child sends: once the link is dead (its stdout ended, or
its process exited and its stdout did not end within `EOF_S`: a descendant that left
its group holds it, and is killed by the pipe), nothing read from it is handled any
more, so nothing an orphan of it says reaches the editor or a log. The link also
remembers how far the child had read its stdin when it died, so a prompt it never read
is told from one it died running (`Call.unread`: the prompt is then sent again to the
restarted child, acp_bridge.wrap.sessions).

A prompt is asked with `ask`: the request runs in a task of the link's own, so the
prompt may stop waiting for it (the editor cancelled it and the child did not answer
within the cancel grace) while the child's late answer is still seen
(acp_bridge.wrap.children, `SessionMap.stuck`).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.abc

from acp_bridge.errors import AgentExitedError
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.rpc.connection import Connection, Fallback, Inline, InlineRun
from acp_bridge.rpc.outgoing import FLUSH_WINDOW_S
from acp_bridge.rpc.protocol import own_request_id
from acp_bridge.wrap.child import ChildAgent

log = logging.getLogger("acp_bridge.wrap.link")

T = TypeVar("T")

DRAIN_S = 2.0  # how long the child gets to read what is queued for it before a close
# How long its stdout may stay open after its process exited. Its group is killed at the
# exit, so what it wrote is read to EOF in milliseconds; longer, a descendant that left
# the group holds the pipe (and is killed for it).
EOF_S = 0.5
# A child that dies this soon after a request, having sent nothing since, did not act on
# it as far as anyone can tell (an agent behind an npm launcher reads what reaches its pipe
# in the moment between the launcher's death and its group's kill): the request counts
# as unread, and a prompt is sent again to the restarted child (issue 34, point 10).
QUIET_S = 1.0


def permission_cancelled() -> dict[str, Any]:
    """The answer to a `session/request_permission` of a turn that was cancelled (ACP's
    outcome for it), given the child by the wrapper itself."""
    return {"outcome": {"outcome": "cancelled"}}


@dataclass(eq=False)
class Call:
    """Our request to the child, answered in a task of the link (`ChildLink.ask`): its
    result or error once `done`, and what the link knew of it when the child died."""

    method: str
    offset: int | None = None  # where its bytes start in the child's stdin; None: not sent
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: Exception | None = None
    # The child died without acting on it, as far as the wrapper can tell: it read no
    # byte of it, or it died within `QUIET_S` of it having said nothing since (an agent
    # behind a launcher reads what reaches the pipe just before its group is killed).
    unread: bool = False
    heard: int = 0  # bytes the child had sent when it was asked
    asked_at: float = 0.0
    # Called once it is done, if the one who asked stopped waiting before (a late answer).
    late: Callable[[Call], None] | None = None

    def outcome(self) -> Any:
        """The child's result; its error (ClientError), AgentExitedError, raised."""
        if self.error is not None:
            raise self.error
        return self.result


class ChildLink:
    """The connection to one run of `child` (started already); `run` it in a task
    (`task_group.start`: `ask` needs it running)."""

    def __init__(self, child: ChildAgent, *, fallback_for: Callable[[ChildLink], Fallback],
                 inline: Mapping[str, Inline]) -> None:
        self.child = child
        self.pid = child.pid
        self.generation = child.starts  # sessions restored on this run carry it
        self.writer = child.writer
        self._reader = child.reader
        self._pacer = Pacer()
        handlers = {name: self._while_alive(handler) for name, handler in inline.items()}
        # The start-up handshake (acp_bridge.wrap.handshake) sent this run its first
        # request, `initialize`: our ids go on after it, and its answer, if the
        # handshake did not take it, is the engine's to await (`first_initialize`).
        greeting = child.greeting
        greeted = greeting is not None and greeting.state != "none"
        self.conn = Connection(child.reader, child.writer, {}, fallback=self._fallback_while_alive(fallback_for(self)),
                               inline=handlers, error_for=to_rpc_error,
                               ids=map(own_request_id, itertools.count(2)) if greeted else None)
        self._first: Coroutine[Any, Any, Any] | None = None
        if greeting is not None and greeting.state == "sent":
            self._first = self.conn.sent_before("initialize", own_request_id(1))
        self.dead = anyio.Event()
        self.status: int | None = None
        # Sent the editor's `initialize` again, or none was needed (the engine's to say).
        self.ready = False
        # Did not answer the wrapper within a cancel's grace: restarted at its next use.
        self.overdue = False
        self._read: int | None = None  # bytes of its stdin the child had read when it died
        self._dead_at = float("inf")  # when it died (loop time)
        self._dropped = 0  # messages read after its death, dropped
        self._waiting: set[anyio.CancelScope] = set()
        self._serving = anyio.CancelScope()
        self._ended = anyio.Event()
        self._closing = False  # `close` stops it its own, gentler way
        self._tg: anyio.abc.TaskGroup | None = None

    @property
    def alive(self) -> bool:
        return not self.dead.is_set()

    @property
    def running(self) -> bool:
        """Alive, and its process has not exited: a grandchild may hold the child's
        stdout open for a while after the child itself died (the link is then still
        alive, reading to EOF), and a new request must not be sent to the dead one."""
        return self.alive and self.child.alive

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve the child until its stdout ends (or it exits), then mark it dead."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._watch_exit)
            task_status.started()
            try:
                with self._serving:
                    await self.conn.serve()
                await self._exit_status()
            except* OSError as group:  # its pipe went away under a write
                log.info("the connection to the wrapped agent failed: %s", group.exceptions[0])
            finally:
                self._mark_dead()
                if self._first is not None:  # never asked for
                    self._first.close()
                self.child.close_output()
                if self.pid is not None and not self._closing:
                    self.child.kill(self.pid)  # its stdout ended: what is left of it goes too
                self._ended.set()
                tg.cancel_scope.cancel()
        if self._dropped:
            log.info("dropped %d message(s) the wrapped agent (pid %s) sent after it died", self._dropped, self.pid)

    async def _watch_exit(self) -> None:
        # Its last answers may still be in the pipe: read to EOF first (its group is
        # killed at its exit, so EOF comes at once), unless a descendant that left the
        # group holds its stdout open: that one is killed, and nothing more is read.
        self.status = await self.child.wait_died()
        with anyio.move_on_after(EOF_S):
            await self._ended.wait()
        if not self._ended.is_set():
            pipes = self.child.pipes()  # before the reader's end closes
            self._mark_dead()
            self._serving.cancel()
            await anyio.to_thread.run_sync(self.child.kill_pipe_holders, pipes)

    async def _exit_status(self) -> None:
        # Its stdout ended: mostly because it exited, and the exit watcher's pidfd fires
        # a moment after the EOF is read. Wait that moment (at most EOF_S, for a child
        # that closed its stdout and runs on), so the error of every request it owed
        # names its status, not "exited" alone.
        if self.status is None and self.child.pid == self.pid:
            with anyio.move_on_after(EOF_S):
                self.status = await self.child.wait_died()

    def _unheard(self, call: Call) -> bool:
        """The child died within `QUIET_S` of `call` having sent nothing since: what it
        read of it, it did not act on as far as anyone can tell (docs/wrap.md, "The
        child's death and restart")."""
        return self._reader.received == call.heard and self._dead_at - call.asked_at <= QUIET_S

    def _mark_dead(self) -> None:
        if self.dead.is_set():
            return
        self._dead_at = anyio.current_time()
        # How far it read its stdin: the pipe keeps what it never read.
        unread = self.child.stdin_unread() if self.child.pid == self.pid else None
        self._read = None if unread is None else self.writer.written - unread
        self.dead.set()
        for scope in list(self._waiting):
            scope.cancel()

    def _streaming(self) -> None:
        """A run of the child's notifications was handled (`Pacer`)."""
        reader = self._reader
        until = self._pacer.ran(reader.reads, reader.read_at)
        if until is not None:
            reader.hold_next(until)

    def _while_alive(self, handler: Inline) -> Inline:
        if isinstance(handler, InlineRun):
            return _RunWhileAlive(self, handler)

        def handle(params: Any) -> bool | None:
            if self.dead.is_set():
                self._dropped += 1
                return None
            return handler(params)

        return handle

    def _fallback_while_alive(self, fallback: Fallback) -> Fallback:
        async def handle(method: str, params: Any, is_request: bool) -> Any:
            if self.dead.is_set():
                self._dropped += 1
                if is_request:
                    raise AgentExitedError(self.status)
                return None
            return await fallback(method, params, is_request)

        return handle

    def ask(self, method: str, params: Any) -> Call:
        """`call`, in a task of the link: the `Call` to wait on (its `done`), which the
        caller may stop waiting for while the child still owes the answer."""
        call = Call(method)
        if self._tg is None or self.dead.is_set():
            call.error, call.unread = AgentExitedError(self.status), True
            call.done.set()
            return call
        # Where its bytes start in the child's stdin: after all that was written or
        # queued before it. Queued here, at once: what the caller sends next (the
        # editor's cancel, passed on) goes after it.
        call.offset = self.writer.written + self.conn.queued_bytes
        call.heard, call.asked_at = self._reader.received, anyio.current_time()
        answer = self.conn.ask(method, params)
        self._tg.start_soon(self._answer, call, answer)
        return call

    async def _answer(self, call: Call, answer: Coroutine[Any, Any, Any]) -> None:
        try:
            call.result = await self.guarded(lambda: answer)
        except Exception as exc:  # the child's error answer, its death
            call.error = exc
        except BaseException:  # the link's own end
            call.error = AgentExitedError(self.status)
            raise
        finally:
            answer.close()  # never awaited if the child died first: no warning, nothing left
            if isinstance(call.error, AgentExitedError):
                call.unread = (call.offset is None or (self._read is not None and self._read <= call.offset)
                               or self._unheard(call))
            call.done.set()
            if call.late is not None:
                call.late(call)

    async def first_initialize(self, params: Any) -> Any:
        """The child's answer to `initialize` with the editor's `params`: to the one the
        start-up handshake sent it, if it did and did not take the answer, else to one
        sent now (as `call`)."""
        first, self._first = self._first, None
        if first is None:
            return await self.call("initialize", params)
        try:
            return await self.guarded(lambda: first)
        finally:
            first.close()  # not awaited if the child was dead already

    async def call(self, method: str, params: Any, *, on_answer: Callable[[bool], None] | None = None) -> Any:
        """Our request to the child: its result, ClientError for its error answer, or
        AgentExitedError if it dies first. `on_answer`: Connection.ask's (in the
        reader, as the answer is read)."""
        return await self.guarded(lambda: self.conn.ask(method, params, on_answer=on_answer))

    async def guarded(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run `work` (a wait on the child, or a wait for the editor on the child's
        behalf), cancelled if the child dies: AgentExitedError then."""
        if self.dead.is_set():
            raise AgentExitedError(self.status)
        with anyio.CancelScope() as scope:
            self._waiting.add(scope)
            try:
                return await work()
            finally:
                self._waiting.discard(scope)
        raise AgentExitedError(self.status)

    def notify(self, method: str, params: Any) -> None:
        if self.alive:
            self.conn.notify(method, params)

    async def close(self, *, grace: float | None = None) -> None:
        """Stop the child: what is queued for it is written (if it reads), then its
        stdin is closed and its process group stopped (ChildAgent.close; `grace`: how
        long it may take to exit first, the configured time by default). Shielded."""
        self._closing = True
        with anyio.CancelScope(shield=True):
            drained = False
            # Not for a child stopped at once (`grace` 0: it had its time already).
            with anyio.move_on_after(DRAIN_S if grace is None else min(grace, DRAIN_S)):
                await self.conn.drain(1)
                drained = True
            # Nothing is written to its stdin after this: the descriptor can be closed.
            self.conn.close_output()
            if not drained:  # a writer stuck on a child that does not read: stop it
                self._serving.cancel()
                await self._ended.wait()
            await self.child.close(grace=grace)
            with anyio.move_on_after(EOF_S):
                await self._ended.wait()
            if not self._ended.is_set():
                self._serving.cancel()
                await self._ended.wait()


class Pacer:
    """When the child's next read waits (FdLineReader.hold_next): if the read before
    the one that brought a run of notifications brought one too, the child streams,
    and its next read waits for the rest of the flush window. A wake-up and a read for
    each message of a fast agent cost more than handling it, and its updates wait that
    long to be written anyway (rpc.outgoing; issue 32, bench/README.md). Not after a
    lone run: a turn's last chunk and the answer right behind it are read at once."""

    def __init__(self, window: float = FLUSH_WINDOW_S) -> None:
        self.window = window
        self._read = -1  # the read the last run came in

    def ran(self, reads: int, read_at: float) -> float | None:
        """A run came in read number `reads`, made at `read_at`: until when the next
        read waits, if it does."""
        streams = reads == self._read + 1
        self._read = reads
        return read_at + self.window if streams else None


class _RunWhileAlive:
    """`ChildLink._while_alive` of a handler that takes runs (`InlineRun`): a run read
    together is handled, or dropped, as a whole (the link dies in another task, never
    while the reader handles what it read)."""

    __slots__ = ("_handler", "_link")

    def __init__(self, link: ChildLink, handler: InlineRun) -> None:
        self._link = link
        self._handler = handler

    def __call__(self, params: Any) -> bool | None:
        link = self._link
        if link.dead.is_set():
            link._dropped += 1
            return None
        return self._handler(params)

    def run(self, params: list[Any]) -> None:
        link = self._link
        if link.dead.is_set():
            link._dropped += len(params)
            return
        self._handler.run(params)
        link._streaming()
