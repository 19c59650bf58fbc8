"""`acp-bridge sessions stats` (docs/search.md): turns, tokens (input, output, cache
read and write, reasoning), failed, interrupted and cancelled turns, grouped by day,
model, wrapped agent or cwd, over any period, as a table or `--json`; with a price file,
what they cost. Sums come from the store's index (brought up to date first), one query.

Each turn is counted once, in the session that ran it: a fork's copies of its original's
turns (`TurnRow.copied`) are lineage, left out; a slash command's turn is counted apart
(`commands`, `failedCommands`), never as a prompt's turn or its error. `--by session`
gives each session with its forks (and theirs) folded in.

Cost: a turn on a model the price file prices costs its tokens at those prices; one on
a model it does not price costs what its agent said (a wrapped agent's
`usage_update.cost`), else nothing is known of it and it is counted apart
(`turnsWithoutCost`): an unknown cost is never shown as zero.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from acp_bridge.cli.sessions.source import Source
    from acp_bridge.prices import Prices
    from session.search.base import StatsRow

BY = ("day", "model", "agent", "cwd", "session", "none")
COUNTS = ("turns", "errors", "interrupted", "cancelled", "toolErrors", "commands", "failedCommands")
COLUMNS = (("turns", "TURNS"), ("errors", "ERRORS"), ("interrupted", "INTERRUPTED"), ("cancelled", "CANCELLED"),
           ("commands", "COMMANDS"),
           ("inputTokens", "INPUT"), ("outputTokens", "OUTPUT"), ("cacheReadTokens", "CACHE READ"),
           ("cacheWriteTokens", "CACHE WRITE"), ("reasoningTokens", "REASONING"))


def stats_options(parser: argparse.ArgumentParser) -> None:
    from acp_bridge.cli.sessions.search import filter_options

    filter_options(parser)
    parser.add_argument("--by", choices=BY, default="day",
                        help="group by day (local time, the default), model, agent, cwd, session (each with "
                             "its forks folded in), or none")
    parser.add_argument("--prices", metavar="FILE",
                        help="model prices (TOML or JSON, docs/search.md; default: $ACP_BRIDGE_PRICES, else "
                             "STORE/prices.toml if there is one)")
    parser.add_argument("--json", action="store_true", help="machine-readable JSON")


class Group:
    """The sums of one group, its cost by currency, and the turns whose cost is unknown."""

    def __init__(self, key: Any) -> None:
        from session.search.base import TOKEN_KEYS

        self.key = key
        self.counts = dict.fromkeys(COUNTS, 0)
        self.tokens = dict.fromkeys(TOKEN_KEYS, 0)
        self.cost: dict[str, float] = {}
        self.unknown = 0

    def add(self, row: StatsRow, prices: Prices | None) -> None:
        for name, value in (("turns", row.turns), ("errors", row.errors), ("interrupted", row.interrupted),
                            ("cancelled", row.cancelled), ("toolErrors", row.tool_errors),
                            ("commands", row.commands), ("failedCommands", row.failed_commands)):
            self.counts[name] += value
        for name, value in row.tokens.items():
            self.tokens[name] += value
        price = prices.price_of(row.model) if prices is not None else None
        if price is not None and prices is not None:
            self.cost[prices.currency] = self.cost.get(prices.currency, 0.0) + price.cost(row.tokens)
            return
        for currency, amount in row.reported.items():
            self.cost[currency] = self.cost.get(currency, 0.0) + amount
        self.unknown += row.turns - row.reported_turns

    def merge(self, other: Group) -> None:
        for name, value in other.counts.items():
            self.counts[name] += value
        for name, value in other.tokens.items():
            self.tokens[name] += value
        for currency, amount in other.cost.items():
            self.cost[currency] = self.cost.get(currency, 0.0) + amount
        self.unknown += other.unknown

    def json(self, label: str) -> dict[str, Any]:
        from acp_bridge.prices import DIGITS

        return {"group": label, **self.counts, "tokens": dict(self.tokens),
                "cost": [{"amount": round(a, DIGITS), "currency": c} for c, a in sorted(self.cost.items())],
                "turnsWithoutCost": self.unknown}


def label_of(by: str, key: Any) -> str:
    import time

    if by == "day":
        return time.strftime("%Y-%m-%d", time.localtime(int(key) * 900))
    if by == "none":
        return "all"
    return "(none)" if key is None else str(key)


def roots_of(headers: dict[str, str]) -> dict[str, str]:
    """Each session's root: the session it was forked from, and so on up, as far as the
    store still holds them (`headers`: each session's header as JSON)."""
    import orjson

    parent: dict[str, str] = {}
    for sid, header in headers.items():
        try:
            value = orjson.loads(header)
        except orjson.JSONDecodeError:
            continue
        forked = value.get("forkedFrom") if isinstance(value, dict) else None
        source = forked.get("sessionId") if isinstance(forked, dict) else None
        if isinstance(source, str) and source in headers:
            parent[sid] = source
    roots: dict[str, str] = {}
    for sid in headers:
        root, seen = sid, {sid}
        while root in parent and parent[root] not in seen:  # a cycle (tampered headers) stops
            root = parent[root]
            seen.add(root)
        roots[sid] = root
    return roots


def groups_of(source: Source, rows: list[StatsRow], opens: list[tuple[Any, str]], by: str,
              prices: Prices | None, roots: dict[str, str] | None = None) -> dict[str, Group]:
    """The groups by their label, an open turn counted interrupted where no agent has
    its session open (cut short, not yet repaired). `roots`: by session, the session
    each one's turns are folded into."""
    groups: dict[str, Group] = {}
    fold = roots or {}
    for row in rows:
        label = label_of(by, fold.get(row.key, row.key))
        groups.setdefault(label, Group(label)).add(row, prices)
    live: dict[str, bool] = {}
    for key, sid in opens:
        if not live.setdefault(sid, source.owner(sid).state == "live"):
            label = label_of(by, fold.get(key, key))
            groups.setdefault(label, Group(label)).counts["interrupted"] += 1
    return groups


def cost_text(group: Group) -> str:
    text = " + ".join(f"{amount:,.4f} {currency}" for currency, amount in sorted(group.cost.items()))
    if group.unknown:
        text = f"{text}*" if text else "?"
    return text


def stats_table(groups: list[Group], total: Group, by: str, with_cost: bool) -> str:
    from acp_bridge.cli.sessions.text import cut, one_line

    head = ["ALL" if by == "none" else by.upper(), *(title for _, title in COLUMNS)]
    if with_cost:
        head.append("COST")
    table = [head]
    for group in [*groups, total]:
        values = {**group.counts, **group.tokens}
        row = [cut(one_line(str(group.key)), 60), *(f"{values[name]:,}" for name, _ in COLUMNS)]
        if with_cost:
            row.append(cost_text(group))
        table.append(row)
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)).rstrip()
             for r in table]
    lines.insert(-1, "  ".join("-" * w for w in widths))
    if with_cost and total.unknown:
        lines.append(f"* {total.unknown:,} turn(s) of a model without a price, whose agent said no cost: not counted")
    return "\n".join(lines) + "\n"


def run_stats(source: Source, args: argparse.Namespace, prog: str) -> int:
    import sys

    from acp_bridge.cli.sessions.indexer import catch_up, notes, open_index
    from acp_bridge.cli.sessions.search import filters_of
    from acp_bridge.cli.startup import read_prices

    prices = read_prices(getattr(args, "prices", None), source.name, source.location)
    filters = filters_of(args)
    by = "" if args.by == "none" else args.by
    index = open_index(source.name, source.location, getattr(args, "index", None))
    try:
        report = catch_up(source, index)
        for line in notes(prog, report, index):
            print(line, file=sys.stderr)
        rows, opens = index.stats(filters, by), index.open_turns(filters, by)
        roots = roots_of({sid: row.header for sid, row in index.sessions().items()}) if by == "session" else None
    finally:
        index.close()
    groups = groups_of(source, rows, opens, args.by, prices, roots)
    ordered = sorted(groups.values(), key=lambda g: g.key if args.by == "day" else (-g.counts["turns"], g.key))
    total = Group("total")
    for group in ordered:
        total.merge(group)
    if args.json:
        import orjson

        out = {"by": args.by, "since": filters.since, "until": filters.until,
               "prices": prices.where if prices is not None else None,
               "groups": [g.json(str(g.key)) for g in ordered], "total": total.json("total")}
        sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    if not ordered:
        sys.stdout.write(f"No turns in {source.root} ({source.name} backend) for these filters.\n")
        return 0
    with_cost = prices is not None or bool(total.cost)
    sys.stdout.write(stats_table(ordered, total, args.by, with_cost))
    return 0
