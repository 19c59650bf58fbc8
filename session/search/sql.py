"""What the two SQL indexes (session.search.fts, .pg) say alike: their tables' columns,
the queries of the stats and of the open turns, and their rows read back. The
placeholder (`?` or `%s`) is the caller's."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from session.backends.base import At
from session.search.base import (
    TOKEN_KEYS,
    DocRow,
    Filters,
    Hit,
    SessionBrief,
    SessionRow,
    StatsRow,
    TurnRow,
    pieces,
    stamp_text,
    without_nul,
)
from session.search.query import tokens_of

SESSION_COLUMNS = ("id", "created", "cwd", "agent", "title", "stamp", "at_seq", "at_offset", "at_time",
                   "at_turn", "cost", "currency", "damaged", "header", "checked", "fork_of", "fork_turn")
TURN_COLUMNS = ("session_id", "turn", "started", "ended", "model", "mode", "state", "reason", "input",
                "output", "cache_read", "cache_write", "reasoning", "steps", "tools", "tool_errors",
                "cost", "currency", "kind", "copied")
_TOKEN_COLUMNS = ("input", "output", "cache_read", "cache_write", "reasoning")
# The group of a turn in the stats, by `by`: the quarter-hour it started in (the caller
# makes local days of them: a time zone's offset is a whole number of quarter hours).
GROUPS = {"day": "t.started / 900000", "model": "t.model", "agent": "s.agent", "cwd": "s.cwd",
          "session": "t.session_id", "": "''"}
# The turns the stats count: each once, where it ran (a fork's copies are lineage).
_RAN = "t.copied = 0"
_COMMAND = "t.kind = 'command'"


def _text(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Text values as both databases take them: PostgreSQL's text holds no NUL."""
    return tuple(without_nul(v) if isinstance(v, str) else v for v in values)


def session_values(row: SessionRow) -> tuple[Any, ...]:
    at = row.at
    # The header is JSON text: a NUL in it is escaped already, and must stay so.
    return (*_text((row.id, row.created, row.cwd, row.agent, row.title, stamp_text(row.stamp),
                    at.seq if at else None, at.offset if at else None, row.at_time, row.at_turn, row.cost,
                    row.currency, row.damaged)), row.header, int(row.checked), *_text((row.fork_of,)),
            row.fork_turn)


def session_of(values: Sequence[Any]) -> SessionRow:
    (sid, created, cwd, agent, title, stamp, at_seq, at_offset, at_time, at_turn, cost, currency,
     damaged, header, checked, fork_of, fork_turn) = values
    return SessionRow(sid, int(created), cwd, agent, title,
                      stamp_of(stamp),
                      At(int(at_seq), None if at_offset is None else int(at_offset)) if at_seq is not None else None,
                      at_time, at_turn, cost, currency, damaged, header or "{}", bool(checked), fork_of,
                      None if fork_turn is None else int(fork_turn))


def stamp_of(text: str | None) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",")) if text else ()


def brief_query(ids: str, schema: str = "") -> str:
    """The rows `briefs_of` reads: each session's row, its turns' count and token sums,
    and its last turn, for the sessions `ids` selects (SQL after the id column, given
    twice its parameters: ` IN (?, ?)`, ` = ANY(%s)`)."""
    sums = ", ".join(f"sum({c}) AS {c}" for c in _TOKEN_COLUMNS)
    return (f"SELECT {', '.join(f's.{c}' for c in SESSION_COLUMNS)}, a.n, "
            f"{', '.join(f'a.{c}' for c in _TOKEN_COLUMNS)}, l.turn, l.state, l.reason FROM {schema}sessions s "
            f"LEFT JOIN (SELECT session_id, count(*) AS n, max(turn) AS last, {sums} FROM {schema}turns "
            f"WHERE session_id{ids} GROUP BY session_id) a ON a.session_id = s.id "
            f"LEFT JOIN {schema}turns l ON l.session_id = s.id AND l.turn = a.last WHERE s.id{ids}")


def briefs_of(rows: Iterable[Sequence[Any]]) -> dict[str, SessionBrief]:
    """The rows of `brief_query` by session id."""
    out: dict[str, SessionBrief] = {}
    width = len(SESSION_COLUMNS)
    for values in rows:
        row = session_of(values[:width])
        count, *sums = values[width:width + 1 + len(_TOKEN_COLUMNS)]
        last_turn, state, reason = values[width + 1 + len(_TOKEN_COLUMNS):]
        tokens = {key: int(v) for key, v in zip(TOKEN_KEYS, sums, strict=True) if v}
        out[row.id] = SessionBrief(row, int(count or 0), tokens, None if last_turn is None else int(last_turn),
                                   state, reason_of(reason))
    return out


def turn_values(session_id: str, row: TurnRow) -> tuple[Any, ...]:
    return _text((session_id, row.turn, row.started, row.ended, row.model, row.mode, row.state,
                  None if row.reason is None else orjson.dumps(row.reason).decode(),
                  *(row.tokens.get(key, 0) for key in TOKEN_KEYS), row.steps, row.tools, row.tool_errors,
                  row.cost, row.currency, row.kind, int(row.copied)))


def doc_values(docs: Iterable[DocRow]) -> Iterable[tuple[DocRow, str, str]]:
    """(doc, piece, its tokens joined) for each piece of each text."""
    for doc in docs:
        for piece in pieces(doc.text):
            yield doc, piece, " ".join(tokens_of(piece))


def hit_of(row: Sequence[Any], score: float) -> Hit:
    """A row of a search (the columns both indexes select, in this order) as a Hit."""
    sid, turn, kind, step, ref, _, title, cwd, agent, started, model, state, reason, doc_id, origin = row
    return Hit(sid, int(turn), kind, int(step or 0), ref, score, title, cwd, agent, int(started or 0),
               model, state, reason_of(reason), doc_id=int(doc_id), origin=origin)


# --- forks: a copied turn is found once ---------------------------------------------------------
# `turns.origin` is NULL for a turn that ran in its own session, else the session it ran
# in. `relink` moves it one `forkedFrom` up at a time (a fork of a fork: two steps),
# where the session it names is a fork that holds turn `turn` as a copy; what is known
# is never undone (a deleted fork in the middle of a chain does not split it again).
RELINK_ROUNDS = 32  # a chain of forks deeper than this is linked by the next passes


def relink_sql(schema: str = "") -> str:
    """One step up every chain, for the turns of forks (and of what they point at)."""
    forks = f"(SELECT id FROM {schema}sessions WHERE fork_of IS NOT NULL)"
    via = f"(SELECT {{}} FROM {schema}sessions h WHERE h.id = coalesce(t.origin, t.session_id))"
    return (f"UPDATE {schema}turns AS t SET origin = {via.format('h.fork_of')} "
            f"WHERE ((t.origin IS NULL AND t.session_id IN {forks}) OR t.origin IN {forks}) "
            f"AND t.turn <= {via.format('h.fork_turn')} "
            f"AND {via.format('h.fork_of')} <> t.session_id")


def copies_query(count: int, mark: str, schema: str = "") -> str:
    """(origin, turn, session) of every turn held as a copy of, or by, the `count`
    origins given (as parameters)."""
    keys = ", ".join([mark] * count)
    return (f"SELECT coalesce(origin, session_id), turn, session_id FROM {schema}turns "
            f"WHERE origin IN ({keys}) OR (session_id IN ({keys}) AND origin IS NULL)")


def name_copies(hits: list[Hit], rows: Iterable[Sequence[Any]]) -> None:
    """Each hit's `copies`: the other sessions holding its turn (rows of `copies_query`)."""
    holders: dict[tuple[str, int], set[str]] = {}
    for origin, turn, sid in rows:
        holders.setdefault((origin, int(turn)), set()).add(sid)
    for hit in hits:
        hit.copies = sorted(holders.get((hit.origin, hit.turn), set()) - {hit.session_id})


def reason_of(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def stats_query(filters: Filters, by: str, mark: str, schema: str = "") -> tuple[str, list[Any]]:
    """Sums per group and model over the turns that ran in their session (`_RAN`): the
    prompts' turns and states, then the commands' (`StatsRow`)."""
    conditions, args = Filters(filters.cwds, filters.agent, filters.model, filters.since,
                               filters.until, filters.ended).where(mark)
    conditions.append(_RAN)
    counted = ", ".join(f"sum(CASE WHEN t.state = '{state}' AND NOT {_COMMAND} THEN 1 ELSE 0 END)"
                        for state in ("error", "interrupted", "cancelled"))
    commands = (f"sum(CASE WHEN {_COMMAND} THEN 1 ELSE 0 END), "
                f"sum(CASE WHEN {_COMMAND} AND t.state = 'error' THEN 1 ELSE 0 END)")
    tokens = ", ".join(f"sum(t.{c})" for c in _TOKEN_COLUMNS)
    where = f" WHERE {' AND '.join(conditions)}"
    sql = (f"SELECT {GROUPS[by]}, t.model, t.currency, count(*), {counted}, {tokens}, sum(t.tool_errors), "
           f"sum(t.cost), count(t.cost), {commands} FROM {schema}turns t JOIN {schema}sessions s "
           f"ON s.id = t.session_id{where} GROUP BY 1, 2, 3")
    return sql, args


def stats_rows(rows: Iterable[Sequence[Any]]) -> list[StatsRow]:
    """The rows of `stats_query`, one per group and model (currencies merged)."""
    out: dict[tuple[Any, str | None], StatsRow] = {}
    for key, model, currency, turns, errors, interrupted, cancelled, *rest in rows:
        token_sums, tool_errors, cost, costed, commands, failed = rest[:5], rest[5], rest[6], rest[7], rest[8], rest[9]
        row = out.get((key, model))
        if row is None:
            row = out[(key, model)] = StatsRow(key, model, 0, 0, 0, 0, dict.fromkeys(TOKEN_KEYS, 0), {}, 0, 0)
        row.turns += int(turns) - int(commands or 0)
        row.commands += int(commands or 0)
        row.failed_commands += int(failed or 0)
        row.errors += int(errors or 0)
        row.interrupted += int(interrupted or 0)
        row.cancelled += int(cancelled or 0)
        row.tool_errors += int(tool_errors or 0)
        for name, value in zip(TOKEN_KEYS, token_sums, strict=True):
            row.tokens[name] += int(value or 0)
        if costed and currency is not None:
            row.reported[currency] = row.reported.get(currency, 0.0) + float(cost or 0.0)
            row.reported_turns += int(costed)
    return list(out.values())


def open_turns_query(filters: Filters, by: str, mark: str, schema: str = "") -> tuple[str, list[Any]]:
    conditions, args = Filters(filters.cwds, filters.agent, filters.model, filters.since,
                               filters.until).where(mark)
    conditions += ["t.state = 'open'", _RAN]
    return (f"SELECT {GROUPS[by]}, t.session_id FROM {schema}turns t JOIN {schema}sessions s "
            f"ON s.id = t.session_id WHERE {' AND '.join(conditions)}", args)


class ReadOnlyBriefs:
    """What both indexes' read-only side for `sessions list` does alike (see
    session.search.base.Briefs): opened once, on first use (`_open`: None when there is
    nothing to trust); any failure while reading (`errors`) closes it and says "nothing
    to trust" from then on, so the list reads the logs instead."""

    errors: tuple[type[Exception], ...] = (ValueError, TypeError, AttributeError)  # and the driver's

    def __init__(self) -> None:
        self._db: Any = None
        self._failed = False

    def _open(self) -> Any:
        """The connection, checked (the index's format and owner), or None."""
        raise NotImplementedError

    def _rows(self, db: Any, session_ids: list[str]) -> list[Sequence[Any]]:
        """The rows of `brief_query` for `session_ids`."""
        raise NotImplementedError

    def _conn(self) -> Any:
        if self._db is None and not self._failed:
            self._failed = True  # one try: an open that fails (or raises) is not retried
            db = self._open()
            if db is not None:
                self._db, self._failed = db, False
        return self._db

    def briefs(self, session_ids: Sequence[str]) -> dict[str, SessionBrief] | None:
        try:
            db = self._conn()
            return None if db is None else briefs_of(self._rows(db, list(session_ids)))
        except self.errors:  # damaged, or not ours to read
            self.close()
            self._failed = True
            return None

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()
