"""`echo`, the embedded default: streams the last user message back, one chunk per
whitespace-separated word. No network, no keys, deterministic."""

from __future__ import annotations

from collections.abc import AsyncIterator

from acp_bridge.content import blocks_text
from acp_bridge.models.base import Finish, ModelChunk, ModelRequest, TextDelta, UsageChunk


def prompt_text(content: object) -> str:
    """What echo repeats of a prompt: its typed text and the text of its embedded
    resources, nothing added (no fences, no notes for other blocks)."""
    return blocks_text(content, fence_resources=False, notes=False, separator="\n")


class EchoModel:
    name = "echo"
    context_window: int | None = 1_000_000
    external = False  # computed in-process, never waits (acp_bridge.models.Model)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        words: list[str] = []
        for message in reversed(request.messages):
            if message["role"] == "user":
                words = prompt_text(message["content"]).split()
                break
        for word in words:
            yield TextDelta(word + " ")
        yield UsageChunk({"inputTokens": len(words), "outputTokens": len(words)})
        yield Finish("stop")
