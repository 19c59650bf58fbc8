"""Reading a session store without touching it, for `acp-bridge sessions`: no lock,
no repair, no folder created (see acp_bridge.cli.sessions.main for the decisions)."""

from __future__ import annotations

import argparse
import os

from acp_bridge.cli.sessions.main import (
    BACKEND_CHOICES,
    MIN_PREFIX,
    _UsageError,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3
    from pathlib import Path
    from typing import Any

    from session.events import Event, Header
    from session.scan import Locate, TornTail




# --- reading the store without touching it ---------------------------------------------


class _Stored:
    """One session as stored, read without ownership; `torn` is what loading would cut."""

    __slots__ = ("earlier_turns", "earlier_usage", "events", "header", "id", "locate", "title",
                 "torn", "updated", "where")

    def __init__(
        self, sid: str, header: Header, events: list[Event], torn: TornTail | None,
        updated: int, title: str | None, where: str, locate: Locate,
        earlier_turns: int = 0, earlier_usage: dict[str, int] | None = None,
    ) -> None:
        # `events` is every stored event, or (a summary, for `list`) the last turn's,
        # with the number of turns before it and their tokens.
        self.earlier_turns = earlier_turns
        self.earlier_usage = earlier_usage or {}
        self.id = sid
        self.locate = locate
        self.header = header
        self.events = events
        self.torn = torn
        self.updated = updated
        self.title = title
        self.where = where


class _Source:
    name = ""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._owners: dict[int, list[tuple[int, int, int]]] | None = None

    def ids(self) -> list[str]:
        raise NotImplementedError

    def read(self, sid: str) -> _Stored:
        raise NotImplementedError

    def summary(self, sid: str) -> _Stored:
        """`read` in one streamed pass, checked as a load checks (SessionCorruptError
        otherwise), keeping only the last turn's events (acp_bridge.cli.sessions.summary)."""
        raise NotImplementedError

    def raw(self, sid: str) -> bytes:
        raise NotImplementedError

    def peek(self, sid: str) -> tuple[dict[str, Any] | None, int | None, str | None]:
        """What the header says (header, updatedAt, title), best effort, for a session
        that cannot be read whole."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def owner(self, sid: str) -> tuple[str, int | None]:
        """("live", pid) if a process holds the session's owner lock, ("none", None) if
        none does, ("unknown", None) if this system does not say. Never takes the lock."""
        lock = self.root / "locks" / f"{sid}.lock"
        try:
            st = os.stat(lock)
        except OSError:
            return "none", None
        if self._owners is None:
            self._owners = _flock_holders()
        if not self._owners and not os.path.exists("/proc/locks"):
            return "unknown", None
        file_pid = _read_pid(lock)
        for major, minor, pid in self._owners.get(st.st_ino, ()):
            same_dev = (major, minor) == (os.major(st.st_dev), os.minor(st.st_dev))
            if same_dev or (file_pid is not None and pid == file_pid):
                return "live", pid
        return "none", None


def _flock_holders() -> dict[int, list[tuple[int, int, int]]]:
    """inode -> [(major, minor, pid)] of the flock locks /proc/locks lists (Linux)."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    out: dict[int, list[tuple[int, int, int]]] = {}
    for line in text.splitlines():
        # "3: FLOCK  ADVISORY  WRITE 4211 fe:00:2162783 0 EOF"; waiters have "->" first.
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK":
            continue
        try:
            major, minor, inode = parts[5].split(":")
            entry = (int(major, 16), int(minor, 16), int(parts[4]))
            out.setdefault(int(inode), []).append(entry)
        except ValueError:
            continue
    return out


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class _JsonlSource(_Source):
    name = "jsonl"

    def _path(self, sid: str) -> Path:
        return self.root / "sessions" / f"{sid}.jsonl"

    def ids(self) -> list[str]:
        from session.backends.base import validate_session_id
        from session.errors import InvalidSessionIdError

        folder = self.root / "sessions"
        if not folder.is_dir():
            return []
        out = []
        for path in folder.iterdir():
            if path.suffix != ".jsonl":
                continue
            try:
                out.append(validate_session_id(path.stem))
            except InvalidSessionIdError:
                continue
        return out

    def _bytes(self, sid: str) -> tuple[bytes, int]:
        from session.errors import SessionNotFoundError

        try:
            with open(self._path(sid), "rb") as f:
                content = f.read()
                mtime = os.fstat(f.fileno()).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid) from None
        return content, mtime

    def raw(self, sid: str) -> bytes:
        return self._bytes(sid)[0]

    def peek(self, sid: str) -> tuple[dict[str, Any] | None, int | None, str | None]:
        import orjson

        try:
            with open(self._path(sid), "rb") as f:
                first = f.readline(1 << 16)
                mtime = os.fstat(f.fileno()).st_mtime_ns // 1_000_000
            header = orjson.loads(first)
        except (OSError, orjson.JSONDecodeError):
            return None, None, None
        if not isinstance(header, dict):
            return None, mtime, None
        title = header.get("title")
        return header, mtime, title if isinstance(title, str) else None

    def summary(self, sid: str) -> _Stored:
        from acp_bridge.cli.sessions.summary import summarize
        from session.backends.jsonl import JsonlStream
        from session.errors import SessionNotFoundError

        path = self._path(sid)

        def opener() -> Any:
            try:
                return open(path, "rb")
            except FileNotFoundError:
                raise SessionNotFoundError(f"session {sid} not found", session_id=sid) from None

        stream = JsonlStream(sid, opener, owner=None)
        try:
            mtime = os.stat(path).st_mtime_ns // 1_000_000
            summary = summarize(sid, stream.blocks(), stream.locate)
            torn = summary.torn
            if torn is not None:
                from session.backends.base import with_size

                torn = with_size(torn, stream)
        finally:
            stream.close()
        title = stream.header.get("title") or summary.first_title
        return _Stored(sid, stream.header, summary.last_turn, torn, mtime, title, str(path),
                       stream.locate, summary.earlier_turns, summary.earlier_usage)

    def read(self, sid: str) -> _Stored:
        from session.backends.jsonl import read_log

        content, mtime = self._bytes(sid)
        stored = read_log(sid, content)
        title = stored.header.get("title") or _title_of(stored.events)
        return _Stored(sid, stored.header, stored.events, stored.torn, mtime, title,
                       str(self._path(sid)), stored.locate)


class _SqliteSource(_Source):
    name = "sqlite"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        from session.backends.sqlite import DB_NAME

        self.path = root / DB_NAME
        self._db: sqlite3.Connection | None = None
        self._empty = False

    def _conn(self) -> sqlite3.Connection | None:
        if self._db is not None or self._empty:
            return self._db
        if not self.path.is_file():
            self._empty = True
            return None
        import sqlite3

        from session.backends.sqlite import SCHEMA_VERSION
        from session.errors import SessionVersionError

        db = sqlite3.connect(self.path.resolve().as_uri() + "?mode=ro", uri=True,
                             isolation_level=None)
        try:
            db.execute("PRAGMA busy_timeout = 5000")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        except BaseException:
            db.close()
            raise
        if version == 0 and tables == 0:  # created, never initialized: no sessions
            db.close()
            self._empty = True
            return None
        if version != SCHEMA_VERSION:
            db.close()
            raise SessionVersionError(
                f"store {self.path} has schema version {version}; this build reads only "
                f"version {SCHEMA_VERSION} (pre-release: no migration)",
                version=version, supported=SCHEMA_VERSION,
            )
        self._db = db
        return db

    def ids(self) -> list[str]:
        db = self._conn()
        if db is None:
            return []
        return [row[0] for row in db.execute("SELECT id FROM sessions")]

    def _snapshot(self, sid: str) -> tuple[tuple[Any, ...], list[Any]]:
        """The session row and its event rows, from one read transaction."""
        from session.backends.sqlite import UPDATED_AT
        from session.errors import SessionNotFoundError

        db = self._conn()
        row = None
        rows: list[Any] = []
        if db is not None:
            db.execute("BEGIN")
            try:
                row = db.execute(
                    f"SELECT header, title, {UPDATED_AT} FROM sessions WHERE id = ?", (sid,)
                ).fetchone()
                if row is not None:
                    rows = db.execute(
                        "SELECT seq, type, time, data FROM events WHERE session_id = ? "
                        "ORDER BY seq", (sid,),
                    ).fetchall()
            finally:
                db.execute("ROLLBACK")
        if row is None:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        return tuple(row), rows

    def summary(self, sid: str) -> _Stored:
        from acp_bridge.cli.sessions.summary import summarize
        from session.backends.sqlite import UPDATED_AT, _row_events
        from session.errors import SessionNotFoundError
        from session.scan import TornTail, parse_header

        db = self._conn()
        if db is None:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        db.execute("BEGIN")  # one snapshot for the row, the events, locate and the sizes
        try:
            row = db.execute(
                f"SELECT header, title, {UPDATED_AT} FROM sessions WHERE id = ?", (sid,)
            ).fetchone()
            if row is None:
                raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
            header = parse_header(sid, row[0], "the sessions row")

            def locate(index: int) -> dict[str, int]:
                found = db.execute("SELECT seq FROM events WHERE session_id = ? ORDER BY seq "
                                   "LIMIT 1 OFFSET ?", (sid, index)).fetchone()
                return {"seq": found[0] if found is not None else index}

            def blocks() -> Any:
                cursor = db.execute("SELECT seq, type, time, data FROM events WHERE session_id = ? "
                                    "ORDER BY seq", (sid,))
                while rows := cursor.fetchmany(1024):
                    yield _row_events(rows)

            summary = summarize(sid, blocks(), locate)
            torn = summary.torn
            if torn is not None:
                size = db.execute(
                    "SELECT coalesce(sum(length(data)), 0) FROM (SELECT data FROM events "
                    "WHERE session_id = ? ORDER BY seq LIMIT -1 OFFSET ?)", (sid, torn.index),
                ).fetchone()[0]
                torn = TornTail(torn.index, torn.where, torn.reason, torn.records, int(size))
        finally:
            db.execute("ROLLBACK")
        title = row[1] or header.get("title") or summary.first_title
        return _Stored(sid, header, summary.last_turn, torn, int(row[2]), title, str(self.path),
                       locate, summary.earlier_turns, summary.earlier_usage)

    def read(self, sid: str) -> _Stored:
        from session.backends.sqlite import _row_event
        from session.scan import TornTail, parse_header, split_tail

        (header_blob, title, updated), rows = self._snapshot(sid)
        header = parse_header(sid, header_blob, "the sessions row")
        items = [_row_event(r) for r in rows]

        def locate(index: int) -> dict[str, int]:
            return {"seq": rows[index][0]}

        events, torn = split_tail(sid, items, locate)
        if torn is not None:
            size = sum(len(r[3] or b"") for r in rows[torn.index:])
            torn = TornTail(torn.index, torn.where, torn.reason, torn.records, size)
        title = title or header.get("title") or _title_of(events)
        return _Stored(sid, header, events, torn, int(updated), title, str(self.path), locate)

    def peek(self, sid: str) -> tuple[dict[str, Any] | None, int | None, str | None]:
        import orjson

        from session.backends.sqlite import UPDATED_AT

        db = self._conn()
        row = None if db is None else db.execute(
            f"SELECT header, title, {UPDATED_AT} FROM sessions WHERE id = ?", (sid,)).fetchone()
        if row is None:
            return None, None, None
        try:
            header = orjson.loads(row[0])
        except (orjson.JSONDecodeError, TypeError):
            header = None
        return header if isinstance(header, dict) else None, row[2], row[1]

    def raw(self, sid: str) -> bytes:
        import orjson

        (header_blob, _, _), rows = self._snapshot(sid)
        out = [_as_bytes(header_blob), b"\n"]
        for seq, etype, stamp, data in rows:
            out.append(b'{"type":%s,"seq":%d,"time":%d,"data":%s}\n' % (
                orjson.dumps(etype), seq, stamp, _as_bytes(data)))
        return b"".join(out)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return b"" if value is None else str(value).encode("utf-8")


def _open_source(args: argparse.Namespace) -> _Source:
    from pathlib import Path

    from session import default_store_dir

    backend = getattr(args, "backend", None) or os.environ.get("ACP_BRIDGE_BACKEND") or "jsonl"
    if backend not in BACKEND_CHOICES:
        raise _UsageError(f"unknown backend {backend!r}; choose one of {', '.join(BACKEND_CHOICES)}")
    store = getattr(args, "store", None)
    root = Path(store) if store else default_store_dir()
    return _JsonlSource(root) if backend == "jsonl" else _SqliteSource(root)


def _title_of(events: list[Event]) -> str | None:
    from session.backends.base import title_from_content

    for event in events[:4]:
        if event["type"] == "user/message":
            return title_from_content(event["data"].get("content"))
    return None


def _resolve_id(source: _Source, given: str) -> str:
    """A full id, or the one stored id that starts with a prefix of >= 4 characters."""
    import re

    from session.backends.base import validate_session_id
    from session.errors import SessionNotFoundError

    text = given.strip().lower()
    if re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", text):
        return text
    if len(text) < MIN_PREFIX or not re.fullmatch(r"[0-9a-f][0-9a-f-]*", text):
        return validate_session_id(given)  # raises InvalidSessionIdError
    matches = sorted(sid for sid in source.ids() if sid.startswith(text))
    if not matches:
        raise SessionNotFoundError(f"no session id starts with {text}", session_id=None)
    if len(matches) > 1:
        raise _UsageError(f"session id prefix {text} is ambiguous: {', '.join(matches)}")
    return matches[0]
