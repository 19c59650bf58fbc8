"""The client's side of ACP with an agent child: the one JSON-RPC connection
(acp_bridge.rpc.Connection) over the child's stdout and stdin, as `acp-bridge chat`,
the snapshot harness's driver and `acp-bridge demo` use it.

The connection is the agent's own: our requests and their ids, the matching of the
agent's answers, the agent's requests each answered in a task of its own (cancelled by
its `$/cancel_request`), the notifications given `inline` handled in the reader, in
the order they arrive (an update is shown before the answer that follows it). Here is
what a client adds: the agent's requests go to one `serve(method, params)`, a request
of ours fails with `AgentGone` when the agent's output ends before its answer, and
`stop` ends the child. How a failure of `serve` is answered is the owner's to say: it
hands the connection the one conversion of errors (acp_bridge.host.errors.to_rpc_error,
which this layer cannot import), or a policy around it (the snapshot driver's).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Final

import anyio
import anyio.abc

from acp_bridge.errors import AgentGone
from acp_bridge.rpc.connection import Connection, Inline
from acp_bridge.rpc.protocol import ErrorMapper
from acp_bridge.rpc.transport import LineReader, StreamLineReader, StreamWriter, Writer

DRAIN_S: Final = 2.0  # how long what is queued for the agent may take to be written before its stdin closes

# The client's handler of the agent's requests: the method and its params (an object).
Serve = Callable[[str, dict[str, Any]], Awaitable[Any]]


def _gone() -> AgentGone:
    return AgentGone("the agent has exited")


class AgentConnection:
    """JSON-RPC with the agent `process` (started with pipes for stdin and stdout): its
    requests to `serve`, a failure of which `error_for` answers, its notifications in
    `inline` (others are ignored). `reader`
    and `writer` stand in for the pipes' own adapters (a wrapper that records the
    traffic); `ids` are our request ids (rpc's `acp-bridge:N` by default). Run `run`
    in a task."""

    def __init__(self, process: anyio.abc.Process, serve: Serve, *, error_for: ErrorMapper,
                 inline: Mapping[str, Inline] | None = None, ids: Iterator[Any] | None = None,
                 reader: LineReader | None = None, writer: Writer | None = None) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._serve = serve
        self.conn = Connection(reader or StreamLineReader(process.stdout), writer or StreamWriter(process.stdin),
                               {}, fallback=self._fallback, inline=inline, error_for=error_for,
                               on_eof=self._ended, ids=ids)
        self.gone = anyio.Event()  # set when the agent's output ends

    async def run(self) -> None:
        """Read and answer the agent until its output ends."""
        await self.conn.serve()

    async def _ended(self) -> None:
        self.gone.set()
        self.conn.close_output()  # nothing more for an agent that has gone
        self.conn.fail_requests(_gone)

    async def _fallback(self, method: str, params: Any, is_request: bool) -> Any:
        if not is_request:
            return None  # a notification we do not handle
        return await self._serve(method, params if isinstance(params, dict) else {})

    async def request(self, method: str, params: Any) -> Any:
        """Ask the agent: its result. ClientError if it answers with an error,
        AgentGone if its output ends first."""
        if self.gone.is_set():
            raise _gone()
        return await self.conn.request(method, params)

    def notify(self, method: str, params: Any) -> None:
        self.conn.notify(method, params)

    def close_output(self) -> None:
        """Nothing sent from now on reaches the agent; what is queued still does."""
        self.conn.close_output()

    async def close(self) -> None:
        """Close the agent's stdin once what is queued for it is written (or after
        DRAIN_S): it finishes what runs and exits. Nothing is sent after this."""
        self.conn.close_output()
        with anyio.move_on_after(DRAIN_S):
            while self.conn.queued_bytes:  # (`drain` does not wait once the output is closed)
                await anyio.sleep(0.01)
        assert self.process.stdin is not None
        with contextlib.suppress(Exception):  # gone already
            await self.process.stdin.aclose()

    async def stop(self, grace: float) -> int:
        """`close`, then wait `grace` seconds for the agent to exit, killed if it
        does not; its exit status. Shielded: it runs on the way out."""
        with anyio.CancelScope(shield=True):
            await self.close()
            with anyio.move_on_after(grace):
                await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
            status = await self.process.wait()
        return status
