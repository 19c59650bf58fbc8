"""`echo`, the embedded default: streams the last user message back as it was typed,
one chunk per word with the whitespace after it (newlines and all, so markdown shows
as markdown). No network, no keys, deterministic."""

from __future__ import annotations

from collections.abc import AsyncIterator

from acp_bridge.content import blocks_text
from acp_bridge.models.base import (
    Finish,
    ModelChunk,
    ModelRequest,
    TextDelta,
    UsageChunk,
    word_chunks,
)


def prompt_text(content: object) -> str:
    """What echo repeats of a prompt: its typed text and the text of its embedded
    resources, nothing added (no fences, no notes for other blocks)."""
    return blocks_text(content, fence_resources=False, notes=False, separator="\n")


class EchoModel:
    name = "echo"
    context_window: int | None = 1_000_000
    external = False  # computed in-process, never waits (acp_bridge.models.Model)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        text = ""
        for message in reversed(request.messages):
            if message["role"] == "user":
                text = prompt_text(message["content"])
                break
        for chunk in word_chunks(text):
            yield TextDelta(chunk)
        words = len(text.split())
        yield UsageChunk({"inputTokens": words, "outputTokens": words})
        yield Finish("stop")
