"""The host's `Turns` of a wrapped session: one prompt through the child, its cancel and
its grace, its close, each decided by the session's lifecycle (acp_bridge.wrap.
lifecycle) and performed here.

One prompt opens a turn in our log (`TurnRecorder.prompt`), goes to the child under its
session id, and while it runs the child's updates are recorded by the same recorder
(acp_bridge.wrap.upstream). The child's answer closes the turn: `TurnRecorder.answer`
for a result, `.failed` for an error answer, `.cancelled` when the editor cancelled and
the child said so. A child that dies first closes it with the crash closers
(`SessionLog.close_interrupted(cause="crash")`), and the end of our stdin with the
shutdown ones, as our own agent does: a live crash and one found on load are written the
same way. The host then settles the editor's answer from the persisted `turn/end`; the
child's own fields and `_meta` are kept beside ours.

The turn's closing events are appended on the event loop, not in a worker thread as
the agent does: the child's updates are recorded in its connection's reader, and the
turn's end must sit after every update that came before the answer and before every
one after it. That costs the loop one fsync per turn (and one per step end).

A cancel is enforced (docs/wrap.md, "The cancel grace"): a child that has not answered
within the grace gets its turn closed `cancelled {by, forced: true}` by the wrapper, and
its session is stuck (its traffic dropped) until it answers. A child that died before
it read the prompt is restarted and sent it again (`RESENDS`): only a child that dies
during the prompt closes the turn `interrupted`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Iterator, Mapping
from typing import Any, Final, Protocol

import anyio

from acp_bridge.errors import AcpBridgeError, AgentExitedError
from acp_bridge.host.advertised import forced_notice
from acp_bridge.host.commands import Command, invoked, unshadowed
from acp_bridge.host.engine import TurnEnd
from acp_bridge.host.errors import relayed
from acp_bridge.rpc.protocol import ClientError
from acp_bridge.wrap.link import Call, ChildLink
from acp_bridge.wrap.record import TurnRecorder
from acp_bridge.wrap.sessions import WrappedSession
from acp_bridge.wrap.signals import (
    Act,
    Answer,
    Answered,
    Asking,
    Began,
    Cancel,
    Close,
    Finished,
    GraceOver,
    Interrupted,
    Prompted,
    Reached,
    ReachFailed,
    Stop,
)
from acp_bridge.wrap.state import Cancelling, Ending, State
from session import SessionLog
from session.events import TURN_END, Event

log = logging.getLogger("acp_bridge.wrap.turns")

# Times a prompt is sent again to a restarted child that died without reading it (one
# is what a kill just before the prompt takes; more, and the child cannot be run).
RESENDS: Final = 2


class Child(Protocol):
    """What a session's turns need of the agent it is placed in (acp_bridge.wrap.driver)."""

    @property
    def agent_name(self) -> str: ...

    @property
    def agent_label(self) -> str | None:
        """Its `wrap --agent` name (None: the one-agent form, `-- COMMAND`)."""

    @property
    def cancel_grace(self) -> float:
        """Seconds the child has to answer a cancelled prompt before the wrapper does."""

    async def child_session(self, turns: WrappedTurns) -> tuple[ChildLink, str]:
        """The child's session for the session on its current run (restored if need be)."""

    def tell_cancel(self, ws: WrappedSession, params: Mapping[str, Any] | None) -> None:
        """Pass the editor's cancel of the running turn on to the child."""

    def stick(self, turns: WrappedTurns, child_sid: str, call: Call) -> None:
        """The child session still runs a turn the wrapper ended (`call`, unanswered)."""

    def overdue(self, before: State | None) -> None:
        """The child did not answer what a prompt needed first within the grace (the
        session was in `before` then)."""

    async def close_child_session(self, ws: WrappedSession, *, wait: bool) -> None:
        """Close the session's child session, if the child can close sessions."""

    def forget(self, turns: WrappedTurns) -> None:
        """The session is no longer live: its child session id maps to nothing."""

    def notice(self, sid: str, update: dict[str, Any]) -> None:
        """Tell the editor `update` (a notice) about the session `sid`, if it takes notices."""


class Agents(Protocol):
    """What a session's turns need of the wrapper (acp_bridge.wrap.engine)."""

    def child_of(self, ws: WrappedSession) -> Child:
        """The agent the session is placed in."""

    def commands_of(self, sid: str) -> list[Command]:
        """The wrapper's own slash commands for the session `sid` (acp_bridge.wrap.commands)."""

    async def run_own(self, turns: WrappedTurns, found: tuple[Command, str], prompt: list[Any]) -> TurnEnd:
        """Run a command of the wrapper's that `prompt` invoked: its turn's end."""


class WrappedTurns:
    """The host's `Turns` of the wrapped session `session`: the I/O its lifecycle's acts
    need (the waits on the child, the permission requests waiting on the editor)."""

    def __init__(self, session: WrappedSession, agents: Agents) -> None:
        self.session = session
        self._agents = agents
        self.asking: set[anyio.CancelScope] = set()  # its permission requests at the editor
        self._stopping: anyio.CancelScope | None = None  # the running prompt's wait on the child
        self._waiting: anyio.CancelScope | None = None  # a wait on the child, until the grace
        self.move_done: anyio.Event | None = None  # set when a move of the session ends
        self.restoring = anyio.Lock()  # held while the session is given a child session
        self._prompt: list[Any] = []

    @property
    def id(self) -> str:
        return self.session.id

    @property
    def log(self) -> SessionLog:
        return self.session.log

    @property
    def child(self) -> Child:
        return self._agents.child_of(self.session)

    # --- the host's Turns --------------------------------------------------------------

    async def prompt(self, prompt: list[Any], params: Mapping[str, Any]) -> TurnEnd:
        """Record and pass on one prompt (after a move of the session that runs, if one
        does), or run the wrapper's own command it invokes; the turn's persisted end
        and the child's answer."""
        ws = self.session
        try:
            if Act.AWAIT_MOVE in ws.to(Prompted()):
                assert self.move_done is not None
                await self.move_done.wait()
            # A command of the wrapper's that no command of the child's names: a turn
            # of its own, not sent to the child.
            found = invoked(prompt, unshadowed(ws.commands, self._agents.commands_of(ws.id)))
            if Act.RUN_OWN in ws.to(Began(own=found is not None)):
                assert found is not None
                return await self._agents.run_own(self, found, prompt)
            return await self._turn(prompt, params)
        finally:
            ws.to(Finished())

    async def _turn(self, prompt: list[Any], params: Mapping[str, Any]) -> TurnEnd:
        ws, child = self.session, self.child
        recorder = ws.recorder = TurnRecorder(ws.log.tracker.turn + 1, agent=child.agent_name, mode=ws.mode,
                                              name=child.agent_label)
        self._prompt = prompt
        result: dict[str, Any] = {}
        try:
            ends = await self._reached_and_run(recorder, {**params, "prompt": prompt}, result)
        finally:
            ws.recorder, self._stopping = None, None
            if ws.log.tracker.in_turn and not ws.log.closed:
                # Anything else that ended the wait (a bug, a failed write): the turn is
                # never left open.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(lambda: ws.log.close_interrupted(cause="shutdown"))
        end = ends[-1]
        assert end["type"] == TURN_END, end
        return TurnEnd(end, result, shown=False)

    async def _reached_and_run(self, recorder: TurnRecorder, params: dict[str, Any],
                               result: dict[str, Any]) -> list[Event]:
        ws = self.session
        try:
            reached = await self._reach()  # a dead child is restarted first
        except Exception:
            ws.to(ReachFailed())  # no turn yet: the prompt's error
            raise
        if reached is None:
            return await self._end(recorder, ws.to(GraceOver()))
        self._perform(recorder, ws.to(Reached()))
        with anyio.CancelScope() as scope:
            self._stopping = scope
            ends = await self._run(recorder, *reached, params, result)
        if scope.cancelled_caught:  # our stdin ended (`stop`)
            ends = await self._end(recorder, ws.to(Interrupted()))
        return ends

    async def _run(self, recorder: TurnRecorder, link: ChildLink, child_sid: str, params: dict[str, Any],
                   result: dict[str, Any]) -> list[Event]:
        """Send the prompt and wait for the child's answer: the events that closed the
        turn. A child that died without reading a byte of the prompt never had it: it is
        restarted and sent it again (`RESENDS` times at most)."""
        ws = self.session
        resends = RESENDS
        while True:
            acts = ws.to(Asking())
            if Act.SEND not in acts:  # cancelled before the child had it
                return await self._end(recorder, acts)
            call = link.ask("session/prompt", {**params, "sessionId": child_sid})
            if not await self._wait(call):
                return await self._end(recorder, ws.to(GraceOver()), stuck=(child_sid, call))
            acts = ws.to(Answered(answer_of(call), resend=resends > 0))
            if Act.RESEND not in acts:
                return await self._end(recorder, acts, call=call, result=result)
            resends -= 1
            log.warning("session %s: the wrapped agent died before it read the prompt of turn %d: sending it to "
                        "the restarted agent", ws.id, recorder.turn)
            try:
                reached = await self._reach()
            except AcpBridgeError as exc:  # it cannot be started again, or died again on the way
                log.warning("session %s: %s", ws.id, exc)
                return await self._end(recorder, ws.to(ReachFailed()))
            if reached is None:
                return await self._end(recorder, ws.to(GraceOver()))
            ws.to(Reached())
            link, child_sid = reached

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
        turn = self.session.state.turn
        with anyio.CancelScope(deadline=turn.deadline if isinstance(turn, Cancelling) else math.inf) as waiting:
            self._waiting = waiting
            try:
                yield waiting
            finally:
                self._waiting = None

    def _perform(self, recorder: TurnRecorder, acts: tuple[Act, ...]) -> None:
        for act in acts:
            if act is Act.RECORD_PROMPT:
                self.session.log.extend(recorder.prompt(self._prompt))

    async def _end(self, recorder: TurnRecorder, acts: tuple[Act, ...], *, stuck: tuple[str, Call] | None = None,
                   call: Call | None = None, result: dict[str, Any] | None = None) -> list[Event]:
        """Perform the acts that end the turn: the events that closed it. Shielded: what
        is decided is written, whatever stops the prompt meanwhile."""
        ws = self.session
        turn = ws.state.turn
        assert isinstance(turn, Ending), turn
        with anyio.CancelScope(shield=True):
            for act in acts:
                if act is Act.RECORD_PROMPT:
                    ws.log.extend(recorder.prompt(self._prompt))
                elif act is Act.STICK:
                    assert stuck is not None
                    self.child.stick(self, *stuck)
                elif act is Act.OVERDUE:
                    self.child.overdue(ws.was)
                elif act is Act.END_FORCED:
                    # No await from here to the turn's end: no update of the child's is
                    # recorded or shown in between.
                    log.warning("session %s: the wrapped agent did not answer the cancelled turn %d within %.3g s: "
                                "answered `cancelled` by acp-bridge", ws.id, recorder.turn, self.child.cancel_grace)
                    self.child.notice(ws.id, forced_notice(self.child.cancel_grace))
                    return ws.log.extend(recorder.cancelled(turn.by or "session/cancel", forced=True))
                elif act is Act.END_CANCELLED:
                    assert turn.by is not None
                    if call is not None and isinstance(call.error, ClientError):
                        log.info("session %s: the wrapped agent answered the cancelled prompt with an error: %s",
                                 ws.id, relayed(call.error).message)
                    answer = call.result if call is not None and isinstance(call.result, dict) else {}
                    if result is not None:
                        result.update(answer)  # its other fields (usage, _meta) kept beside ours
                    stop = answer.get("stopReason")
                    agent_stop = stop if isinstance(stop, str) and stop != "cancelled" else None
                    if agent_stop is not None:
                        log.info("session %s: the wrapped agent answered the cancelled prompt %r: answered "
                                 "`cancelled`", ws.id, agent_stop)
                    return ws.log.extend(recorder.cancelled(turn.by, agent_stop=agent_stop))
                elif act is Act.END_FAILED:
                    assert call is not None and isinstance(call.error, ClientError)
                    return ws.log.extend(recorder.failed(relayed(call.error).to_json()))
                elif act is Act.END_ANSWER:
                    assert call is not None and result is not None
                    answer = call.result if isinstance(call.result, dict) else {}
                    result.update(answer)
                    return ws.log.extend(recorder.answer(answer))
                elif act in (Act.END_CRASH, Act.END_SHUTDOWN):
                    ws.log.extend(recorder.known_calls())  # the closers answer its calls
                    close = functools.partial(ws.log.close_interrupted,
                                              cause="crash" if act is Act.END_CRASH else "shutdown")
                    return await anyio.to_thread.run_sync(close)
        raise AssertionError(f"no end among {acts}")

    def cancel(self, by: str, params: Mapping[str, Any] | None) -> bool:
        """The editor cancelled the running turn: the child is told (`params`: the
        editor's session/cancel, passed on as it came), its grace starts (the first
        cancel's), and the child's permission requests waiting on the editor stop
        waiting (answered `cancelled`, without recording; `$/cancel_request` to the
        editor for one it has not answered). False: no turn of the child's runs."""
        child = self.child
        acts = self.session.to(Cancel(by, anyio.current_time() + child.cancel_grace))
        for act in acts:
            if act is Act.WAIT_UNTIL_GRACE:
                turn = self.session.state.turn
                if self._waiting is not None and isinstance(turn, Cancelling):
                    self._waiting.deadline = turn.deadline
            elif act is Act.CANCEL_ASKS:
                for scope in self.asking:
                    scope.cancel()
            elif act is Act.TELL_CHILD:
                child.tell_cancel(self.session, params)
        return bool(acts)

    def stop(self) -> None:
        if Act.STOP_WAITING in self.session.to(Stop()) and self._stopping is not None:
            self._stopping.cancel()

    async def close(self, *, stopping: bool) -> None:
        """The child's session closed if it can be (not when we are stopping: the child
        is about to be), our log released."""
        ws, child = self.session, self.child
        acts = ws.to(Close())
        if not stopping:
            await child.close_child_session(ws, wait=Act.CLOSE_CHILD in acts)
        child.forget(self)
        await anyio.to_thread.run_sync(ws.log.close)


def answer_of(call: Call) -> Answer:
    """What the child's answer to the prompt was, as the lifecycle tells them apart (an
    error other than the child's own or its death is raised: a bug)."""
    error = call.error
    if isinstance(error, AgentExitedError):
        return "exited_unread" if call.unread else "exited"
    if isinstance(error, ClientError):
        return "error"
    if error is not None:
        raise error
    result = call.result
    return "result_cancelled" if isinstance(result, dict) and result.get("stopReason") == "cancelled" else "result"
