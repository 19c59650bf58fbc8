"""A load run one block of events at a time (`SessionStore.loading`), and the error a
stored log that breaks the invariants raises.

The log is never held whole: backends stream their records (`Backend.open_stream`),
the torn-tail rule runs block by block (`scan.TailSplitter`), the invariants are
checked as the blocks go by (`InvariantTracker.feed_stored`), and only the last turn is
kept for the repair and the live log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from session.backends.base import Backend, BackendSession, with_size
from session.errors import InvariantError, SessionCorruptError
from session.events import ASSISTANT_CHUNK, TURN_START, Event
from session.invariants import InvariantTracker
from session.log import SessionLog, encode
from session.repair import RepairReport, interrupted_turn_closers, report_of
from session.scan import Locate, TailSplitter


@dataclass(frozen=True)
class LoadedSession:
    log: SessionLog
    report: RepairReport


class SessionLoad:
    """A load run one block of events at a time, so a long log is never held whole:
    iterating it yields the stored events, checked, in order, then the repair closers
    (if any) as a last block; when the iteration ends, `loaded` holds the live log.

    Everything is checked before anything is written: a log that breaks the invariants
    raises SessionCorruptError from the iteration, untouched (a consumer that streamed
    the earlier blocks on has already passed those on). Abandoning the iteration
    (closing the generator) releases the session. Unless `keep_history`, the log keeps
    only the events since the last `turn/start`, which is all that repair and the
    live turn need; unless `keep_chunks`, less their `assistant/chunk`s (SessionLog.events).
    """

    def __init__(
        self, backend: Backend, session_id: str, clock: Callable[[], int], *, keep_history: bool,
        keep_chunks: bool = True,
    ) -> None:
        self.session_id = session_id
        self.keep_history = keep_history
        self.keep_chunks = keep_chunks
        self.loaded: LoadedSession | None = None
        self._backend = backend
        self._clock = clock  # stamps the live log's events

    def __iter__(self) -> Iterator[list[Event]]:
        sid = self.session_id
        stream = self._backend.open_stream(sid)
        handle: BackendSession | None = None
        try:
            splitter = TailSplitter(sid, stream.locate)
            tracker = InvariantTracker(session_id=sid)
            kept: list[Event] = []
            last_time = 0  # of the last event stored (a chunk, maybe, not kept)
            for block in stream.blocks():
                events = splitter.feed(block)
                if not events:
                    continue
                try:
                    tracker.feed_stored(events)  # shapes checked by the scan
                except InvariantError as exc:
                    raise invariant_corruption(sid, exc, stream.locate) from None
                kept = _keep(kept, events, everything=self.keep_history, chunks=self.keep_chunks)
                last_time = events[-1]["time"]
                yield events
            torn = with_size(splitter.finish(), stream)
            closers = interrupted_turn_closers(tracker, time=last_time)
            tracker.feed_all(closers)
            stream.close()
            handle = stream.session(tracker.next_seq - len(closers), torn)
            kept_aside = None
            if torn is not None or closers:
                kept_aside = handle.repair(torn, [encode(c) for c in closers])
                kept.extend(closers)
                if closers:
                    yield closers
        except BaseException:
            try:
                stream.close()
            finally:  # the owner lock goes whatever the close did (issue 34: a lock kept)
                if handle is not None:
                    handle.close()
                else:
                    stream.release()
            raise
        report = report_of(closers, torn_bytes=torn.size if torn else 0,
                           torn_records=torn.records if torn else 0, kept_aside=kept_aside)
        log = SessionLog(
            handle, stream.header, kept, tracker, self._clock,
            keep_history=self.keep_history, keep_chunks=self.keep_chunks,
        )
        self.loaded = LoadedSession(log, report)


def _keep(kept: list[Event], block: list[Event], *, everything: bool, chunks: bool = True) -> list[Event]:
    """`kept` with `block` added: all of it, or only what follows the last turn/start;
    without `chunks`, less its `assistant/chunk`s."""
    if not everything:
        for index in range(len(block) - 1, -1, -1):
            if block[index]["type"] == TURN_START:
                block = block[index:]
                kept = []
                break
    kept.extend(block if chunks else [e for e in block if e["type"] != ASSISTANT_CHUNK])
    return kept


def invariant_corruption(sid: str, exc: InvariantError, locate: Locate) -> SessionCorruptError:
    """The error a load raises for a stored log that breaks the invariants, saying where
    (tools that check a log the same way word it the same)."""
    seq = exc.details.get("seq")
    where = locate(seq) if isinstance(seq, int) and seq >= 0 else {}
    place = "".join(f", {k} {v}" for k, v in where.items())
    return SessionCorruptError(
        f"session {sid} breaks the log invariants at seq {seq}{place}: {exc.message}",
        session_id=sid,
        reason=exc.message,
        **({"seq": seq} | where),
    )


