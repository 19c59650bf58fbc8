"""The seam between the live log and the stores: what a backend must do.

A backend stores headers and ordered events, holds one live owner per session, and
implements the durability and repair primitives. Ordering, buffering, validation and
the decision of *when* to be durable live in the live log (session.log), so a backend
(memory, JSONL, SQLite, PostgreSQL) only has to get these few methods right and pass
the shared contract suite in tests/. The ids a store issues, and the files named by
them, are session.backends.session_ids's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple, NotRequired, Protocol, TypedDict

import orjson

from session.errors import SequenceError, StoreIOError
from session.events import Event, Header
from session.files import Owner
from session.scan import Damage, Locate, TailSplitter, TornTail


class Encoded(NamedTuple):
    """An event and its `data` already serialized: encoding happens once, at append,
    so non-JSON data is refused before anything is buffered."""

    event: Event
    data_json: bytes


class SessionSummary(TypedDict):
    id: str
    cwd: str
    title: str | None
    updatedAt: int  # epoch ms
    additionalDirectories: NotRequired[list[str]]


@dataclass(frozen=True)
class StoredLog:
    """A log as read back, before repair: its good events, any torn tail, and where
    each event is stored (for errors that must say where)."""

    header: Header
    events: list[Event]
    torn: TornTail | None
    locate: Locate


class StoredStream(Protocol):
    """A stored log read block by block, before repair, so that a long log is never
    held in memory at once. Read `header`, iterate `blocks()` once, then `close()`."""

    header: Header

    def blocks(self) -> Iterator[list[Event | Damage]]:
        """Every stored record after the header, in order, a block at a time."""

    def locate(self, index: int) -> dict[str, int]:
        """Where the record of index `index` (counted from 0, already read) is stored."""

    def size_from(self, index: int) -> int:
        """Bytes stored from record `index` to the end (after `blocks` is exhausted)."""

    def close(self) -> None:
        """Let go of what reading holds (file, cursor). Idempotent."""


class OwnedStream(StoredStream, Protocol):
    """A stored stream read by its owner: `Backend.open_stream` took the lock."""

    def session(self, next_seq: int, torn: TornTail | None) -> BackendSession:
        """The owned handle, once every block was read: `next_seq` events are good,
        `torn` (if any) is still stored and is for `repair` to cut."""

    def release(self) -> None:
        """Give up ownership without a handle (the load failed). Idempotent."""


class ReadStream(StoredStream, Protocol):
    """A stored stream opened by a `StoreReader`, with what the store says about the
    session besides its records."""

    updated: int  # `updatedAt` as `list_sessions` defines it (epoch ms)
    title: str | None  # the title the store keeps (header, or its index), if any
    where: str  # where the log is stored (a file, a database), for people to read


class At(NamedTuple):
    """Where a read of a log starts, for a reader that already has what comes before
    (the search index, docs/search.md): the record of seq `seq`, which a JSONL log
    stores at byte `offset` of its file (the SQL stores find it by seq: None there)."""

    seq: int
    offset: int | None = None


Stamp = tuple[int, ...]
"""What a store says about a log without reading it, changing whenever the log does:
JSONL its file's size, mtime (ns) and inode; the SQL stores (and memory) a count and
`updatedAt` (ms). The second element is always when the log last changed (JSONL: in
ns, the file's mtime, which is never before its last event's time but is the copy's on
a copied store: jsonl_time reads the event's): `sessions list` orders by it to read only
a first page's logs."""


class SessionPeek(NamedTuple):
    """What a store says about a session it cannot read whole, as far as it can."""

    header: dict[str, Any] | None
    updated: int | None
    title: str | None


def peek_of(header: bytes | str | None, updated: int | None, title: str | None) -> SessionPeek:
    """The peek of a SQL store's sessions row: its header JSON kept if it is an object
    (not JSON, not an object, or none: None)."""
    try:
        value = orjson.loads(header) if header is not None else None
    except (orjson.JSONDecodeError, TypeError):  # TypeError: SQLite holds any type
        value = None
    return SessionPeek(value if isinstance(value, dict) else None, updated, title)


# The events of a log's outline: what `sessions list` counts of its turns (their number,
# how each ended, the tokens of each step's message), in a log checked when written.
OUTLINE_TYPES = ("turn/start", "step/start", "assistant/message", "turn/end")


class Outline(NamedTuple):
    """A session's outline (`StoreReader.outlines`): its stored header (JSON), the title
    the store keeps, its `Stamp` when read, and its `OUTLINE_TYPES` events in seq order,
    each `assistant/message`'s data cut to its `usage`."""

    header: bytes
    title: str | None
    stamp: Stamp
    events: list[Event]


class StoreReader(Protocol):
    """A store opened read-only, for tools outside the agent (`acp-bridge sessions`):
    it never takes a lock, repairs, creates a folder or a file, or writes. A session
    that a live agent owns can be read as far as its owner has written it."""

    name: str

    def ids(self) -> list[str]:
        """The stored session ids, in no order ([] for a store that does not exist)."""

    def stream(self, session_id: str, at: At | None = None) -> ReadStream:
        """Start reading a log as stored now, unrepaired; with `at`, from that record on
        (the blocks' records are counted from `at.seq`; one that is not there, or not
        where `at` says, is the reader's to notice). Raises SessionNotFoundError,
        SessionVersionError, SessionCorruptError (the header)."""

    def stamps(self) -> dict[str, Stamp]:
        """Every stored session's `Stamp`, in one cheap pass (no log is read)."""

    def fingerprint(self) -> str | None:
        """What the whole store holds, as one value that every write changes, or None
        where the store has none or it cannot be trusted yet (a write that may share its
        file time with a later one): when it is the one a pass over every stamp began
        with, nothing changed since. SQLite's: its files' identities, sizes and times."""

    def unstamped(self) -> set[str]:
        """The sessions holding events their stamp does not count yet, in one cheap pass:
        SQLite's streamed events in a tail file, which its next durable commit moves into
        the database (and so into its stamp). Empty for the other stores."""

    def peek(self, session_id: str) -> SessionPeek:
        """Best effort, never raising for damage: for a session `stream` refuses."""

    def raw(self, session_id: str) -> bytes:
        """The stored form as JSONL lines (header, then events), bytes as stored.
        Raises SessionNotFoundError."""

    def raw_chunks(self, session_id: str) -> Iterator[bytes]:
        """`raw` a piece at a time, so a log of any size is copied in bounded memory.
        Raises SessionNotFoundError when called, before the first piece."""

    def owner(self, session_id: str) -> Owner:
        """Whether a live process owns the session now (never by trying its lock)."""

    def owners(self, session_ids: Sequence[str]) -> dict[str, Owner]:
        """`owner` of each of `session_ids`, in one pass where the store can
        (`FileReader.owners` otherwise)."""

    def outlines(self, session_ids: Sequence[str]) -> dict[str, Outline]:
        """The outlines of those of `session_ids` whose every stored event was checked
        as a load checks it when it was written (or last loaded), in one cheap read; a
        store that cannot vouch for a log that way (a file may be torn or changed behind
        its back: JSONL, SQLite) gives none, and its logs are read whole."""

    def close(self) -> None: ...


class FileReader:
    """What a reader of files (the lock files of JSONL and SQLite, or memory) answers
    for the protocol's batch methods: owners one session at a time (a lock file each:
    nothing to batch), and no outline (a file may be torn or rewritten behind the
    store's back: its logs are read whole and checked)."""

    def owner(self, session_id: str) -> Owner:
        raise NotImplementedError

    def owners(self, session_ids: Sequence[str]) -> dict[str, Owner]:
        return {sid: self.owner(sid) for sid in session_ids}

    def outlines(self, session_ids: Sequence[str]) -> dict[str, Outline]:
        return {}


class BackendSession(Protocol):
    """One open session, owned by this process until `close`."""

    session_id: str

    def write(self, batch: Sequence[Encoded], *, sync: bool) -> None:
        """Append `batch` (seqs continuing the log), durably if `sync`. `write([],
        sync=True)` makes earlier writes durable. On failure: roll back to the last
        durable state and raise StoreIOError (the caller rewrites from there)."""

    def repair(self, torn: TornTail | None, closers: Sequence[Encoded]) -> str | None:
        """Durably cut `torn` (keeping it aside) and append `closers`, as one unit as
        far as the store allows. Returns where the cut records were kept, if any."""

    def close(self) -> None:
        """Release ownership. Unsynced writes are not made durable by this."""


class Backend(Protocol):
    name: str

    def create(self, header: Header) -> BackendSession:
        """Publish a new session (header only) atomically and durably, owned by the caller.
        Raises SessionExistsError."""

    def open(self, session_id: str) -> tuple[BackendSession, StoredLog]:
        """`open_stream` read whole (`read_whole`): every event in memory."""

    def open_stream(self, session_id: str) -> OwnedStream:
        """Take ownership and start reading the log. Raises SessionNotFoundError,
        SessionLockedError, SessionVersionError, SessionCorruptError (the header)."""

    def read_stream(self, session_id: str) -> StoredStream:
        """Read what is stored now, without ownership (a live session can be read:
        what its owner has written so far). Raises SessionNotFoundError,
        SessionVersionError, SessionCorruptError."""

    def copy(self, source_id: str, header: Header, upto: int, closers: Sequence[Encoded], *,
             title: str | None) -> None:
        """Publish a new session (`header`, owned by nobody) holding the first `upto`
        event records of `source_id` as they are stored, then `closers`: whole or not at
        all, a crash included (session.fork). `title`: the session's title as those
        records and `header` give it (`session_title`), which the store lists. The
        source is read, never locked or written. Raises SessionNotFoundError,
        SessionExistsError, StoreIOError (`changed_while_forked`: the source no longer
        holds `upto` records)."""

    def publish(self, header: Header, records: Sequence[Encoded], *, title: str | None,
                after: int | None = None) -> None:
        """Publish `records` as a session's, whole or not at all, a crash included (an
        import: acp_bridge.cli.importer). With `after` None: a new session (`header`,
        owned by nobody, as `copy` makes one); SessionExistsError if it exists. With
        `after` N: appended to the stored session `header["id"]`, which must hold exactly
        N event records (`records` continue its seqs) and nobody may own (its owner lock
        is taken for the write); its header stays. `title`: the session's title as
        `session_title` gives it (the SQL stores list it). Raises SessionNotFoundError,
        SessionLockedError, StoreIOError (`changed_while_forked`: it holds more or fewer
        records than N)."""

    def list_sessions(self) -> list[SessionSummary]:
        """Every stored session, from headers and index data, not whole logs."""

    def reader(self) -> StoreReader:
        """The same store opened read-only (what `session.open_reader` opens by path)."""

    def delete(self, session_id: str) -> None:
        """Remove a session that nobody owns. Raises SessionNotFoundError,
        SessionLockedError."""

    def close(self) -> None: ...


def read_whole(stream: OwnedStream) -> tuple[BackendSession, StoredLog]:
    """Read an owned stream to the end and keep every event (tools, tests, small logs;
    the agent streams instead). Raises what `blocks` raises, releasing ownership."""
    try:
        stored = read_stored(stream)
    except BaseException:
        stream.release()
        raise
    return stream.session(len(stored.events), stored.torn), stored


def read_stored(stream: StoredStream) -> StoredLog:
    """Read a stream to the end, keeping every event, and close it. The torn tail is
    reported (with its size), not cut; damage that a later `turn/end` follows raises
    SessionCorruptError."""
    try:
        splitter = TailSplitter(stream.header["id"], stream.locate)
        events: list[Event] = []
        for block in stream.blocks():
            events.extend(splitter.feed(block))
        torn = with_size(splitter.finish(), stream)
    finally:
        stream.close()
    return StoredLog(stream.header, events, torn, stream.locate)


def with_size(torn: TornTail | None, stream: StoredStream) -> TornTail | None:
    """`torn` with its stored size filled in from the stream."""
    if torn is None:
        return None
    return TornTail(torn.index, torn.where, torn.reason, torn.records, stream.size_from(torn.index))


def check_batch_seqs(session_id: str, batch: Sequence[Encoded], next_seq: int) -> None:
    """Refuse a batch whose seqs do not continue the log exactly."""
    if [item.event["seq"] for item in batch] == list(range(next_seq, next_seq + len(batch))):
        return  # the one answer there is, as a whole (a stream's batch holds hundreds)
    for offset, item in enumerate(batch):
        if item.event["seq"] != next_seq + offset:
            raise SequenceError(
                f"session {session_id}: append of seq {item.event['seq']} where "
                f"{next_seq + offset} was expected",
                session_id=session_id,
                seq=item.event["seq"],
                expected=next_seq + offset,
            )


def changed_while_forked(source_id: str, found: int, upto: int) -> StoreIOError:
    """A fork's copy found fewer records than its plan read (the source's owner rolled
    back a failed write in between): nothing was published."""
    return StoreIOError(f"session {source_id} changed while it was forked ({found} of its {upto} events "
                        "were still there): nothing was made; fork it again", session_id=source_id)


def changed_while_imported(session_id: str, found: int, after: int) -> StoreIOError:
    """An import's append found the session holding other records than the import read
    (continued, or imported again, meanwhile): nothing was appended."""
    return StoreIOError(f"session {session_id} changed while it was imported (it holds {found} events, "
                        f"not the {after} read): nothing was added; import it again", session_id=session_id)


_LINE: Final = b'{"type":"%s","seq":%d,"time":%d,"data":%s}\n'


def event_line(item: Encoded) -> bytes:
    """The JSONL line of an event (with newline), reusing the encoded data. Event types
    come from the fixed vocabulary, so they need no escaping."""
    event = item.event
    return _LINE % (event["type"].encode(), event["seq"], event["time"], item.data_json)

def event_lines(batch: Sequence[Encoded]) -> bytes:
    """The JSONL lines of `batch`, joined: `event_line` of each, in one pass (a stream's
    hand-off writes hundreds at a time)."""
    return b"".join([_LINE % (event["type"].encode(), event["seq"], event["time"], data) for event, data in batch])
