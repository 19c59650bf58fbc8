"""The provider transcript derived from a log: what the model is shown next turn.

Only messages survive: the prompt, each assistant message with content, each tool
result. Chunks are the streamed form of a message that follows them, boundaries carry
no content, and `tool/call` repeats the call block of its `assistant/message`. An
empty-content `assistant/message` only hosts usage, so it is skipped too, and so is a
`wrapped/update` (a wrapped agent's plan, mode or interim tool update: what the editor
was shown, never what a model said or was told). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypedDict

import orjson

from session.events import (
    ASSISTANT_MESSAGE,
    JSON,
    TOOL_RESULT,
    USER_MESSAGE,
    AssistantBlock,
    Event,
    tool_calls_of,
)


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


_MESSAGE_TYPES = frozenset({USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT})

# A model is shown at most what fits its context window; a token is about 4 bytes of
# text, and JSON blocks carry some overhead, so 8 bytes per token of history is kept.
HISTORY_BYTES_PER_TOKEN = 8
DEFAULT_HISTORY_BYTES = 8 << 20


def history_budget(context_window: int | None) -> int:
    """Bytes of transcript worth keeping for a model with this context window."""
    if context_window is None or context_window <= 0:
        return DEFAULT_HISTORY_BYTES
    return context_window * HISTORY_BYTES_PER_TOKEN


class Transcript:
    """The transcript kept up to date one event at a time, so a long session does not
    re-derive its whole history before every model call. `messages` after feeding a
    log equals `derive_messages` of it, unless a `budget` (bytes of JSON content) is
    set: then the oldest whole turns are dropped while the transcript is over it (the
    last turn always stays). Turns are dropped whole, from one user message to the
    next, so every tool call kept keeps its result. The log itself keeps everything."""

    def __init__(self, budget: int | None = None) -> None:
        self.messages: list[Message] = []
        self.budget = budget
        self.dropped = 0  # messages dropped for the budget
        self._names: dict[str, str] = {}
        self._sizes: list[int] = []  # per message, while a budget is set
        self._size = 0

    def feed(self, event: Event) -> None:
        etype, data = event["type"], event["data"]
        if etype == USER_MESSAGE:
            self._add({"role": "user", "content": data["content"]})
        elif etype == ASSISTANT_MESSAGE:
            if not data["content"]:
                return
            for block in tool_calls_of(data):
                self._names[block["id"]] = block["name"]
            self._add({"role": "assistant", "content": data["content"]})
        elif etype == TOOL_RESULT:
            self._add(
                {
                    "role": "tool",
                    "callId": data["callId"],
                    "name": self._names.pop(data["callId"], ""),
                    "content": data["content"],
                    "isError": data["isError"],
                }
            )

    def _add(self, message: Message) -> None:
        self.messages.append(message)
        if self.budget is None:
            return
        size = len(orjson.dumps(message["content"]))
        self._sizes.append(size)
        self._size += size
        if self._size > self.budget and message["role"] == "user":
            self._trim()

    def _trim(self) -> None:
        # Only at a user message (a turn's first): the turn before it is complete.
        messages, sizes = self.messages, self._sizes
        assert self.budget is not None
        cut = 0
        while self._size > self.budget:
            end = next(
                (i for i in range(cut + 1, len(messages)) if messages[i]["role"] == "user"),
                None,
            )
            if end is None:
                break
            self._size -= sum(sizes[cut:end])
            cut = end
        if cut:
            del messages[:cut], sizes[:cut]
            self.dropped += cut

    def truncate(self, count: int) -> None:
        """Keep the first `count` messages only (a failed write dropped the rest from
        the log, and the model must not be shown what the log does not hold)."""
        if self.budget is not None:
            self._size -= sum(self._sizes[count:])
            del self._sizes[count:]
        del self.messages[count:]

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
