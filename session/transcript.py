"""The provider transcript derived from a log: what the model is shown next turn.

Only messages survive: the prompt, each assistant message with content, each tool
result. Chunks are the streamed form of a message that follows them, boundaries carry
no content, and `tool/call` repeats the call block of its `assistant/message`. An
empty-content `assistant/message` only hosts usage, so it is skipped too. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypedDict

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


class Transcript:
    """The transcript kept up to date one event at a time, so a long session does not
    re-derive its whole history before every model call. `messages` after feeding a
    log equals `derive_messages` of it."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._names: dict[str, str] = {}

    def feed(self, event: Event) -> None:
        etype, data = event["type"], event["data"]
        if etype == USER_MESSAGE:
            self.messages.append({"role": "user", "content": data["content"]})
        elif etype == ASSISTANT_MESSAGE:
            if not data["content"]:
                return
            for block in tool_calls_of(data):
                self._names[block["id"]] = block["name"]
            self.messages.append({"role": "assistant", "content": data["content"]})
        elif etype == TOOL_RESULT:
            self.messages.append(
                {
                    "role": "tool",
                    "callId": data["callId"],
                    "name": self._names.get(data["callId"], ""),
                    "content": data["content"],
                    "isError": data["isError"],
                }
            )

    def feed_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.feed(event)


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
