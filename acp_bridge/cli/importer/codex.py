"""codex's rollouts (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`), pure: one
`{timestamp, type, payload}` record a line (docs/import.md, "codex").

- `session_meta`: the session's id, cwd and codex's version (the rest kept raw);
- `response_item`s, what the model saw and said: a `user` message is a prompt unless
  codex wrote it (its provenance is not the user's, or it is one of codex's tagged
  blocks: `<environment_context>`, `<user_instructions>`, ...), kept raw then;
  `developer` and `system` messages are kept raw; an `assistant` message's text,
  `reasoning` (its summary and content), `function_call`, `custom_tool_call` and
  `local_shell_call` are a step, which the next prompt or tool output closes; a
  `*_output` is the result of the call it names;
- `token_usage_record`: the usage of the step it follows, once per model response
  (`event_msg` `token_count`, which repeats totals, is the usage only in a file that
  has no `token_usage_record`);
- `turn_context`: the model of the steps that follow; kept raw, as every `event_msg`,
  `world_state` and `compacted` record; any other type kept raw too, and counted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

import orjson

from acp_bridge.cli.importer.native import Builder, NativeSession, Source, text_blocks
from acp_bridge.cli.importer.records import json_lines, ms, tool_kind, tool_title
from session.events import Usage

AGENT: Final = "codex"
KEPT: Final = frozenset({"event_msg", "world_state", "compacted", "turn_context"})
_CALLS: Final = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_OUTPUTS: Final = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})
_TAGGED = re.compile(r"\s*<[a-z_][a-z_ ]*>")  # codex's own blocks: <environment_context>, ...
_EXIT = re.compile(r"(?:Process exited with code|Exit code:?) (-?\d+)")


def looks_like(record: dict[str, Any]) -> bool:
    return isinstance(record.get("payload"), dict) and record.get("type") in ("session_meta", "response_item",
                                                                               "event_msg", "turn_context")


class _Reader:
    def __init__(self, file: str) -> None:
        self.builder = Builder(AGENT)
        self.file = file
        self.meta: dict[str, Any] = {}
        self.model: str | None = None
        self.in_step = False
        self.usage_records = False  # the file has token_usage_records: token_count is not usage
        self.step_usage = False
        self.steps = 0  # the steps opened: each one's key

    def record(self, record: dict[str, Any], time: int) -> None:
        kind, payload = record.get("type"), record.get("payload")
        if not isinstance(payload, dict):
            self.builder.unknown(str(kind), record)
            return
        if kind == "session_meta":
            self.meta = payload
            self.builder.keep(record)
        elif kind == "response_item":
            self.item(payload, time, record)
        elif kind == "token_usage_record":
            self.usage_records = True
            usage = payload.get("usage")
            if isinstance(usage, dict) and self.in_step:
                self.builder.usage(_usage(usage))
                self.step_usage = True
            else:
                self.builder.keep(record)
            self.in_step = False
        elif kind in KEPT:
            if kind == "turn_context" and isinstance(payload.get("model"), str):
                self.model = payload["model"]
            info = payload.get("info")
            if (kind == "event_msg" and payload.get("type") == "token_count" and not self.usage_records
                    and self.in_step and not self.step_usage and isinstance(info, dict)
                    and isinstance(info.get("last_token_usage"), dict)):
                self.builder.usage(_usage(info["last_token_usage"]))
                self.step_usage = True
            self.builder.keep(record)
        else:
            self.builder.unknown(str(kind), record)

    def item(self, item: dict[str, Any], time: int, record: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "message" and item.get("role") == "user":
            blocks = [b for b in item.get("content") or [] if isinstance(b, dict)]
            if _is_prompt(item, blocks):
                self.in_step = False
                native = {k: v for k, v in record.items() if k != "payload"}
                native["payload"] = {k: v for k, v in item.items() if k != "content"}
                self.builder.prompt(time, [_block(b) for b in blocks], native=native)
            else:
                self.builder.keep(record)
        elif kind == "message" and item.get("role") == "assistant":
            self.open(time, item)
            for block in item.get("content") or []:
                if isinstance(block, dict) and isinstance(block.get("text"), str):
                    self.builder.text("text", block["text"])
        elif kind == "reasoning":
            self.open(time, item)
            parts = [*(item.get("summary") or []), *(item.get("content") or [])]
            text = "\n\n".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
            self.builder.text("reasoning", text)
        elif kind in _CALLS:
            self.open(time, item)
            name, arguments = _call(item)
            self.builder.call(str(item.get("call_id") or item.get("id")), name, arguments,
                              title=tool_title(name, arguments), kind=tool_kind(name))
        elif kind in _OUTPUTS:
            self.in_step = False
            content, failed = _output(item.get("output"))
            self.builder.result(time, str(item.get("call_id")), content, is_error=failed,
                                native={k: v for k, v in item.items() if k != "output"})
        else:
            self.builder.keep(record)

    def open(self, time: int, item: dict[str, Any]) -> None:
        """The step this item is part of: the open one, else a new one."""
        native = {k: v for k, v in item.items() if k not in ("content", "summary", "arguments", "input")}
        if not self.in_step:
            self.steps += 1
            self.in_step, self.step_usage = True, False
        self.builder.step(time, key=str(self.steps), model=self.model, native=native)


def read(lines: Iterable[bytes], file: str) -> NativeSession:
    reader = _Reader(file)
    last = 0
    for record in json_lines(lines, reader.builder, file):
        time = ms(record.get("timestamp"))
        last = time if time is not None else last
        reader.record(record, last)
    session = reader.builder.finish()
    meta = reader.meta
    sid = meta.get("id") or meta.get("session_id")
    if isinstance(sid, str):
        created = ms(meta.get("timestamp")) or 0
        version = meta.get("cli_version") if isinstance(meta.get("cli_version"), str) else None
        session.source = Source(AGENT, version, file, sid, str(meta.get("cwd") or ""), created)
    else:
        session.problems.append(f"{file}: no codex session_meta with an id; not imported")
    return session


def _is_prompt(item: dict[str, Any], blocks: list[dict[str, Any]]) -> bool:
    meta = item.get("internal_chat_message_metadata_passthrough")
    kinds = meta.get("content_item_metadata") if isinstance(meta, dict) else None
    if isinstance(kinds, list) and kinds:
        return any(isinstance(k, dict) and isinstance(k.get("provenance"), dict)
                   and k["provenance"].get("type") == "user" for k in kinds)
    text = "".join(str(b.get("text", "")) for b in blocks)
    return bool(blocks) and _TAGGED.match(text) is None


def _block(block: dict[str, Any]) -> dict[str, Any]:
    if block.get("type") in ("input_text", "output_text") and isinstance(block.get("text"), str):
        return {"type": "text", "text": block["text"]}
    url = block.get("image_url")
    if block.get("type") == "input_image" and isinstance(url, str) and url.startswith("data:"):
        mime, _, data = url[5:].partition(";base64,")
        return {"type": "image", "mimeType": mime, "data": data}
    return block


def _call(item: dict[str, Any]) -> tuple[str, Any]:
    if item.get("type") == "local_shell_call":
        action = item.get("action")
        return "local_shell", action if isinstance(action, dict) else {}
    name = str(item.get("name") or "tool")
    raw = item.get("arguments", item.get("input"))
    if isinstance(raw, str) and item.get("type") == "function_call":
        try:
            return name, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return name, raw
    return name, raw if raw is not None else {}


def _output(output: Any) -> tuple[list[Any], bool]:
    """A call's output as ACP content, and whether it failed (a `success` false, or a
    command's non-zero exit code, as codex writes them)."""
    if isinstance(output, dict):
        failed = output.get("success") is False
        output = output.get("content", output.get("output", ""))
    else:
        failed = False
    if isinstance(output, list):
        return [_block(b) for b in output if isinstance(b, dict)], failed
    text = output if isinstance(output, str) else orjson.dumps(output).decode()
    code = _EXIT.search(text)
    return text_blocks(text), failed or (code is not None and code.group(1) != "0")


def _usage(usage: dict[str, Any]) -> Usage:
    def count(key: str) -> int:
        value = usage.get(key)
        return value if type(value) is int else 0

    out: Usage = {"inputTokens": count("input_tokens"), "outputTokens": count("output_tokens")}
    if count("cached_input_tokens"):
        out["cacheReadTokens"] = count("cached_input_tokens")
    if count("cache_write_input_tokens"):
        out["cacheWriteTokens"] = count("cache_write_input_tokens")
    if count("reasoning_output_tokens"):
        out["reasoningTokens"] = count("reasoning_output_tokens")
    return out
