"""The search index file of a file store (session.search.fts) opened read-only, for
`sessions list` (session.search.base.Briefs): apart from fts.py so that the list's
path imports neither the writer's side nor the SQLite store's reader."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

from session.search.base import FORMAT, SessionBrief
from session.search.sql import brief_query, briefs_of


class FtsBriefs:
    """The index file at `path` opened read-only for `sessions list` (see
    session.search.base.Briefs): a missing file is not made, a damaged one or one of
    another format or store is not trusted (and left for the indexer to make again)."""

    CHUNK = 500  # ids per query (SQLite's limit on parameters is 32,766 here, 999 in old builds)

    def __init__(self, path: Path, identity: str) -> None:
        self.path = path.absolute()
        self.identity = identity
        self._db: sqlite3.Connection | None = None
        self._failed = False

    def _conn(self) -> sqlite3.Connection | None:
        if self._db is None and not self._failed:
            self._failed = True
            if not self.path.is_file():
                return None
            db = sqlite3.connect(f"{self.path.as_uri()}?mode=ro", uri=True, check_same_thread=False)
            try:
                db.execute("PRAGMA query_only = 1")
                meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            except sqlite3.Error:
                db.close()
                return None
            if meta.get("format") != FORMAT or meta.get("store") != self.identity:
                db.close()
                return None
            self._db, self._failed = db, False
        return self._db

    def briefs(self, session_ids: Sequence[str]) -> dict[str, SessionBrief] | None:
        try:
            db = self._conn()
            if db is None:
                return None
            out: dict[str, SessionBrief] = {}
            for start in range(0, len(session_ids), self.CHUNK):
                chunk = list(session_ids[start:start + self.CHUNK])
                out.update(briefs_of(db.execute(brief_query(f" IN ({', '.join('?' * len(chunk))})"), chunk * 2).fetchall()))
            return out
        except (sqlite3.Error, ValueError, TypeError, AttributeError):  # damaged, or not ours to read
            self.close()
            self._failed = True
            return None

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()
