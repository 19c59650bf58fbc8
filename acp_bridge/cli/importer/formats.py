"""Which reader reads a native file: by `--from`, else by its first records. Pure."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

import orjson

import acp_bridge.cli.importer.claude_code as claude_code
import acp_bridge.cli.importer.codex as codex
import acp_bridge.cli.importer.gemini as gemini
import acp_bridge.cli.importer.qwen as qwen
from acp_bridge.cli.importer.native import NativeSession

Reader = Callable[[Iterable[bytes], str], NativeSession]

READERS: Final[dict[str, Reader]] = {
    claude_code.AGENT: claude_code.read,
    codex.AGENT: codex.read,
    gemini.AGENT: gemini.read,
    qwen.AGENT: qwen.read,
}
# In this order: a qwen-code record would pass for Claude Code's but for its parts.
_LOOKS: Final[dict[str, Callable[[dict[str, Any]], bool]]] = {
    qwen.AGENT: qwen.looks_like,
    gemini.AGENT: gemini.looks_like,
    codex.AGENT: codex.looks_like,
    claude_code.AGENT: claude_code.looks_like,
}
OPENCODE: Final = "opencode"  # a database, not lines: acp_bridge.cli.importer.opencode_db
FORMATS: Final = (*READERS, OPENCODE)
SUFFIXES: Final = (".jsonl",)  # what a folder is searched for, with these names:
NAMES: Final = ("opencode.db",)


def detect(head: list[bytes]) -> str | None:
    """The format of a file whose first lines are `head`: the first of its JSON records
    a reader recognises decides; None when none does."""
    for line in head:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        for name, looks in _LOOKS.items():
            if looks(record):
                return name
    return None
