"""The request side of `openai:MODEL`, pure: the transcript and the tool specs as a
streaming Chat Completions request body, and the context windows of known models.

Prompts and tool results are sent as text (acp_bridge.content.blocks_text): embedded
resources fenced under their URI, the other blocks as short notes. A prompt holding
images, for a model that takes them, is sent as content parts: its text as `text`
parts and each image as an `image_url` part with a `data:` URL (the OpenAI wire format).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from acp_bridge.content import block_text, blocks_text, expand_images, has_images
from session.transcript import Message

SYSTEM_PROMPT = (
    "You are acp-bridge, a coding agent working in the user's project through an editor. "
    "Use the tools to read, list, edit and write files and to run commands; paths are "
    "relative to the session's working directory. Keep answers short and say what you changed."
)


def system_prompt(cwd: str | None) -> str:
    """The system message, naming the session's working directory when there is one: a
    model that must say where a file is, or run a command there, should not have to ask
    (`pwd`) first. The path is the editor's, as given at session/new."""
    return SYSTEM_PROMPT if not cwd else f"{SYSTEM_PROMPT} The session's working directory is {cwd}."

# Context windows (tokens) of models people commonly point this at; the longest prefix
# of the model name wins, after dropping a router prefix such as "openai/".
CONTEXT_WINDOWS: Mapping[str, int] = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o1-mini": 128_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "deepseek-chat": 128_000,  # 64k before DeepSeek-V3.1
    "deepseek-reasoner": 128_000,
}


def context_window(model: str) -> int | None:
    name = model.rsplit("/", 1)[-1].lower()
    best: str | None = None
    for prefix in CONTEXT_WINDOWS:
        if name.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return CONTEXT_WINDOWS[best] if best is not None else None


def request_body(model: str, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]],
                 *, system: str | None = SYSTEM_PROMPT, images: bool = False,
                 reasoning_effort: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": openai_messages(messages, system=system, images=images),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if reasoning_effort is not None:
        body["reasoning_effort"] = reasoning_effort
    if tools:
        body["tools"] = [{"type": "function", "function": {
            "name": t["name"], "description": t.get("description", ""),
            "parameters": t.get("parameters") or {"type": "object", "properties": {}}}} for t in tools]
    return body


def openai_messages(messages: Sequence[Message], *, system: str | None = None,
                    images: bool = False) -> list[dict[str, Any]]:
    """The transcript as Chat Completions messages. Reasoning is not sent back. Every
    assistant tool call is answered before the next message, as the API requires (a
    repaired log guarantees it; a placeholder covers anything else)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    pending: dict[str, None] = {}  # tool-call ids of the last assistant message not yet answered

    def answer_pending() -> None:
        for call_id in pending:
            out.append({"role": "tool", "tool_call_id": call_id,
                        "content": "Error: no result was recorded for this tool call."})
        pending.clear()

    for message in messages:
        if message["role"] == "tool":
            pending.pop(message["callId"], None)
            text = blocks_text(message["content"]) or "(no output)"
            out.append({"role": "tool", "tool_call_id": message["callId"],
                        "content": f"Error: {text}" if message["isError"] else text})
            continue
        answer_pending()
        if message["role"] == "user":
            out.append({"role": "user", "content": user_content(message["content"], images=images)})
            continue
        text = "".join(b["text"] for b in message["content"] if b["type"] == "text")
        calls = [{"id": b["id"], "type": "function",
                  "function": {"name": b["name"], "arguments": _arguments(b["arguments"])}}
                 for b in message["content"] if b["type"] == "tool-call"]
        if not text and not calls:
            continue  # reasoning only: nothing the API takes back
        item: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            item["tool_calls"] = calls
            pending.update((b["id"], None) for b in message["content"] if b["type"] == "tool-call")
        out.append(item)
    answer_pending()
    return out


def user_content(blocks: Sequence[Any], *, images: bool) -> str | list[dict[str, Any]]:
    """A prompt as the API takes it: plain text, or content parts when it holds images
    and the model takes them (images it cannot take are a short note in the text)."""
    if not (images and has_images(blocks)):
        return blocks_text(blocks)
    parts: list[dict[str, Any]] = []
    for block in expand_images(blocks):
        if isinstance(block, Mapping) and block.get("type") == "image":
            url = image_url(block)
            if url is not None:
                parts.append({"type": "image_url", "image_url": {"url": url}})
                continue
        text = block_text(block)
        if text:
            parts.append({"type": "text", "text": text})
    return parts


def image_url(block: Mapping[str, Any]) -> str | None:
    """An ACP image block as the `url` of an `image_url` part: its bytes as a `data:`
    URL, else its `uri` when that is a web address."""
    data, mime = block.get("data"), block.get("mimeType")
    if isinstance(data, str) and data and isinstance(mime, str):
        return f"data:{mime};base64,{data}"
    uri = block.get("uri")
    return uri if isinstance(uri, str) and uri.startswith(("http://", "https://")) else None


def _arguments(text: str) -> str:
    """Arguments as the model produced them, when they are JSON (some servers reject a
    transcript whose arguments do not parse; the tool result already said why)."""
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return "{}"
    return text
