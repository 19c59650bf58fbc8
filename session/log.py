"""The live log: ordering, buffering and durability points over a backend session.

`SessionLog` is the one live handle to a session: it stamps seq and time, checks every
event against the invariants and encodes it at append (so bad data never reaches a
buffer), buffers streamed events, and makes everything durable at `tool/call`,
`step/end` and `turn/end`, and whenever the caller asks with `sync()` (before it waits
on anything outside the agent). Buffered events are handed to the OS (`hand_off`)
before anything derived from them leaves the process, so a kill -9 loses nothing
shown. A failed write rolls the log back to its last durable point and drops what
came after. Synchronous; calls from the event loop and from worker threads serialize
on a lock. `SessionStore` (session.store) opens these logs; nothing here knows how
sessions are found.
"""

from __future__ import annotations

import threading
import time as _time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import orjson

from session.backends.base import BackendSession, Encoded
from session.closers import Interrupted, closers, open_turn
from session.errors import EventDataError, SessionClosedError, StoreIOError
from session.events import (
    ASSISTANT_CHUNK,
    CONTEXT_COMPACTION,
    STEP_END,
    TOOL_CALL,
    TOOL_PERMISSION,
    TURN_END,
    TURN_START,
    Event,
    EventType,
    Header,
)
from session.invariants import InvariantTracker
from session.items import ChunkKind, Item
from session.tracker_state import TrackerState, copy_tracker

# Events after which everything appended so far is on disk. `tool/call` precedes both
# the permission request and the tool run, so no tool runs without its call durable;
# `tool/permission` precedes the run of a call that waited for it, so a crash while it
# runs is never taken for one while it waited. A `context/compaction` changes what later
# model calls are shown (session.transcript): once the model is shown its summary, a
# failed write never takes it back.
DURABLE_TYPES: Final = frozenset({TOOL_CALL, TOOL_PERMISSION, STEP_END, TURN_END, CONTEXT_COMPACTION})
# Streamed events go to the OS (not fsync'd) once this many are buffered, so memory
# stays bounded even when nothing is sent meanwhile (the sender's `hand_off` writes
# them sooner, before their updates are sent).
FLUSH_EVENTS: Final = 512
FLUSH_BYTES: Final = 1 << 20
_CHUNK_KINDS: Final = ("text", "reasoning")
_new_encoded: Final = tuple.__new__  # `Encoded(event, data)` without the call of its __new__

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
        keep_chunks: bool = True,
    ) -> None:
        self._backend = backend_session
        self._keep_history = keep_history
        # Without it, the `assistant/chunk`s appended are not kept in `events` (nothing
        # reads a live log's chunks back from memory: a stream's bulk, held to its turn's
        # end and scanned by the cyclic collector meanwhile).
        self._keep_chunks = keep_chunks
        self.header: Final = header
        self._events = events
        self._tracker = tracker
        self._clock = clock
        self._unwritten: list[Encoded] = []  # appended, not yet handed to the backend
        self._unwritten_bytes = 0
        # How many events were written to the backend and are not durable yet (only
        # counted: the backend has their bytes, and a stream's would be held to its end).
        self._unsynced = 0
        self._closed = False
        # The log is used from the event loop and, for durable commits, from worker
        # threads, and the sender hands buffered events to the OS from its own task
        # (`hand_off`): every read-modify-write of the buffers and every backend call
        # holds this lock, so a hand-off never runs beside a write of the same log.
        self._lock = threading.Lock()
        # Where a failed write rolls back to: the tracker at the last durable point,
        # and (without history) the events before the last `turn/start` until that
        # `turn/start` is durable.
        self._durable_tracker = copy_tracker(tracker)
        self._prior_events: list[Event] | None = None
        # A failed hand-off, kept for the log's owner (the turn that wrote the events):
        # raised by its next append, flush or sync.
        self._failure: StoreIOError | None = None

    @property
    def id(self) -> str:
        return self.header["id"]

    @property
    def events(self) -> Sequence[Event]:
        """The events held in memory, buffered ones included, in seq order: every
        event of the session if the log keeps its history, otherwise those since the
        last `turn/start` (the open or last turn); without `keep_chunks`, less the
        `assistant/chunk`s it appended. `tracker.next_seq` counts them all."""
        return self._events

    @property
    def tracker(self) -> InvariantTracker:
        """Where the log stands (open turn and step, next seq). Read it, don't feed it."""
        return self._tracker

    @property
    def durable_seq(self) -> int:
        """The next seq at the last durable point: a failed write rolls back to it."""
        return self._durable_tracker.next_seq

    @property
    def pending(self) -> int:
        """Events appended but not yet durable."""
        return len(self._unwritten) + self._unsynced

    @property
    def buffered(self) -> int:
        """Events appended but not yet handed to the backend (lost on kill -9). Read
        without the lock: it drops to 0 only once their write has returned, and the
        events a worker thread appends are not counted while it writes them."""
        return len(self._unwritten)

    def append(self, etype: EventType, data: Mapping[str, Any]) -> Event:
        """Append one event; durable before return if its type is a durability point."""
        return self.extend([(etype, data)])[0]

    def extend(self, items: Iterable[Item]) -> list[Event]:
        """Append events in order with one durability point at most (if any of them is
        a durable type). Raises InvariantError or EventDataError, appending none of
        them; StoreIOError if a write fails (this one, or an earlier hand-off): the log
        is then back at its last durable point (`durable_seq`), everything appended
        since is dropped, and the next append starts from there."""
        with self._lock:
            return self._extend(items)

    def _extend(self, items: Iterable[Item]) -> list[Event]:
        self._check_open()
        self._raise_failure()
        stamp = self._clock()
        tracker = self._tracker
        # The batch is checked on the live tracker; a refused batch leaves no trace: a
        # single event is refused before it changes anything (encode, then `feed`, which
        # leaves the tracker as it was on a refusal), a longer batch puts back the
        # tracker's state from before the batch.
        saved = None if _single(items) else TrackerState(tracker)
        batch: list[Encoded] = []
        try:
            for etype, data in items:
                # An item's data is one of session.items' TypedDicts: a dict at run time.
                event: Event = {"type": etype, "seq": tracker.next_seq, "time": stamp, "data": data}  # type: ignore[typeddict-item]
                encoded = encode(event)
                tracker.feed(event)
                batch.append(encoded)
        except BaseException:
            if saved is not None:
                saved.restore(tracker)
            raise
        durable = False
        for encoded in batch:
            etype = encoded.event["type"]
            if etype == TURN_START and not self._keep_history:
                self._prior_events = self._events
                self._events = []
            if etype != ASSISTANT_CHUNK or self._keep_chunks:
                self._events.append(encoded.event)
            durable = durable or etype in DURABLE_TYPES
        if durable:
            # Written straight from the batch, not through `_unwritten`: `buffered`
            # stays as it was while a worker thread writes and syncs it.
            self._write(sync=True, extra=batch)
        else:
            self._unwritten.extend(batch)
            self._unwritten_bytes += sum(len(encoded.data_json) for encoded in batch)
            if len(self._unwritten) >= FLUSH_EVENTS or self._unwritten_bytes >= FLUSH_BYTES:
                self._write(sync=False)
        return [encoded.event for encoded in batch]

    def append_chunks(self, turn: int, chunks: Sequence[tuple[int, ChunkKind, str, dict[str, Any] | None]]) -> int:
        """The fast path of most events of a stream (a wrapped agent's chunks): each of
        `chunks` (step, kind, text, sent) appended as `append(*assistant_chunk(turn,
        ...))` would, in order, while it is a chunk of the open step, with the checks the
        tracker's own fast path makes (`InvariantTracker.feed_all`): the same events and
        bytes, in one call. Returns how many were appended; the first one it does not
        take (a closed log, a failure to report, another step, not JSON) is the caller's
        to `append`, which refuses or raises as it always does. Never raises: a write
        that fails here is reported as a hand-off's is (by the next append)."""
        with self._lock:
            count = self._append_chunks(turn, chunks)
            if count and (len(self._unwritten) >= FLUSH_EVENTS or self._unwritten_bytes >= FLUSH_BYTES):
                try:
                    self._write(sync=False)
                except StoreIOError as exc:
                    self._failure = exc
            return count

    def _append_chunks(self, turn: int, chunks: Iterable[tuple[int, ChunkKind, str, dict[str, Any] | None]]) -> int:
        tracker = self._tracker
        if self._closed or self._failure is not None or not tracker.step_open or not tracker.in_turn \
                or tracker.turn != turn:
            return 0
        clock, unwritten, dumps, step = self._clock, self._unwritten, orjson.dumps, tracker.step
        events = self._events if self._keep_chunks else None
        # Each event's data as orjson writes `{"turn": T, "step": S, "chunk": {"type":
        # K, "text": X}[, "sent": ...]}`, built around the text's own encoding: the same
        # bytes, right-sized (`encode` copies orjson's), in one pass.
        heads = {kind: b'{"turn":%d,"step":%d,"chunk":{"type":"%s","text":' % (turn, step, kind.encode())
                 for kind in _CHUNK_KINDS}
        seq, size, count = tracker.next_seq, 0, 0
        for at, kind, text, sent in chunks:
            if at != step or kind not in heads or type(text) is not str:
                break
            data: dict[str, Any] = {"turn": turn, "step": step, "chunk": {"type": kind, "text": text}}
            try:
                if sent:
                    data["sent"] = sent
                    data_json = b"".join((heads[kind], dumps(text), b'},"sent":', dumps(sent, option=_ENCODE_OPTIONS),
                                          b"}"))
                else:
                    data_json = b"".join((heads[kind], dumps(text), b"}}"))
            except TypeError:  # `extend` words the refusal
                break
            # The clock last, once the chunk is taken (a clock that gives no time, which
            # the tracker refuses, is asked again by `extend`).
            stamp = clock()
            if type(stamp) is not int or stamp < 0:
                break
            event: Event = {"type": ASSISTANT_CHUNK, "seq": seq, "time": stamp, "data": data}
            if events is not None:
                events.append(event)
            unwritten.append(_new_encoded(Encoded, (event, data_json)))
            seq += 1
            size += len(data_json)
            count += 1
        tracker.next_seq = seq
        self._unwritten_bytes += size
        return count

    def flush(self) -> None:
        """Hand buffered events to the backend without waiting for the disk."""
        with self._lock:
            self._raise_failure()
            self._write(sync=False)

    def sync(self) -> None:
        """Make everything appended so far durable (a durability point)."""
        with self._lock:
            self._check_open()
            self._raise_failure()
            self._write(sync=True)

    def hand_off(self, *, wait: bool = True) -> bool:
        """Hand buffered events to the OS (written, not fsync'd) before the updates
        derived from them are sent: the sender calls this before each write to the
        client. Without `wait` it does nothing and returns False if another thread is
        writing this log at this moment (the caller then waits for it elsewhere, with
        `wait=True` in a worker thread, rather than block its event loop). Never
        raises for a failed write: the log rolls back to its last durable point and
        the failure is raised to the log's owner by its next append, flush or sync."""
        if not self._lock.acquire(blocking=wait):
            return False
        try:
            if not self._closed and self._failure is None:
                self._write(sync=False)
        except StoreIOError as exc:
            self._failure = exc
        finally:
            self._lock.release()
        return True

    def _raise_failure(self) -> None:
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _write(self, *, sync: bool, extra: Sequence[Encoded] = ()) -> None:
        batch = self._unwritten + list(extra) if extra else self._unwritten
        if not batch and not (sync and self._unsynced):
            return
        try:
            self._backend.write(batch, sync=sync)
        except StoreIOError:
            self._roll_back()
            raise
        if sync:
            self._unsynced = 0
            self._durable_tracker = copy_tracker(self._tracker)
            self._prior_events = None
        else:
            self._unsynced += len(batch)
        self._unwritten, self._unwritten_bytes = [], 0

    def _roll_back(self) -> None:
        """Back to the last durable point, as the backend is after a failed write (it
        truncated the file or rolled back its transaction): what was appended since is
        dropped, not kept for a retry, so a turn reported as rolled back never shows
        up on disk later and the next write has only its own events to write."""
        durable = self._durable_tracker
        cut = durable.next_seq
        events = self._events
        if self._prior_events is not None and (not events or events[0]["seq"] >= cut):
            events = self._prior_events  # the last `turn/start` itself is dropped
        while events and events[-1]["seq"] >= cut:  # in seq order (with gaps, if chunks are not kept)
            events.pop()
        self._events, self._prior_events = events, None
        self._tracker = copy_tracker(durable)
        self._unwritten, self._unwritten_bytes, self._unsynced = [], 0, 0

    def close_interrupted(self, *, cause: Literal["crash", "shutdown"] = "shutdown") -> list[Event]:
        """Close an open turn with the interrupted closers (the agent is stopping
        mid-turn, or the agent it wraps died) and make it durable. Returns the events
        as logged ([] if no turn is open)."""
        with self._lock:
            items = closers(open_turn(self._tracker), Interrupted(cause))
            return self._extend(items) if items else []

    def close(self) -> None:
        """Flush durably and release ownership. Idempotent. A failed write that was
        not reported yet is dropped with the events it rolled back."""
        with self._lock:
            if self._closed:
                return
            self._failure = None
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


def _single(items: Iterable[Item]) -> bool:
    return isinstance(items, list | tuple) and len(items) == 1
