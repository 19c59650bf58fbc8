"""gemini-cli's chats (`~/.gemini/tmp/<project>/chats/session-*.jsonl`), pure
(docs/import.md, "gemini-cli"). The file is a log of a session object: a header record
(`sessionId`, `projectHash`, `startTime`, `kind`; again at each resume), message
records (`{id, timestamp, type, content, ...}`: a message written again under its id
is that message updated, a call's result added), and `{"$set": {...}}` records that set
fields of the session, `messages` the whole history (a resume writes it again: only the
messages not seen yet are taken from it). Each message is read where it first came, as
it was last written; the header records and the `$set`s are kept raw where they came (a
`$set`'s messages as their ids):

- `user`: a prompt (its text and inline images), unless gemini-cli wrote it (a
  `<session_context>` block, or only `functionResponse` parts: the results of calls its
  `gemini` message already holds), kept raw then;
- `gemini`: a step: `thoughts` reasoning, `content` text, `toolCalls` the calls with
  their results, `tokens` the usage (once per message); `model`;
- `info`, `error`, `warning`: kept raw, as any other type (counted).

The Gemini API's parts (text, thought, functionCall, functionResponse, inlineData) are
read here for qwen-code too (acp_bridge.cli.importer.qwen).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import orjson

from acp_bridge.cli.importer.native import Builder, NativeSession, Source, text_blocks
from acp_bridge.cli.importer.records import json_lines, ms, tool_kind, tool_title
from session.events import Usage

AGENT: Final = "gemini"
KEPT: Final = frozenset({"info", "error", "warning"})
_INJECTED: Final = ("<session_context>",)


def looks_like(record: dict[str, Any]) -> bool:
    return ("projectHash" in record and "sessionId" in record) or "$set" in record


def read(lines: Iterable[bytes], file: str) -> NativeSession:
    builder = Builder(AGENT)
    rows = list(json_lines(lines, builder, file))
    final: dict[str, dict[str, Any]] = {}  # each message as last written, by id
    for record in rows:
        if isinstance(record.get("id"), str) and "type" in record:
            final[record["id"]] = record
        for message in _set_messages(record):
            final.setdefault(message["id"], message)
    header: dict[str, Any] = {}
    done: set[str] = set()  # the messages read already
    for record in rows:  # in file order: each message where it first came, as last written
        fresh = [m for m in ([record] if "type" in record and isinstance(record.get("id"), str)
                             else _set_messages(record)) if m["id"] not in done]
        for message in fresh:
            done.add(message["id"])
            _message(builder, final[message["id"]])
        if "projectHash" in record or ("kind" in record and "sessionId" in record):
            header = header or record
            builder.keep(record)
        elif isinstance(record.get("$set"), dict):
            update = record["$set"]
            if isinstance(update.get("sessionId"), str):
                header = {**header, "sessionId": update["sessionId"]}
            if "messages" in update:  # kept as the ids of the messages it set: read above
                update = {**update, "messages": [m["id"] for m in _set_messages(record)]}
            builder.keep({"$set": update})
        elif not (isinstance(record.get("id"), str) and "type" in record):
            builder.unknown("record without an id", record)
    session = builder.finish()
    sid = header.get("sessionId")
    if isinstance(sid, str):
        first = next(iter(final.values()), {})
        session.source = Source(AGENT, None, file, sid, _cwd(first), ms(header.get("startTime")) or 0)
    else:
        session.problems.append(f"{file}: no gemini-cli session id; not imported")
    return session


def _set_messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    update = record.get("$set")
    messages = update.get("messages") if isinstance(update, dict) else None
    return [m for m in messages or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]


def _cwd(first: dict[str, Any]) -> str:
    """The workspace gemini-cli told the model of (its session context), if it did."""
    text = "".join(str(p.get("text", "")) for p in first.get("content") or [] if isinstance(p, dict))
    marker = "**Workspace Directories:**\n  - "
    return text.split(marker, 1)[1].split("\n", 1)[0].strip() if marker in text else ""


def _message(builder: Builder, message: dict[str, Any]) -> None:
    time = ms(message.get("timestamp")) or builder.last_time
    kind = message.get("type")
    content = message.get("content")
    parts = content if isinstance(content, list) else text_blocks(content) if isinstance(content, str) else []
    if kind == "user":
        text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
        blocks = [b for p in parts if isinstance(p, dict) for b in prompt_blocks(p)]
        if not blocks or text.lstrip().startswith(_INJECTED):
            builder.keep(message)
            return
        builder.prompt(time, blocks, native={k: v for k, v in message.items() if k != "content"})
    elif kind == "gemini":
        kept = {k: v for k, v in message.items() if k not in ("content", "thoughts", "toolCalls")}
        builder.step(time, key=message.get("id"), model=message.get("model"), native=kept)
        for thought in message.get("thoughts") or []:
            if isinstance(thought, dict):
                subject, description = thought.get("subject", ""), thought.get("description", "")
                builder.text("reasoning", f"{subject}\n{description}".strip() + "\n")
        for part in parts:
            if isinstance(part, dict):
                model_part(builder, part, time)
        for call in message.get("toolCalls") or []:
            if isinstance(call, dict):
                _tool_call(builder, call, time)
        tokens = message.get("tokens")
        if isinstance(tokens, dict):
            builder.usage(gemini_usage(tokens.get("input"), tokens.get("cached"), tokens.get("output"),
                                       tokens.get("thoughts"), tokens.get("tool")))
    elif kind in KEPT:
        builder.keep(message)
    else:
        builder.unknown(str(kind), message)


def _tool_call(builder: Builder, call: dict[str, Any], time: int) -> None:
    call_id, name, args = str(call.get("id")), str(call.get("name", "tool")), call.get("args", {})
    title = call.get("description") if isinstance(call.get("description"), str) else None
    builder.call(call_id, name, args, title=f"{name}: {title}" if title else tool_title(name, args),
                 kind=tool_kind(name))
    result = call.get("result")
    if result is None and call.get("status") not in ("error", "cancelled"):
        return  # not run yet: the file ends before it (a missing result)
    content = [b for p in result or [] if isinstance(p, dict) for b in response_blocks(p)]
    native = {k: v for k, v in call.items() if k not in ("args", "result")}
    builder.result(ms(call.get("timestamp")) or time, call_id, content or text_blocks(str(call.get("status", ""))),
                   is_error=call.get("status") != "success", native=native)


def model_part(builder: Builder, part: dict[str, Any], time: int) -> None:
    """One part of the model's turn: text, thought or a call (the rest kept raw)."""
    if isinstance(part.get("text"), str):
        builder.text("reasoning" if part.get("thought") else "text", part["text"])
    elif isinstance(part.get("functionCall"), dict):
        call = part["functionCall"]
        name, args = str(call.get("name", "tool")), call.get("args", {})
        builder.call(str(call.get("id") or f"{name}-{time}"), name, args, title=tool_title(name, args),
                     kind=tool_kind(name))
    else:
        builder.keep({"part": part})


def prompt_blocks(part: dict[str, Any]) -> list[Any]:
    """A user part as ACP content: text, an inline image; a function response none."""
    if isinstance(part.get("text"), str):
        return text_blocks(part["text"])
    data = part.get("inlineData")
    if isinstance(data, dict) and str(data.get("mimeType", "")).startswith("image/"):
        return [{"type": "image", "data": data.get("data", ""), "mimeType": data["mimeType"]}]
    return []


def response_blocks(part: dict[str, Any]) -> list[Any]:
    """A functionResponse part as ACP content: its output (or error) text."""
    response = part.get("functionResponse")
    if not isinstance(response, dict):
        return prompt_blocks(part)
    body = response.get("response")
    if isinstance(body, dict) and isinstance(body.get("output"), str):
        return text_blocks(body["output"])
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return text_blocks(body["error"])
    return text_blocks(orjson.dumps(body).decode()) if body is not None else []


def gemini_usage(prompt: Any, cached: Any, output: Any, thoughts: Any, tool: Any = 0) -> Usage:
    """Gemini's counts in ours: the prompt count holds the cached tokens (and the tool
    prompt's are added), the candidates' count leaves the thoughts out (ours holds them)."""

    def count(value: Any) -> int:
        return value if type(value) is int else 0

    out: Usage = {"inputTokens": count(prompt) + count(tool), "outputTokens": count(output) + count(thoughts)}
    if count(cached):
        out["cacheReadTokens"] = count(cached)
    if count(thoughts):
        out["reasoningTokens"] = count(thoughts)
    return out
