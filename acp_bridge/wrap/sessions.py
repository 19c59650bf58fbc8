"""The wrapper's sessions: our log, the child's session id, and one prompt through it.

The editor sees our session ids (the log's); each maps to the wrapped agent's own id,
which is only valid on the run of the child that made it (`generation`, the child's
`starts` when it was made); a stale one is restored first (acp_bridge.wrap.children).

A `WrappedSession` is the host's `Turns` of a wrapped session. One prompt opens a turn
in our log (`TurnRecorder.prompt`), goes to the child under its session id, and while
it runs the child's updates are recorded by the same recorder (acp_bridge.wrap.upstream).
The child's answer closes the turn: `TurnRecorder.answer` for a result, `.failed` for an
error answer, `.cancelled` when the editor cancelled and the child said so. A child that
dies first closes it with the crash closers (`SessionLog.close_interrupted(cause=
"crash")`), and the end of our stdin with the shutdown ones, as our own agent does: a
live crash and one found on load are written the same way. The host then settles the
editor's answer from the persisted `turn/end`; the child's own fields and `_meta` are
kept beside ours.

The turn's closing events are appended on the event loop, not in a worker thread as
the agent does: the child's updates are recorded in its connection's reader, and the
turn's end must sit after every update that came before the answer and before every
one after it. That costs the loop one fsync per turn (and one per step end).

A cancel is enforced (docs/wrap.md, "The cancel grace"): a child that has not answered
within the grace gets its turn closed `cancelled {by, forced: true}` by the wrapper, and
its session is stuck (acp_bridge.wrap.children, its traffic dropped) until it answers. A
child that died before it read the prompt is restarted and sent it again (`RESENDS`):
only a child that dies during the prompt closes the turn `interrupted`.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import anyio

from acp_bridge.errors import (
    AcpBridgeError,
    AgentExitedError,
)
from acp_bridge.host.commands import Command, invoked, unshadowed
from acp_bridge.host.engine import TurnEnd
from acp_bridge.host.errors import relayed
from acp_bridge.rpc.protocol import ClientError
from acp_bridge.wrap.link import Call, ChildLink
from acp_bridge.wrap.record import TurnRecorder
from session import SessionLog
from session.events import TURN_END, Event

log = logging.getLogger("acp_bridge.wrap.sessions")

# Times a prompt is sent again to a restarted child that died without reading it (one
# is what a kill just before the prompt takes; more, and the child cannot be run).
RESENDS: Final = 2


class Child(Protocol):
    """What a wrapped session needs of the wrapper: the child agent it runs in."""

    @property
    def agent_name(self) -> str: ...

    @property
    def agent_label(self) -> str | None:
        """Its `wrap --agent` name (None: the one-agent form, `-- COMMAND`)."""

    @property
    def cancel_grace(self) -> float:
        """Seconds the child has to answer a cancelled prompt before the wrapper does."""

    async def child_session(self, ws: WrappedSession) -> tuple[ChildLink, str]:
        """The child's session for `ws` on its current run (restored if stale)."""

    def tell_cancel(self, ws: WrappedSession, params: Mapping[str, Any] | None) -> None:
        """Pass the editor's cancel of `ws`'s running turn on to the child."""

    def stuck(self, ws: WrappedSession, child_sid: str, call: Call) -> None:
        """`ws`'s child session still runs a turn the wrapper ended (`call`, unanswered)."""

    def overdue(self, ws: WrappedSession) -> None:
        """The child did not answer what `ws`'s prompt needed first within the grace."""

    async def close_child_session(self, ws: WrappedSession) -> None:
        """Close `ws`'s session in the child, if it can close sessions."""

    def forget(self, ws: WrappedSession) -> None:
        """`ws` is no longer live: its child session id maps to nothing."""

    def commands_of(self, sid: str) -> list[Command]:
        """The wrapper's own slash commands for the session `sid` (acp_bridge.wrap.commands)."""

    async def run_own(self, ws: WrappedSession, found: tuple[Command, str], prompt: list[Any]) -> TurnEnd:
        """Run a command of the wrapper's that `prompt` invoked: its turn's end."""


@dataclass(eq=False)
class WrappedSession:
    """One session of ours, live in this process, and what we know of the child's."""

    child: Child
    log: SessionLog
    cwd: str
    mcp_servers: list[Any] = field(default_factory=list)
    additional_directories: list[str] | None = None
    child_sid: str | None = None
    generation: int = 0  # the child run `child_sid` belongs to; 0: none yet
    mode: str | None = None  # the child's current mode, as it last said
    recorder: TurnRecorder | None = None  # the running turn's
    cancelled_by: str | None = None  # how the editor cancelled the running turn
    # The editor cancelled the running turn (session/cancel, $/cancel_request, close):
    # the child's permission requests of the turn are answered `cancelled` (docs/wrap.md).
    cancelling: bool = False
    asking: set[anyio.CancelScope] = field(default_factory=set)  # its permission requests at the editor
    stopping: anyio.CancelScope | None = None  # the running prompt's wait on the child
    cancel_at: float | None = None  # when the grace of the editor's cancel of the running turn ends
    waiting: anyio.CancelScope | None = None  # the wait for the child's answer (its deadline: `cancel_at`)
    close_by: float | None = None  # when a `session/close` of the running turn must be answered
    restoring: bool = False  # the child is replaying to us (or seeded): kept from the editor
    seeding: bool = False  # the wrapper's own seed prompt runs (acp_bridge.wrap.seed)
    prompting: bool = False  # a prompt of the editor runs, or waits for a switch to end
    # `wrap --agent`: a switch of the session's agent runs (set when it ends); a prompt
    # waits for it (acp_bridge.wrap.switch).
    placing: anyio.Event | None = None
    # The session moved to another agent once: the header's child session id is not the
    # current agent's (its own is `moved_sid`), and a fresh restore is always seeded.
    moved: bool = False
    moved_sid: str | None = None
    # Its child session was made fresh and seeded (an emulated fork): a fresh restore
    # seeds it again, as a moved session's is (the editor's load of a `/fork` it made).
    seed_again: bool = False
    # The child's slash commands, as its last `available_commands_update` gave them (None:
    # none yet); the wrapper's own are offered and run beside them (acp_bridge.wrap.commands).
    commands: list[Any] | None = None

    @property
    def id(self) -> str:
        return self.log.id

    def session_params(self) -> dict[str, Any]:
        """The params that place a session in the child (new, load, resume)."""
        params: dict[str, Any] = {"cwd": self.cwd, "mcpServers": self.mcp_servers}
        if self.additional_directories:
            params["additionalDirectories"] = self.additional_directories
        return params

    def took_state(self, result: Any) -> None:
        """Keep what the child said of the session's state (its current mode)."""
        if isinstance(result, dict) and isinstance(result.get("modes"), dict):
            mode = result["modes"].get("currentModeId")
            self.mode = mode if isinstance(mode, str) else self.mode

    def stored_child_sid(self) -> str | None:
        if self.child_sid is not None or self.moved:
            return self.child_sid or self.moved_sid
        wrapped = self.log.header.get("wrapped")
        return wrapped.get("sessionId") if wrapped is not None else None

    # --- the host's Turns --------------------------------------------------------------

    async def prompt(self, prompt: list[Any], params: Mapping[str, Any]) -> TurnEnd:
        """Record and pass on one prompt (after a switch of its agent that runs, if one
        does), or run the wrapper's own command it invokes; the turn's persisted end
        and the child's answer."""
        self.prompting = True
        try:
            if self.placing is not None:
                await self.placing.wait()
            # A command of the wrapper's that no command of the child's names: a turn
            # of its own, not sent to the child.
            found = invoked(prompt, unshadowed(self.commands, self.child.commands_of(self.id)))
            if found is not None:
                return await self.child.run_own(self, found, prompt)
            return await self._prompt(prompt, params)
        finally:
            self.prompting = False

    async def _prompt(self, prompt: list[Any], params: Mapping[str, Any]) -> TurnEnd:
        recorder = TurnRecorder(self.log.tracker.turn + 1, agent=self.child.agent_name, mode=self.mode,
                                name=self.child.agent_label)
        self.recorder, self.cancelled_by, self.cancelling, self.cancel_at = recorder, None, False, None
        result: dict[str, Any] = {}
        try:
            reached = await self._reach()  # a dead child is restarted first
            self.log.extend(recorder.prompt(prompt))
            with anyio.CancelScope() as scope:
                self.stopping = scope
                if reached is None:
                    ends = self._forced(recorder, None)
                else:
                    ends = await self._run(recorder, *reached, {**params, "prompt": prompt}, result)
            if scope.cancelled_caught:  # our stdin ended (`stop`)
                self.log.extend(recorder.known_calls())
                ends = await anyio.to_thread.run_sync(lambda: self.log.close_interrupted(cause="shutdown"))
        finally:
            self.recorder, self.stopping = None, None
            if self.log.tracker.in_turn and not self.log.closed:
                # Anything else that ended the wait (a bug, a failed write): the turn is
                # never left open.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(lambda: self.log.close_interrupted(cause="shutdown"))
        end = ends[-1]
        assert end["type"] == TURN_END, end
        return TurnEnd(end, result, shown=False)

    async def _run(self, recorder: TurnRecorder, link: ChildLink, child_sid: str, params: dict[str, Any],
                   result: dict[str, Any]) -> list[Event]:
        """Send the prompt and wait for the child's answer: the events that closed the
        turn. A child that died without reading a byte of the prompt never had it: it is
        restarted and sent it again (`RESENDS` times at most)."""
        for resend in range(RESENDS + 1):
            if self.cancelled_by is not None:  # before the child had it (it was started, restored)
                return self.log.extend(recorder.cancelled(self.cancelled_by))
            call = link.ask("session/prompt", {**params, "sessionId": child_sid})
            if not await self._wait(call):
                return self._forced(recorder, (child_sid, call))
            if not (isinstance(call.error, AgentExitedError) and call.unread) or resend == RESENDS:
                break
            log.warning("session %s: the wrapped agent died before it read the prompt of turn %d: sending it to "
                        "the restarted agent", self.id, recorder.turn)
            try:
                reached = await self._reach()
            except AcpBridgeError as exc:  # it cannot be started again, or died again on the way
                log.warning("session %s: %s", self.id, exc)
                return await anyio.to_thread.run_sync(lambda: self.log.close_interrupted(cause="crash"))
            if reached is None:
                return self._forced(recorder, None)
            link, child_sid = reached
        return await self._answered(recorder, call, result)

    async def _reach(self) -> tuple[ChildLink, str] | None:
        """The child's session for the prompt (the child restarted and the session
        restored if need be); None if the grace of the editor's cancel ran out first."""
        with self._grace():
            return await self.child.child_session(self)
        return None

    async def _wait(self, call: Call) -> bool:
        """Wait for the child's answer to `call`; False if the grace of the editor's
        cancel ran out first."""
        with self._grace():
            await call.done.wait()
        return call.done.is_set()

    @contextlib.contextmanager
    def _grace(self) -> Iterator[anyio.CancelScope]:
        """A wait on the child that ends at the grace of the editor's cancel (`cancel`
        moves its deadline)."""
        with anyio.CancelScope(deadline=math.inf if self.cancel_at is None else self.cancel_at) as waiting:
            self.waiting = waiting
            try:
                yield waiting
            finally:
                self.waiting = None

    async def _answered(self, recorder: TurnRecorder, call: Call, result: dict[str, Any]) -> list[Event]:
        """The child's answer to the prompt, recorded: the events that closed the turn."""
        try:
            answer = call.outcome()
        except AgentExitedError:
            if call.unread and self.cancelled_by is not None:  # it never ran: the editor's cancel ends it
                return self.log.extend(recorder.cancelled(self.cancelled_by))
            self.log.extend(recorder.known_calls())  # the crash closers answer its calls
            return await anyio.to_thread.run_sync(lambda: self.log.close_interrupted(cause="crash"))
        except ClientError as exc:
            if self.cancelled_by is not None:
                # The editor cancelled and the child answered with an error (many answer a
                # cancelled prompt -32800): the cancel is how the turn ended, as ACP has it.
                log.info("session %s: the wrapped agent answered the cancelled prompt with an error: %s",
                         self.id, relayed(exc).message)
                return self.log.extend(recorder.cancelled(self.cancelled_by))
            return self.log.extend(recorder.failed(relayed(exc).to_json()))
        if not isinstance(answer, dict):
            answer = {}
        result.update(answer)
        if answer.get("stopReason") == "cancelled" and self.cancelled_by is not None:
            items = recorder.cancelled(self.cancelled_by)
        else:
            items = recorder.answer(answer)
        return self.log.extend(items)

    def _forced(self, recorder: TurnRecorder, stuck: tuple[str, Call] | None) -> list[Event]:
        """The child did not answer the cancelled prompt (`stuck`: its session, the
        call), or what the prompt needed first (None), within the grace: the turn ends
        here, `cancelled {by, forced: true}`, and the child is taken back at its next
        use. No await from here to the turn's end: no update of the child's is
        recorded or shown in between."""
        by = self.cancelled_by or "session/cancel"
        log.warning("session %s: the wrapped agent did not answer the cancelled turn %d within %.3g s: "
                    "answered `cancelled` by acp-bridge", self.id, recorder.turn, self.child.cancel_grace)
        if stuck is None:
            self.child.overdue(self)
        else:
            self.child.stuck(self, *stuck)
        return self.log.extend(recorder.cancelled(by, forced=True))

    def cancel(self, by: str, params: Mapping[str, Any] | None) -> bool:
        """The editor cancelled the running turn: the child is told (`params`: the
        editor's session/cancel, passed on as it came), its grace starts (the first
        cancel's), and the child's permission requests waiting on the editor stop
        waiting (answered `cancelled`, without recording; `$/cancel_request` to the
        editor for one it has not answered)."""
        if self.recorder is None:
            return False
        self.cancelled_by = self.cancelled_by or by
        self.cancelling = True
        if self.cancel_at is None:
            self.cancel_at = anyio.current_time() + self.child.cancel_grace
            if self.waiting is not None:
                self.waiting.deadline = self.cancel_at
        if by == "session/close":
            self.close_by = self.cancel_at
        for scope in self.asking:
            scope.cancel()
        self.child.tell_cancel(self, params)
        return True

    def stop(self) -> None:
        if self.stopping is not None:
            self.stopping.cancel()

    async def close(self, *, stopping: bool) -> None:
        """The child's session closed if it can be (not when we are stopping: the child
        is about to be), our log released."""
        if not stopping:
            await self.child.close_child_session(self)
        self.child.forget(self)
        await anyio.to_thread.run_sync(self.log.close)
