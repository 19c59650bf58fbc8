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


def derive_messages(events: Iterable[Event]) -> list[Message]:
    """The model transcript of a log, in log order. On a repaired log every tool call
    is followed by its result (the closers answer interrupted ones)."""
    messages: list[Message] = []
    names: dict[str, str] = {}
    for event in events:
        etype, data = event["type"], event["data"]
        if etype == USER_MESSAGE:
            messages.append({"role": "user", "content": data["content"]})
        elif etype == ASSISTANT_MESSAGE:
            if not data["content"]:
                continue
            for block in tool_calls_of(data):
                names[block["id"]] = block["name"]
            messages.append({"role": "assistant", "content": data["content"]})
        elif etype == TOOL_RESULT:
            messages.append(
                {
                    "role": "tool",
                    "callId": data["callId"],
                    "name": names.get(data["callId"], ""),
                    "content": data["content"],
                    "isError": data["isError"],
                }
            )
    return messages


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
