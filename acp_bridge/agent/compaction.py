"""A compaction of the session's context (docs/openai.md, "Compaction"): when a model
call would be shown fewer turns than the session has (its history outgrew the model's
window, or the provider refused a request as too long), the oldest turns are first
summarized by the model, in a call of its own, and from then on the model is shown
the summary in their place (session.transcript). Nothing is dropped silently: the log
records the compaction (`context/compaction`: in progress, then completed with the
summary and the call's usage, or failed saying why), a client that advertised
compaction sees it (acp_bridge.host.advertised), and the turns stay in the log and in
every replay.

What is compacted (`plan`): every whole turn before the newest ones that fit half of
what a call may be shown (so one compaction makes room for many turns, not one), never
the running turn. What the summarizer is shown: as many of those turns as fit its own
call (the newest; an earlier summary first when it fits too), then the instruction.
When not even the newest of them fits, there is no compaction: the call is shown fewer
turns, as before compaction existed, and the client that takes notices is told.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from acp_bridge.agent.context import Context, answer_room, request_overhead
from acp_bridge.models import Finish, Model, ModelRequest, TextDelta, UsageChunk
from acp_bridge.models.base import SUMMARY_FAILED
from session import StoreIOError
from session.events import Replaces, Usage
from session.items import Item, context_compaction
from session.transcript import MESSAGE_TOKENS, Message, Transcript, content_tokens

# What is kept after a compaction: the newest whole turns that fit this share of what
# a call may be shown (the rest of it is for the summary and the turns to come).
KEEP_SHARE: Final = 0.5

INSTRUCTION: Final = (
    "The conversation above is about to be removed from your context to make room; this summary "
    "will stand in its place. Write a summary of it that lets you carry on the work without it: "
    "what the user asked for and decided, what was done and found (files and paths, commands and "
    "their outcome, the state of the code), what is still open, and what to do next. Keep names, "
    "paths and numbers exact. Write only the summary, without tool calls.")

Write = Callable[[Item], Awaitable[Any]]
"""Append one item to the session's log and tell the client (the turn's writer)."""


@dataclass(frozen=True)
class Plan:
    """What one compaction summarizes: the messages from `shown` to `keep` (whole turns;
    `keep` is the start of the first turn kept), standing for every turn up to
    `to_turn`, the summarizer reading those from `from_turn` on as they were."""

    shown: int
    keep: int
    from_turn: int
    to_turn: int

    @property
    def replaces(self) -> Replaces:
        return {"fromTurn": self.from_turn, "toTurn": self.to_turn}


def wanted(transcript: Transcript, start: int) -> bool:
    """Whether a call shown the transcript from `start` on leaves out a turn (not just
    the summary of an earlier compaction)."""
    return start > transcript.head


def plan(transcript: Transcript, context: Context, window: int, tools: Sequence[Mapping[str, Any]]) -> Plan | None:
    """What to compact for a call to a model of `window` tokens, or None when nothing
    can be: no turn before the running one, or not even the newest of them fits the
    summarizer's call."""
    starts = transcript.turn_starts()
    if len(starts) < 2:
        return None
    scale = context.scale
    limit = window - answer_room(window) - request_overhead(tools) * scale
    keep = min(transcript.fit(limit * KEEP_SHARE, scale), starts[-1][0])
    compacted = [(index, number) for index, number in starts if index < keep]
    if not compacted:
        return None
    room = limit - scale * (content_tokens([{"type": "text", "text": INSTRUCTION}]) + MESSAGE_TOKENS)
    candidates = ([0] if transcript.head else []) + [index for index, _ in compacted]
    kept_tokens = transcript.tokens(keep, scale)
    for shown in candidates:
        if transcript.tokens(shown, scale) - kept_tokens <= room:
            from_turn = next(number for index, number in compacted if index >= shown)
            return Plan(shown, keep, from_turn, compacted[-1][1])
    return None


@dataclass(frozen=True)
class Compaction:
    """One compaction, in the step `step` of turn `turn` (its id says where)."""

    turn: int
    step: int
    plan: Plan

    @property
    def compaction_id(self) -> str:
        return f"t{self.turn}s{self.step}-compaction"

    def item(self, status: str, summary: list[Any] | None = None, *, error: str | None = None,
             usage: Usage | None = None) -> Item:
        return context_compaction(self.turn, self.step, self.compaction_id, replaces=self.plan.replaces,
                                  summary=summary or [], status=status, error=error, usage=usage)

    def request(self, transcript: Transcript, tools: Sequence[Mapping[str, Any]], effort: str | None,
                cwd: str) -> ModelRequest:
        """The summarizer's call: the turns to summarize, then the instruction. The tools
        are the session's, so the request is a step's with the instruction at its end
        (a provider's prompt cache serves its start)."""
        instruction: Message = {"role": "user", "content": [{"type": "text", "text": INSTRUCTION}]}
        messages = [*transcript.messages[self.plan.shown:self.plan.keep], instruction]
        return ModelRequest(messages, tools, effort, turn=self.turn, step=self.step, cwd=cwd, purpose="compaction")

    async def run(self, model: Model, request: ModelRequest, write: Write) -> bool:
        """In progress, the summary call, then completed with the summary (True) or
        failed saying why (False): each event in the log before the client is told."""
        await write(self.item("in_progress"))
        text, usage, finish = await summarize(model, request)
        if finish.reason in ("stop", "max_tokens", "tool_calls") and text.strip():
            await write(self.item("completed", [{"type": "text", "text": text}], usage=usage))
            return True
        why = finish.message if finish.reason == "error" else f"the model ended it with {finish.reason!r}"
        if finish.reason != "error" and not text.strip():
            why = "the model wrote no summary"
        head, tail = SUMMARY_FAILED
        await write(self.item("failed", error=f"{head}{why}{tail}", usage=usage))
        return False


async def summarize(model: Model, request: ModelRequest) -> tuple[str, Usage | None, Finish]:
    """The summary's text, the call's usage and its finish (its reasoning and tool calls
    are not the summary: left out)."""
    parts: list[str] = []
    usage: Usage | None = None
    finish: Finish | None = None
    try:
        async with contextlib.aclosing(model.stream(request)) as stream:  # type: ignore[type-var]
            async for chunk in stream:
                if isinstance(chunk, TextDelta):
                    parts.append(chunk.text)
                elif isinstance(chunk, UsageChunk):
                    usage = chunk.usage
                elif isinstance(chunk, Finish):
                    finish = chunk
                    break
    except StoreIOError:
        raise
    except Exception as exc:  # a provider bug: the compaction fails, the step goes on
        finish = Finish("error", message=f"{type(exc).__name__}: {exc}", code="model_error")
    if finish is None:
        finish = Finish("error", message="the model stream ended without finishing", code="model_error")
    return "".join(parts), usage, finish
