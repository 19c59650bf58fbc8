"""A search of the FTS5 index file (session.search.fts), given its open database: the
best texts bm25 scores, the scan of the matches narrowed first by what the filters
allow, one hit per turn as it ran. Apart from fts.py, which keeps the file and writes
it: this half only reads.

The texts' ids are the seam between the two: the writer gives a text an id in the
order of its turn's start (`least_id`, fts.py's `_next_id`), so that the texts' own
order (FTS5's rowid, no join) puts the newest first among equal scores and a `since`
filter is a least id.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from session.search.base import Filters, Hit
from session.search.query import Query, fts5_match, snippet
from session.search.sql import copies_query, hit_of, name_copies

CANDIDATES, PER_HIT = 256, 8  # texts a search takes first, in bm25's order: this many, or 8 per hit wanted
FEW_SESSIONS = 4  # the sessions' filters keep at most a quarter of them: their texts are found first
ID_SLOTS = 1 << 16  # ids a millisecond of turn starts has: a text's id is start * ID_SLOTS + n


def least_id(time: int) -> int:
    """The least id of a text whose turn started at `time` (ms)."""
    return min(max(0, time), 1 << 46) * ID_SLOTS  # a log's time is not trusted to fit


def best_hits(db: sqlite3.Connection, query: Query, filters: Filters, limit: int,
              narrow: tuple[str, list[Any]]) -> list[Hit]:
    """The best `limit` turns for `query`, the scan of the matches narrowed by
    `narrow` (`narrowing`'s, for the same filters)."""
    conditions, args = filters.where("?")
    where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
    # The best texts first (bm25 over every match is quick; joining every match to
    # its turn and session is not: a word of 10,000 sessions), equal scores newest
    # first, then their turns. The turns of the best `wanted` texts hold the best
    # turns if they are `limit` or more once filtered (a turn left out has no text
    # better than these, nor as good and newer); else more texts are taken.
    # One hit per turn as it ran: a fork's copy of it is one with the original. The
    # text shown is the best the original holds (a copy's only where none of the
    # original's is kept, or filtered out), the first of the turn among equals.
    narrow_sql, narrow_args = narrow
    sql = ("WITH h AS MATERIALIZED (SELECT rowid AS id, bm25(texts) AS score FROM texts WHERE texts MATCH ? "
           f"{narrow_sql}ORDER BY bm25(texts), rowid DESC LIMIT ?), "
           "r AS (SELECT d.session_id, d.turn, d.kind, d.step, d.ref, min(h.score) OVER w AS best, s.title, "
           "s.cwd, s.agent, t.started, t.model, t.state, t.reason, d.id, coalesce(t.origin, d.session_id) AS k, "
           "row_number() OVER (w ORDER BY t.origin IS NOT NULL, h.score, d.id) AS n "
           "FROM h JOIN docs d ON d.id = h.id JOIN turns t ON t.session_id = d.session_id AND t.turn = d.turn "
           f"JOIN sessions s ON s.id = d.session_id {where} "
           "WINDOW w AS (PARTITION BY coalesce(t.origin, d.session_id), d.turn)) "
           "SELECT session_id, turn, kind, step, ref, best, title, cwd, agent, started, model, state, reason, "
           "id, k FROM r WHERE n = 1 ORDER BY best, started DESC LIMIT ?")
    match = fts5_match(query)
    wanted = max(CANDIDATES, limit * PER_HIT)
    while True:
        rows = db.execute(sql, [match, *narrow_args, wanted, *args, limit]).fetchall()
        if len(rows) >= limit or limit <= 0:
            break
        (matched,) = db.execute(f"SELECT count(*) FROM texts WHERE texts MATCH ? {narrow_sql}",
                                (match, *narrow_args)).fetchone()
        if matched <= wanted:
            break
        wanted *= 8
    hits = [hit_of(row, -row[5]) for row in rows]  # bm25: lower is better; a score: higher
    for hit in hits:
        body = db.execute("SELECT body FROM texts WHERE rowid = ?", (hit.doc_id,)).fetchone()
        hit.snippet, hit.marks = snippet(body[0] if body else "", query)
    origins = sorted({hit.origin for hit in hits})
    if origins:
        name_copies(hits, db.execute(copies_query(len(origins), "?"), origins * 2).fetchall())
    return hits


def narrowing(db: sqlite3.Connection, filters: Filters) -> tuple[str, list[Any]]:
    """Conditions the scan of the texts itself takes, so that fewer matches are
    scored (bm25 over every match of a phrase is most of a search): `since` as a
    least id (`least_id`), and, when the sessions' own filters (folder, agent) keep
    few sessions, the texts every filter keeps, found from those sessions (`+rowid`:
    looked up as each match is read, not a seek of the texts per id, which costs far
    more). Both only leave out texts the join's filters would: the hits are the same."""
    sql, args = "", []
    if filters.since is not None:
        sql, args = "AND rowid >= ? ", [least_id(filters.since)]
    if not filters.cwds and filters.agent is None:
        return sql, args
    own, own_args = Filters(cwds=filters.cwds, agent=filters.agent).where("?")
    (kept,) = db.execute(f"SELECT count(*) FROM sessions s WHERE {' AND '.join(own)}", own_args).fetchone()
    (total,) = db.execute("SELECT count(*) FROM sessions").fetchone()
    if kept * FEW_SESSIONS > total:
        return sql, args  # the scan would read most texts' ids for little
    conditions, kept_args = filters.where("?")
    # CROSS JOIN: from the kept sessions to their turns and texts (by the keys), not
    # every text to its session.
    sql += ("AND +rowid IN (SELECT d.id FROM sessions s CROSS JOIN turns t ON t.session_id = s.id "
            "CROSS JOIN docs d ON d.session_id = t.session_id AND d.turn = t.turn "
            f"WHERE {' AND '.join(conditions)}) ")
    return sql, [*args, *kept_args]
