"""Reading stored records back: shape checks and the torn-tail rule, shared by backends.

A backend turns its stored records (JSONL lines, SQLite rows, memory entries) into a
list of `Event | Damage`, each with a description of where it is, and `TailSplitter`
decides what the contract says: damage that a later `turn/end` follows is in the
committed region (refuse, naming where); damage after the last `turn/end` is a torn
tail (cut it from the first damaged record on, and keep it aside). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson

from session.errors import SessionCorruptError, SessionVersionError
from session.events import EVENT_TYPES, SESSION_FORMAT_VERSION, TURN_END, Event, Header


@dataclass(frozen=True)
class Damage:
    """A stored record that is not a well-formed event."""

    reason: str


@dataclass(frozen=True)
class TornTail:
    """The records cut off a log's end by the torn-tail rule (`TailSplitter`): from `index` (the first damaged
    record, counted in events from seq 0) to the end."""

    index: int
    where: dict[str, int]  # e.g. {"offset": 812, "line": 9} or {"seq": 7}
    reason: str
    records: int  # stored records cut, a partial line included
    size: int = 0  # bytes cut, where the backend counts bytes


_EMPTY = Damage("empty line")


def parse_events(records: Iterable[bytes]) -> list[Event | Damage]:
    """Parse stored records (an empty one is damage): each is an event, or a Damage
    saying why not. Inlined for the common case: loading is this loop, run once per
    stored event."""
    loads, decode_error, types = orjson.loads, orjson.JSONDecodeError, EVENT_TYPES
    out: list[Event | Damage] = []
    append = out.append
    for raw in records:
        if not raw:
            append(_EMPTY)
            continue
        try:
            value = loads(raw)
        except decode_error as exc:
            append(Damage(f"not valid JSON ({exc})"))
            continue
        if (
            type(value) is dict
            and len(value) == 4
            and value.get("type") in types
            and type(value.get("seq")) is int
            and type(value.get("time")) is int
            and type(value.get("data")) is dict
        ):
            append(value)  # type: ignore[arg-type]
        else:
            append(check_event_shape(value))  # says what is wrong
    return out


def check_event_shape(value: Any) -> Event | Damage:
    if type(value) is not dict or len(value) != 4:
        return Damage("not an event object {type, seq, time, data}")
    etype = value.get("type")
    seq = value.get("seq")
    time = value.get("time")
    data = value.get("data")
    if etype not in EVENT_TYPES:
        return Damage(f"unknown event type {etype!r}")
    if type(seq) is not int or type(time) is not int or not isinstance(data, dict):
        return Damage(f"{etype} event with malformed seq, time or data")
    return value  # type: ignore[return-value]


Locate = Callable[[int], dict[str, int]]
"""Where the record of event index i is stored, e.g. {"offset": 812, "line": 9} or
{"seq": 7}: computed only when an error or a cut needs it."""


class TailSplitter:
    """The torn-tail rule, one block of records at a time, so a log can be read without
    holding it: `feed` returns the events known to be good so far, `finish` the torn
    tail. After the first damaged record nothing more is passed on; the records after
    it are only counted (and checked for a `turn/end`, which makes the damage fatal).

    `locate` is called at most once, when the first damage is met, with its index.
    `start`: the seq of the first record fed (a read that starts part-way: `At`).
    """

    def __init__(self, session_id: str, locate: Locate, start: int = 0) -> None:
        self.session_id = session_id
        self._locate = locate
        self.count = start  # records fed, and those before `start`
        self._damage: tuple[int, str, dict[str, int]] | None = None  # index, reason, where

    def feed(self, items: Sequence[Event | Damage]) -> list[Event]:
        """The good events of `items` (all of them, unless damage shows up).
        Raises SessionCorruptError if a `turn/end` follows damage."""
        index = self.count
        self.count += len(items)
        if self._damage is None:
            for offset, item in enumerate(items):
                if type(item) is not dict or item["seq"] != index + offset:
                    self._damaged(index + offset, item)
                    self._check_after(items[offset + 1 :])
                    return cast("list[Event]", list(items[:offset]))
            # Every item is an event here (the loop checked each one).
            return cast("list[Event]", items if type(items) is list else list(items))
        self._check_after(items)
        return []

    def _damaged(self, index: int, item: Event | Damage) -> None:
        if isinstance(item, Damage):
            reason = item.reason
        else:
            reason = f"seq {item['seq']} where {index} was expected"
        self._damage = (index, reason, self._locate(index))

    def _check_after(self, items: Sequence[Event | Damage]) -> None:
        assert self._damage is not None
        for later in items:
            if type(later) is dict and later["type"] == TURN_END:
                _, reason, where = self._damage
                place = ", ".join(f"{k} {v}" for k, v in where.items())
                raise SessionCorruptError(
                    f"session {self.session_id} is damaged at {place}: {reason}; a later "
                    f"turn/end (seq {later['seq']}) shows this part was committed, so it is "
                    "not cut",
                    session_id=self.session_id,
                    reason=reason,
                    **where,
                )

    def finish(self) -> TornTail | None:
        """The torn tail to cut (size left 0 for the backend to fill), or None."""
        if self._damage is None:
            return None
        index, reason, where = self._damage
        return TornTail(index=index, where=where, reason=reason, records=self.count - index)


def parse_header(session_id: str, raw: bytes | str, where: str) -> Header:
    """Parse and check a stored header: a session object of our format version and id."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SessionCorruptError(
            f"session {session_id}: the header at {where} is not valid JSON ({exc})",
            session_id=session_id,
            reason="header",
        ) from None
    if not isinstance(value, dict) or value.get("type") != "session":
        raise SessionCorruptError(
            f"session {session_id}: the header at {where} is not a session header",
            session_id=session_id,
            reason="header",
        )
    version = value.get("version")
    if version != SESSION_FORMAT_VERSION or type(version) is not int:
        raise SessionVersionError(
            f"session {session_id} is stored at format version {version!r}; this build reads "
            f"only version {SESSION_FORMAT_VERSION} (pre-release: no migration)",
            session_id=session_id,
            version=version,
            supported=SESSION_FORMAT_VERSION,
        )
    if value.get("id") != session_id or not isinstance(value.get("cwd"), str):
        raise SessionCorruptError(
            f"session {session_id}: the header at {where} names id {value.get('id')!r} "
            "or lacks a cwd",
            session_id=session_id,
            reason="header",
        )
    return value  # type: ignore[return-value]
