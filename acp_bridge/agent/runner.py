"""The turn runner (DESIGN.md section 4): one prompt in, one durable `turn/end` out.

Every fact goes through the session log first and is then handed to `on_event` (the
ACP layer turns events into `session/update`s), so what a client sees is what the log
holds (acp_bridge.agent.turn_writer writes them). The turn runs inside a cancel scope: `cancel(by)` ends it promptly as
`cancelled`; cancellation from outside (the agent is stopping) closes it as
`interrupted` with cause `shutdown`, using the same closers as crash repair. A failed
write of the log ends the turn with what the log kept (`_store_failed`). A step's model
call (its context, its retries, its stream) is acp_bridge.agent.model_call's; its tool
calls are acp_bridge.agent.tool_calls'.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from acp_bridge.agent.context import Context
from acp_bridge.agent.model_call import Notify, StepCall, ask_model, step_end_reason
from acp_bridge.agent.tool_calls import DurableFirstServices, ProgressSink, ToolCalls
from acp_bridge.agent.turn_close import StepText, partial_answer, step_content
from acp_bridge.agent.turn_writer import EventSink, TurnWriter
from acp_bridge.errors import PromptInProgressError
from acp_bridge.host.tuning import Tuning
from acp_bridge.models import Model
from acp_bridge.tools import permissions
from acp_bridge.tools.base import ClientServices, Tool
from acp_bridge.tools.environment import Secrets
from session import Event, SessionLog, StoreIOError, reason
from session.closers import EndedEarly, closers, open_turn
from session.events import Reason
from session.items import (
    Item,
    assistant_message,
    config_set,
    step_end,
    step_start,
    turn_end,
    turn_start,
    user_message,
)
from session.transcript import Transcript

logger = logging.getLogger("acp_bridge.agent.runner")
DEFAULT_MAX_STEPS = 50


class TurnRunner:
    """Runs the turns of one session, one at a time."""

    def __init__(
        self,
        log: SessionLog,
        model: Model,
        services: ClientServices,
        *,
        mode: str = permissions.DEFAULT_MODE,
        max_steps: int = DEFAULT_MAX_STEPS,
        tools: Sequence[Tool] | None = None,
        on_event: EventSink | None = None,
        on_progress: ProgressSink | None = None,
        on_notice: Notify | None = None,
        transcript: Transcript | None = None,
        always_allowed: set[permissions.Rule] | None = None,
        effort: str | None = None,
        tuning: Tuning | None = None,
        secrets: Callable[[], Secrets] | None = None,
    ) -> None:
        self.log = log
        # The model and reasoning effort of the next turn (a switch never reaches a turn
        # already running: it runs with those its `turn/start` recorded).
        self.model = model
        self.effort = effort
        self._turn_model, self._turn_effort = model, effort
        self._recording = anyio.Lock()  # held while a `config/set` is written
        self.mode = mode
        self.max_steps = max_steps
        # Both are kept in step with the log by the writer. A caller that streamed the log
        # (session/load keeps only the last turn in memory) hands them in; otherwise
        # they are derived from the events the log holds.
        if always_allowed is None:
            always_allowed = permissions.remembered_always(log.events)
        self.always_allowed = always_allowed
        if transcript is None:
            transcript = Transcript()
            transcript.feed_all(log.events)
        self.transcript = transcript
        self.context = Context()  # what a model call is shown, measured in tokens
        self._notify = on_notice  # a notice for the client (acp_bridge.agent.live decides who takes them)
        # The process's policy (the turns it runs, all sessions); a runner of its own
        # gets its own, neutral one.
        self.tuning = tuning or Tuning()
        self._writer = TurnWriter(log, transcript, on_event, self.tuning)
        self.services: ClientServices = DurableFirstServices(services, self._writer.sync)
        header = log.header
        cwd = Path(header["cwd"])
        self.context_roots = (cwd, *(Path(p) for p in header.get("additionalDirectories", [])))
        self._calls = ToolCalls(tools=tools, services=self.services, roots=self.context_roots,
                                append=self._writer.append, mode=lambda: self.mode, cancel=self.cancel,
                                cancelled=self._cancelled, always_allowed=self.always_allowed, on_progress=on_progress,
                                secrets=secrets)
        self._scope: anyio.CancelScope | None = None
        self._cancel_by: str | None = None
        self._stopping = False
        self._step: StepText | None = None
        # The end reason of a turn a failed write left open on disk (the log could not
        # take its closers either): it is closed with it before the next prompt or
        # when the session closes, so the log records what the prompt was answered.
        self._left_open: Reason | None = None

    def set_tools(self, tools: Sequence[Tool] | None) -> None:
        """The session's tools from the next step on (None: the built-in ones)."""
        self._calls.set_tools(tools)

    @property
    def running(self) -> bool:
        return self._scope is not None

    def stop(self) -> bool:
        """The agent is stopping: end the running turn now, closed as `interrupted
        {cause: "shutdown"}` by the crash-repair closers; `prompt` then returns that
        `turn/end` (so the prompt can still be answered). False if no turn runs."""
        if self._scope is None:
            return False
        self._stopping = True
        self._scope.cancel()
        return True

    def cancel(self, by: str = "session/cancel") -> bool:
        """Cancel the running turn (it ends as `cancelled {by}`). False if none runs."""
        if self._scope is None:
            return False
        self._cancel_by = self._cancel_by or by
        self._scope.cancel()
        return True

    def _cancelled(self) -> bool:
        """Whether the running turn was cancelled or stopped (it ends at its next await)."""
        return self._scope is not None and self._scope.cancel_called

    async def prompt(self, content: list[Any]) -> Event:
        """Run one turn for `content` (ACP ContentBlocks). Returns its `turn/end`
        event, durable. Raises PromptInProgressError while a turn runs; StoreIOError
        if the log fails."""
        if self._scope is not None:
            raise PromptInProgressError(self.log.id)
        scope = self._scope = anyio.CancelScope()
        self._cancel_by, self._stopping = None, False
        self.tuning.running_turns += 1
        leftover = self._left_open is not None
        try:
            return await self._turn(content, scope)
        except StoreIOError as exc:
            if leftover and self._left_open is not None:
                raise  # the turn an earlier failure left open still cannot be closed
            with anyio.CancelScope(shield=True):
                last = await self._store_failed(exc)
            return last
        finally:
            self.tuning.running_turns -= 1
            self._scope = None
            self._step = None

    async def _turn(self, content: list[Any], scope: anyio.CancelScope) -> Event:
        async with self._recording:
            pass  # a setting being written (maybe in a worker thread) lands before this turn
        await self._close_leftover()
        turn = self.log.tracker.turn + 1
        self._turn_model, self._turn_effort = self.model, self.effort
        await self._writer.extend([
            turn_start(turn, trigger={"kind": "prompt"}, mode=self.mode, model=self.model.name,
                       thought_level=self.effort),
            user_message(turn, content)])
        end: Reason | None = None
        try:
            with scope:
                end = await self._steps(turn)
        except anyio.get_cancelled_exc_class():
            # Cancelled from outside: the agent is stopping mid-turn.
            with anyio.CancelScope(shield=True):
                try:
                    await self._shutdown_closers()
                except StoreIOError as exc:  # the cancellation goes on; a load repairs it
                    logger.warning("could not close the turn: %s", exc.message)
            raise
        except StoreIOError:
            raise
        except Exception as exc:  # a bug or a broken service: the step fails
            step = self._step.number if self._step else 0
            failed = reason("error", step=step, message=f"{type(exc).__name__}: {exc}", code="internal")
            with anyio.CancelScope(shield=True):
                last = await self._close_open(failed, "was not completed because the turn failed")
            return last
        with anyio.CancelScope(shield=True):
            if end is None and self._stopping:
                last = (await self._shutdown_closers())[-1]
            elif end is None:  # cancelled by the client
                by = self._cancel_by or "session/cancel"
                last = await self._close_open(reason("cancelled", by=by), "was cancelled")
            else:
                last = await self._end_turn(turn, end)
        return last

    async def _close_leftover(self) -> None:
        if self.log.tracker.in_turn:  # left open by a failed write: close it first
            if self._left_open is not None:
                await self._close_failed()
            else:
                await self._close_open({"kind": "interrupted", "cause": "shutdown"}, "was interrupted")

    async def record_turn(self, trigger: dict[str, Any], content: list[Any],
                          body: Callable[[int], list[Item]]) -> Event:
        """A turn the agent answers without its model (a slash command's,
        acp_bridge.host.commands): `turn/start` (the session's mode and model, as any
        turn's) and the prompt, then `body(turn)` (what it did, and its `turn/end`), in
        one durable commit; the `turn/end`. PromptInProgressError while a turn runs; a
        failed write is the prompt's error, and none of the turn stays."""
        if self._scope is not None:
            raise PromptInProgressError(self.log.id)
        async with self._recording:
            await self._close_leftover()
            turn = self.log.tracker.turn + 1
            items: list[Item] = [turn_start(turn, trigger=trigger, mode=self.mode, model=self.model.name,
                                            thought_level=self.effort), user_message(turn, content), *body(turn)]
            try:
                events = await self._writer.extend(items)
            except StoreIOError:
                self._writer.marks.rewind(self.transcript, self.log.tracker.next_seq)
                raise
        return events[-1]

    async def _store_failed(self, exc: StoreIOError) -> Event:
        """A write failed; the log is back at its last durable point (`exc` says which).
        Part of the turn durable: it is closed as `error {code: "store_io"}` and answered
        from that `turn/end`; otherwise (or if the closers fail too: `_left_open`) `exc`
        is the answer."""
        self._writer.marks.rewind(self.transcript, self.log.tracker.next_seq)
        if not self.log.tracker.in_turn:
            raise exc
        if self._left_open is None:
            self._left_open = reason("error", step=self.log.tracker.step, message=exc.message,
                                     code="store_io", retryable=True)
        try:
            return await self._close_failed()
        except StoreIOError:
            self._writer.marks.rewind(self.transcript, self.log.tracker.next_seq)
            raise exc from None

    async def _close_failed(self) -> Event:
        """Close the turn a failed write left open with the reason it was answered."""
        assert self._left_open is not None
        self._step = None  # its streamed text was rolled back: no partial message
        last = await self._close_open(self._left_open, "was not completed: the log could not be written")
        self._left_open = None
        return last

    async def close(self) -> None:
        """Close the log, first closing a turn a failed write left open (with the reason
        it was answered). Store failures are logged, not raised: a load repairs them."""
        try:
            if self._left_open is not None and self.log.tracker.in_turn and not self.log.closed:
                await self._close_failed()
            await anyio.to_thread.run_sync(self.log.close)
        except StoreIOError as exc:
            logger.warning("session %s: %s", self.log.id, exc.message)
            with contextlib.suppress(StoreIOError):
                await anyio.to_thread.run_sync(self.log.close)

    async def _steps(self, turn: int) -> Reason:
        step = 0
        while True:
            step += 1
            end = await self._run_step(turn, step)
            if end is not None:
                return end
            await self._writer.append(step_end(turn, step))
            self._step = None
            if step >= self.max_steps:
                return reason("max_steps", limit=self.max_steps)

    async def _end_turn(self, turn: int, end: Reason) -> Event:
        items: list[Item] = []
        if self.log.tracker.step_open:
            items.append(step_end(turn, self.log.tracker.step))
        items.append(turn_end(turn, end))
        events = await self._writer.extend(items)
        return events[-1]

    async def _run_step(self, turn: int, number: int) -> Reason | None:
        """One model call and its tools. Returns the turn's end reason if the turn
        ends with this step (the step is then still open), else None."""
        await self._writer.append(step_start(turn, number))
        await self._before_model()
        step = self._step = StepText(number)
        call = StepCall(self.log.id, self._turn_model, self._turn_effort, self._calls.specs(), turn,
                        str(self.context_roots[0]))
        answer = await ask_model(call, step, self.transcript, self.context, self._writer.streamed,
                                 write=self._writer.append, notify=self._notify)
        content = step_content(step, answer.calls)
        if content or answer.usage is not None:
            await self._writer.append(assistant_message(turn, number, content, answer.usage))
        step.message_written = True
        end = step_end_reason(answer.finish, number, answer.calls)
        if end is not None:
            return end
        return await self._calls.run_all(turn, number, answer.calls)

    async def record_setting(self, config_id: str, value: str) -> None:
        """Record a changed session setting (`config/set`, made durable) between turns.
        Raises PromptInProgressError while a turn runs: the log has one writer."""
        if self._scope is not None:
            raise PromptInProgressError(self.log.id)
        async with self._recording:  # a prompt that comes meanwhile waits for it (`_turn`)
            tracker = self.log.tracker
            # Inside the turn a failed write left open, or between turns.
            await self._writer.append(config_set(config_id, value, tracker.turn if tracker.in_turn else None))
            await self._writer.sync()  # acknowledged: durable before the answer

    async def _close_open(self, end: Reason, verb: str) -> Event:
        """Close the open turn with `end`: keep the partial answer of an unfinished
        step, answer unanswered calls, close the step."""
        ending = EndedEarly(end, verb, partial_answer(self._step))
        events = await self._writer.extend(closers(open_turn(self.log.tracker), ending))
        return events[-1]

    async def _shutdown_closers(self) -> list[Event]:
        closers = await anyio.to_thread.run_sync(self.log.close_interrupted)
        for event in closers:
            self.transcript.feed(event)
            await self._writer.emit(event)
        return closers

    async def _before_model(self) -> None:
        """Before a model call. A model outside the agent (a provider, a script that
        sleeps or hangs: `Model.external`) may keep us waiting, so the turn so far (the
        prompt above all) is made durable first: a crash mid-stream then loses only this
        step's chunks (DESIGN.md section 3). An in-process model (echo, an instant
        script) is not something outside the agent to wait on: the turn is only handed
        to the OS, which keeps it through a kill -9 of the agent, and its fsync comes at
        the step's durability point, the same commit as the step's end."""
        if getattr(self._turn_model, "external", True):
            await self._writer.sync()
        elif self.log.pending:
            self.log.flush()
