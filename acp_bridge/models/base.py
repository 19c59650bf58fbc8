"""The model interface: one streaming call per step (DESIGN.md section 4).

A model turns the transcript (`session.derive_messages`) into a stream of chunks:
text and reasoning deltas, complete tool calls, usage, and exactly one `Finish` at the
end. Provider failures arrive as `Finish("error", ...)`, never as exceptions, so the
runner has one path for every way a step can end.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from session.events import Usage
from session.transcript import Message

FinishReason = Literal["stop", "tool_calls", "max_tokens", "refusal", "error"]

# A word with the whitespace after it (the text's leading whitespace goes with its first
# word), or whitespace alone when the text has no word.
_WORD = re.compile(r"\s*\S+\s*|\s+")


def word_chunks(text: str) -> list[str]:
    """`text` cut at word boundaries, every character kept: newlines, tabs and runs of
    spaces stay where they were, so `"".join(word_chunks(text)) == text` and a client
    is shown the text (markdown included) as it was written. What `echo` and `script:`
    stream, one chunk each."""
    return _WORD.findall(text)


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallChunk:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass(frozen=True)
class UsageChunk:
    usage: Usage


@dataclass(frozen=True)
class Finish:
    reason: FinishReason
    message: str | None = None  # error only
    code: str | None = None
    retryable: bool | None = None
    # A request the provider refused as longer than its context (code CONTEXT_LENGTH):
    # the request's tokens and the context's size as the provider counted them, where
    # it said (the runner sends less and tries again: acp_bridge.agent.context).
    request_tokens: int | None = None
    context_tokens: int | None = None


# How a compaction's summary call that failed is recorded (acp_bridge.agent.compaction),
# around what the model failed with, which `replay:` reads back (models.recording).
SUMMARY_FAILED = ("The summary could not be made: ", ".")

CONTEXT_LENGTH = "context_length"
"""The `code` of a `Finish("error")` for a request longer than the model's context."""


@dataclass(frozen=True)
class Retrying:
    """The call failed before anything was streamed and is tried again after `delay`
    seconds (try `attempt` of `attempts`): what the person may be told (a notice)
    while the turn waits. `code` and `message` are the failure's, the key redacted."""

    attempt: int
    attempts: int
    delay: float
    code: str | None
    message: str


ModelChunk = TextDelta | ReasoningDelta | ToolCallChunk | UsageChunk | Retrying | Finish


@dataclass(frozen=True)
class ModelRequest:
    messages: Sequence[Message]
    tools: Sequence[Mapping[str, Any]]  # {name, description, parameters}
    # The session's `thought_level` for a model that takes a reasoning effort
    # (acp_bridge.models.catalog.EFFORT_LEVELS), else None.
    reasoning_effort: str | None = None
    # Where the call stands in the session's log (the runner says; None elsewhere): a
    # recorded session is replayed call by call at the same (turn, step) (models.replay).
    turn: int | None = None
    step: int | None = None
    cwd: str | None = None  # the session's, where recorded paths are replayed
    # What the call is for: a step of the turn, or the summary of a compaction of the
    # session's context (acp_bridge.agent.compaction; its messages end with what to
    # summarize and how). A script's summary entries serve only the latter.
    purpose: Literal["step", "compaction"] = "step"


class Model(Protocol):
    name: str  # the spec it was made from, e.g. "echo", "script:/path.json"
    context_window: int | None  # for usage_update.size
    # True when a call leaves the process (a provider over the network) or can keep the
    # turn waiting (a script with delays or a hang): the runner makes the turn so far
    # durable (fsync) before calling it. False only for models that compute their
    # answer in-process without waiting (echo, a script without delays): the runner
    # then only hands the turn to the OS (kept on kill -9, fsync'd at step/end).
    external: bool

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]: ...
