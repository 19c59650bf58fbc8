"""What a model call is shown of the session's transcript, measured in tokens
(docs/openai.md, "What the model is shown"), and what to send instead when the provider
refuses a request as longer than the model's context.

The transcript measures each message (session.transcript: the provider's count of an
assistant message, an estimate of every other). A call is shown the newest whole turns
whose measure fits the model's window less room for the answer (`answer_room`) and
for what goes with every request (the system message and the tool specs, estimated),
the running turn always. The estimates are scaled by what the provider's counts say
of them: after each call, its `inputTokens` against what the call was shown
(`Context.measured`), and after a refusal, the request's size the provider gave.

A refusal (`Finish` code CONTEXT_LENGTH) before anything was streamed is answered by
`Context.retry`: the window the provider gave (kept for the model from then on), the
scale its count implies, and at least one turn fewer than the refused request showed;
a refusal that gives no numbers bounds the window by what the refused request
measured, so each try shows at least a quarter less;
None when only the running turn is left (the turn then fails, and the next prompt
starts without it). The log keeps everything: only what the model is shown shrinks.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from acp_bridge.host.updates import DEFAULT_CONTEXT_WINDOW
from acp_bridge.models.base import CONTEXT_LENGTH, Finish
from session.events import Usage
from session.transcript import Transcript, estimate_tokens

# The system message and each request's framing, on top of the tool specs' JSON.
REQUEST_TOKENS = 256
# The room kept for the answer: a quarter of the window, at most ANSWER_ROOM_MAX (what
# the largest models write in one answer; a window of 8k keeps 2k).
ANSWER_SHARE = 4
ANSWER_ROOM_MAX = 32_768
# What one call's counts may say of the estimates: an estimate is never trusted to be
# more than SCALE_MAX times too low, or less than 1 / SCALE_MAX of the truth.
SCALE_MAX = 4.0
# Tries of one model call refused as too long, the first included.
CONTEXT_TRIES = 4


def answer_room(window: int) -> int:
    """Tokens of a `window` kept free for the model's answer."""
    return min(window // ANSWER_SHARE, ANSWER_ROOM_MAX)


def request_overhead(tools: Sequence[Mapping[str, Any]]) -> int:
    """The estimated tokens every request carries besides the transcript."""
    return REQUEST_TOKENS + estimate_tokens(len(orjson.dumps(list(tools))))


@dataclass(frozen=True)
class Shown:
    """What one call is shown: the transcript's messages from `start` on."""

    start: int
    exact: int  # the provider's counts of the messages shown
    guess: int  # the estimates of the rest, with the request's overhead
    limit: float  # what it was fitted to, in tokens


@dataclass
class Context:
    """The measure of one session's model calls: the scale of its estimates and the
    windows its providers gave (per model name), kept while the session is live."""

    scale: float = 1.0
    windows: dict[str, int] = field(default_factory=dict)
    # The last turn a call left out that the client was told of (a notice: no
    # compaction could stand for it), so it is told once, not at every call.
    told_left_out: int = 0
    # The turn whose compaction failed: not tried again in that turn (each of its
    # steps would make the same call), the next turn tries again.
    failed_compaction: int = 0

    def window(self, name: str, context_window: int | None) -> int:
        """The window of the model `name`: the provider's own word if it gave one,
        else the model's, else DEFAULT_CONTEXT_WINDOW."""
        known = self.windows.get(name) or context_window
        return known if known is not None and known > 0 else DEFAULT_CONTEXT_WINDOW

    def choose(self, transcript: Transcript, window: int, tools: Sequence[Mapping[str, Any]],
               *, after: int = -1) -> Shown:
        """The turns a call to a model of `window` tokens is shown (starting after
        `after`, when a request that started there was refused)."""
        overhead = request_overhead(tools)
        limit = window - answer_room(window) - overhead * self.scale
        start = transcript.fit(limit, self.scale, after=after)
        return Shown(start, sum(transcript.exact[start:]), sum(transcript.guess[start:]) + overhead, limit)

    def measured(self, shown: Shown, usage: Usage | None) -> None:
        """A call shown `shown` was counted `usage.inputTokens` by its provider: what
        that says of the estimates is the scale from now on."""
        counted = usage.get("inputTokens") if usage is not None else None
        if type(counted) is int and counted > 0:
            self._rescale(shown, counted)

    def retry(self, transcript: Transcript, name: str, window: int, tools: Sequence[Mapping[str, Any]],
              refused: Shown, finish: Finish) -> Shown | None:
        """What to show instead of `refused`, which the provider refused as longer
        than the context (`finish`); None when nothing less can be shown."""
        if finish.context_tokens is not None:
            window = self.windows[name] = finish.context_tokens
        if finish.request_tokens is not None:
            self._rescale(refused, finish.request_tokens)
        if finish.context_tokens is None and finish.request_tokens is None:
            # Nothing counted: the window is smaller than the request as measured, so
            # it is at most that from now on (one turn fewer a try would take as many
            # tries as turns when one old answer fills the window).
            measured = int(refused.exact + refused.guess * self.scale)
            if 0 < measured < window:
                window = self.windows[name] = measured
        shown = self.choose(transcript, window, tools, after=refused.start)
        return shown if shown.start > refused.start else None

    def _rescale(self, shown: Shown, counted: int) -> None:
        if shown.guess <= 0:
            return
        scale = (counted - shown.exact) / shown.guess
        self.scale = min(max(scale, 1 / SCALE_MAX), SCALE_MAX)


def refused_as_too_long(finish: Finish | None) -> bool:
    return finish is not None and finish.reason == "error" and finish.code == CONTEXT_LENGTH
