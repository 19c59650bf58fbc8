"""opencode's sessions, pure: the rows of its database (`~/.local/share/opencode/
opencode.db`, opencode 1.x: tables `session`, `message`, `part`, each row's `data` its
JSON) as one `NativeSession` per session (docs/import.md, "opencode").
`opencode_db.py` reads the rows.

- a `user` message: a prompt (its `text` parts that are not `synthetic`, its image
  `file` parts); its other parts kept raw;
- an `assistant` message: a step: `reasoning` parts reasoning, `text` parts text,
  `tool` parts a call and its result (`state.status` `completed`: its output;
  `error`: failed, its error), its `tokens` the usage once; `step-start`,
  `step-finish`, `snapshot`, `patch`, `agent`, `file` parts kept raw on it, any other
  part type too (counted);
- the session row: id, directory (cwd), title, opencode's version, created.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from acp_bridge.cli.importer.native import Builder, NativeSession, Source, text_blocks
from acp_bridge.cli.importer.records import tool_kind, tool_title
from session.events import Usage

AGENT: Final = "opencode"
KEPT_PARTS: Final = frozenset({"step-start", "step-finish", "snapshot", "patch", "agent", "file", "subtask",
                               "retry", "compaction"})

Row = dict[str, Any]
"""A row: its columns, `data` parsed (a JSON object; a row whose data is not one is
skipped as a problem)."""


def read_session(session: Row, messages: list[Row], parts: list[Row], file: str) -> NativeSession:
    """One session from its row, its message rows and their part rows (any order)."""
    builder = Builder(AGENT)
    by_message: dict[str, list[Row]] = {}
    for part in sorted(parts, key=lambda p: (p.get("time_created") or 0, str(p.get("id")))):
        by_message.setdefault(str(part.get("message_id")), []).append(part)
    for message in sorted(messages, key=lambda m: (m.get("time_created") or 0, str(m.get("id")))):
        _message(builder, message, by_message.get(str(message.get("id")), []))
    native = builder.finish()
    info = {k: v for k, v in session.items() if k not in ("id",)}
    if native.turns:
        time, (kind, data) = native.turns[0].items[0]
        kept = data.get("native")
        native.turns[0].items[0] = (time, (kind, {**data, "native": [{"session": info},
                                                                      *(kept if isinstance(kept, list) else [])]}))
    version = session.get("version") if isinstance(session.get("version"), str) else None
    native.source = Source(AGENT, version, file, str(session.get("id")), str(session.get("directory") or ""),
                           int(session.get("time_created") or 0))
    title = session.get("title")
    native.title = title if isinstance(title, str) and title else None
    return native


def _message(builder: Builder, message: Row, parts: list[Row]) -> None:
    data = _data(message)
    time = int(message.get("time_created") or 0)
    kept = {"message": {k: v for k, v in message.items() if k != "data"}, "data": data}
    role = data.get("role")
    if role == "user":
        blocks: list[Any] = []
        for part in parts:
            body = _data(part)
            if body.get("type") == "text" and not body.get("synthetic") and isinstance(body.get("text"), str):
                blocks += text_blocks(body["text"])
            elif body.get("type") == "file" and str(body.get("mime", "")).startswith("image/") and \
                    str(body.get("url", "")).startswith("data:"):
                blocks.append({"type": "image", "mimeType": body["mime"],
                               "data": str(body["url"]).partition(";base64,")[2]})
            else:
                builder.keep({"part": part})
        if blocks:
            builder.prompt(time, blocks, native=kept)
        else:
            builder.keep(kept)
        return
    if role != "assistant":
        builder.unknown(f"message {role}", kept)
        return
    model = data.get("modelID") if isinstance(data.get("modelID"), str) else None
    builder.step(time, key=str(message.get("id")), model=model, native=kept)
    for part in parts:
        body = _data(part)
        kind = body.get("type")
        if kind == "text" and isinstance(body.get("text"), str):
            builder.text("text", body["text"])
        elif kind == "reasoning" and isinstance(body.get("text"), str):
            builder.text("reasoning", body["text"])
        elif kind == "tool":
            _tool(builder, part, body, time)
        elif kind in KEPT_PARTS:
            builder.keep({"part": part})
        else:
            builder.unknown(f"part {kind}", {"part": part})
    tokens = data.get("tokens")
    if isinstance(tokens, dict):
        builder.usage(_usage(tokens))


def _data(row: Row) -> dict[str, Any]:
    data = row.get("data")
    return data if isinstance(data, dict) else {}


def _tool(builder: Builder, part: Row, body: dict[str, Any], time: int) -> None:
    given = body.get("state")
    state: dict[str, Any] = given if isinstance(given, dict) else {}
    name, arguments = str(body.get("tool", "tool")), state.get("input", {})
    title = state.get("title") if isinstance(state.get("title"), str) and state.get("title") else None
    call_id = str(body.get("callID") or part.get("id"))
    builder.call(call_id, name, arguments, title=f"{name}: {title}" if title else tool_title(name, arguments),
                 kind=tool_kind(name))
    status = state.get("status")
    if status not in ("completed", "error"):
        return  # pending or running when the database was read: no result
    times = state.get("time")
    ended = times.get("end") if isinstance(times, dict) else None
    output = state.get("output") if status == "completed" else state.get("error")
    text = output if isinstance(output, str) else orjson.dumps(output).decode()
    native = {"part": {k: v for k, v in part.items() if k != "data"},
              "state": {k: v for k, v in state.items() if k not in ("input", "output")}}
    builder.result(int(ended) if type(ended) is int else time, call_id, text_blocks(text),
                   is_error=status == "error", native=native)


def _usage(tokens: dict[str, Any]) -> Usage:
    """opencode's counts in ours: its `input` leaves the cached tokens out and its
    `output` the reasoning (ours holds both)."""

    def count(value: Any) -> int:
        return value if type(value) is int else 0

    given = tokens.get("cache")
    cache: dict[str, Any] = given if isinstance(given, dict) else {}
    read, written, reasoning = count(cache.get("read")), count(cache.get("write")), count(tokens.get("reasoning"))
    out: Usage = {"inputTokens": count(tokens.get("input")) + read + written,
                  "outputTokens": count(tokens.get("output")) + reasoning}
    if read:
        out["cacheReadTokens"] = read
    if written:
        out["cacheWriteTokens"] = written
    if reasoning:
        out["reasoningTokens"] = reasoning
    return out
