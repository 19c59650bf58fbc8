"""`acp-bridge sessions list`: stored sessions, newest first, as a table or JSON.

A session's facts come from the search index's rows when they are fresh (`Summaries`),
else from the outline a store keeps of a log it vouches for (`Outlines`), else from its
log, read in one streamed pass (`Source.summary`): the same output each way, and a first
page of 10,000 sessions reads no log (bench/README.md, "At scale")."""

from __future__ import annotations

import os

from acp_bridge.cli.sessions.rows import Brief, Outlines, Row, Summaries, updated_of
from acp_bridge.cli.sessions.text import cut, iso_time, local_time, one_line, tokens_json
from acp_bridge.cli.sessions.view import View

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from acp_bridge.cli.sessions.source import Source


def list_text(source: Source, args: argparse.Namespace) -> str:
    """The `list` output: a table, or JSON with `--json`."""
    cwd_filter = getattr(args, "cwd", None)
    rows = list_rows(source, cwd_filter, getattr(args, "limit", None))
    if getattr(args, "json", False):
        import orjson

        return orjson.dumps([_list_json(r) for r in rows], option=orjson.OPT_INDENT_2).decode() + "\n"
    if not rows:
        where = f"{source.root} ({source.name} backend)"
        if cwd_filter:
            return f"No sessions for {os.path.abspath(cwd_filter)} in {where}.\n"
        return f"No sessions in {where}.\n"
    return _list_table(rows)


def list_rows(source: Source, cwd_filter: str | None = None, limit: int | None = None) -> list[Row]:
    """The sessions of the store, newest first (for `list` and `serve`'s list page):
    only those whose cwd is `cwd_filter` if given, at most `limit`."""
    from session import SessionError

    wanted: set[str] | None = None
    if cwd_filter:
        wanted = {os.path.abspath(cwd_filter), os.path.realpath(cwd_filter)}
    rows: list[Row] = []
    stamps = source.reader.stamps()  # every session's, in one pass: its ids too
    ids = list(stamps)
    if limit is not None and 0 <= limit < len(ids):
        ids = sorted(ids, key=lambda sid: (-updated_of(source.name, stamps.get(sid)), sid))
        # newest first by the store's stamps (a stat per JSONL log, one query for a SQL
        # store), so that a first page reads only its own sessions (10,000: bench/README.md)
    summaries = Summaries(source, stamps, ids)
    outlines = Outlines(source, stamps, ids, limit if limit is not None and limit > 0 else Outlines.CHUNK)
    try:
        for sid in ids:
            if limit is not None and 0 <= limit <= len(rows):
                break  # newest first: the rest are older than every row kept
            indexed = outlines.row(sid) or summaries.row(sid)
            if indexed is not None:
                if wanted is None or indexed.header.get("cwd") in wanted:
                    rows.append(indexed)
                continue
            if wanted is not None:
                header = source.peek(sid).header
                if header is not None and header.get("cwd") not in wanted:
                    continue  # another cwd's, known from its header alone: not read
            try:
                stored = source.summary(sid)  # one streamed pass: the last turn is kept
            except (SessionError, OSError) as exc:
                header, updated, title = source.peek(sid)
                message = exc.message if isinstance(exc, SessionError) else f"cannot read: {exc}"
                rows.append(Row(sid, header, updated, title, damaged=message))
            else:
                view = View(stored, source.owner(sid))
                rows.append(Row(sid, dict(stored.header), stored.updated, stored.title, Brief.of_view(view)))
            if wanted is not None and rows[-1].header.get("cwd") not in wanted:
                rows.pop()
    finally:
        summaries.close()
    rows.sort(key=lambda r: (-(r.updated or 0), r.id))
    if limit is not None and limit >= 0:
        rows = rows[:limit]
    return rows


def _list_json(row: Row) -> dict[str, Any]:
    header = row.header
    out: dict[str, Any] = {
        "id": row.id,
        "title": row.title,
        "cwd": header.get("cwd"),
        "createdAt": header.get("createdAt"),
        "updatedAt": row.updated,
        "updated": None if row.updated is None else iso_time(row.updated),
    }
    if header.get("additionalDirectories"):
        out["additionalDirectories"] = header["additionalDirectories"]
    if isinstance(header.get("wrapped"), dict):  # recorded by `acp-bridge wrap`: as stored
        out["wrapped"] = header["wrapped"]
    if isinstance(header.get("imported"), dict):  # imported by `acp-bridge import` (docs/import.md): as stored
        out["imported"] = header["imported"]
    if isinstance(header.get("forkedFrom"), dict):  # a fork (docs/persistence.md, "Forks"): as stored
        out["forkedFrom"] = header["forkedFrom"]
    if isinstance(header.get("parent"), dict):  # a subagent's session (docs/wrap.md, "Subagents")
        out["parent"] = header["parent"]
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
        "tokens": tokens_json(view.usage),
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


def parent_of(row: Row) -> str | None:
    parent = row.header.get("parent")
    sid = parent.get("sessionId") if isinstance(parent, dict) else None
    return sid if isinstance(sid, str) else None


def under_parents(rows: list[Row]) -> list[tuple[Row, int]]:
    """`rows` with each subagent's session right under its parent's, if the parent is
    among them (in their order there), and how deep each is; the rest as they were."""
    ids = {row.id for row in rows}
    children: dict[str, list[Row]] = {}
    for row in rows:
        parent = parent_of(row)
        if parent is not None and parent in ids and parent != row.id:
            children.setdefault(parent, []).append(row)
    placed: set[str] = set()
    out: list[tuple[Row, int]] = []

    def put(row: Row, depth: int) -> None:
        if row.id in placed:
            return
        placed.add(row.id)
        out.append((row, depth))
        for child in children.get(row.id, []):
            put(child, depth + 1)

    for row in rows:
        parent = parent_of(row)
        if parent is None or parent not in ids or parent == row.id:
            put(row, 0)
    for row in rows:  # a cycle of parents (a hand-edited store): each row once
        put(row, 0)
    return out


def _list_table(rows: list[Row]) -> str:
    table = [("ID", "UPDATED", "TURNS", "LAST TURN", "TOKENS IN/OUT", "CWD", "TITLE")]
    for row, depth in under_parents(rows):
        view = row.view
        updated = "?" if row.updated is None else local_time(row.updated, seconds=False)
        cwd = _short_path(one_line(str(row.header.get("cwd", ""))))
        title = cut(one_line(row.title or ""), 60)
        if depth:  # a subagent's session, under its parent's
            title = "  " * (depth - 1) + "└ " + title
        if view is None:
            table.append((row.id, updated, "?", "damaged", "", cwd, title))
            continue
        usage = view.usage
        tokens = f"{usage.get('inputTokens', 0):,}/{usage.get('outputTokens', 0):,}"
        table.append((row.id, updated, str(view.turn_count), cut(view.status()[1], 40),
                      tokens, cwd, title))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    right = {2, 4}
    lines = []
    for r in table:
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"
