"""`echo`, the embedded default: streams the last user message back, one chunk per
whitespace-separated word. No network, no keys, deterministic."""

from __future__ import annotations

from collections.abc import AsyncIterator

from acp_bridge.models import Finish, ModelChunk, ModelRequest, TextDelta, UsageChunk


def prompt_text(content: object) -> str:
    """The text of a prompt's blocks (text blocks and embedded text resources)."""
    parts: list[str] = []
    if isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                parts.append(str(block.get("text", "")))
            elif block.get("type") == "resource" and isinstance(block.get("resource"), dict):
                text = block["resource"].get("text")
                if isinstance(text, str):
                    parts.append(text)
    return "\n".join(parts)


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
