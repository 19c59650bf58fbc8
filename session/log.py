"""The live log: ordering, buffering and durability points over a backend session.

`SessionLog` is the one live handle to a session: it stamps seq and time, checks every
event against the invariants and encodes it at append (so bad data never reaches a
buffer), buffers streamed events, and makes everything durable at `tool/call`,
`step/end` and `turn/end`, and whenever the caller asks with `sync()` (before it waits
on anything outside the agent). Synchronous and thread-confined: the agent calls it
from one task, moving the fsyncs off its event loop as it sees fit. `SessionStore`
(session.store) opens these logs; nothing here knows how sessions are found.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import orjson

from session.backends.base import BackendSession, Encoded
from session.errors import EventDataError, SessionClosedError, StoreIOError
from session.events import STEP_END, TOOL_CALL, TURN_END, TURN_START, Event, Header
from session.invariants import InvariantTracker
from session.repair import interrupted_turn_closers

# Events after which everything appended so far is on disk. `tool/call` precedes both
# the permission request and the tool run, so no tool runs without its call durable.
DURABLE_TYPES: Final = frozenset({TOOL_CALL, STEP_END, TURN_END})
# Streamed events go to the OS (not fsync'd) once this many are buffered, so memory
# stays bounded and a kill -9 loses little even in a long step.
FLUSH_EVENTS: Final = 512
FLUSH_BYTES: Final = 1 << 20

# orjson would silently turn these into strings; the log takes JSON data only.
_ENCODE_OPTIONS: Final = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def now_ms() -> int:
    return _time.time_ns() // 1_000_000


def encode(event: Event) -> Encoded:
    """Serialize an event's data once. Raises EventDataError naming the event type."""
    try:
        data = orjson.dumps(event["data"], option=_ENCODE_OPTIONS)
    except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
        raise EventDataError(
            f"the data of a {event['type']} event is not JSON: {exc}",
            eventType=event["type"],
            seq=event["seq"],
        ) from None
    # orjson's bytes keep a 4 KiB buffer however short they are; a right-sized copy
    # keeps a long streamed step from holding 4 KiB per chunk until its durable point.
    return Encoded(event, bytes(memoryview(data)) if len(data) < 2048 else data)


class SessionLog:
    """The live, owned handle to one session's log."""

    def __init__(
        self,
        backend_session: BackendSession,
        header: Header,
        events: list[Event],
        tracker: InvariantTracker,
        clock: Callable[[], int],
        *,
        keep_history: bool = True,
    ) -> None:
        self._backend = backend_session
        self._keep_history = keep_history
        self.header: Final = header
        self._events = events
        self._tracker = tracker
        self._clock = clock
        self._unwritten: list[Encoded] = []  # appended, not yet handed to the backend
        self._unwritten_bytes = 0
        self._unsynced: list[Encoded] = []  # written to the backend, not yet durable
        self._closed = False

    @property
    def id(self) -> str:
        return self.header["id"]

    @property
    def events(self) -> Sequence[Event]:
        """The events held in memory, buffered ones included, in seq order: every
        event of the session if the log keeps its history, otherwise those since the
        last `turn/start` (the open or last turn). `tracker.next_seq` counts them all."""
        return self._events

    @property
    def tracker(self) -> InvariantTracker:
        """Where the log stands (open turn and step, next seq). Read it, don't feed it."""
        return self._tracker

    @property
    def pending(self) -> int:
        """Events appended but not yet durable."""
        return len(self._unwritten) + len(self._unsynced)

    @property
    def buffered(self) -> int:
        """Events appended but not yet handed to the backend (lost on kill -9)."""
        return len(self._unwritten)

    def append(self, etype: str, data: dict[str, Any]) -> Event:
        """Append one event; durable before return if its type is a durability point."""
        return self.extend([(etype, data)])[0]

    def extend(self, items: Iterable[tuple[str, dict[str, Any]]]) -> list[Event]:
        """Append events in order with one durability point at most (if any of them is
        a durable type). Raises InvariantError or EventDataError, appending none of
        them; StoreIOError if the durability point fails (the events stay pending and
        the next `sync` rewrites them)."""
        self._check_open()
        stamp = self._clock()
        tracker = self._tracker
        # Check the whole batch on a copy, so a refused batch leaves no trace.
        trial = tracker if _single(items) else _copy_tracker(tracker)
        batch: list[Encoded] = []
        for etype, data in items:
            event: Event = {"type": etype, "seq": trial.next_seq, "time": stamp, "data": data}
            encoded = encode(event)
            trial.feed(event)
            batch.append(encoded)
        if trial is not tracker:
            self._tracker = trial
        durable = False
        for encoded in batch:
            if encoded.event["type"] == TURN_START and not self._keep_history:
                self._events = []
            self._events.append(encoded.event)
            self._unwritten.append(encoded)
            self._unwritten_bytes += len(encoded.data_json)
            durable = durable or encoded.event["type"] in DURABLE_TYPES
        if durable:
            self.sync()
        elif len(self._unwritten) >= FLUSH_EVENTS or self._unwritten_bytes >= FLUSH_BYTES:
            self.flush()
        return [encoded.event for encoded in batch]

    def flush(self) -> None:
        """Hand buffered events to the backend without waiting for the disk."""
        self._write(sync=False)

    def sync(self) -> None:
        """Make everything appended so far durable (a durability point)."""
        self._check_open()
        self._write(sync=True)

    def _write(self, *, sync: bool) -> None:
        if not self._unwritten and not (sync and self._unsynced):
            return
        batch = self._unwritten
        try:
            self._backend.write(batch, sync=sync)
        except StoreIOError:
            # The backend is back at its last durable state: everything since then is
            # pending again, in order, so a retry leaves no seq gap.
            self._unwritten = self._unsynced + self._unwritten
            self._unsynced = []
            raise
        if sync:
            self._unsynced = []
        else:
            self._unsynced.extend(batch)
        self._unwritten, self._unwritten_bytes = [], 0

    def close_interrupted(self, *, cause: str = "shutdown") -> list[Event]:
        """Close an open turn with the interrupted closers (the agent is stopping
        mid-turn) and make it durable. Returns the events as logged ([] if no turn is
        open): `extend` stamps its own time, which may be a tick later than the one the
        closers were computed with."""
        closers = interrupted_turn_closers(self._events, cause=cause, time=self._clock())  # type: ignore[arg-type]
        if not closers:
            return []
        return self.extend([(c["type"], c["data"]) for c in closers])

    def close(self) -> None:
        """Flush durably and release ownership. Idempotent."""
        if self._closed:
            return
        try:
            self._write(sync=True)
        finally:
            self._closed = True
            self._backend.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"session {self.id} is closed", session_id=self.id)

    def __enter__(self) -> SessionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _single(items: Iterable[tuple[str, dict[str, Any]]]) -> bool:
    return isinstance(items, list | tuple) and len(items) == 1


def _copy_tracker(tracker: InvariantTracker) -> InvariantTracker:
    from copy import deepcopy

    return deepcopy(tracker)


