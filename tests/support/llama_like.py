"""A model server that enforces a context size the way llama.cpp's `llama-server`
does, for tests/support/sse_server.py's `SSEServer` (as its responder).

Every request is tokenized with a stand-in tokenizer (`tokens_of`: each message framed
by role markers as a chat template frames it, its text at `chars_per_token` characters
a token, the tool specs likewise). A request of `n_ctx` tokens or more is refused as
llama.cpp refuses it: HTTP 400, `{"error": {"code": 400, "message": "request (N tokens)
exceeds the available context size (C tokens), try increasing it", "type":
"exceed_context_size_error", "n_prompt_tokens": N, "n_ctx": C}}`. Otherwise it
streams its answer and stops where the context is full (`finish_reason: "length"`),
as llama.cpp stops generating there; its usage counts the prompt as llama.cpp does,
`prompt_tokens` all of it and `prompt_tokens_details.cached_tokens` the part it had
cached (the messages the previous request began with, its KV cache).

What it answers, read from the last user message: `WRITE N` asks for N tokens of text
(streamed in pieces of PIECE_TOKENS); anything else gets a short answer.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.support.sse_server import Received, Reply, chunk, stream_reply, usage_chunk

WRITE = re.compile(r"WRITE (\d+)")
PIECE_TOKENS = 256
SHORT_ANSWER = "Fine, thanks."
FRAME_TOKENS = 4  # "<start_of_turn>", the role, "\n", "<end_of_turn>"


@dataclass
class LlamaLike:
    n_ctx: int
    chars_per_token: int = 4
    prompts: list[int] = field(default_factory=list)  # prompt tokens of every request, refused ones too
    refused: list[int] = field(default_factory=list)  # the prompt tokens of each refused request
    systems: list[str] = field(default_factory=list)  # the system message of every request
    asked: list[str] = field(default_factory=list)  # the last user text of every request (a summary's instruction)
    _cache: list[bytes] = field(default_factory=list)  # the messages of the last request, as sent
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def text_tokens(self, text: str) -> int:
        return -(-len(text) // self.chars_per_token)

    def tokens_of(self, body: dict[str, Any]) -> tuple[int, list[int]]:
        """The request's tokens, and each message's (the system message's first)."""
        per_message = [FRAME_TOKENS + self.text_tokens(_text_of(m)) for m in body.get("messages", [])]
        tools = self.text_tokens(orjson.dumps(body["tools"]).decode()) if body.get("tools") else 0
        return tools + sum(per_message), per_message

    def __call__(self, request: Received) -> Reply:
        body = request.json
        n_prompt, per_message = self.tokens_of(body)
        messages = [orjson.dumps(m) for m in body.get("messages", [])]
        first = (body.get("messages") or [{}])[0]
        last: dict[str, Any] = next((m for m in reversed(body.get("messages", [])) if m.get("role") == "user"), {})
        with self._lock:
            self.prompts.append(n_prompt)
            self.asked.append(_text_of(last))
            if first.get("role") == "system":
                self.systems.append(str(first.get("content")))
            if n_prompt >= self.n_ctx:
                self.refused.append(n_prompt)
                return _exceeded(n_prompt, self.n_ctx)
            same = 0
            while same < min(len(messages), len(self._cache)) and messages[same] == self._cache[same]:
                same += 1
            self._cache = messages
        tools = n_prompt - sum(per_message)
        cached = tools + sum(per_message[:same]) if same else 0
        asked = WRITE.search(_text_of(last))
        wanted = int(asked.group(1)) if asked else self.text_tokens(SHORT_ANSWER)
        room = self.n_ctx - n_prompt
        written = min(wanted, room)
        pieces = _pieces(written, self.chars_per_token) if asked else [SHORT_ANSWER]
        payloads: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
        payloads += [chunk({"content": piece}) for piece in pieces]
        payloads.append(chunk({}, "length" if wanted > room else "stop"))
        payloads.append(usage_chunk(n_prompt, written, cached=cached))
        return stream_reply(*payloads)


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    calls = orjson.dumps(message["tool_calls"]).decode() if message.get("tool_calls") else ""
    return (content if isinstance(content, str) else "") + calls


def _pieces(tokens: int, chars_per_token: int) -> list[str]:
    """`tokens` tokens of text (words of `chars_per_token` characters, the last one
    with its space), in pieces of PIECE_TOKENS."""
    word = "lore"[:chars_per_token - 1].ljust(chars_per_token - 1, "m") + " "
    return [word * min(PIECE_TOKENS, tokens - at) for at in range(0, tokens, PIECE_TOKENS)]


def _exceeded(n_prompt: int, n_ctx: int) -> Reply:
    error = {"code": 400, "message": f"request ({n_prompt} tokens) exceeds the available context size "
             f"({n_ctx} tokens), try increasing it", "type": "exceed_context_size_error",
             "n_prompt_tokens": n_prompt, "n_ctx": n_ctx}
    return Reply(400, {"Content-Type": "application/json; charset=utf-8"}, [orjson.dumps({"error": error})],
                 chunked=False)
