"""The rows of `acp-bridge sessions list` (`Row`, and what it shows of a session: `Brief`),
and the two ways to make one without reading the session's log: from the search index's
fresh rows (`Summaries`), or from the outline a store keeps of a log it can vouch for
(`Outlines`: PostgreSQL's checked sessions). Either gives the bytes the log would
(tests/test_sessions_list_index.py, tests/test_sessions_list_outline.py); anything
they cannot vouch for is read from its log (acp_bridge.cli.sessions.listing)."""

from __future__ import annotations

import typing
from typing import Generic, TypeVar

from acp_bridge.cli.sessions.view import View, last_status

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Any

    from acp_bridge.cli.sessions.source import Source
    from session import Owner
    from session.backends.base import Outline, Stamp
    from session.search.base import Briefs, SessionBrief

T = TypeVar("T")


class Brief:
    """What `list` shows of a session, and nothing more: a row of 10,000 must not keep
    its last turn's events and text (bench/README.md, "At scale"). Made from its `View`
    (`of_view`), from the search index's rows (`Summaries`) or from the store's outline
    of its log (`Outlines`)."""

    __slots__ = ("_status", "last", "owner", "owner_pid", "turn_count", "usage")

    def __init__(self, last: LastTurn | None, owner: Owner | tuple[str, int | None], turn_count: int,
                 usage: dict[str, int]) -> None:
        self.last = last
        self.owner: str = owner[0]
        self.owner_pid: int | None = owner[1]
        self._status = last_status(last, self.owner)
        self.turn_count, self.usage = turn_count, usage

    @classmethod
    def of_view(cls, view: View) -> Brief:
        last = view.last
        return cls(None if last is None else LastTurn(last.number, last.reason, last.end_on_disk),
                   (view.owner, view.owner_pid), view.turn_count, view.usage)

    def status(self) -> tuple[str | None, str]:
        return self._status


class LastTurn(typing.NamedTuple):
    number: int
    reason: Mapping[str, Any] | None
    end_on_disk: bool


class Row:
    """One `list` entry: a readable session (`view`, its Brief), or one that cannot be
    read (`damaged` says why, with what its header still says; `unreadable`: not
    damaged but refused, permission denied)."""

    __slots__ = ("damaged", "header", "id", "title", "unreadable", "updated", "view")

    def __init__(self, sid: str, header: dict[str, Any] | None, updated: int | None,
                 title: str | None, view: Brief | None = None, damaged: str | None = None,
                 unreadable: bool = False) -> None:
        self.id = sid
        self.header = header or {}
        self.updated = updated
        self.title = title
        self.view = view
        self.damaged = damaged
        self.unreadable = unreadable

    @property
    def status(self) -> str:
        """What `list` says of a row it could not read: `unreadable` or `damaged`."""
        return "unreadable" if self.unreadable else "damaged"


class Ahead(Generic[T]):
    """What `fetch` says of the ids a list asks for, one at a time in `order`, fetched a
    chunk at a time from where the asked id stands (a first page: one fetch). An id
    asked for again, or passed over, has nothing; `fetch` returning None stops it."""

    def __init__(self, order: Sequence[str], fetch: Callable[[Sequence[str]], dict[str, T] | None],
                 chunk: int) -> None:
        self._order, self._fetch, self._chunk = order, fetch, max(1, chunk)
        self._got: dict[str, T] = {}
        self._read = 0  # how much of `order` was asked for
        self._position: dict[str, int] | None = None  # where each id is in `order`, if needed
        self._stopped = False

    def pop(self, sid: str) -> T | None:
        if self._stopped:
            return None
        if sid not in self._got and self._read < len(self._order):
            if self._order[self._read] == sid:  # the next one not asked for yet, as a list goes
                at = self._read
            else:
                if self._position is None:
                    self._position = {s: n for n, s in enumerate(self._order)}
                at = self._position.get(sid, -1)
            if at < self._read:  # asked for already: nothing of it
                return None
            chunk = self._order[at:at + self._chunk]
            self._read = at + len(chunk)
            got = self._fetch(chunk)
            if got is None:
                self._stopped = True
                return None
            self._got.update(got)
        return self._got.pop(sid, None)


def updated_of(backend: str, stamp: Stamp | None) -> int:
    """When a session last changed (epoch ms) by its stamp: a SQL store's last event
    time; a JSONL log's mtime, which is never before its last event's time (the upper
    bound `newest_first` orders by; `updated_at` is the time itself); 0 without one."""
    if stamp is None or len(stamp) < 2:
        return 0
    return stamp[1] // 1_000_000 if backend == "jsonl" else stamp[1]


def updated_at(source: Source, sid: str, stamp: Stamp | None) -> int:
    """A session's `updatedAt`: its last event's time on every backend (a JSONL log's
    read from its tail, one small read: a copied store keeps its times)."""
    upper = updated_of(source.name, stamp)
    if source.name != "jsonl" or stamp is None or not stamp:
        return upper
    from session.backends.jsonl_time import tail_time

    return tail_time(source.reader.path_of(sid), stamp[0], upper)  # type: ignore[attr-defined]


def newest_first(source: Source, stamps: Mapping[str, Stamp], limit: int) -> list[str]:
    """The ids of `stamps`, the `limit` newest by `updatedAt` first (in that order), the
    rest after them. A SQL store's stamps hold that time. A JSONL log's mtime is an upper
    bound of it: the logs are taken by mtime, newest first, and their times read from
    their tails until the next mtime is older than the `limit`-th newest time read, so
    an untouched store reads about `limit` tails, and a copied one (every mtime the
    copy's) all of them, in the right order."""
    import heapq

    ids = sorted(stamps, key=lambda sid: (-updated_of(source.name, stamps.get(sid)), sid))
    if source.name != "jsonl" or limit <= 0:
        return ids
    times: dict[str, int] = {}
    best: list[int] = []  # a min-heap of the `limit` newest times read
    for sid in ids:
        if len(best) >= limit and updated_of(source.name, stamps[sid]) < best[0]:
            break  # this log, and every one after it, changed before the `limit`-th newest
        times[sid] = updated_at(source, sid, stamps[sid])
        if len(best) < limit:
            heapq.heappush(best, times[sid])
        else:
            heapq.heappushpop(best, times[sid])
    read = sorted(times, key=lambda sid: (-times[sid], sid))
    return read + ids[len(read):]


class _Owners:
    """The owners of a chunk's sessions, asked for in one pass (`StoreReader.owners`)
    when the chunk is fetched; a row not prefetched asks for its own."""

    _source: Source

    def __init__(self) -> None:
        self._owners: dict[str, Owner] = {}

    def _prefetch(self, sids: Iterable[str]) -> None:
        self._owners.update(self._source.reader.owners(list(sids)))

    def _owner(self, sid: str) -> Owner:
        return self._owners.pop(sid) if sid in self._owners else self._source.owner(sid)


class Summaries(_Owners):
    """The `list` rows of sessions whose search index rows are fresh (session.search:
    the `sessions` row and its `turns`' sums), read a chunk at a time in list order.
    A row is trusted only if its stamp is the session's stamp now, its log was read
    whole and checked as a load checks it (`SessionRow.checked`), no event is held
    outside that stamp (`StoreReader.unstamped`: SQLite's tail), and its last turn
    ended; else (and with no index, one of another format or store, or a damaged one)
    `row` is None and the log is read. Nothing here makes or updates the index: that is
    the indexer's, whose first build would cost a list minutes."""

    CHUNK = 200

    def __init__(self, source: Source, stamps: dict[str, Stamp], order: Sequence[str]) -> None:
        super().__init__()
        self._source, self._stamps = source, stamps
        self._index: Briefs | None = None
        self._opened = False  # on first use: a list whose rows all come otherwise opens no index
        self._unstamped: set[str] | None = None
        self._ahead: Ahead[SessionBrief] = Ahead(order, self._briefs, self.CHUNK)

    def _briefs(self, chunk: Sequence[str]) -> dict[str, SessionBrief] | None:
        got = self._index.briefs(chunk) if self._index is not None else None
        if got is None:  # nothing to trust: every log is read
            self.close()
        else:
            self._prefetch(got)
        return got

    def row(self, sid: str) -> Row | None:
        if not self._opened:
            from acp_bridge.cli.sessions.indexer import open_briefs

            self._opened = True
            self._index = open_briefs(self._source.name, self._source.location)
        if self._index is None:
            return None
        brief = self._ahead.pop(sid)
        if brief is None or not self._fresh(sid, brief):
            return None
        import orjson

        try:
            header = orjson.loads(brief.row.header)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(header, dict):
            return None
        last = None
        if brief.last_turn is not None:
            last = LastTurn(brief.last_turn, brief.last_reason, True)
        view = Brief(last, self._owner(sid), brief.turns, brief.tokens)
        return Row(sid, header, updated_at(self._source, sid, self._stamps[sid]), brief.row.title, view)

    def _fresh(self, sid: str, brief: SessionBrief) -> bool:
        row = brief.row
        if row.stamp != self._stamps.get(sid) or row.damaged is not None or not row.checked:
            return False
        if row.title is not None and "\ufffd" in row.title:
            return False  # maybe a NUL the index's text column could not hold: the log has it

        if brief.turns and (brief.last_turn != brief.turns or brief.last_state == "open"
                            or brief.last_reason is None):
            return False  # an open last turn: running or cut short, for its log to tell
        if self._unstamped is None:
            self._unstamped = self._source.reader.unstamped()
        return sid not in self._unstamped

    def close(self) -> None:
        index, self._index = self._index, None
        if index is not None:
            index.close()


class Outlines(_Owners):
    """The `list` rows of sessions whose store vouches for every stored event
    (`StoreReader.outlines`: on PostgreSQL, each row written by an agent that checked it
    first, or checked by the last load), built from their outlines by the turn rules a
    log's view uses (`TurnBuilder`, `add_usage`), asked for a chunk at a time in list
    order. A row is made only if the outline's stamp is the one the list ordered by
    (nothing written since), its title is whole and its last turn ended; else `row` is
    None and the log is read whole and checked."""

    CHUNK = 200

    def __init__(self, source: Source, stamps: dict[str, Stamp], order: Sequence[str], chunk: int) -> None:
        super().__init__()
        self._source, self._stamps = source, stamps
        self._ahead: Ahead[Outline] = Ahead(order, self._outlines, min(chunk, self.CHUNK))

    def _outlines(self, chunk: Sequence[str]) -> dict[str, Outline]:
        got = self._source.reader.outlines(chunk)
        if got:
            self._prefetch(got)
        return got

    def row(self, sid: str) -> Row | None:
        from acp_bridge.cli.sessions.text import add_usage
        from acp_bridge.cli.sessions.turns import TurnBuilder
        from session import SessionCorruptError
        from session.scan import parse_header

        outline = self._ahead.pop(sid)
        if outline is None or outline.stamp != self._stamps.get(sid):
            return None
        try:
            header = parse_header(sid, outline.header, "the sessions row")
        except SessionCorruptError:
            return None  # for its log's reading to say
        builder = TurnBuilder(keep=False)
        usage: dict[str, int] = {}
        for event in outline.events:
            turn = builder.feed(event)
            if turn is not None:
                add_usage(usage, turn.usage)
        if builder.turn is not None:
            return None  # an open last turn: running or cut short, for its log to tell
        title = outline.title or header.get("title") or None
        if (title is None and builder.count) or (isinstance(title, str) and "\ufffd" in title):
            return None  # no title kept (a first prompt without text), or one a column could not hold
        last = builder.turns[-1] if builder.turns else None
        view = Brief(None if last is None else LastTurn(last.number, last.reason, True),
                     self._owner(sid), builder.count, usage)
        return Row(sid, dict(header), updated_at(self._source, sid, self._stamps[sid]), title, view)
