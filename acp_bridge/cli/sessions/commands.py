"""The `sessions list`, `show` and `export` commands and their renderings."""

from __future__ import annotations

import argparse
import os
import sys

from acp_bridge.cli.sessions.main import (
    EXIT_OK,
    SHOW_ARG_CHARS,
    _write,
)
from acp_bridge.cli.sessions.store import (
    _Source,
)
from acp_bridge.cli.sessions.view import (
    _blocks_text,
    _check,
    _clean,
    _cut,
    _diff_summary,
    _diffs,
    _head,
    _indent,
    _iso,
    _json_text,
    _local,
    _notes,
    _one_line,
    _permission_text,
    _result_mark,
    _Step,
    _tokens,
    _tokens_json,
    _Tool,
    _Turn,
    _turn_info,
    _unified,
    _View,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any





# --- list -----------------------------------------------------------------------------------


class _Row:
    """One `list` entry: a readable session (`view`), or a damaged one (`damaged`, with
    what its header still says)."""

    __slots__ = ("damaged", "header", "id", "title", "updated", "view")

    def __init__(self, sid: str, header: dict[str, Any] | None, updated: int | None,
                 title: str | None, view: _View | None = None, damaged: str | None = None) -> None:
        self.id = sid
        self.header = header or {}
        self.updated = updated
        self.title = title
        self.view = view
        self.damaged = damaged


def _cmd_list(source: _Source, args: argparse.Namespace) -> int:
    from session import SessionError

    cwd_filter = getattr(args, "cwd", None)
    wanted: set[str] | None = None
    if cwd_filter:
        wanted = {os.path.abspath(cwd_filter), os.path.realpath(cwd_filter)}
    rows: list[_Row] = []
    for sid in source.ids():
        try:
            stored = source.summary(sid)  # one streamed pass: the last turn is kept
        except (SessionError, OSError) as exc:
            header, updated, title = source.peek(sid)
            message = exc.message if isinstance(exc, SessionError) else f"cannot read: {exc}"
            rows.append(_Row(sid, header, updated, title, damaged=message))
        else:
            view = _View(stored, source.owner(sid))
            rows.append(_Row(sid, dict(stored.header), stored.updated, stored.title, view))
    if wanted is not None:
        rows = [r for r in rows if r.header.get("cwd") in wanted]
    rows.sort(key=lambda r: (-(r.updated or 0), r.id))
    limit = getattr(args, "limit", None)
    if limit is not None and limit >= 0:
        rows = rows[:limit]
    if getattr(args, "json", False):
        import orjson

        _write(orjson.dumps([_list_json(r) for r in rows], option=orjson.OPT_INDENT_2).decode()
               + "\n")
        return EXIT_OK
    if not rows:
        where = f"{source.root} ({source.name} backend)"
        if cwd_filter:
            _write(f"No sessions for {os.path.abspath(cwd_filter)} in {where}.\n")
        else:
            _write(f"No sessions in {where}.\n")
        return EXIT_OK
    _write(_list_table(rows))
    return EXIT_OK


def _list_json(row: _Row) -> dict[str, Any]:
    header = row.header
    out: dict[str, Any] = {
        "id": row.id,
        "title": row.title,
        "cwd": header.get("cwd"),
        "createdAt": header.get("createdAt"),
        "updatedAt": row.updated,
        "updated": None if row.updated is None else _iso(row.updated),
    }
    if header.get("additionalDirectories"):
        out["additionalDirectories"] = header["additionalDirectories"]
    view = row.view
    if view is None:
        out.update({"status": "damaged", "error": row.damaged})
        return out
    status, text = view.status()
    last = view.last
    out.update({
        "turns": view.turn_count,
        "status": status,
        "statusText": text,
        "lastTurn": None if last is None else {
            "turn": last.number,
            "reason": last.reason,
            "onDisk": last.end_on_disk if last.reason is not None else True,
        },
        "tokens": _tokens_json(view.usage),
        "live": view.owner == "live",
    })
    if view.owner == "live":
        out["ownerPid"] = view.owner_pid
    return out


def _short_path(path: str) -> str:
    home = os.path.expanduser("~")
    if home not in ("", "/") and (path == home or path.startswith(home + os.sep)):
        path = "~" + path[len(home):]
    return path if len(path) <= 40 else "…" + path[-39:]


def _list_table(rows: list[_Row]) -> str:
    table = [("ID", "UPDATED", "TURNS", "LAST TURN", "TOKENS IN/OUT", "CWD", "TITLE")]
    for row in rows:
        view = row.view
        updated = "?" if row.updated is None else _local(row.updated, seconds=False)
        cwd = _short_path(_one_line(str(row.header.get("cwd", ""))))
        title = _cut(_one_line(row.title or ""), 60)
        if view is None:
            table.append((row.id, updated, "?", "damaged", "", cwd, title))
            continue
        usage = view.usage
        tokens = f"{usage.get('inputTokens', 0):,}/{usage.get('outputTokens', 0):,}"
        table.append((row.id, updated, str(view.turn_count), _cut(view.status()[1], 40),
                      tokens, cwd, title))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    right = {2, 4}
    lines = []
    for r in table:
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"


# --- show -----------------------------------------------------------------------------------


def _load_view(source: _Source, sid: str) -> _View:
    stored = source.read(sid)
    _check(stored)
    return _View(stored, source.owner(sid))


def _cmd_show(source: _Source, sid: str, *, full: bool) -> int:
    _write(_render_text(_load_view(source, sid), source, full=full))
    return EXIT_OK


def _render_text(view: _View, source: _Source, *, full: bool = False) -> str:
    stored = view.stored
    header = stored.header
    out = [f"Session {stored.id}"]
    fields = [
        ("title", _one_line(stored.title) if stored.title else "(untitled)"),
        ("cwd", _one_line(str(header.get("cwd", "")))),
    ]
    if header.get("additionalDirectories"):
        fields.append(("dirs", ", ".join(_one_line(str(d)) for d in header["additionalDirectories"])))
    fields += [
        ("created", _local(header.get("createdAt"))),
        ("updated", _local(stored.updated)),
        ("store", f"{stored.where} ({source.name})"),
    ]
    if view.owner == "live":
        fields.append(("owner", f"process {view.owner_pid} (live: an agent has it open)"))
    last = view.last
    turns = str(len(view.turns))
    if last is not None:
        turns += f" (last: {view.status()[1]})"
    fields += [("turns", turns), ("tokens", _tokens(view.usage))]
    out += [f"  {name:<8} {value}" for name, value in fields]
    out += [f"  note: {note}" for note in _notes(view)]
    if not view.turns:
        out += ["", "No turns yet."]
    for turn in view.turns:
        out += ["", f"Turn {turn.number} — {view.turn_status(turn)}", f"  {_turn_info(turn)}"]
        out += ["", "  User:"]
        out += _indent(_blocks_text(turn.prompt).split("\n"), "    ")
        for step in turn.steps:
            label = f"  Step {step.number}"
            if step.usage:
                label += f" · tokens {_tokens(step.usage)}"
            out += ["", label]
            out += _step_text(step, turn, full)
        out.append("")
        if turn.reason is not None:
            end = f"  End: {view.turn_status(turn)}"
        else:
            end = "  (the turn is still running; shown as far as it is on disk)"
        out.append(end + (f" · tokens {_tokens(turn.usage)}" if turn.usage else ""))
    out += ["", f"Total tokens: {_tokens(view.usage)}"]
    return "\n".join(out) + "\n"


def _step_text(step: _Step, turn: _Turn, full: bool) -> list[str]:
    out: list[str] = []
    partial = " (partial: streamed, cut short)" if step.partial else ""
    reasoning = step.shown_reasoning()
    if reasoning:
        out.append(f"    Thinking{partial}:")
        out += _indent(_clean(reasoning).split("\n"), "      | ")
    text = step.shown_text()
    if text:
        out.append(f"    Assistant{partial}:")
        out += _indent(_clean(text).split("\n"), "      ")
    for tool in step.tools:
        out += _tool_text(tool, turn, full)
    if not (reasoning or text or step.tools):
        out.append("    (no output)")
    return out


def _tool_heading(tool: _Tool) -> str:
    head = _one_line(tool.name)
    if tool.kind:
        head += f" ({_one_line(tool.kind)})"
    if tool.title:
        head += f" — {_one_line(tool.title)}"
    return head + f" [{_one_line(tool.call_id)}]"


def _tool_text(tool: _Tool, turn: _Turn, full: bool) -> list[str]:
    out = [f"    Tool {_tool_heading(tool)}"]
    args = _json_text(tool.arguments)
    out.append(f"      arguments: {args if full else _cut(args, SHOW_ARG_CHARS)}")
    result = tool.result
    if result is None:
        if turn.reason is None:
            out.append("      result: (no result yet)" if tool.started
                       else "      result: (not started yet)")
        else:
            out.append("      result: (none recorded)")
        return out
    permission = _permission_text(result.get("permission"))
    if permission:
        out.append(f"      permission: {permission}")
    mark = _result_mark(tool)
    label = "      result" + (f" {mark}" if mark else "")
    if not tool.result_on_disk:
        label += " (synthetic, not yet on disk)"
    out.append(label + ":")
    out += _indent(_head(_blocks_text(result.get("content")), full), "        ")
    for path, old, new in _diffs(tool):
        out.append(f"      {_diff_summary(path, old, new)}")
        if full:
            out += _indent(_unified(path, old, new), "        ")
    return out


# --- export ---------------------------------------------------------------------------------


def _cmd_export(source: _Source, sid: str, fmt: str) -> int:
    if fmt == "jsonl":
        data = source.raw(sid)
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return EXIT_OK
    _write(_render_markdown(_load_view(source, sid), source))
    return EXIT_OK


def _fence(text: str, lang: str = "") -> list[str]:
    import re

    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    bar = "`" * max(3, longest + 1)
    return [bar + lang, *text.rstrip("\n").split("\n"), bar]


def _md_escape(text: str) -> str:
    """One line of plain text that Markdown shows as is (headings, emphasis, code)."""
    import re

    text = re.sub(r"([\\`*\[\]<>])", r"\\\1", text)
    return re.sub(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])", r"\\_", text)


def _render_markdown(view: _View, source: _Source) -> str:
    stored = view.stored
    header = stored.header
    title = _one_line(stored.title) if stored.title else "Untitled session"
    out = [f"# {_md_escape(title)}", ""]
    items = [
        ("id", f"`{stored.id}`"),
        ("cwd", f"`{_one_line(str(header.get('cwd', ''))).replace('`', '')}`"),
    ]
    if header.get("additionalDirectories"):
        items.append(("directories", ", ".join(
            f"`{_one_line(str(d)).replace('`', '')}`" for d in header["additionalDirectories"])))
    items += [
        ("created", _local(header.get("createdAt"))),
        ("updated", _local(stored.updated)),
        ("backend", source.name),
    ]
    if view.owner == "live":
        items.append(("owner", f"process {view.owner_pid} (live)"))
    turns = str(len(view.turns))
    if view.last is not None:
        turns += f" (last: {_md_escape(view.status()[1])})"
    items += [("turns", turns), ("tokens", _tokens(view.usage))]
    out += [f"- **{name}**: {value}" for name, value in items]
    notes = _notes(view)
    if notes:
        out.append("")
        out += [f"> **Note:** {_md_escape(note)}" for note in notes]
    for turn in view.turns:
        out += ["", f"## Turn {turn.number} — {_md_escape(view.turn_status(turn))}", "",
                f"*{_md_escape(_turn_info(turn))}*", "", "### User", ""]
        out += _blocks_text(turn.prompt).split("\n")
        for step in turn.steps:
            label = f"### Step {step.number}"
            if step.usage:
                label += f" · tokens {_tokens(step.usage)}"
            out += ["", label]
            out += _step_markdown(step, turn)
        out.append("")
        if turn.reason is not None:
            end = f"**End:** {_md_escape(view.turn_status(turn))}"
        else:
            end = "**The turn is still running;** shown as far as it is on disk."
        out.append(end + (f" · tokens {_tokens(turn.usage)}" if turn.usage else ""))
    out += ["", "---", "", f"**Total tokens:** {_tokens(view.usage)}"]
    return "\n".join(out) + "\n"


def _step_markdown(step: _Step, turn: _Turn) -> list[str]:
    out: list[str] = []
    partial = " (partial: streamed, cut short)" if step.partial else ""
    reasoning = step.shown_reasoning()
    if reasoning:
        out += ["", f"> **Thinking{partial}:**", ">"]
        out += [f"> {line}".rstrip() for line in _clean(reasoning).split("\n")]
    text = step.shown_text()
    if text:
        out += ["", f"**Assistant{partial}:**", ""]
        out += _clean(text).split("\n")
    for tool in step.tools:
        out += ["", f"**Tool** `{_one_line(tool.name).replace('`', '')}`"
                    + (f" ({_md_escape(_one_line(tool.kind))})" if tool.kind else "")
                    + (f" — {_md_escape(_one_line(tool.title))}" if tool.title else "")
                    + f" · `{_one_line(tool.call_id).replace('`', '')}`", ""]
        out += ["Arguments:", ""]
        out += _fence(_json_text(tool.arguments), "json")
        result = tool.result
        out.append("")
        if result is None:
            out.append("Result: *no result yet*" if turn.reason is None else "Result: *none recorded*")
            continue
        permission = _permission_text(result.get("permission"))
        if permission:
            out += [f"Permission: {_md_escape(permission)}", ""]
        mark = _result_mark(tool)
        label = "Result" + (f" **{_md_escape(mark)}**" if mark else "")
        if not tool.result_on_disk:
            label += " *(synthetic, not yet on disk)*"
        out += [label + ":", ""]
        out += _fence(_blocks_text(result.get("content")), "text")
        for path, old, new in _diffs(tool):
            out += ["", f"{_md_escape(_diff_summary(path, old, new))}:", ""]
            out += _fence("\n".join(_unified(path, old, new)), "diff")
    if not (reasoning or text or step.tools):
        out += ["", "*(no output)*"]
    return out
