"""Claude Code's transcripts (`~/.claude/projects/<project>/<session>.jsonl`), pure:
one JSON record a line (docs/import.md, "Claude Code").

- `user` with text: a prompt, unless Claude Code made it (`isMeta`, a compaction's
  summary, a slash command's echo, a subagent's `isSidechain` record): kept raw;
- `user` with `tool_result` blocks: the results of the calls they name
  (`toolUseResult`, Claude Code's own account of the call, kept beside each);
- `assistant`: one record per streamed content block, each repeating the message's
  `usage`: the records of one `message.id` are one step, its usage counted once;
  `thinking` is reasoning, `text` text, `tool_use` a call; other blocks kept raw;
- `summary`: the session's title; the other record types Claude Code writes
  (`queue-operation`, `attachment`, `last-prompt`, `mode`, `system`,
  `file-history-snapshot`, ...) are kept raw; a type not in this list is kept raw too,
  and counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from acp_bridge.cli.importer.native import Builder, NativeSession, from_first, text_blocks
from acp_bridge.cli.importer.records import json_lines, ms, tool_kind, tool_title
from session.events import Usage

AGENT: Final = "claude-code"
# Record types Claude Code writes that have no place in the vocabulary: kept raw.
KEPT: Final = frozenset({"queue-operation", "attachment", "last-prompt", "mode", "system",
                         "file-history-snapshot", "custom-title", "ai-title", "tag", "agent-name",
                         "pr-link", "progress"})
# The beginnings of a user text Claude Code wrote itself (a slash command and its output).
_INJECTED: Final = ("<command-name>", "<command-message>", "<local-command-stdout>", "<local-command-stderr>",
                    "<local-command-caveat>", "Caveat: The messages below were generated", "[Request interrupted")


def looks_like(record: dict[str, Any]) -> bool:
    """Whether a record is one of Claude Code's."""
    return (record.get("type") in ("user", "assistant", "summary", *KEPT)
            and ("sessionId" in record or "leafUuid" in record)
            and "payload" not in record)


def read(lines: Iterable[bytes], file: str) -> NativeSession:
    builder = Builder(AGENT)
    first: dict[str, Any] = {}
    last_time = 0
    for record in json_lines(lines, builder, file):
        time = ms(record.get("timestamp"))
        last_time = time if time is not None else last_time
        for key in ("sessionId", "cwd", "version"):
            if key not in first and isinstance(record.get(key), str):
                first[key] = record[key]
        if "created" not in first and time is not None:
            first["created"] = time
        kind = record.get("type")
        if kind == "user" and not record.get("isSidechain"):
            _user(builder, record, last_time)
        elif kind == "assistant" and not record.get("isSidechain"):
            _assistant(builder, record, last_time)
        elif kind == "summary" and isinstance(record.get("summary"), str):
            builder.session.title = record["summary"]
            builder.keep(record)
        elif kind in KEPT or kind in ("user", "assistant"):
            builder.keep(record)
        else:
            builder.unknown(str(kind), record)
    return from_first(builder.finish(), AGENT, "Claude Code", file, first)


def _user(builder: Builder, record: dict[str, Any], time: int) -> None:
    message = record.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    blocks = text_blocks(content) if isinstance(content, str) else content if isinstance(content, list) else []
    results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
    rest = {k: v for k, v in record.items() if k != "message"}
    if results:
        extra = rest.get("toolUseResult")
        for block in results:
            native = {"block": {k: v for k, v in block.items() if k != "content"}, "record": rest}
            builder.result(time, str(block.get("tool_use_id")), _result_content(block.get("content")),
                           is_error=block.get("is_error") is True, native=native if extra is None else
                           {**native, "toolUseResult": extra})
        return
    text = "".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text")
    if record.get("isMeta") or record.get("isCompactSummary") or text.lstrip().startswith(_INJECTED) or not blocks:
        builder.keep(record)
        return
    builder.prompt(time, [_prompt_block(b) for b in blocks if isinstance(b, dict)], native=rest)


def _prompt_block(block: dict[str, Any]) -> dict[str, Any]:
    """A prompt's block as ACP content: text as it is, an image as ACP's image block."""
    source = block.get("source")
    if block.get("type") == "image" and isinstance(source, dict) and source.get("type") == "base64":
        return {"type": "image", "data": source.get("data", ""), "mimeType": source.get("media_type", "")}
    return block


def _result_content(content: Any) -> list[Any]:
    if isinstance(content, str):
        return text_blocks(content)
    if isinstance(content, list):
        return [_prompt_block(b) for b in content if isinstance(b, dict)]
    return []


def _assistant(builder: Builder, record: dict[str, Any], time: int) -> None:
    message = record.get("message")
    if not isinstance(message, dict):
        builder.keep(record)
        return
    key = message.get("id") if isinstance(message.get("id"), str) else None
    model = message.get("model") if isinstance(message.get("model"), str) else None
    kept = {**record, "message": {k: v for k, v in message.items() if k != "content"}}
    builder.step(time, key=key, model=model if model != "<synthetic>" else None, native=kept)
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            builder.text("text", str(block.get("text", "")))
        elif block.get("type") == "thinking":
            builder.text("reasoning", str(block.get("thinking", "")))
        elif block.get("type") == "tool_use":
            name, arguments = str(block.get("name", "tool")), block.get("input", {})
            builder.call(str(block.get("id")), name, arguments, title=tool_title(name, arguments),
                         kind=tool_kind(name))
        else:
            builder.keep({"block": block, "message": key})
    usage = message.get("usage")
    if isinstance(usage, dict):
        builder.usage(_usage(usage))


def _usage(usage: dict[str, Any]) -> Usage:
    """Anthropic's usage in ours: inputTokens holds the cached tokens too."""

    def count(key: str) -> int:
        value = usage.get(key)
        return value if type(value) is int else 0

    read, written = count("cache_read_input_tokens"), count("cache_creation_input_tokens")
    out: Usage = {"inputTokens": count("input_tokens") + read + written, "outputTokens": count("output_tokens")}
    if read:
        out["cacheReadTokens"] = read
    if written:
        out["cacheWriteTokens"] = written
    return out
