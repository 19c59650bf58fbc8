"""`acp-bridge sessions list`: stored sessions, newest first, as a table or JSON.

A session's facts come from the search index's rows when they are fresh (`Summaries`),
else from its log, read in one streamed pass (`Source.summary`): the same output either
way, and a first page of 10,000 sessions reads no log (bench/README.md, "At scale")."""

from __future__ import annotations

import os
import typing

from acp_bridge.cli.sessions.text import cut, iso_time, local_time, one_line, tokens_json
from acp_bridge.cli.sessions.view import View, last_status

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import Any

    from acp_bridge.cli.sessions.source import Source
    from session import Owner
    from session.backends.base import Stamp
    from session.search.base import SessionBrief


class Brief:
    """What `list` shows of a session, and nothing more: a row of 10,000 must not keep
    its last turn's events and text (bench/README.md, "At scale"). Made from its `View`
    (`of_view`) or from the search index's rows (`Summaries`)."""

    __slots__ = ("_status", "last", "owner", "owner_pid", "turn_count", "usage")

    def __init__(self, last: LastTurn | None, owner: Owner | tuple[str, int | None], turn_count: int,
                 usage: dict[str, int]) -> None:
        self.last = last
        self.owner: str = owner[0]
        self.owner_pid: int | None = owner[1]
        self._status = last_status(last, self.owner)
        self.turn_count, self.usage = turn_count, usage

    @classmethod
    def of_view(cls, view: View) -> Brief:
        last = view.last
        return cls(None if last is None else LastTurn(last.number, last.reason, last.end_on_disk),
                   (view.owner, view.owner_pid), view.turn_count, view.usage)

    def status(self) -> tuple[str | None, str]:
        return self._status


class LastTurn(typing.NamedTuple):
    number: int
    reason: dict[str, Any] | None
    end_on_disk: bool


class Row:
    """One `list` entry: a readable session (`view`, its Brief), or a damaged one
    (`damaged`, with what its header still says)."""

    __slots__ = ("damaged", "header", "id", "title", "updated", "view")

    def __init__(self, sid: str, header: dict[str, Any] | None, updated: int | None,
                 title: str | None, view: Brief | None = None, damaged: str | None = None) -> None:
        self.id = sid
        self.header = header or {}
        self.updated = updated
        self.title = title
        self.view = view
        self.damaged = damaged


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
    try:
        for sid in ids:
            if limit is not None and 0 <= limit <= len(rows):
                break  # newest first: the rest are older than every row kept
            indexed = summaries.row(sid)
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


def updated_of(backend: str, stamp: Stamp | None) -> int:
    """A session's `updatedAt` (epoch ms) from its stamp: a JSONL log's mtime (ns), a SQL
    store's last event time; 0 without one."""
    if stamp is None or len(stamp) < 2:
        return 0
    return stamp[1] // 1_000_000 if backend == "jsonl" else stamp[1]


class Summaries:
    """The `list` rows of sessions whose search index rows are fresh (session.search:
    the `sessions` row and its `turns`' sums), read a chunk at a time in list order.
    A row is trusted only if its stamp is the session's stamp now, its log was read
    whole and checked as a load checks it (`SessionRow.checked`), no event is held
    outside that stamp (`StoreReader.unstamped`: SQLite's tail), and its last turn
    ended; else (and with no index, one of another format or store, or a damaged one)
    `row` is None and the log is read. Nothing here makes or updates the index: that is
    the indexer's, whose first build would cost a list minutes."""

    CHUNK = 200

    def __init__(self, source: Source, stamps: dict[str, Stamp], order: Sequence[str]) -> None:
        self._source, self._stamps, self._order = source, stamps, order
        self._index = None
        if order:
            from acp_bridge.cli.sessions.indexer import open_briefs

            self._index = open_briefs(source.name, source.location)
        self._unstamped: set[str] | None = None
        self._briefs: dict[str, SessionBrief] = {}
        self._read = 0  # how much of `order` was asked for
        self._position: dict[str, int] | None = None  # where each id is in `order`, if needed

    def row(self, sid: str) -> Row | None:
        if self._index is None:
            return None
        if sid not in self._briefs and self._read < len(self._order):
            if self._order[self._read] == sid:  # the next one not asked for yet, as a list goes
                at = self._read
            else:
                if self._position is None:
                    self._position = {s: n for n, s in enumerate(self._order)}
                at = self._position.get(sid, -1)
            if at < self._read:  # asked for already: the index has no row of it
                return None
            chunk = self._order[at:at + self.CHUNK]
            self._read = at + len(chunk)
            got = self._index.briefs(chunk)
            if got is None:  # nothing to trust: every log is read
                self.close()
                return None
            self._briefs.update(got)
        brief = self._briefs.pop(sid, None)
        if brief is None or not self._fresh(sid, brief):
            return None
        import orjson

        try:
            header = orjson.loads(brief.row.header)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(header, dict):
            return None
        last = None
        if brief.last_turn is not None:
            last = LastTurn(brief.last_turn, brief.last_reason, True)
        view = Brief(last, self._source.owner(sid), brief.turns, brief.tokens)
        return Row(sid, header, updated_of(self._source.name, self._stamps[sid]), brief.row.title, view)

    def _fresh(self, sid: str, brief: SessionBrief) -> bool:
        row = brief.row
        if row.stamp != self._stamps.get(sid) or row.damaged is not None or not row.checked:
            return False
        if row.title is not None and "\ufffd" in row.title:
            return False  # maybe a NUL the index's text column could not hold: the log has it

        if brief.turns and (brief.last_turn != brief.turns or brief.last_state == "open"
                            or brief.last_reason is None):
            return False  # an open last turn: running or cut short, for its log to tell
        if self._unstamped is None:
            self._unstamped = self._source.reader.unstamped()
        return sid not in self._unstamped

    def close(self) -> None:
        index, self._index = self._index, None
        if index is not None:
            index.close()


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
    if isinstance(header.get("forkedFrom"), dict):  # a fork (docs/persistence.md, "Forks"): as stored
        out["forkedFrom"] = header["forkedFrom"]
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


def _list_table(rows: list[Row]) -> str:
    table = [("ID", "UPDATED", "TURNS", "LAST TURN", "TOKENS IN/OUT", "CWD", "TITLE")]
    for row in rows:
        view = row.view
        updated = "?" if row.updated is None else local_time(row.updated, seconds=False)
        cwd = _short_path(one_line(str(row.header.get("cwd", ""))))
        title = cut(one_line(row.title or ""), 60)
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
