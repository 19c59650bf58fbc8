"""The title `/title` gave a JSONL session, kept beside its append-only log.

A JSONL log never rewrites its header, and `list` reads only the head of each log, so
the last `config/set session/title` (session.titles.session_title) is kept in a
small file, `titles/<id>.json`, replaced whole (session.files.publish). The log is the
truth; the file says one of

    {"title": T}               settled: T is the last title the log sets
    {"title": T, "from": N}    pending: T was, and the log from byte N on may set a
                               later one (a reader scans that part of the log for it)

(T is null for a session no `/title` had named yet.) The owner publishes `pending`
before it appends a batch that sets a title, and `settled` once that batch is durable,
so a crash anywhere in between leaves a pending file: readers scan from N (what the
owner had not synced when it died: a turn's events at most) and the next load settles
it. A write that fails leaves it pending too, until the next durable write. A session
never titled has no file, and `list` finds the few that do with one scan of `titles/`.

A fork's file is published before its log: a crash in between leaves a file that names
no session, never a fork whose title is lost. The fork holds a lock on its file until
its log is published (`keep_for_fork`), so that such a file, left by a fork killed
while it copied, is told from one whose fork is still at work, and removed by the next
fork or list of the store (`sweep`: both scan the folders anyway, an open does not).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import BinaryIO, NamedTuple

import orjson

from session.backends.session_ids import is_session_id
from session.errors import StoreIOError
from session.events import CONFIG_SET, Event
from session.files import held_by_nobody, private_dir, publish, publish_held
from session.titles import last_set_title, set_title

TITLES = "titles"  # the folder, under the store's
# How a stored `config/set` line starts (session.backends.base.event_line writes every line).
_SET_HEAD = b'{"type":"%s",' % CONFIG_SET.encode()


class Kept(NamedTuple):
    title: str | None  # the last title set, as far as the file knows
    pending: int | None  # where in the log a later one may be (None: settled)


def title_path(titles_dir: Path, session_id: str) -> Path:
    return titles_dir / f"{session_id}.json"


def kept_ids(titles_dir: Path) -> set[str]:
    """The sessions that have a title file: one scan of the folder, no file read."""
    try:
        entries = os.scandir(titles_dir)
    except (FileNotFoundError, NotADirectoryError):
        return set()
    with entries:
        return {entry.name[:-5] for entry in entries
                if entry.name.endswith(".json") and is_session_id(entry.name[:-5])}


def read_kept(path: Path) -> Kept | None:
    """The title file at `path`; None when there is none. A file that cannot be read
    whole counts as pending from the log's start: the log says."""
    try:
        value = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError):
        return Kept(None, 0)
    if not isinstance(value, dict):
        return Kept(None, 0)
    title, start = value.get("title"), value.get("from")
    return Kept(title if isinstance(title, str) and title else None,
                start if type(start) is int and start >= 0 else None)


def scan_sets(f: BinaryIO, start: int, end: int | None = None) -> str | None:
    """The last title the log `f` sets in its whole lines from byte `start` (a line's
    start) up to `end` (the end of the file without one); a torn line sets nothing."""
    f.seek(start)
    found: str | None = None
    at = start
    for line in f:
        at += len(line)
        if (end is not None and at > end) or not line.endswith(b"\n"):
            break
        if line.startswith(_SET_HEAD):
            with contextlib.suppress(orjson.JSONDecodeError):
                found = set_title(orjson.loads(line)) or found
    return found


def kept_title(titles_dir: Path, session_id: str, log: Path) -> str | None:
    """The last title `/title` gave the session as its files say now (a reader's: a
    pending file is resolved from the log, not settled); None when it was never given."""
    kept = read_kept(title_path(titles_dir, session_id))
    if kept is None or kept.pending is None:
        return None if kept is None else kept.title
    try:
        with open(log, "rb") as f:
            return scan_sets(f, kept.pending) or kept.title
    except OSError:
        return kept.title


def keep(titles_dir: Path, session_id: str, title: str | None, *, pending: int | None) -> None:
    """Publish the session's title file (module docstring). Raises StoreIOError."""
    content: dict[str, object] = {"title": title}
    if pending is not None:
        content["from"] = pending
    publish(title_path(private_dir(titles_dir), session_id), orjson.dumps(content),
            session_id=session_id, replace=True)


def keep_for_fork(titles_dir: Path, session_id: str, title: str) -> int:
    """Publish a fork's title file, before its log: a descriptor holding a lock on it
    is returned, to be closed once the log is published (or has failed). Raises
    StoreIOError."""
    return publish_held(title_path(private_dir(titles_dir), session_id), orjson.dumps({"title": title}),
                        session_id=session_id)


def sweep(titles_dir: Path, sessions_dir: Path, candidates: set[str]) -> None:
    """Remove the title files of forks killed before their log was published: of the
    `candidates` (sessions with a title file and, when looked, no log), each whose
    session still has no log and whose fork holds no lock on it. Nothing is said of a
    file that cannot be removed (a read-only store): it names no session."""
    for session_id in candidates:
        log = sessions_dir / f"{session_id}.jsonl"
        path = title_path(titles_dir, session_id)
        if not log.exists() and held_by_nobody(path) and not log.exists():  # again: done meanwhile?
            with contextlib.suppress(OSError):
                path.unlink()


def forget(titles_dir: Path, session_id: str) -> None:
    """Remove the session's title file, if it has one (its log is gone)."""
    with contextlib.suppress(FileNotFoundError):
        title_path(titles_dir, session_id).unlink()


class TitleKeeper:
    """The owner's side: the title file kept true as batches are written (module
    docstring). `before` each write, `synced` after each durable one, `rolled_back`
    after a failed one."""

    def __init__(self, titles_dir: Path, session_id: str, title: str | None, *,
                 pending: bool = False) -> None:
        self._dir, self._sid = titles_dir, session_id
        self.durable = title  # the last title the durable log sets
        self._written = title  # ... and the log as written (not yet durable)
        self._pending = pending  # the file says `pending`

    @classmethod
    def opened(cls, titles_dir: Path, session_id: str, log: Path, good_end: int) -> TitleKeeper:
        """At a load: the file read, and a pending one (a crash, a failed write) settled
        from the log's good records (up to `good_end`, where a torn tail starts)."""
        kept = read_kept(title_path(titles_dir, session_id))
        if kept is None or kept.pending is None:
            return cls(titles_dir, session_id, None if kept is None else kept.title)
        try:
            with open(log, "rb") as f:
                title = scan_sets(f, kept.pending, good_end) or kept.title
        except OSError as exc:
            raise StoreIOError(f"session {session_id}: could not read the log for its title: "
                               f"{exc.strerror or exc}", session_id=session_id, errno=exc.errno) from exc
        keeper = cls(titles_dir, session_id, title, pending=True)
        keeper.synced()
        return keeper

    def before(self, batch: list[Event], durable_size: int) -> None:
        """Before `batch` is appended: the file made pending if the batch sets a title
        (from `durable_size`: the bytes after it are not durable, and none of those
        already written sets one). Raises StoreIOError (nothing was appended)."""
        named = last_set_title(batch)
        if named is None:
            return
        if not self._pending:
            keep(self._dir, self._sid, self.durable, pending=durable_size)
            self._pending = True
        self._written = named

    def synced(self) -> None:
        """What was written is durable: a pending file settled. If it cannot be written
        it stays pending (readers scan; the next durable write tries again)."""
        self.durable = self._written
        if self._pending:
            try:
                keep(self._dir, self._sid, self.durable, pending=None)
            except StoreIOError:
                return
            self._pending = False

    def rolled_back(self) -> None:
        """The log is back at its durable point: what was written since is gone."""
        self._written = self.durable
