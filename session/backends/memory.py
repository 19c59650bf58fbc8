"""The memory backend: the contract without a disk, for tests and throwaway sessions.

It keeps each event as the same encoded line the JSONL backend writes, so the shared
scanning code reads it back and tests can damage records exactly as on disk. Locks are
per backend instance (one "process").
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import orjson

from session.backends.base import (
    At,
    BackendSession,
    Encoded,
    FileReader,
    SessionPeek,
    SessionSummary,
    Stamp,
    StoredLog,
    changed_while_forked,
    changed_while_imported,
    check_batch_seqs,
    event_line,
    read_whole,
)
from session.backends.session_ids import validate_session_id
from session.errors import SessionExistsError, SessionLockedError, SessionNotFoundError
from session.events import Event, Header
from session.files import Owner
from session.scan import Damage, TornTail, parse_events, parse_header
from session.titles import first_prompt_title, last_set_title


@dataclass
class _Stored:
    header: Header
    records: list[bytes] = field(default_factory=list)  # event lines, no newline
    updated_at: int = 0
    title: str | None = None  # the header's, else the first prompt's
    set_title: str | None = None  # the last `/title` (session.titles.session_title)

    @property
    def listed(self) -> str | None:
        return self.set_title or self.title


class MemoryBackend:
    name = "memory"

    def __init__(self) -> None:
        self.stored: dict[str, _Stored] = {}
        self.torn: dict[str, list[bytes]] = {}
        self._owned: set[str] = set()

    def create(self, header: Header) -> MemorySession:
        sid = validate_session_id(header["id"])
        if sid in self.stored:
            raise SessionExistsError(f"session {sid} already exists", session_id=sid)
        self._own(sid)
        self.stored[sid] = _Stored(
            header=orjson.loads(orjson.dumps(header)),
            updated_at=header["createdAt"],
            title=header.get("title"),
        )
        return MemorySession(self, sid, next_seq=0)

    def copy(self, source_id: str, header: Header, upto: int, closers: Sequence[Encoded], *,
             title: str | None) -> None:
        source = self.read_stream(source_id)  # not found: raised here
        records = self.stored[source.header["id"]].records
        if len(records) < upto:
            raise changed_while_forked(source_id, len(records), upto)
        sid = validate_session_id(header["id"])
        if sid in self.stored:
            raise SessionExistsError(f"session {sid} already exists", session_id=sid)
        self.stored[sid] = _Stored(
            header=orjson.loads(orjson.dumps(header)),
            records=[*records[:upto], *(event_line(item)[:-1] for item in closers)],
            updated_at=header["createdAt"],
            title=title if title is not None else header.get("title"),
        )

    def publish(self, header: Header, records: Sequence[Encoded], *, title: str | None,
                after: int | None = None) -> None:
        sid = validate_session_id(header["id"])
        lines = [event_line(item)[:-1] for item in records]
        updated = records[-1].event["time"] if records else header["createdAt"]
        if after is None:
            if sid in self.stored:
                raise SessionExistsError(f"session {sid} already exists", session_id=sid)
            self.stored[sid] = _Stored(header=orjson.loads(orjson.dumps(header)), records=lines,
                                       updated_at=updated, title=title if title is not None else header.get("title"))
            return
        self.read_stream(sid)  # not found: raised here
        stored = self.stored[sid]
        self._own(sid)
        try:
            if len(stored.records) != after:
                raise changed_while_imported(sid, len(stored.records), after)
            stored.records.extend(lines)
            stored.updated_at = max(stored.updated_at, updated)
        finally:
            self._owned.discard(sid)

    def open(self, session_id: str) -> tuple[BackendSession, StoredLog]:
        return read_whole(self.open_stream(session_id))

    def open_stream(self, session_id: str) -> MemoryStream:
        stream = self.read_stream(session_id)  # raises before ownership is taken
        self._own(stream.header["id"])
        stream.owner = self
        return stream

    def read_stream(self, session_id: str) -> MemoryStream:
        sid = validate_session_id(session_id)
        stored = self.stored.get(sid)
        if stored is None:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        header = parse_header(sid, orjson.dumps(stored.header), "the header")
        return MemoryStream(header, list(stored.records))

    def list_sessions(self) -> list[SessionSummary]:
        out: list[SessionSummary] = []
        for sid, stored in self.stored.items():
            summary: SessionSummary = {
                "id": sid,
                "cwd": stored.header["cwd"],
                "title": stored.listed,
                "updatedAt": stored.updated_at,
            }
            if stored.header.get("additionalDirectories"):
                summary["additionalDirectories"] = list(stored.header["additionalDirectories"])
            out.append(summary)
        return out

    def delete(self, session_id: str) -> None:
        sid = validate_session_id(session_id)
        if sid not in self.stored:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        self._own(sid)
        del self.stored[sid]
        self._owned.discard(sid)

    def reader(self) -> MemoryReader:
        return MemoryReader(self)

    def owns(self, session_id: str) -> bool:
        """Whether a live handle of this backend has the session open."""
        return session_id in self._owned

    def close(self) -> None:
        self._owned.clear()

    def disown(self, session_id: str) -> None:
        """Release a session a handle or a stream of this backend owned. Idempotent."""
        self._owned.discard(session_id)

    def _own(self, sid: str) -> None:
        if sid in self._owned:
            raise SessionLockedError(f"session {sid} is already open", session_id=sid)
        self._owned.add(sid)


class MemoryStream:
    """The stored records, parsed a block at a time like the other backends."""

    BLOCK = 4096
    # Filled in by MemoryReader.stream (see session.backends.base.ReadStream).
    updated = 0
    title: str | None = None
    where = ""

    def __init__(self, header: Header, records: list[bytes]) -> None:
        self.header = header
        self._records = records  # a copy: appends by a live owner do not show up
        self.owner: MemoryBackend | None = None
        self.start = 0  # the seq of the first record read (a read from `At`)

    def blocks(self) -> Iterator[list[Event | Damage]]:
        records = self._records
        for start in range(self.start, len(records), self.BLOCK):
            yield parse_events(records[start : start + self.BLOCK])

    def locate(self, index: int) -> dict[str, int]:
        return {"seq": index}

    def size_from(self, index: int) -> int:
        return sum(len(r) + 1 for r in self._records[index:])

    def close(self) -> None:
        pass

    def session(self, next_seq: int, torn: TornTail | None) -> MemorySession:
        if self.owner is None:
            raise RuntimeError("a read-only stream has no session")
        return MemorySession(self.owner, self.header["id"], next_seq=next_seq)

    def release(self) -> None:
        if self.owner is not None:
            self.owner.disown(self.header["id"])
            self.owner = None


class MemorySession:
    def __init__(self, backend: MemoryBackend, session_id: str, next_seq: int) -> None:
        self.session_id = session_id
        self._backend = backend
        self._next_seq = next_seq

    def write(self, batch: Sequence[Encoded], *, sync: bool) -> None:
        check_batch_seqs(self.session_id, batch, self._next_seq)
        stored = self._backend.stored[self.session_id]
        for item in batch:
            stored.records.append(event_line(item)[:-1])
            event = item.event
            stored.updated_at = event["time"]
            if stored.title is None:
                stored.title = first_prompt_title(event)
        stored.set_title = last_set_title(item.event for item in batch) or stored.set_title
        self._next_seq += len(batch)

    def repair(self, torn: TornTail | None, closers: Sequence[Encoded]) -> str | None:
        stored = self._backend.stored[self.session_id]
        kept = None
        if torn is not None:
            cut = stored.records[torn.index :]
            del stored.records[torn.index :]
            self._backend.torn.setdefault(self.session_id, []).extend(cut)
            kept = f"memory:{self.session_id}"
        self._next_seq = len(stored.records)
        self.write(closers, sync=True)
        return kept

    def close(self) -> None:
        self._backend.disown(self.session_id)


class MemoryReader(FileReader):
    """The read-only view of a memory store (see session.backends.base.StoreReader):
    a memory store lives in its backend, so this reads through it; the owner of a
    session is this process while a handle has it open."""

    name = "memory"

    def __init__(self, backend: MemoryBackend) -> None:
        self._backend = backend

    def ids(self) -> list[str]:
        return list(self._backend.stored)

    def stream(self, session_id: str, at: At | None = None) -> MemoryStream:
        stream = self._backend.read_stream(session_id)
        if at is not None:
            stream.start = at.seq
        stored = self._backend.stored[stream.header["id"]]
        stream.updated, stream.title = stored.updated_at, stored.listed
        stream.where = f"memory:{session_id}"
        return stream

    def stamps(self) -> dict[str, Stamp]:
        return {sid: (len(stored.records), stored.updated_at) for sid, stored in self._backend.stored.items()}

    def fingerprint(self) -> str | None:
        return None

    def unstamped(self) -> set[str]:
        return set()  # every write changes the stamp

    def peek(self, session_id: str) -> SessionPeek:
        stored = self._backend.stored.get(session_id)
        if stored is None:
            return SessionPeek(None, None, None)
        return SessionPeek(orjson.loads(orjson.dumps(stored.header)), stored.updated_at, stored.listed)

    def raw(self, session_id: str) -> bytes:
        sid = validate_session_id(session_id)
        stored = self._backend.stored.get(sid)
        if stored is None:
            raise SessionNotFoundError(f"session {sid} not found", session_id=sid)
        return b"".join(line + b"\n" for line in [orjson.dumps(stored.header), *stored.records])

    def raw_chunks(self, session_id: str) -> Iterator[bytes]:
        return iter([self.raw(session_id)])  # in memory already

    def owner(self, session_id: str) -> Owner:
        return Owner("live", os.getpid()) if self._backend.owns(session_id) else Owner("none")

    def close(self) -> None:
        pass
