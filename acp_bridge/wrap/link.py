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
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio

from acp_bridge.errors import AgentExitedError
from acp_bridge.host.errors import to_rpc_error
from acp_bridge.rpc.connection import Connection, Fallback, Inline
from acp_bridge.wrap.child import ChildAgent

log = logging.getLogger("acp_bridge.wrap.link")

T = TypeVar("T")

DRAIN_S = 2.0  # how long the child gets to read what is queued for it before a close
EOF_S = 2.0  # how long its stdout may stay open after its group was killed


def obj(value: Any) -> dict[str, Any]:
    """`value` if it is a JSON object, else an empty one (what a peer sent is not
    trusted to have the shape the schema gives it)."""
    return value if isinstance(value, dict) else {}


def permission_cancelled() -> dict[str, Any]:
    """The answer to a `session/request_permission` of a turn that was cancelled (ACP's
    outcome for it), given the child by the wrapper itself."""
    return {"outcome": {"outcome": "cancelled"}}


class ChildLink:
    """The connection to one run of `child` (started already); `run` it in a task."""

    def __init__(self, child: ChildAgent, *, fallback_for: Callable[[ChildLink], Fallback],
                 inline: Mapping[str, Inline]) -> None:
        self.child = child
        self.generation = child.starts  # sessions restored on this run carry it
        self.conn = Connection(child.reader, child.writer, {}, fallback=fallback_for(self), inline=inline,
                               error_for=to_rpc_error)
        self.dead = anyio.Event()
        self.status: int | None = None
        self._waiting: set[anyio.CancelScope] = set()
        self._serving = anyio.CancelScope()
        self._ended = anyio.Event()

    @property
    def alive(self) -> bool:
        return not self.dead.is_set()

    @property
    def running(self) -> bool:
        """Alive, and its process has not exited: a grandchild may hold the child's
        stdout open for a while after the child itself died (the link is then still
        alive, reading to EOF), and a new request must not be sent to the dead one."""
        return self.alive and self.child.alive

    async def run(self) -> None:
        """Serve the child until its stdout ends (or it exits), then mark it dead."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_exit)
            try:
                with self._serving:
                    await self.conn.serve()
            except* OSError as group:  # its pipe went away under a write
                log.info("the connection to the wrapped agent failed: %s", group.exceptions[0])
            finally:
                self.child.close_output()
                self._mark_dead()
                self._ended.set()
                tg.cancel_scope.cancel()

    async def _watch_exit(self) -> None:
        # Its last answers may still be in the pipe: read to EOF first, unless a
        # grandchild holds its stdout open after the agent itself exited.
        self.status = await self.child.wait_died()
        with anyio.move_on_after(EOF_S):
            await self._ended.wait()
        self._mark_dead()

    def _mark_dead(self) -> None:
        if self.dead.is_set():
            return
        self.dead.set()
        for scope in list(self._waiting):
            scope.cancel()

    async def call(self, method: str, params: Any) -> Any:
        """Our request to the child: its result, ClientError for its error answer, or
        AgentExitedError if it dies first."""
        return await self.guarded(lambda: self.conn.request(method, params))

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

    async def close(self) -> None:
        """Stop the child: what is queued for it is written (if it reads), then its
        stdin is closed and its process group stopped (ChildAgent.close). Shielded."""
        with anyio.CancelScope(shield=True):
            drained = False
            with anyio.move_on_after(DRAIN_S):
                await self.conn.drain(1)
                drained = True
            # Nothing is written to its stdin after this: the descriptor can be closed.
            self.conn.close_output()
            if not drained:  # a writer stuck on a child that does not read: stop it
                self._serving.cancel()
                await self._ended.wait()
            await self.child.close()
            with anyio.move_on_after(EOF_S):
                await self._ended.wait()
            if not self._ended.is_set():
                self._serving.cancel()
                await self._ended.wait()
