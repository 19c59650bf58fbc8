"""A stored session read in one streamed pass, for `acp-bridge sessions show` and
`export --format md`: the turns come out one at a time, as soon as each is complete,
and are let go once printed, so a log of any length is shown in the memory of one
turn (bench/sessions_memory.py measures it).

The log is checked as a load checks it, block by block (the torn-tail rule and the
invariants, the same `TailSplitter` and `InvariantTracker.feed_stored` that
`session.loading` and `source.summarize` use): a log that `load` would refuse raises
the same SessionCorruptError, from the turn where the damage is found on. Only at the
end is it known whether the last turn is still open: then the owner is asked, and an
open turn without a live owner is closed in memory with the crash-repair closers
(`session.interrupted_turn_closers`), as loading will close it.
"""

from __future__ import annotations

from acp_bridge.cli.sessions.text import add_usage
from acp_bridge.cli.sessions.turns import Turn, TurnBuilder
from acp_bridge.cli.sessions.view import States

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from acp_bridge.cli.sessions.source import Source
    from session import Event
    from session.scan import TornTail


class Walk(States):
    """One pass over a stored session. Read `header`, `updated`, `where` at once;
    iterate `turns()` once; then `turn_count`, `usage`, `torn`, `closers`, `running`
    and the owner describe the whole. `title` is known once the first turn is out."""

    def __init__(self, source: Source, sid: str, progress: Callable[[int], None] | None = None) -> None:
        self.id = sid
        self._source = source
        self._stream = stream = source.reader.stream(sid)  # not found, bad header: raises here
        self.header: dict[str, Any] = dict(stream.header)
        self.updated = stream.updated
        self.where = stream.where
        self.title = stream.title
        self.owner, self.owner_pid = "none", None
        self.turn_count = 0
        self.usage: dict[str, int] = {}
        self.torn: TornTail | None = None
        self.closers: list[Event] = []
        self.running = False
        self._last: Turn | None = None
        self._progress = progress  # called with the records read so far, per block

    @property
    def last(self) -> Turn | None:
        return self._last

    def _done(self, turn: Turn) -> Turn:
        self.turn_count += 1
        add_usage(self.usage, turn.usage)
        self._last = turn
        return turn

    def turns(self) -> Iterator[Turn]:
        """Every turn, in order, each once it is complete (the last one at the end)."""
        from session import InvariantError, InvariantTracker
        from session.backends.base import with_size
        from session.events import USER_MESSAGE
        from session.loading import invariant_corruption
        from session.repair import interrupted_turn_closers
        from session.scan import TailSplitter
        from session.titles import first_prompt_title

        sid, stream = self.id, self._stream
        splitter = TailSplitter(sid, stream.locate)
        tracker = InvariantTracker(session_id=sid)
        builder = TurnBuilder(keep=False)
        last_event: Event | None = None  # the closers take its time
        read = 0
        try:
            for block in stream.blocks():
                events = splitter.feed(block)
                try:
                    tracker.feed_stored(events)
                except InvariantError as exc:  # worded as `load` words it
                    raise invariant_corruption(sid, exc, stream.locate) from None
                read += len(block)
                if self._progress is not None:
                    self._progress(read)
                for event in events:
                    if event["type"] == USER_MESSAGE and self.title is None:
                        self.title = first_prompt_title(event)  # the stores' rule: turn 1's
                    done = builder.feed(event)
                    if done is not None:
                        try:
                            yield self._done(done)
                        finally:
                            done.close()
                if events:
                    last_event = events[-1]
            self.torn = with_size(splitter.finish(), stream)
        except BaseException:  # damage, or the reader gone: the turn being read is dropped
            if builder.turn is not None:
                builder.turn.close()
            raise
        finally:
            stream.close()
        self.owner, self.owner_pid = self._source.owner(sid)
        last = builder.turn
        if last is None:
            return
        if self.owner == "live":  # shown as far as it is on disk
            self.running = True
        else:
            assert last_event is not None  # a turn was read
            self.closers = interrupted_turn_closers(tracker, time=last_event["time"])
            builder.on_disk = tracker.next_seq
            for closer in self.closers:
                builder.feed(closer)
        try:
            yield self._done(last)
        finally:
            last.close()

    def close(self) -> None:
        self._stream.close()

