"""The file tools: read_file, write_file, edit_file, list_dir.

Reads and writes go through `ctx.services` (the client's `fs/*` methods or the local
file system); confinement (tools/paths.py) happens first, whichever services run them.
`list_dir` has no ACP counterpart, so it always lists the local directory.

`plan()` validates and describes a call without changing anything; `run()` re-resolves
the path and re-reads the file, since it may have changed while the person was looking
at the permission prompt: if the file is no longer what the diff showed, nothing is
written (`file_changed`), so what is written is always what the person approved.

A file that is not UTF-8 text (tools/base.py `NotTextError`) is never shown, edited or
overwritten: as text it would come back with U+FFFD in place of its bytes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio.to_thread

from acp_bridge.errors import ToolError
from acp_bridge.tools.base import JSON, NotTextError, ToolContext, ToolKind, ToolOutcome, ToolPlan
from acp_bridge.tools.paths import display_path, resolve_in_roots

MAX_READ_BYTES = 256 * 1024
MAX_DIR_ENTRIES = 2000


def check_arguments(
    tool: str, arguments: Mapping[str, JSON], schema: Mapping[str, JSON]
) -> dict[str, Any]:
    """Check `arguments` against the tool's (flat) JSON Schema: unknown names, missing
    required fields, string/integer types and integer bounds. A null optional argument
    counts as absent (models often send them). Raises ToolError `invalid_arguments`."""

    def bad(message: str) -> ToolError:
        return ToolError(f"{tool}: {message}", code="invalid_arguments")

    if not isinstance(arguments, Mapping):
        raise bad("arguments must be a JSON object")
    props: Mapping[str, Mapping[str, JSON]] = schema["properties"]
    for key in arguments:
        if key not in props:
            raise bad(f"unknown argument {key!r} (expected: {', '.join(props)})")
    for key in schema.get("required", ()):
        if arguments.get(key) is None:
            raise bad(f"missing required argument {key!r}")
    out: dict[str, Any] = {}
    for key, value in arguments.items():
        if value is None:
            continue
        spec = props[key]
        if spec["type"] == "string":
            if not isinstance(value, str):
                raise bad(f"argument {key!r} must be a string, got {type(value).__name__}")
        elif spec["type"] == "integer":
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(f"argument {key!r} must be an integer, got {value!r}")
            if "minimum" in spec and value < spec["minimum"]:
                raise bad(f"argument {key!r} must be >= {spec['minimum']}, got {value}")
            if "maximum" in spec and value > spec["maximum"]:
                raise bad(f"argument {key!r} must be <= {spec['maximum']}, got {value}")
        out[key] = value
    return out


def _schema(properties: dict[str, JSON], required: list[str]) -> dict[str, JSON]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_PATH = {
    "type": "string",
    "description": "File path, relative to the working directory or absolute inside the session roots.",
}


async def _read(
    ctx: ToolContext, path: Path, line: int | None = None, limit: int | None = None
) -> str:
    try:
        return await ctx.services.read_text_file(path, line, limit)
    except FileNotFoundError as e:
        raise ToolError(f"{path} does not exist", code="not_found") from e


async def _read_to_change(ctx: ToolContext, path: Path, refusal: str) -> str:
    try:
        return await _read(ctx, path)
    except NotTextError as e:
        raise ToolError(e.refusal(refusal), code=e.code) from e


async def _write(ctx: ToolContext, path: Path, content: str) -> None:
    try:
        await ctx.services.write_text_file(path, content)
    except OSError as e:  # the local write is atomic: the file is as it was
        raise ToolError(f"cannot write {path}: {e.strerror or e}; it was not changed",
                        code="io_error") from e


def _call_key(tool: str, args: Mapping[str, JSON]) -> str:  # args: checked, so str and int
    return f"{tool}:{sorted(args.items())!r}"


def _hold_to_shown(ctx: ToolContext, key: str, path: Path, old: str | None, new: str) -> None:
    """In run(): refuse if the edit is not the one plan() showed (the file changed in
    between), rather than write something the person did not see."""
    shown = ctx.shown.get(key)
    if shown is not None and shown != (old, new):
        raise ToolError(f"{path} changed after the change was shown for permission; nothing "
                        "was written. Read it again and retry.", code="file_changed")


def _diff(path: Path, old: str | None, new: str) -> dict[str, JSON]:
    return {"type": "diff", "path": str(path), "oldText": old, "newText": new}


def _lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def cap_read(text: str, first_line: int) -> str:
    """Cap a read at MAX_READ_BYTES, at a line end when one is near, with a note that
    tells the model how to read on."""
    data = text.encode("utf-8")
    if len(data) <= MAX_READ_BYTES:
        return text
    cut = data[:MAX_READ_BYTES]
    newline = cut.rfind(b"\n")
    if newline >= MAX_READ_BYTES // 2:
        cut = cut[: newline + 1]
    head = cut.decode("utf-8", "ignore")  # "ignore" drops a character split by the cut
    rest = len(data) - len(head.encode("utf-8"))
    next_line = first_line + head.count("\n")
    sep = "" if head.endswith("\n") else "\n"
    return f"{head}{sep}[truncated: {rest} more bytes; use line/limit (e.g. line={next_line}) to read on]"


class ReadFile:
    name = "read_file"
    kind: ToolKind = "read"
    description = (
        "Read a UTF-8 text file; optionally start at a 1-based line and read at most "
        "`limit` lines (output is capped at 256 KiB)."
    )
    parameters: Mapping[str, JSON] = _schema(
        {
            "path": _PATH,
            "line": {
                "type": "integer",
                "minimum": 1,
                "description": "First line to read (1-based).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "Maximum number of lines to read.",
            },
        },
        ["path"],
    )

    def _resolve(
        self, arguments: Mapping[str, JSON], ctx: ToolContext
    ) -> tuple[dict[str, Any], Path]:
        args = check_arguments(self.name, arguments, self.parameters)
        return args, resolve_in_roots(args["path"], ctx, must_exist=True, for_write=False)

    async def plan(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolPlan:
        args, path = self._resolve(arguments, ctx)
        location: dict[str, JSON] = {"path": str(path)}
        if "line" in args:
            location["line"] = args["line"]
        return ToolPlan(f"Read {display_path(path, ctx)}", self.kind, [location])

    async def run(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolOutcome:
        args, path = self._resolve(arguments, ctx)
        line, limit = args.get("line"), args.get("limit")
        text = await _read(ctx, path, line, limit)
        if not text and line is not None and line > 1:
            return ToolOutcome.text(f"[no lines from line {line}: {path} is shorter]")
        return ToolOutcome.text(cap_read(text, line or 1))


class WriteFile:
    name = "write_file"
    kind: ToolKind = "edit"
    description = (
        "Create a text file or replace its whole content; its directory must already exist."
    )
    parameters: Mapping[str, JSON] = _schema(
        {
            "path": _PATH,
            "content": {"type": "string", "description": "The complete new content of the file."},
        },
        ["path", "content"],
    )

    async def _prepare(
        self, arguments: Mapping[str, JSON], ctx: ToolContext
    ) -> tuple[str, Path, str | None, str]:
        args = check_arguments(self.name, arguments, self.parameters)
        path = resolve_in_roots(args["path"], ctx, must_exist=False, for_write=True)
        old = await _read_to_change(ctx, path, "refusing to overwrite it") if path.exists() else None
        return _call_key(self.name, args), path, old, args["content"]

    async def plan(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolPlan:
        key, path, old, new = await self._prepare(arguments, ctx)
        ctx.shown[key] = (old, new)
        return ToolPlan(
            f"Write {display_path(path, ctx)}",
            self.kind,
            [{"path": str(path)}],
            [_diff(path, old, new)],
        )

    async def run(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolOutcome:
        key, path, old, new = await self._prepare(arguments, ctx)
        _hold_to_shown(ctx, key, path, old, new)
        await _write(ctx, path, new)
        verb = "Created" if old is None else "Wrote"
        size = f"{_lines(new)} lines, {len(new.encode('utf-8'))} bytes"
        return ToolOutcome.text(f"{verb} {path} ({size})", display=[_diff(path, old, new)])


def _find_all(text: str, needle: str) -> list[int]:
    # Overlapping occurrences count: "aa" in "aaa" is ambiguous.
    found: list[int] = []
    i = text.find(needle)
    while i != -1:
        found.append(i)
        i = text.find(needle, i + 1)
    return found


def _crlf_only(text: str) -> bool:
    """Every line of `text` ends in CRLF (and there is at least one)."""
    return "\r\n" in text and text.count("\n") == text.count("\r\n")


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _no_match_hint(text: str, old: str) -> str:
    stripped = [s.strip() for s in old.strip().splitlines() if s.strip()]
    if not stripped:
        return ""
    lines = [s.strip() for s in text.splitlines()]
    n = len(stripped)
    for i in range(len(lines) - n + 1):
        if lines[i : i + n] == stripped:
            return f" Text matching it up to whitespace/indentation starts at line {i + 1}."
    return ""


class EditFile:
    name = "edit_file"
    kind: ToolKind = "edit"
    description = (
        "Replace one exact occurrence of `old_text` in a file with `new_text`; "
        "`old_text` must match exactly once, including whitespace."
    )
    parameters: Mapping[str, JSON] = _schema(
        {
            "path": _PATH,
            "old_text": {
                "type": "string",
                "description": "Exact text to replace; must occur exactly once in the file.",
            },
            "new_text": {"type": "string", "description": "Replacement text."},
        },
        ["path", "old_text", "new_text"],
    )

    async def _prepare(
        self, arguments: Mapping[str, JSON], ctx: ToolContext
    ) -> tuple[str, Path, str, str, int]:
        args = check_arguments(self.name, arguments, self.parameters)
        old_text: str = args["old_text"]
        new_text: str = args["new_text"]
        if not old_text:
            raise ToolError(
                "edit_file: 'old_text' must not be empty (use write_file to create or replace a file)",
                code="invalid_arguments",
            )
        path = resolve_in_roots(args["path"], ctx, must_exist=True, for_write=True)
        text = await _read_to_change(ctx, path, "refusing to edit it")
        found = _find_all(text, old_text)
        if not found and "\r\n" in text and "\r" not in old_text:
            # The model usually writes "\n"; match a CRLF file in its own line endings.
            old_text, new_text = old_text.replace("\n", "\r\n"), new_text.replace("\n", "\r\n")
            found = _find_all(text, old_text)
        elif _crlf_only(text) and "\r" not in new_text:
            # New lines in a CRLF file end in CRLF too, not in a mix of the two.
            new_text = new_text.replace("\n", "\r\n")
        if not found:
            raise ToolError(
                f"old_text was not found in {path}. Read the file again and copy the text "
                f"exactly, including whitespace and indentation.{_no_match_hint(text, old_text)}",
                code="no_match",
            )
        if len(found) > 1:
            where = ", ".join(str(_line_of(text, i)) for i in found[:10])
            raise ToolError(
                f"old_text occurs {len(found)} times in {path} (at lines {where}); include "
                "more surrounding lines so that it matches exactly once",
                code="ambiguous_match",
            )
        start = found[0]
        new = text[:start] + new_text + text[start + len(old_text) :]
        return _call_key(self.name, args), path, text, new, _line_of(text, start)

    async def plan(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolPlan:
        key, path, old, new, line = await self._prepare(arguments, ctx)
        ctx.shown[key] = (old, new)
        return ToolPlan(
            f"Edit {display_path(path, ctx)}",
            self.kind,
            [{"path": str(path), "line": line}],
            [_diff(path, old, new)],
        )

    async def run(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolOutcome:
        key, path, old, new, line = await self._prepare(arguments, ctx)
        _hold_to_shown(ctx, key, path, old, new)
        await _write(ctx, path, new)
        return ToolOutcome.text(f"Edited {path} at line {line}", display=[_diff(path, old, new)])


def _list(path: Path) -> tuple[list[str], int]:
    names: list[str] = []
    with os.scandir(path) as entries:
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # follows symlinks: a link to a directory ends in "/"
            except OSError:
                is_dir = False
            names.append(entry.name + "/" if is_dir else entry.name)
    names.sort()
    return names[:MAX_DIR_ENTRIES], max(len(names) - MAX_DIR_ENTRIES, 0)


class ListDir:
    name = "list_dir"
    kind: ToolKind = "read"
    description = (
        "List a directory's entries, sorted by name, with directories marked by a trailing '/'."
    )
    parameters: Mapping[str, JSON] = _schema(
        {
            "path": {
                **_PATH,
                "description": "Directory path, relative to the working directory ('.' for it) or absolute inside the session roots.",
            }
        },
        ["path"],
    )

    def _resolve(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> Path:
        args = check_arguments(self.name, arguments, self.parameters)
        return resolve_in_roots(args["path"], ctx, must_exist=True, for_write=False, kind="dir")

    async def plan(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolPlan:
        path = self._resolve(arguments, ctx)
        shown = display_path(path, ctx).rstrip("/") + "/"
        return ToolPlan(f"List {shown}", self.kind, [{"path": str(path)}])

    async def run(self, arguments: Mapping[str, JSON], ctx: ToolContext) -> ToolOutcome:
        path = self._resolve(arguments, ctx)
        try:
            names, more = await anyio.to_thread.run_sync(_list, path)
        except OSError as e:
            raise ToolError(f"cannot list {path}: {e.strerror}", code="io_error") from e
        if not names:
            return ToolOutcome.text(f"[{path} is empty]")
        text = "\n".join(names)
        if more:
            text += f"\n[... {more} more entries not shown]"
        return ToolOutcome.text(text)
