"""qwen-code's chats (`~/.qwen/projects/<project>/chats/<session>.jsonl`), pure: one
record a line, `{uuid, parentUuid, sessionId, timestamp, type, provenance, cwd, version,
message: {role, parts}}`, the parts the Gemini API's (docs/import.md, "qwen-code").

- `user` from the person (`provenance` `real_user`, or none): a prompt; any other
  user record (qwen-code's own): kept raw;
- `assistant`: a step per record (one model response): its parts (text, thought,
  functionCall), `usageMetadata` the usage, `model`;
- `tool_result`: the results of the calls its `functionResponse` parts name (failed
  when `toolCallResult.status` is not `success`; `toolCallResult` kept beside each);
- `system` (telemetry, snapshots), and any other type (counted): kept raw.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from acp_bridge.cli.importer.gemini import gemini_usage, model_part, prompt_blocks, response_blocks
from acp_bridge.cli.importer.native import Builder, NativeSession, from_first
from acp_bridge.cli.importer.records import json_lines, ms

AGENT: Final = "qwen"
KEPT: Final = frozenset({"system"})


def looks_like(record: dict[str, Any]) -> bool:
    message = record.get("message")
    return "sessionId" in record and "uuid" in record and (
        "provenance" in record or (isinstance(message, dict) and "parts" in message))


def read(lines: Iterable[bytes], file: str) -> NativeSession:
    builder = Builder(AGENT)
    first: dict[str, Any] = {}
    time = 0
    for record in json_lines(lines, builder, file):
        time = ms(record.get("timestamp")) or time
        for key in ("sessionId", "cwd", "version"):
            if key not in first and isinstance(record.get(key), str):
                first[key] = record[key]
        first.setdefault("created", time)
        message = record.get("message")
        parts = [p for p in message.get("parts") or [] if isinstance(p, dict)] if isinstance(message, dict) else []
        kind = record.get("type")
        rest = {k: v for k, v in record.items() if k != "message"}
        if kind == "user":
            blocks = [b for p in parts for b in prompt_blocks(p)]
            if record.get("provenance", "real_user") != "real_user" or not blocks:
                builder.keep(record)
            else:
                builder.prompt(time, blocks, native=rest)
        elif kind == "assistant":
            builder.step(time, key=str(record.get("uuid")), model=record.get("model"), native=rest)
            for part in parts:
                model_part(builder, part, time)
            usage = record.get("usageMetadata")
            if isinstance(usage, dict):
                builder.usage(gemini_usage(usage.get("promptTokenCount"), usage.get("cachedContentTokenCount"),
                                           usage.get("candidatesTokenCount"), usage.get("thoughtsTokenCount"),
                                           usage.get("toolUsePromptTokenCount")))
        elif kind == "tool_result":
            outcome = record.get("toolCallResult")
            status = outcome.get("status") if isinstance(outcome, dict) else None
            for part in parts:
                response = part.get("functionResponse")
                if isinstance(response, dict):
                    builder.result(time, str(response.get("id")), response_blocks(part),
                                   is_error=status not in (None, "success"), native=rest)
        elif kind in KEPT:
            builder.keep(record)
        else:
            builder.unknown(str(kind), record)
    return from_first(builder.finish(), AGENT, "qwen-code", file, first)
