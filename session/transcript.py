"""The provider transcript derived from a log: what the model is shown next turn.

Only messages survive: the prompt, each assistant message with content, each tool
result. Chunks are the streamed form of a message that follows them, boundaries carry
no content, and `tool/call` repeats the call block of its `assistant/message`. An
empty-content `assistant/message` only hosts usage, so it is skipped too, and so is a
`wrapped/update` (a wrapped agent's plan, mode or interim tool update: what the editor
was shown, never what a model said or was told). Pure.

A completed `context/compaction` replaces, from where it stands on, every message of
the turns up to its `replaces.toTurn` by one user message holding its summary (the
transcript's head, before its first turn): what the model is shown is the summary and
the turns after it. The log keeps the turns; only the transcript forgets them.

Each message is measured in tokens: the provider's count where it gave one (an
answer's outputTokens), an estimate of the rest, so a model call can be shown the
newest whole turns that fit its window (`Transcript.fit`; the limit is the runner's:
acp_bridge.agent.context).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise
from typing import Literal, TypedDict

import orjson

from session.events import (
    ASSISTANT_MESSAGE,
    CONTEXT_COMPACTION,
    JSON,
    TOOL_RESULT,
    USER_MESSAGE,
    AssistantBlock,
    Event,
    tool_calls_of,
)
from session.items import AssistantMessageData
from session.typed import typed


class UserMessage(TypedDict):
    role: Literal["user"]
    content: list[JSON]  # ACP ContentBlocks, verbatim


class AssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: list[AssistantBlock]


class ToolMessage(TypedDict):
    role: Literal["tool"]
    callId: str
    name: str
    content: list[JSON]
    isError: bool


Message = UserMessage | AssistantMessage | ToolMessage


_MESSAGE_TYPES = frozenset({USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT, CONTEXT_COMPACTION})

# What the model is told of a compaction's summary, before it: the model never saw the
# turns it stands for as turns of this conversation any more.
SUMMARY_INTRO = ("[The earlier part of this conversation was compacted to fit the context window. "
                 "This is its summary:]")

# What the model is shown is measured in tokens (docs/openai.md, "What the model is
# shown"). Where the provider counted a message (an assistant message's outputTokens)
# its count is kept; every other message is estimated from its bytes, on the high side
# (English runs about 4 bytes a token, code 3 to 4, CJK 2 to 3), so an estimate errs
# towards showing less. A message's framing in a chat template (role markers) costs a
# few tokens more; an image or an audio clip costs what providers charge for one at
# most, not its base64 bytes.
BYTES_PER_TOKEN = 3
MESSAGE_TOKENS = 8
MEDIA_TOKENS = 1_600
# What a transcript keeps in memory at most, in tokens, when its owner names no bound:
# more than any context window it will be asked to fit (the fit per call is `fit`).
DEFAULT_HISTORY_TOKENS = 2_000_000


def history_budget(context_window: int | None) -> int:
    """Tokens of transcript worth keeping in memory for a model with this context
    window: twice the window (a switch to a model with a larger one, an estimate that
    was too high), or DEFAULT_HISTORY_TOKENS when the window is unknown."""
    if context_window is None or context_window <= 0:
        return DEFAULT_HISTORY_TOKENS
    return 2 * context_window


def estimate_tokens(text_bytes: int) -> int:
    """Tokens of `text_bytes` bytes of text, estimated on the high side."""
    return -(-text_bytes // BYTES_PER_TOKEN)


def content_tokens(blocks: Iterable[JSON]) -> int:
    """The estimated tokens of a message's content blocks as a provider is sent them:
    reasoning is never sent back, media cost MEDIA_TOKENS each, any other block its
    JSON (a text block's is its text plus a few bytes)."""
    size = media = 0
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "reasoning":
            continue
        if kind in ("image", "audio"):
            media += 1
            continue
        size += len(orjson.dumps(block))
    return estimate_tokens(size) + media * MEDIA_TOKENS


def counted_tokens(data: AssistantMessageData) -> int | None:
    """The provider's count of an `assistant/message`'s content as it is sent back:
    its usage's outputTokens less the reasoning, which is not sent back (its
    reasoningTokens, else its reasoning blocks estimated); None without a count."""
    usage = data.get("usage")
    output = usage.get("outputTokens") if isinstance(usage, dict) else None
    if type(output) is not int or output <= 0:
        return None
    assert usage is not None
    reasoning = usage.get("reasoningTokens")
    if type(reasoning) is not int:
        reasoning = sum(estimate_tokens(len(str(b.get("text", "")).encode())) for b in data["content"]
                        if b["type"] == "reasoning")
    sent = output - reasoning
    return sent if sent > 0 else None


class Transcript:
    """The transcript kept up to date one event at a time, so a long session does not
    re-derive its whole history before every model call. `messages` after feeding a
    log equals `derive_messages` of it, unless a `budget` (tokens) is set: then the
    oldest whole turns are dropped from memory while the transcript is over it (the
    last turn always stays). Turns are dropped whole, from one user message to the
    next, so every tool call kept keeps its result. The log itself keeps everything.

    Each message is measured in tokens (`exact`: the provider's count, else `guess`:
    an estimate; one of the two is 0), and `fit` picks the whole turns a call can be
    shown within a limit."""

    def __init__(self, budget: int | None = None) -> None:
        self.messages: list[Message] = []
        self.budget = budget
        self.dropped = 0  # messages dropped from memory for the budget
        self.exact: list[int] = []  # per message: the provider's count, or 0
        self.guess: list[int] = []  # per message: the estimate, or 0 when counted
        self._names: dict[str, str] = {}
        self._turns: list[int] = []  # the index of each turn's first (user) message
        self._numbers: list[int] = []  # the number of each of those turns in the log

    @property
    def head(self) -> int:
        """The messages before the first turn: a compaction's summary (0 or 1)."""
        return self._turns[0] if self._turns else len(self.messages)

    def turn_starts(self) -> list[tuple[int, int]]:
        """(index of its first message, its number in the log) of each turn kept."""
        return list(zip(self._turns, self._numbers, strict=True))

    def feed(self, event: Event) -> None:
        if event["type"] not in _MESSAGE_TYPES:  # most events of a log: skipped before the typed view
            return
        ev = typed(event)
        if ev["type"] == USER_MESSAGE:
            self._numbers.append(ev["data"]["turn"])
            self._add({"role": "user", "content": ev["data"]["content"]}, None)
        elif ev["type"] == ASSISTANT_MESSAGE:
            data = ev["data"]
            if not data["content"]:
                return
            for block in tool_calls_of(data):
                self._names[block["id"]] = block["name"]
            self._add({"role": "assistant", "content": data["content"]}, counted_tokens(data))
        elif ev["type"] == TOOL_RESULT:
            result = ev["data"]
            self._add(
                {
                    "role": "tool",
                    "callId": result["callId"],
                    "name": self._names.pop(result["callId"], ""),
                    "content": result["content"],
                    "isError": result["isError"],
                },
                None,
            )
        elif ev["type"] == CONTEXT_COMPACTION:
            compaction = ev["data"]
            if compaction["status"] == "completed" and compaction["summary"]:
                self._compacted(compaction["replaces"]["toTurn"], compaction["summary"])

    def _compacted(self, to_turn: int, summary: list[JSON]) -> None:
        """Everything before turn `to_turn + 1` is `summary` from now on (an earlier
        summary with it). A compaction without a summary (a wrapped agent that showed
        none) changes nothing: there is nothing to stand for the turns."""
        cut = next((start for start, number in zip(self._turns, self._numbers, strict=True) if number > to_turn),
                    len(self.messages))
        self._forget(cut)
        content: list[JSON] = [{"type": "text", "text": SUMMARY_INTRO}, *summary]
        self.messages.insert(0, {"role": "user", "content": content})
        self.exact.insert(0, 0)
        self.guess.insert(0, content_tokens(content) + MESSAGE_TOKENS)
        self._turns = [start + 1 for start in self._turns]

    def _add(self, message: Message, counted: int | None) -> None:
        if message["role"] == "user":  # a turn's prompt (a summary is inserted, not added)
            self._turns.append(len(self.messages))
        self.messages.append(message)
        if counted is not None:
            self.exact.append(counted + MESSAGE_TOKENS)
            self.guess.append(0)
        else:
            self.exact.append(0)
            self.guess.append(content_tokens(message["content"]) + MESSAGE_TOKENS)
        if self.budget is not None and message["role"] == "user" and len(self._turns) > 1:
            # Only at a user message (a turn's first): the turn before it is complete.
            cut = self.fit(self.budget)
            if cut:
                self._forget(cut)

    def _forget(self, cut: int) -> None:
        del self.messages[:cut], self.exact[:cut], self.guess[:cut]
        kept = [(start - cut, number) for start, number in zip(self._turns, self._numbers, strict=True)
                if start >= cut]
        self._turns = [start for start, _ in kept]
        self._numbers = [number for _, number in kept]
        self.dropped += cut

    def tokens(self, start: int = 0, scale: float = 1.0) -> float:
        """The measure of the messages from `start` on: the provider's counts plus the
        estimates times `scale` (what the provider's counts so far say of them)."""
        return sum(self.exact[start:]) + scale * sum(self.guess[start:])

    def fit(self, limit: float, scale: float = 1.0, *, after: int = -1) -> int:
        """The index of the first message to show so that what is shown measures at
        most `limit` tokens (`tokens`, at `scale`): the newest whole turns that fit,
        and only turns that start after `after` (the start of a request that was
        refused: show less than it did). The last turn is always shown: its start is
        the answer when nothing smaller fits (at or before `after`: nothing less can
        be shown). 0 when everything fits."""
        turns = self._turns
        if not turns:
            return 0
        starts = turns if turns[0] == 0 else [0, *turns]  # a head before the first turn goes first
        exact, guess = self.exact, self.guess
        total = self.tokens(0, scale)
        for here, after_here in pairwise(starts):
            if here > after and total <= limit:
                return here
            total -= sum(exact[here:after_here]) + scale * sum(guess[here:after_here])
        return starts[-1]

    def truncate(self, count: int) -> None:
        """Keep the first `count` messages only (a failed write dropped the rest from
        the log, and the model must not be shown what the log does not hold)."""
        del self.messages[count:], self.exact[count:], self.guess[count:]
        kept = len([start for start in self._turns if start < count])
        del self._turns[kept:], self._numbers[kept:]

    def feed_all(self, events: Iterable[Event]) -> None:
        feed, wanted = self.feed, _MESSAGE_TYPES
        for event in events:
            if event["type"] in wanted:  # most events of a log are chunks: skip them fast
                feed(event)


def derive_messages(events: Iterable[Event]) -> list[Message]:
    """The model transcript of a log, in log order. On a repaired log every tool call
    is followed by its result (the closers answer interrupted ones)."""
    transcript = Transcript()
    transcript.feed_all(events)
    return transcript.messages


def unanswered_calls(messages: Iterable[Message]) -> list[str]:
    """Tool-call ids in `messages` that no tool message answers (empty on a valid log)."""
    pending: dict[str, None] = {}
    for message in messages:
        if message["role"] == "assistant":
            for block in message["content"]:
                if block["type"] == "tool-call":
                    pending[block["id"]] = None
        elif message["role"] == "tool":
            pending.pop(message["callId"], None)
    return list(pending)
