"""A session store as `acp-bridge sessions` reads it: through `session`'s read-only
open (`session.open_reader`), which never locks, repairs or creates anything. `list`
reads each log in one streamed pass (`summarize`), checked as a load checks, keeping
only its last turn, the count of the turns before it and their tokens (`show` streams
too: walk.py; `read` is the whole-log form the tests compare them with). Ids are
resolved here too (full ids, or unique prefixes)."""

from __future__ import annotations

from acp_bridge.cli.sessions.text import add_usage
from acp_bridge.errors import AmbiguousIdError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from pathlib import Path

    from session import Event, Header, InvariantTracker, Owner, SessionPeek
    from session.scan import Damage, Locate, TornTail

# A session id prefix must be at least this long (as with git).
MIN_PREFIX = 4


class Stored:
    """One session as stored, read without ownership; `torn` is what loading would cut."""

    __slots__ = ("earlier_turns", "earlier_usage", "events", "header", "id", "locate", "title",
                 "torn", "tracker", "updated", "where")

    def __init__(
        self, sid: str, header: Header, events: list[Event], torn: TornTail | None,
        updated: int, title: str | None, where: str, locate: Locate,
        earlier_turns: int = 0, earlier_usage: dict[str, int] | None = None,
        tracker: InvariantTracker | None = None,
    ) -> None:
        # `events` is every stored event, or (a summary, for `list`) the last turn's,
        # with the number of turns before it and their tokens. `tracker` is where the
        # log stands once checked (a summary is; a whole read, by `view.check_stored`).
        self.tracker = tracker
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


class Source:
    """A store opened read-only, by backend name and location (a folder; for postgres a
    connection string, shown as `root` without its password)."""

    def __init__(self, name: str, location: Path | str) -> None:
        from session import open_reader, shown_store

        self.name = name
        self.location = location  # as given (a connection string keeps its password)
        self.root = shown_store(location)
        self.reader = open_reader(name, location)

    def ids(self) -> list[str]:
        return self.reader.ids()

    def read(self, sid: str) -> Stored:
        """Every stored event of a session, and the torn tail a load would cut."""
        from session.backends.base import read_stored

        stream = self.reader.stream(sid)
        stored = read_stored(stream)
        title = stream.title or title_of(stored.events)
        return Stored(sid, stored.header, stored.events, stored.torn, stream.updated, title,
                      stream.where, stored.locate)

    def summary(self, sid: str) -> Stored:
        """`read` in one streamed pass, checked as a load checks (SessionCorruptError
        otherwise), keeping only the last turn's events (see `summarize`)."""
        from session.backends.base import with_size

        stream = self.reader.stream(sid)
        try:
            summary = summarize(sid, stream.blocks(), stream.locate)
            torn = with_size(summary.torn, stream)
        finally:
            stream.close()
        title = stream.title or summary.first_title
        return Stored(sid, stream.header, summary.last_turn, torn, stream.updated, title,
                      stream.where, stream.locate, summary.earlier_turns, summary.earlier_usage,
                      summary.tracker)

    def raw_chunks(self, sid: str) -> Iterator[bytes]:
        """The stored form (`export --format jsonl`), a piece at a time."""
        return self.reader.raw_chunks(sid)

    def peek(self, sid: str) -> SessionPeek:
        """What the store says of a session it cannot read whole, best effort."""
        return self.reader.peek(sid)

    def owner(self, sid: str) -> Owner:
        return self.reader.owner(sid)

    def close(self) -> None:
        self.reader.close()


def title_of(events: list[Event]) -> str | None:
    """The title of a session without a stored one: its first prompt's text, whatever
    comes before it (the stores' rule: session.titles.first_prompt_title)."""
    from session.titles import first_prompt_title

    for event in events:
        if event["type"] == "user/message":
            return first_prompt_title(event)
    return None


def resolve_id(source: Source, given: str) -> str:
    """A full id, or the one stored id that starts with a prefix of >= 4 characters
    (match_prefix; the store is scanned only for a prefix)."""
    text = given.strip().lower()
    return match_prefix(given, () if is_full_id(text) else source.ids())


def is_full_id(text: str) -> bool:
    from session import is_session_id

    return is_session_id(text.strip().lower())


def match_prefix(given: str, ids: Iterable[str]) -> str:
    """`given` as a full session id, or the one of `ids` it is a prefix of: the one rule
    for ids wherever a person types one (`sessions show/export/fork`, the served URLs,
    `chat --load`, chat's `/load`; docs/cli.md, "Ids"). Raises InvalidSessionIdError (not
    an id; a prefix shorter than MIN_PREFIX, said so), SessionNotFoundError (no id starts
    with it) or AmbiguousIdError (several do, listed)."""
    import re

    from session import InvalidSessionIdError, SessionNotFoundError, validate_session_id

    text = given.strip().lower()
    if is_full_id(text):
        return text
    if not re.fullmatch(r"[0-9a-f][0-9a-f-]*", text):
        return validate_session_id(given)  # raises InvalidSessionIdError
    if len(text) < MIN_PREFIX:
        raise InvalidSessionIdError(f"session id prefix {text!r} is too short: a prefix needs at least "
                                    f"{MIN_PREFIX} characters", session_id=None, given=text)
    matches = sorted({sid for sid in ids if sid.startswith(text)})
    if not matches:
        raise SessionNotFoundError(f"no session id starts with {text}", session_id=None)
    if len(matches) > 1:
        raise AmbiguousIdError(f"session id prefix {text} is ambiguous: {', '.join(matches)}")
    return matches[0]


# --- summaries for `list` ---------------------------------------------------------------
#
# `list` needs, per session, the number of turns, the state of the last one and the
# total tokens; reading every log whole for that (as `show` does) would take gigabytes
# for a session of hundreds of megabytes (19 MB of peak RSS to list a 60 MB session,
# which had taken 145 MB). `summarize` reads a log a block at a time, checks it as a
# load would (the torn-tail rule and the invariants: a log the agent would refuse is
# listed as damaged), and keeps only the last turn's events (its chunks aside: their text
# is not listed), the count of the turns before it, their tokens and the session's
# first prompt (its title).


class Summary:
    __slots__ = ("earlier_turns", "earlier_usage", "first_title", "last_turn", "torn", "tracker")

    def __init__(self, tracker: InvariantTracker) -> None:
        self.tracker = tracker  # where the log stands: the closers of an open last turn read it
        self.last_turn: list[Event] = []  # events since the last turn/start
        self.earlier_turns = 0
        self.earlier_usage: dict[str, int] = {}
        self.first_title: str | None = None
        self.torn: TornTail | None = None


def summarize(sid: str, blocks: Iterable[list[Event | Damage]], locate: Locate) -> Summary:
    """Raises SessionCorruptError, worded as `SessionStore.load` words it."""
    from session import InvariantError, InvariantTracker
    from session.events import ASSISTANT_CHUNK, ASSISTANT_MESSAGE, TURN_START, USER_MESSAGE
    from session.loading import invariant_corruption
    from session.scan import TailSplitter
    from session.titles import first_prompt_title
    from session.typed import typed_all

    splitter = TailSplitter(sid, locate)
    tracker = InvariantTracker(session_id=sid)
    out = Summary(tracker)
    usage_all: dict[str, int] = {}
    usage_last: dict[str, int] = {}
    turns = 0
    seen_prompt = False
    last_chunk: Event | None = None
    for block in blocks:
        events = splitter.feed(block)
        try:
            tracker.feed_stored(events)
        except InvariantError as exc:
            raise invariant_corruption(sid, exc, locate) from None
        for event, ev in zip(events, typed_all(events), strict=True):
            if ev["type"] == TURN_START:
                turns += 1
                out.last_turn = [event]
                usage_last = {}
                continue
            if not turns:  # a wrapped agent's updates before its first turn: no turn's
                continue
            if ev["type"] == ASSISTANT_CHUNK:  # `list` shows no text; a streamed step may be huge
                last_chunk = event
                continue
            out.last_turn.append(event)
            if ev["type"] == ASSISTANT_MESSAGE:
                usage = ev["data"].get("usage")
                if isinstance(usage, dict):
                    add_usage(usage_all, usage)
                    add_usage(usage_last, usage)
            elif ev["type"] == USER_MESSAGE and not seen_prompt:
                seen_prompt = True
                out.first_title = first_prompt_title(event)
    if last_chunk is not None and out.last_turn and last_chunk["seq"] > out.last_turn[-1]["seq"]:
        out.last_turn.append(last_chunk)  # the log's last event: the closers take its time
    out.torn = splitter.finish()
    out.earlier_turns = turns - 1 if out.last_turn else turns
    out.earlier_usage = {k: v - usage_last.get(k, 0) for k, v in usage_all.items()}
    return out
