"""An imported session into the store: keyed by the agent's own session id, whole or
not at all, idempotent (docs/import.md).

The session's id is derived from the agent and its own session id (a UUID 5), so the
same native session is always the same stored one. What is stored already decides:
nothing (a new session, published whole), the same number of turns (nothing to do),
fewer (the turns after them appended, whole), more, or a last turn that is not an
imported one (continued here: nothing is appended, and it says so).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from acp_bridge.cli.importer.native import NativeSession, Source, Turn
from session.backends.base import StoredStream
from session.events import SESSION_FORMAT_VERSION, TURN_END, TURN_START, Event, Header
from session.scan import Damage
from session.store import SessionStore

# The namespace of the UUID 5 of an imported session's id: fixed for good (a new one
# would import every session again under another id).
NAMESPACE: Final = uuid.UUID("5d1f7c2e-9a43-4b0e-8f6a-0c8e2b7d4a19")


def session_id_of(source: Source) -> str:
    return str(uuid.uuid5(NAMESPACE, f"{source.agent}/{source.session_id}"))


@dataclass(frozen=True)
class Outcome:
    session_id: str
    state: Literal["new", "added", "unchanged", "refused", "live"]
    added: int  # turns written now
    turns: int  # turns the native file holds
    why: str = ""  # `refused`: why nothing was written; `live`: the session wrap recorded


def header_of(source: Source, session_id: str, title: str | None) -> Header:
    header: Header = {"type": "session", "version": SESSION_FORMAT_VERSION, "id": session_id,
                      "createdAt": source.created, "cwd": source.cwd}
    if title:
        header["title"] = title
    header["imported"] = source.header_field()  # type: ignore[typeddict-item]
    return header


def stamped(turns: list[Turn], seq: int) -> list[Event]:
    """The turns' items as events, seqs from `seq`, each at its native time."""
    events: list[Event] = []
    for turn in turns:
        for time, (kind, data) in turn.items:
            events.append({"type": kind, "seq": seq, "time": max(time, 0), "data": dict(data)})
            seq += 1
    return events


@dataclass(frozen=True)
class _Stored:
    records: int
    turns: int
    imported_last: bool  # its last turn is an imported one (or it has none)
    damaged: bool
    tail: list[Any] = field(default_factory=list)  # what its last turn/end keeps raw


def recorded_live(store: SessionStore) -> dict[str, str]:
    """The sessions `acp-bridge wrap` recorded, by the wrapped agent's own session id
    (the header's `wrapped.sessionId`): one read of every header, once per import."""
    reader = store.backend.reader()
    try:
        out: dict[str, str] = {}
        for sid in reader.ids():
            header = reader.peek(sid).header or {}
            wrapped = header.get("wrapped")
            native = wrapped.get("sessionId") if isinstance(wrapped, dict) else None
            if isinstance(native, str):
                out.setdefault(native, sid)
        return out
    finally:
        reader.close()


def write(store: SessionStore, native: NativeSession, live: dict[str, str] | None = None) -> Outcome:
    """Store `native` (its source known), unless `live` (`recorded_live`) says wrap
    recorded it already: one session, not two. Raises the SessionError family."""
    from session.errors import SessionNotFoundError

    source = native.source
    assert source is not None
    if live and source.session_id in live:
        return Outcome(live[source.session_id], "live", 0, len(native.turns))
    sid = session_id_of(source)
    header = header_of(source, sid, native.title)
    total = len(native.turns)
    try:
        stream = store.backend.read_stream(sid)
    except SessionNotFoundError:
        store.publish(header, stamped(native.turns, 0))
        return Outcome(sid, "new", total, total)
    stored = _survey(stream)
    if stored.damaged:
        return Outcome(sid, "refused", 0, total, "its stored log is damaged (load it once to repair it)")
    if stored.turns == total:
        return Outcome(sid, "unchanged", 0, total)
    if stored.turns > total or not stored.imported_last:
        return Outcome(sid, "refused", 0, total, f"it holds {stored.turns} turn(s), the file {total}: it was "
                       "continued here, or the file lost turns; nothing added")
    new = without_tail(native.turns[stored.turns:], stored.tail)
    store.publish(header, stamped(new, stored.records), after=(stored.records, stored.turns))
    return Outcome(sid, "added", len(new), total)


def without_tail(turns: list[Turn], tail: list[Any]) -> list[Turn]:
    """`turns` without the records the stored last `turn/end` keeps already: what the
    agent wrote after that turn was kept there when it was the file's end, and is the
    next turn's preamble now (`Builder.keep`): kept once, not twice."""
    if not tail or not turns:
        return turns
    time, (kind, data) = turns[0].items[0]
    kept = data.get("native")
    if not isinstance(kept, list) or kept[: len(tail)] != tail:
        return turns
    rest = {k: v for k, v in data.items() if k != "native"}
    if kept[len(tail):]:
        rest["native"] = kept[len(tail):]
    return [Turn(turns[0].number, [(time, (kind, rest)), *turns[0].items[1:]]), *turns[1:]]


def _survey(stream: StoredStream) -> _Stored:
    """How many records and turns a stored session holds, and whether its last turn
    was imported. A torn or damaged record: damaged."""
    records = turns = 0
    imported_last = True
    tail: list[Any] = []
    try:
        for block in stream.blocks():
            for record in block:
                if isinstance(record, Damage):
                    return _Stored(records, turns, imported_last, damaged=True)
                event = record
                records += 1
                if event["type"] == TURN_START:
                    turns += 1
                    trigger = event["data"].get("trigger")
                    imported_last = isinstance(trigger, dict) and "imported" in trigger
                elif event["type"] == TURN_END:
                    kept = event["data"].get("native")
                    tail = kept if isinstance(kept, list) else []
    finally:
        stream.close()
    return _Stored(records, turns, imported_last, damaged=False, tail=tail)
