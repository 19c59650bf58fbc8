"""The search index file of a file store (session.search.fts) opened read-only, for
`sessions list` (session.search.base.Briefs): apart from fts.py so that the list's
path imports neither the writer's side nor the SQLite store's reader."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from session.search.base import FORMAT
from session.search.sql import ReadOnlyBriefs, brief_query


class FtsBriefs(ReadOnlyBriefs):
    """The index file at `path` opened read-only for `sessions list` (see
    session.search.base.Briefs): a missing file is not made, a damaged one or one of
    another format or store is not trusted (and left for the indexer to make again)."""

    CHUNK = 500  # ids per query (SQLite's limit on parameters is 32,766 here, 999 in old builds)
    errors = (sqlite3.Error, *ReadOnlyBriefs.errors)

    def __init__(self, path: Path, identity: str) -> None:
        super().__init__()
        self.path = path.absolute()
        self.identity = identity

    def _open(self) -> sqlite3.Connection | None:
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
        return db

    def _rows(self, db: sqlite3.Connection, session_ids: list[str]) -> list[Sequence[Any]]:
        rows: list[Sequence[Any]] = []
        for start in range(0, len(session_ids), self.CHUNK):
            chunk = session_ids[start:start + self.CHUNK]
            rows += db.execute(brief_query(f" IN ({', '.join('?' * len(chunk))})"), chunk * 2).fetchall()
        return rows
