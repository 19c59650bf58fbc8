"""The model call of one step of a turn (acp_bridge.agent.runner runs the step around
it): the part of the transcript the model is shown (acp_bridge.agent.context), the
older turns compacted first when they do not all fit (acp_bridge.agent.compaction,
once a step), shown again with fewer older turns while the provider refuses it as
longer than its context, its deltas streamed to the log as they come; then the step's
end reason from its finish. What the client that takes notices is told on the way (a
retry of the provider, turns left out) goes to `notify`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from acp_bridge.agent.compaction import Compaction, Write, plan, wanted
from acp_bridge.agent.context import CONTEXT_TRIES, Context, Shown, refused_as_too_long
from acp_bridge.agent.turn_close import StepText
from acp_bridge.host.advertised import left_out_notice, retry_notice
from acp_bridge.models import (
    Finish,
    Model,
    ModelRequest,
    ReasoningDelta,
    Retrying,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
)
from session import StoreIOError, reason
from session.events import Reason, Usage
from session.items import ChunkKind, Item, assistant_chunk
from session.transcript import Transcript

# The runner's logger: the call is a part of its turn.
logger = logging.getLogger("acp_bridge.agent.runner")
_DELTAS = (TextDelta, ReasoningDelta)

Streamed = Callable[[Item], Awaitable[None]]
Notify = Callable[[dict[str, Any]], None]
"""Tell the client a notice, if it takes them (the live session's)."""


@dataclass(frozen=True)
class StepCall:
    """What one step asks its model: whose turn, which step, with what."""

    session_id: str
    model: Model
    effort: str | None
    tools: Sequence[Mapping[str, Any]]
    turn: int
    cwd: str


@dataclass(frozen=True)
class Answer:
    """What the model gave: its tool calls (none unless it finished to stop or call
    tools), its usage and its finish (an error finish where the stream had none)."""

    calls: list[ToolCallChunk]
    usage: Usage | None
    finish: Finish


async def ask_model(call: StepCall, step: StepText, transcript: Transcript, context: Context,
                    streamed: Streamed, *, write: Write, notify: Notify | None = None) -> Answer:
    """The model's answer in `step`: shown what fits its context (older turns compacted
    first when they do not all fit), and shown less (up to CONTEXT_TRIES times) while
    it refuses that as too long without having said anything."""
    model, specs = call.model, call.tools
    window = context.window(model.name, model.context_window)
    shown = context.choose(transcript, window, specs)
    tried_compaction = wanted(transcript, shown.start)
    if tried_compaction and await _compact(call, step, transcript, context, window, write):
        shown = context.choose(transcript, window, specs)
    for tried in range(1, CONTEXT_TRIES + 1):
        request = ModelRequest(transcript.messages[shown.start:], specs, call.effort,
                               turn=call.turn, step=step.number, cwd=call.cwd)
        calls, usage, finish = await _stream(model, request, step, call.turn, streamed, notify)
        if not refused_as_too_long(finish) or step.text or step.reasoning or calls:
            break
        assert finish is not None
        fewer = context.retry(transcript, model.name, window, specs, shown, finish)
        window = context.window(model.name, model.context_window)  # the provider's word, if it gave one
        if fewer is not None and not tried_compaction and wanted(transcript, fewer.start):
            tried_compaction = True
            if await _compact(call, step, transcript, context, window, write):
                fewer = context.choose(transcript, window, specs)
        if fewer is None or tried == CONTEXT_TRIES:  # the turn fails; the next prompt goes without it
            why = ("this turn alone is longer than the model's context" if fewer is None
                   else f"refused {tried} times, each time with fewer older turns")
            finish = replace(finish, message=f"{finish.message} ({why})")
            break
        logger.info("session %s: %s; trying again with %d message(s) shown instead of %d",
                    call.session_id, finish.message, len(transcript.messages) - fewer.start,
                    len(transcript.messages) - shown.start)
        shown = fewer
    _told_left_out(transcript, context, shown, notify)
    context.measured(shown, usage)
    learned = context.windows.get(model.name)
    if usage is not None and learned is not None and "contextWindow" not in usage:
        # The server's own window, once a refusal said it: the editor's meter (and
        # the replay's) shows that rather than a guess the server proved wrong.
        usage = {**usage, "contextWindow": learned}
    if finish is None:
        finish = Finish("error", message="the model stream ended without finishing", code="model_error")
    if finish.reason not in ("stop", "tool_calls"):
        calls = []  # cut off, refused or failed: its tool calls are not trusted
    return Answer(calls, usage, finish)


async def _compact(call: StepCall, step: StepText, transcript: Transcript, context: Context, window: int,
                   write: Write) -> bool:
    """Compact the older turns for a call to a model of `window` tokens; whether the
    transcript now holds a summary in their place."""
    found = plan(transcript, context, window, call.tools) if context.failed_compaction != call.turn else None
    if found is None:
        return False
    compaction = Compaction(call.turn, step.number, found)
    if await compaction.run(call.model, compaction.request(transcript, call.tools, call.effort, call.cwd), write):
        return True
    context.failed_compaction = call.turn
    return False


def _told_left_out(transcript: Transcript, context: Context, shown: Shown, notify: Notify | None) -> None:
    """The client that takes notices is told when a call leaves out turns it was not
    told of yet (no compaction could stand for them)."""
    if notify is None or not wanted(transcript, shown.start):
        return
    first = next((number for index, number in transcript.turn_starts() if index >= shown.start), None)
    if first is not None and first - 1 > context.told_left_out:
        context.told_left_out = first - 1
        notify(left_out_notice(first))


def step_end_reason(finish: Finish, number: int, calls: list[ToolCallChunk]) -> Reason | None:
    """The turn's end reason if it ends with step `number` (None: its tool calls run)."""
    if finish.reason == "error":
        fields: dict[str, Any] = {"step": number, "message": finish.message or "model error"}
        if finish.code is not None:
            fields["code"] = finish.code
        if finish.retryable is not None:
            fields["retryable"] = finish.retryable
        return reason("error", **fields)
    if finish.reason in ("max_tokens", "refusal"):
        return reason(finish.reason)
    if not calls:
        return reason("completed")
    return None


async def _stream(model: Model, request: ModelRequest, step: StepText, turn: int, streamed: Streamed,
                  notify: Notify | None) -> tuple[list[ToolCallChunk], Usage | None, Finish | None]:
    """One call of the turn's model: its deltas streamed to the log as they come,
    its tool calls, usage and finish returned."""
    calls: list[ToolCallChunk] = []
    usage: Usage | None = None
    finish: Finish | None = None
    number = step.number
    try:
        async with contextlib.aclosing(model.stream(request)) as stream:  # type: ignore[type-var]
            async for chunk in stream:
                if isinstance(chunk, _DELTAS):
                    kind: ChunkKind
                    if isinstance(chunk, TextDelta):
                        kind = "text"
                        step.text.append(chunk.text)
                    else:
                        kind = "reasoning"
                        step.reasoning.append(chunk.text)
                    await streamed(assistant_chunk(turn, number, kind, chunk.text))
                elif isinstance(chunk, ToolCallChunk):
                    calls.append(chunk)
                elif isinstance(chunk, UsageChunk):
                    usage = chunk.usage
                elif isinstance(chunk, Retrying):
                    if notify is not None:
                        notify(retry_notice(chunk.attempt, chunk.attempts, chunk.delay, chunk.code, chunk.message))
                elif isinstance(chunk, Finish):
                    finish = chunk
                    break
    except StoreIOError:
        raise  # the log failed, not the model: the turn ends as the runner's `_store_failed` says
    except Exception as exc:  # a provider bug: the step fails, the turn says why
        finish = Finish("error", message=f"{type(exc).__name__}: {exc}", code="model_error")
    return calls, usage, finish
