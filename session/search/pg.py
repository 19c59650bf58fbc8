"""The search index of a PostgreSQL store: tables of their own in the store's database,
schema `acp_bridge_search` (not the store's `acp_bridge`, whose schema is versioned and
whose writers are the agents), the texts searched by PostgreSQL's full-text search
over a GIN index on their `tsvector`.

    meta      the index's format
    sessions  one row per session: its facts, its stamp, where its reading stopped
    turns     one row per turn: model, state, tokens, reported cost
    docs      one row per indexed text (or piece of one), its `tsv` GIN-indexed

The `tsv` is made from the text's tokens as session.search.query cuts them (the
`simple` configuration: no stemming, no stop words), so a query finds what it finds
in the file stores' FTS5 index. One indexer at a time writes (an advisory lock in the
two-key space, apart from the agents' session locks); searches read meanwhile. Tables
of another format are dropped and made again: the index is only a copy of the logs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from session.backends.postgres_connect import UPDATED_AT, connect
from session.backends.postgres_conninfo import scrub, shown
from session.backends.postgres_schema import schema_version
from session.errors import IndexUnwritable, SearchIndexError, StoreIOError
from session.search.base import (
    FORMAT,
    Changes,
    Feed,
    Filters,
    Hit,
    SessionRow,
    StatsRow,
)
from session.search.query import Query, snippet, tsquery
from session.search.sql import (
    RELINK_ROUNDS,
    SESSION_COLUMNS,
    TURN_COLUMNS,
    ReadOnlyBriefs,
    brief_query,
    copies_query,
    doc_values,
    hit_of,
    name_copies,
    open_turns_query,
    relink_sql,
    session_of,
    session_values,
    stats_query,
    stats_rows,
    turn_values,
)

S = "acp_bridge_search."
DDL = f"""
CREATE SCHEMA acp_bridge_search;
CREATE TABLE {S}meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE {S}sessions (id text PRIMARY KEY, created bigint, cwd text, agent text, title text,
    stamp text, at_seq bigint, at_offset bigint, at_time bigint, at_turn integer,
    cost double precision, currency text, damaged text, header text, checked integer, fork_of text,
    fork_turn integer);
CREATE INDEX sessions_forks ON {S}sessions (fork_of) WHERE fork_of IS NOT NULL;
CREATE TABLE {S}turns (session_id text NOT NULL, turn integer NOT NULL, started bigint, ended bigint,
    model text, mode text, state text, reason text, input bigint, output bigint, cache_read bigint,
    cache_write bigint, reasoning bigint, steps integer, tools integer, tool_errors integer,
    cost double precision, currency text, kind text, copied integer, origin text, PRIMARY KEY (session_id, turn));
CREATE INDEX turns_started ON {S}turns (started);
CREATE INDEX turns_origin ON {S}turns (origin) WHERE origin IS NOT NULL;
CREATE TABLE {S}docs (id bigserial PRIMARY KEY, session_id text NOT NULL, turn integer NOT NULL,
    step integer, kind text, ref text, started bigint, body text NOT NULL, tsv tsvector NOT NULL);
CREATE INDEX docs_turn ON {S}docs (session_id, turn);
CREATE INDEX docs_tsv ON {S}docs USING gin (tsv);
INSERT INTO {S}meta VALUES ('format', '{FORMAT}');
"""
# Matching texts ranked at most (the newest): ts_rank_cd reads each one's tsvector.
WALK_FROM = 2_000  # texts with the query's words from which the newest are found by a walk
RANKED, PER_HIT = 500, 8
# Advisory locks in the two-key space (never the agents' one-key session locks): the
# schema while it is checked or made (one transaction), and the one indexer.
LOCK_CLASS = 0x6163_7073  # "acps"
SCHEMA_KEY, INDEXER_KEY = 1, 2


class PgIndex:
    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self.where = f"{shown(conninfo)} (schema acp_bridge_search)"
        self._db: psycopg.Connection[Any] | None = None
        self._locked = False
        self.rebuilt: str | None = None

    def _fail(self, what: str, exc: psycopg.Error) -> SearchIndexError:
        words = scrub(" ".join(str(exc).split()), self.conninfo)
        return SearchIndexError(f"could not {what} the search index in {self.where}: {words}; "
                                "give a local file with --index FILE")

    def _conn(self) -> psycopg.Connection[Any]:
        if self._db is None:
            db = connect(self.conninfo, purpose="index")
            try:
                with db.transaction():
                    db.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, SCHEMA_KEY))
                    self._check_schema(db)
            except psycopg.Error as exc:
                db.close()
                raise self._fail("make", exc) from None
            self._db = db
        return self._db

    def _check_schema(self, db: psycopg.Connection[Any]) -> None:
        found = db.execute("SELECT to_regclass('acp_bridge_search.meta'), to_regclass('acp_bridge_search.docs'), "
                           "to_regclass('acp_bridge_search.turns'), to_regclass('acp_bridge_search.sessions'), "
                           "to_regnamespace('acp_bridge_search')").fetchone()
        assert found is not None
        if all(found[:4]):
            row = db.execute(f"SELECT value FROM {S}meta WHERE key = 'format'").fetchone()
            if row is not None and row[0] == FORMAT:
                return
            self.rebuilt = "it is of another format"
        elif found[4] is not None:
            self.rebuilt = "its tables are not all there"
        if found[4] is not None:
            db.execute("DROP SCHEMA acp_bridge_search CASCADE")
        db.execute(DDL)

    def rebuild(self, why: str) -> None:
        db = self._conn()
        try:
            with db.transaction():
                db.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, SCHEMA_KEY))
                db.execute("DROP SCHEMA acp_bridge_search CASCADE")
                db.execute(DDL)
        except psycopg.Error as exc:
            raise self._fail("make", exc) from None
        self.rebuilt = why

    def lock(self, wait: float) -> bool:
        if self._locked:
            return True
        deadline = time.monotonic() + wait
        try:
            while True:
                row = self._conn().execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, INDEXER_KEY)).fetchone()
                if row is not None and row[0]:
                    self._locked = True
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.05)
        except psycopg.Error as exc:
            raise self._fail("lock", exc) from None

    def unlock(self) -> None:
        if self._locked and self._db is not None:
            self._locked = False
            with contextlib.suppress(psycopg.Error):
                self._db.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, INDEXER_KEY))

    @contextlib.contextmanager
    def _reading(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            yield self._conn()
        except psycopg.Error as exc:
            raise self._fail("read", exc) from None

    @contextlib.contextmanager
    def _writing(self) -> Iterator[psycopg.Connection[Any]]:
        db = self._conn()
        try:
            with db.transaction():
                yield db
        except psycopg.Error as exc:
            if (exc.sqlstate or "").startswith("53"):  # insufficient resources: a full disk (53100)
                raise IndexUnwritable(scrub(" ".join(str(exc).split()), self.conninfo)) from None
            raise self._fail("write", exc) from None

    def sessions(self) -> dict[str, SessionRow]:
        with self._reading() as db:
            rows = db.execute(f"SELECT {', '.join(SESSION_COLUMNS)} FROM {S}sessions").fetchall()
        return {row[0]: session_of(row) for row in rows}

    def stamps(self) -> dict[str, str]:
        with self._reading() as db:
            rows = db.execute(f"SELECT id, stamp FROM {S}sessions").fetchall()
        return dict(rows)

    def changes(self, conninfo: str | None) -> Changes | None:
        if conninfo != self.conninfo:
            return None
        stamp = f"coalesce(s.last_seq, -1), {UPDATED_AT}"
        with self._reading() as db, db.transaction():
            if schema_version(db) in (None, 1):  # no store, or no `last_seq` kept: stamps read one by one
                return None
            changed = db.execute(
                f"SELECT s.id, {stamp}, i.id IS NOT NULL FROM acp_bridge.sessions s "
                f"LEFT JOIN {S}sessions i ON i.id = s.id "
                f"WHERE i.stamp IS DISTINCT FROM concat_ws(',', {stamp})").fetchall()  # stamp_text's
            gone = db.execute(f"SELECT i.id FROM {S}sessions i WHERE NOT EXISTS "
                              "(SELECT 1 FROM acp_bridge.sessions s WHERE s.id = i.id)").fetchall()
            stored = db.execute("SELECT count(*) FROM acp_bridge.sessions").fetchone()
        return Changes([(sid, (int(seq), int(updated)), known) for sid, seq, updated, known in changed],
                       sorted(row[0] for row in gone), int(stored[0]) if stored else 0)

    def fingerprint(self) -> str | None:
        return None  # a PostgreSQL store has none (StoreReader.fingerprint)

    def keep_fingerprint(self, fingerprint: str | None) -> None:
        pass

    def unreadable(self) -> dict[str, tuple[str, str]]:
        with self._reading() as db:
            rows = db.execute(f"SELECT id, stamp, damaged FROM {S}sessions WHERE damaged IS NOT NULL").fetchall()
        return {sid: (stamp, why) for sid, stamp, why in rows}

    def session(self, session_id: str) -> SessionRow | None:
        with self._reading() as db:
            row = db.execute(f"SELECT {', '.join(SESSION_COLUMNS)} FROM {S}sessions WHERE id = %s",
                             (session_id,)).fetchone()
        return None if row is None else session_of(row)

    def _forget(self, db: psycopg.Connection[Any], session_id: str, from_turn: int) -> None:
        for table in ("docs", "turns"):
            db.execute(f"DELETE FROM {S}{table} WHERE session_id = %s AND turn >= %s", (session_id, from_turn))

    def replace(self, session_id: str, from_turn: int, feed: Feed) -> None:
        turn_sql = (f"INSERT INTO {S}turns ({', '.join(TURN_COLUMNS)}) "
                    f"VALUES ({', '.join(['%s'] * len(TURN_COLUMNS))})")
        doc_sql = (f"INSERT INTO {S}docs (session_id, turn, step, kind, ref, started, body, tsv) "
                   "VALUES (%s, %s, %s, %s, %s, %s, %s, to_tsvector('simple', %s))")
        with self._writing() as db:
            self._forget(db, session_id, from_turn)
            with db.cursor() as cursor:
                for turn, docs in feed.turns():
                    cursor.execute(turn_sql, turn_values(session_id, turn))
                    cursor.executemany(doc_sql, [(session_id, doc.turn, doc.step, doc.kind, doc.ref, turn.started,
                                                  piece, words) for doc, piece, words in doc_values(docs)])
            self._keep(db, feed.row())

    def _keep(self, db: psycopg.Connection[Any], row: SessionRow) -> None:
        columns = ", ".join(SESSION_COLUMNS)
        updates = ", ".join(f"{c} = excluded.{c}" for c in SESSION_COLUMNS[1:])
        values = session_values(row)
        db.execute(f"INSERT INTO {S}sessions ({columns}) VALUES ({', '.join(['%s'] * len(SESSION_COLUMNS))}) "
                   f"ON CONFLICT (id) DO UPDATE SET {updates}", values)

    def damaged(self, row: SessionRow) -> None:
        with self._writing() as db:
            self._forget(db, row.id, 0)
            self._keep(db, row)

    def drop(self, session_ids: Sequence[str]) -> None:
        if not session_ids:
            return
        with self._writing() as db:
            for table, column in (("docs", "session_id"), ("turns", "session_id"), ("sessions", "id")):
                db.execute(f"DELETE FROM {S}{table} WHERE {column} = ANY(%s)", (list(session_ids),))

    def relink(self) -> None:
        with self._writing() as db:
            sql = relink_sql(S)
            for _ in range(RELINK_ROUNDS):
                if db.execute(sql).rowcount == 0:
                    break

    def search(self, query: Query, filters: Filters, limit: int) -> list[Hit]:
        conditions, args = filters.where("%s")
        where = "".join(f" AND {c}" for c in conditions)
        # The texts that match, the newest RANKED of them (filters applied) ranked; then
        # one hit per turn as it ran: a fork's copy of it is one with the original (whose
        # best text is picked where the original holds one the filters keep). Sequential
        # scans are off (a seq scan would read every text's tsvector, out of line for a
        # long one: 10,000 sessions' outputs take seconds); ordered by the turn's start
        # (what `docs.started` copies), the planner may walk `turns_started` newest first
        # and stop at RANKED, checking a few texts (a common word or a phrase: 150 -> 7 ms
        # on 10,000 sessions), or take the GIN index's matches (a rare word), as the
        # query's own values tell it: never a prepared plan (`prepare=False`), whose
        # generic plan cannot tell a rare word from a common one.
        joins = f" JOIN {S}turns t ON t.session_id = d.session_id AND t.turn = d.turn" + (
            f" JOIN {S}sessions s ON s.id = d.session_id" if conditions else "")
        sql = (f"WITH c AS MATERIALIZED (SELECT d.id FROM {S}docs d{joins} WHERE d.tsv @@ to_tsquery('simple', %s)"
               f"{where} ORDER BY t.started DESC, d.id DESC LIMIT %s) "
               "SELECT * FROM (SELECT DISTINCT ON (coalesce(t.origin, d.session_id), d.turn) d.session_id, "
               "d.turn, d.kind, d.step, d.ref, ts_rank_cd(d.tsv, q) AS score, s.title, s.cwd, s.agent, t.started, "
               "t.model, t.state, t.reason, d.id, coalesce(t.origin, d.session_id) AS origin "
               f"FROM c JOIN {S}docs d ON d.id = c.id JOIN {S}turns t ON t.session_id = d.session_id "
               f"AND t.turn = d.turn JOIN {S}sessions s ON s.id = d.session_id, to_tsquery('simple', %s) q "
               "ORDER BY coalesce(t.origin, d.session_id), d.turn, t.origin IS NOT NULL, score DESC, d.id) best "
               "ORDER BY score DESC, started DESC LIMIT %s")
        match = tsquery(query)
        with self._reading() as db, db.transaction():
            db.execute("SET LOCAL enable_seqscan = off")  # the GIN index, however many texts match
            many = db.execute(f"SELECT count(*) >= %s FROM (SELECT 1 FROM {S}docs WHERE tsv @@ "
                              "to_tsquery('simple', %s) LIMIT %s) x",
                              (WALK_FROM, tsquery(query, near=" & "), WALK_FROM), prepare=False).fetchone()
            if many is not None and many[0]:
                # Many texts match: walking the turns newest first finds RANKED of them
                # after a few, where the planner, misjudging a phrase or a filter (it
                # cannot count what a phrase matches), would check every text the
                # filters keep, or every match (phrase + 3 filters on 10,000 sessions:
                # 60 -> 15 ms).
                for setting in ("bitmapscan", "hashjoin", "mergejoin", "sort"):
                    db.execute(f"SET LOCAL enable_{setting} = off")
            rows = db.execute(sql, [match, *args, max(RANKED, limit * PER_HIT), match, limit],
                              prepare=False).fetchall()
            hits = [hit_of(row, float(row[5])) for row in rows]
            bodies = dict(db.execute(f"SELECT id, body FROM {S}docs WHERE id = ANY(%s)",
                                     ([h.doc_id for h in hits],)).fetchall()) if hits else {}
            origins = sorted({hit.origin for hit in hits})
            if origins:
                name_copies(hits, db.execute(copies_query(len(origins), "%s", S), origins * 2).fetchall())
        for hit in hits:
            hit.snippet, hit.marks = snippet(bodies.get(hit.doc_id, ""), query)
        return hits

    def open_turns(self, filters: Filters, by: str) -> list[tuple[Any, str]]:
        sql, args = open_turns_query(filters, by, "%s", S)
        with self._reading() as db:
            return [(row[0], row[1]) for row in db.execute(sql, args)]

    def stats(self, filters: Filters, by: str) -> list[StatsRow]:
        sql, args = stats_query(filters, by, "%s", S)
        with self._reading() as db:
            return stats_rows(db.execute(sql, args).fetchall())

    def close(self) -> None:
        self.unlock()
        db, self._db = self._db, None
        if db is not None:
            db.close()


class PgBriefs(ReadOnlyBriefs):
    """The index's tables opened read-only for `sessions list` (see
    session.search.base.Briefs): never made; tables of another format, or none, are
    not read; any failure is "nothing to trust" (the logs are read instead)."""

    errors = (psycopg.Error, StoreIOError, *ReadOnlyBriefs.errors)

    def __init__(self, conninfo: str) -> None:
        super().__init__()
        self.conninfo = conninfo

    def _open(self) -> psycopg.Connection[Any] | None:
        try:
            db = connect(self.conninfo, purpose="sessions")
        except StoreIOError:
            return None
        try:
            db.execute("SET default_transaction_read_only = on")
            found = db.execute("SELECT to_regclass('acp_bridge_search.meta'), "
                               "to_regclass('acp_bridge_search.turns'), "
                               "to_regclass('acp_bridge_search.sessions')").fetchone()
            if found is None or not all(found):
                db.close()
                return None
            row = db.execute(f"SELECT value FROM {S}meta WHERE key = 'format'").fetchone()
        except psycopg.Error:
            db.close()
            return None
        if row is None or row[0] != FORMAT:
            db.close()
            return None
        return db

    def _rows(self, db: psycopg.Connection[Any], session_ids: list[str]) -> list[Sequence[Any]]:
        return db.execute(brief_query(" = ANY(%s)", S), (session_ids, session_ids)).fetchall()
