"""opencode's database read: each session's rows, for the pure reader
(acp_bridge.cli.importer.opencode). Opened read-only (opencode may be running: its
writes are in its WAL, which a reader sees); nothing in it is ever written."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import orjson

from acp_bridge.cli.importer.native import NativeSession
from acp_bridge.cli.importer.opencode import Row, read_session

DB_NAME: Final = "opencode.db"
SQLITE_MAGIC: Final = b"SQLite format 3\x00"


def is_database(head: bytes) -> bool:
    return head.startswith(SQLITE_MAGIC)


def sessions(path: Path) -> Iterator[NativeSession]:
    """Each session of the database at `path`, read. Raises sqlite3.Error (not an
    opencode database, damaged) and OSError."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        db.row_factory = sqlite3.Row
        rows = [dict(row) for row in db.execute("SELECT * FROM session ORDER BY time_created, id")]
        for session in rows:
            sid = session["id"]
            messages = _parsed(db.execute("SELECT * FROM message WHERE session_id = ?", (sid,)))
            parts = _parsed(db.execute("SELECT * FROM part WHERE session_id = ?", (sid,)))
            yield read_session(session, messages, parts, str(path))
    finally:
        db.close()


def _parsed(cursor: sqlite3.Cursor) -> list[Row]:
    out: list[Row] = []
    for row in cursor:
        value: dict[str, Any] = dict(row)
        try:
            data = orjson.loads(value.get("data") or b"null")
        except orjson.JSONDecodeError:
            data = None
        value["data"] = data if isinstance(data, dict) else {}
        out.append(value)
    return out
