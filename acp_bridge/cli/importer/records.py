"""What every reader needs of native records, pure: the JSON lines of a file, one bad
line a problem and never the end; ISO times as epoch milliseconds; the kind of a tool
by its name."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import orjson

from acp_bridge.cli.importer.native import Builder


def json_lines(lines: Iterable[bytes], builder: Builder, file: str) -> Iterator[dict[str, Any]]:
    """Each line of `lines` that holds a JSON object; any other a problem of the
    builder's (one line each: the file, the line's number, what is wrong with it)."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            torn = "" if line.endswith(b"\n") else " (torn: the file ends inside it)"
            builder.problem(f"{file}:{number}: not JSON{torn}; skipped")
            continue
        if not isinstance(value, dict):
            builder.problem(f"{file}:{number}: not a JSON object; skipped")
            continue
        yield value


def ms(value: Any) -> int | None:
    """An ISO 8601 time (`2026-12-05T03:21:40.469Z`), or epoch seconds or milliseconds,
    as epoch milliseconds; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value if value > 10**11 else value * 1000)
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None  # no zone: no time to trust
    return int(when.timestamp() * 1000)


_KINDS = (
    (("bash", "shell", "exec", "command", "run"), "execute"),
    (("read", "view", "cat"), "read"),
    (("edit", "write", "replace", "patch", "create"), "edit"),
    (("grep", "glob", "search", "find", "ls", "list"), "search"),
    (("fetch", "web"), "fetch"),
    (("think", "todo", "plan"), "think"),
)


def tool_kind(name: str) -> str:
    """ACP's ToolKind of a tool, guessed from its name as agents name them."""
    lowered = name.lower()
    for words, kind in _KINDS:
        if any(word in lowered for word in words):
            return kind
    return "other"


def tool_title(name: str, arguments: Any) -> str:
    """A call's title: its description, command, path or pattern if it has one, else
    the tool's name."""
    if isinstance(arguments, dict):
        for key in ("description", "command", "cmd", "file_path", "path", "absolute_path", "pattern", "url",
                    "query"):
            value = arguments.get(key)
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            if isinstance(value, str) and value.strip():
                return f"{name}: {value.strip().splitlines()[0][:120]}"
    return name
