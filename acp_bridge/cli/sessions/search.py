"""`acp-bridge sessions search QUERY` (docs/search.md): the turns of every session
whose prompt, thinking, answers, tool calls or tool output match, best first, one line
of facts and a snippet each (or `--json`), over the store's index, brought up to date
first. The filters (shared with `stats`) and the times they take are here too.

    acp-bridge sessions search 'timeout -retry' --since 7d --ended error --agent claude-code
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from acp_bridge.cli.sessions.source import Source
    from session.search.base import Filters, Hit, SearchIndex
    from session.search.query import Query

ENDED = ("completed", "cancelled", "error", "interrupted", "running", "max_tokens", "max_steps", "refusal")
LIMIT = 20
# `--since 7d`: a number and a unit, back from now.
UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# The times a filter may name (epoch ms): from 1970, before which no session started, to
# the end of year 9999. A date outside, or not convertible from local time here
# (`0001-01-01` in a zone ahead of UTC), is a usage error (docs/cli.md: one line, exit 2),
# never a traceback; a span back past 1970 is from the start.
EARLIEST_MS, LATEST_MS = 0, 253_402_300_799_999
MAX_NAME = 1_000
"""Characters of `--agent` or `--model` at most (SQLite refuses a LIKE pattern over
50,000 bytes; no agent or model is named so): a longer one is a usage error."""


def filter_options(parser: argparse.ArgumentParser) -> None:
    """The filters of `search` and `stats`."""
    parser.add_argument("--cwd", metavar="DIR", help="only sessions whose cwd is DIR")
    parser.add_argument("--agent", metavar="NAME",
                        help="only sessions of this wrapped agent (its name, any case; acp-bridge: our own)")
    parser.add_argument("--model", metavar="MODEL",
                        help="only turns on this model (its spec, or its name after the provider:, any case)")
    parser.add_argument("--since", metavar="WHEN",
                        help="only turns started at or after WHEN: YYYY-MM-DD[THH:MM[:SS]] (local time), or "
                             "30m, 12h, 7d, 2w ago")
    parser.add_argument("--until", metavar="WHEN", help="only turns started before WHEN (as --since)")
    parser.add_argument("--index", metavar="FILE",
                        help="the search index file (default: STORE/index/search.sqlite3; postgres: tables "
                             "in the store's database, schema acp_bridge_search)")


def search_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query", nargs="+", metavar="QUERY",
                        help='words (all of them), "a phrase", pre* (a prefix), -word (not), a OR b')
    filter_options(parser)
    parser.add_argument("--ended", action="append", choices=ENDED, metavar="HOW",
                        help=f"only turns that ended so ({', '.join(ENDED)}); repeat it for several")
    parser.add_argument("--in", dest="kinds", action="append", metavar="KIND",
                        choices=("prompt", "answer", "thought", "tool", "output", "summary"),
                        help="only these texts: prompt, answer, thought, tool (a call), output (a call's), "
                             "summary (a compaction's); repeat it for several")
    parser.add_argument("-n", "--limit", type=count, default=LIMIT, metavar="N",
                        help=f"at most N turns (default {LIMIT})")
    parser.add_argument("--json", action="store_true", help="machine-readable JSON")


def count(text: str) -> int:
    """`-n N` of `list` and `search`: acp_bridge.cli.startup.count, imported when -n is
    given (the parser is built on every start, and startup is not light)."""
    from acp_bridge.cli.startup import count

    return count(text)


def parse_when(text: str, option: str, now_ms: int) -> int:
    """Epoch ms of a `--since`/`--until` value; ConfigError for anything else."""
    import datetime
    import re

    from acp_bridge.errors import ConfigError

    value = text.strip()
    shown = text if len(text) <= 60 else text[:59] + "…"
    relative = re.fullmatch(r"(\d{1,30})\s*([mhdw])", value)
    when_ms: int | None = None
    if relative:  # a span back past 1970 is "from the start" (`--since 100000d`)
        when_ms = max(EARLIEST_MS, now_ms - int(relative.group(1)) * UNITS[relative.group(2)] * 1000)
    else:
        try:
            when = datetime.datetime.fromisoformat(value)
        except ValueError:
            raise ConfigError(option, f"not a time: {shown!r}; give YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] "
                                      "(local time) or a span back from now: 30m, 12h, 7d, 2w") from None
        try:
            if when.tzinfo is None:
                when = when.astimezone()  # local time
            when_ms = int(when.timestamp() * 1000)
        except (ValueError, OverflowError, OSError):  # year 1, year 9999 in a zone ahead of UTC
            pass
    if when_ms is None or not EARLIEST_MS <= when_ms <= LATEST_MS:
        raise ConfigError(option, f"{shown!r} is not a time from 1970 to 9999, when sessions can have run")
    return when_ms


def filters_of(args: argparse.Namespace, *, kinds: bool = False) -> Filters:
    import os
    import time

    from acp_bridge.errors import ConfigError
    from session.search.base import Filters

    now = int(time.time() * 1000)
    for name in ("agent", "model"):
        if len(getattr(args, name, None) or "") > MAX_NAME:
            raise ConfigError(f"--{name}", f"at most {MAX_NAME:,} characters, not {len(getattr(args, name)):,}")
    cwd = getattr(args, "cwd", None)
    since, until = getattr(args, "since", None), getattr(args, "until", None)
    ended = tuple("open" if e == "running" else e for e in (getattr(args, "ended", None) or ()))
    return Filters(
        cwds=tuple(sorted({os.path.abspath(cwd), os.path.realpath(cwd)})) if cwd else (),
        agent=getattr(args, "agent", None),
        model=getattr(args, "model", None),
        since=parse_when(since, "--since", now) if since else None,
        until=parse_when(until, "--until", now) if until else None,
        ended=ended,
        kinds=tuple(getattr(args, "kinds", None) or ()) if kinds else (),
    )


def find(source: Source, index: SearchIndex, query: Query, filters: Filters, limit: int) -> list[Hit]:
    """The hits, open turns told apart: `running` (their agent has the session open) or
    `interrupted` (cut short, not yet repaired); filters on either apply here."""
    wanted = set(filters.ended)
    hits = index.search(query, filters, limit + 16 if "open" in wanted or "interrupted" in wanted else limit)
    owners: dict[str, bool] = {}
    kept = []
    for hit in hits:
        if hit.state == "open":
            live = owners.setdefault(hit.session_id, source.owner(hit.session_id).state == "live")
            hit.state = "running" if live else "interrupted"
            if wanted and not (("open" in wanted and live) or ("interrupted" in wanted and not live)):
                continue
        kept.append(hit)
    return kept[:limit]


def hit_json(hit: Hit) -> dict[str, Any]:
    from acp_bridge.cli.sessions.text import iso_time

    return {"sessionId": hit.session_id, "turn": hit.turn, "step": hit.step, "kind": hit.kind,
            "callId": hit.ref, "score": round(hit.score, 6), "snippet": hit.snippet,
            "marks": [list(m) for m in hit.marks], "title": hit.title, "cwd": hit.cwd, "agent": hit.agent,
            "model": hit.model, "startedAt": hit.started, "started": iso_time(hit.started),
            "state": hit.state, "reason": hit.reason, "forks": hit.copies}


def state_text(hit: Hit) -> str:
    from acp_bridge.cli.sessions.view import reason_text

    if hit.state == "interrupted" and hit.reason is None:
        return "interrupted (unrepaired)"
    if hit.reason is not None:
        return reason_text(hit.reason, long=False)
    return hit.state


def hits_text(hits: list[Hit], *, bold: bool) -> str:
    from acp_bridge.cli.sessions.text import cut, local_time, one_line

    lines = []
    for hit in hits:
        where = f"step {hit.step} {hit.kind}" if hit.step else hit.kind
        lines.append(f"{local_time(hit.started, seconds=False)}  {hit.session_id[:8]}  turn {hit.turn}  "
                     f"{cut(one_line(state_text(hit)), 40)}  {where}  {cut(one_line(hit.title or ''), 60)}")
        lines.append("    " + marked(hit, bold))
        if hit.copies:
            lines.append(f"    {copies_text(hit)}")
    return "\n".join(lines) + "\n"


def copies_text(hit: Hit) -> str:
    """The other sessions that hold the hit's turn: the forks that copied it (or, where
    the hit is a copy, the original too)."""
    shown = ", ".join(sid[:8] for sid in hit.copies[:5])
    more = f" and {len(hit.copies) - 5} more" if len(hit.copies) > 5 else ""
    return f"also in {shown}{more} (forks: the same turn, copied)"


def marked(hit: Hit, bold: bool) -> str:
    """The snippet, its matches in bold on a terminal; control characters shown escaped."""
    from acp_bridge.cli.safe_text import clean

    if not bold:
        return clean(hit.snippet)
    out, at = [], 0
    for start, end in hit.marks:
        out += [clean(hit.snippet[at:start]), "\x1b[1m", clean(hit.snippet[start:end]), "\x1b[0m"]
        at = end
    out.append(clean(hit.snippet[at:]))
    return "".join(out)


def run_search(source: Source, args: argparse.Namespace, prog: str) -> int:
    """The command: exit 0 (results or none), 2 for a query with nothing to find."""
    import sys

    from acp_bridge.cli.sessions.indexer import catch_up_shown, notes, open_index
    from session.search.query import parse_query

    text = " ".join(args.query)
    query = parse_query(text)  # SearchQueryError before the index is touched
    filters = filters_of(args, kinds=True)
    index = open_index(source.name, source.location, getattr(args, "index", None))
    try:
        report = catch_up_shown(source, index, prog)
        for line in notes(prog, report, index):
            print(line, file=sys.stderr)
        if query.cut is not None:
            print(f"{prog}: {query.cut}", file=sys.stderr)
        hits = find(source, index, query, filters, args.limit)
    finally:
        index.close()
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps([hit_json(h) for h in hits], option=orjson.OPT_INDENT_2).decode() + "\n")
    elif not hits:
        from acp_bridge.cli.sessions.text import cut

        sys.stdout.write(f"No turns match {cut(text, 200)!r} in {source.root} ({source.name} backend).\n")
    else:
        sys.stdout.write(hits_text(hits, bold=sys.stdout.isatty()))
    return 0
