"""The search index of a running `acp-bridge sessions serve` (docs/search.md, "Up to
date"): kept up to date by a thread of its own, as `sessions index --watch` keeps it,
so that a search answers from the index at once instead of first asking the store for
every session's stamp (a pass with nothing new: 10,000 `stat`s and rows, more than the
whole answer may take; bench/README.md, "Search speed").

The first search starts it. A pass runs then, and again a moment after the last one
ended: at least `EVERY` seconds, and at least `SHARE` times what the pass took, so that
a large store costs the machine at most a tenth of a core; after IDLE seconds without
a search the passes stop until the next one. A search that comes before the first pass
has ended, or after such a pause, waits for a pass to end, up to indexer.WAIT seconds
(the index being made: it then answers from what is there, and says so); the others
answer at once, from an index at most a pass behind. The index read by searches is one
connection, kept, opened again when its file was made again (by this thread or by
another process: its inode changed); the indexer's is its own.
"""

from __future__ import annotations

import os
import threading
import time

from acp_bridge.cli.sessions.indexer import WAIT, catch_up, index_path, notes, open_index

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from acp_bridge.cli.sessions.source import Source
    from session.search.base import Filters, Hit, SearchIndex
    from session.search.query import Query

EVERY = 0.5  # seconds between two passes at least
SHARE = 9  # ... and at least this many times the last pass's time (a tenth of a core at most)
IDLE = 60.0  # seconds without a search after which the passes stop until the next one


class IndexKeeper:
    """Started by the first search of a `serve`; `close` stops it."""

    def __init__(self, backend: str, root: Path | str, option: str | None, prog: str) -> None:
        self.backend, self.root, self.option, self.prog = backend, root, option, prog
        self.where = ""
        self._state = threading.Condition()
        self._passes = 0  # passes ended
        self._idle = False  # waiting for a search to pass again
        self._waited = False  # a search has waited for the first pass
        self._stopping = False
        self._last = time.monotonic()  # the last search
        self._said: list[str] = []  # what the last pass had to say (damaged logs, a rebuild)
        self._lock = threading.Lock()  # the reader: one search at a time
        self._reader: SearchIndex | None = None
        self._inode: int | None = None
        self._thread = threading.Thread(target=self._run, name="search-index", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        index = open_index(self.backend, self.root, self.option)
        self.where = index.where
        try:
            while True:
                seconds = self._pass(index)
                with self._state:
                    self._passes += 1
                    self._state.notify_all()
                    self._state.wait_for(lambda: self._stopping, max(EVERY, SHARE * seconds))
                    if time.monotonic() - self._last > IDLE:
                        self._idle = True
                        self._state.wait_for(lambda: self._stopping or not self._idle)
                    if self._stopping:
                        return
        finally:
            index.close()

    def _pass(self, index: SearchIndex) -> float:
        """One pass (its seconds); a failure is said on stderr and tried again later."""
        import sys

        from acp_bridge.cli.sessions.source import Source

        started = time.monotonic()
        source = Source(self.backend, self.root)
        try:
            report = catch_up(source, index, wait=0.0)
            if not report.busy:
                self._said = notes(self.prog, report, index)
                index.rebuilt = None
        except Exception as exc:  # a store or index that cannot be read now
            print(f"{self.prog}: the search index could not be brought up to date: {exc}",
                  file=sys.stderr, flush=True)
        finally:
            source.close()
        return time.monotonic() - started

    def search(self, source: Source, query: Query, filters: Filters, limit: int) -> tuple[list[Hit], list[str]]:
        """The hits (acp_bridge.cli.sessions.search.find) and what to tell about the index.
        After a pause (no pass: IDLE), or before the first pass has ended, a search waits
        for the next pass, up to indexer.WAIT seconds."""
        from acp_bridge.cli.sessions.search import find

        with self._state:
            self._last = time.monotonic()
            # Wait for a pass after a pause, and for the first one (once: while a large
            # index is being made, the searches after the first answer at once).
            wanted = self._passes + 1 if self._idle or (self._passes == 0 and not self._waited) else 0
            self._waited = self._waited or wanted > 0
            self._idle = False
            self._state.notify_all()
            fresh = self._state.wait_for(lambda: self._passes >= max(wanted, 1), WAIT if wanted else 0)
        told = [] if fresh else [f"{self.prog}: the search index {self.where} is being brought up to date; "
                                 "the last turns may be missing"]
        with self._lock:
            try:
                return find(source, self._open(), query, filters, limit), told + self._said
            except Exception:  # the next search opens it again (a dropped connection, a file gone)
                reader, self._reader = self._reader, None
                if reader is not None:
                    reader.close()
                raise

    def _open(self) -> SearchIndex:
        path = index_path(self.backend, self.root, self.option)
        inode = None
        if path is not None:
            try:
                inode = os.stat(path).st_ino
            except OSError:
                inode = None
        if self._reader is not None and inode != self._inode:
            self._reader.close()  # the file was made again: the old one is gone
            self._reader = None
        if self._reader is None:
            self._reader = open_index(self.backend, self.root, self.option)
            self._inode = inode
        return self._reader

    def close(self) -> None:
        with self._state:
            self._stopping = True
            self._state.notify_all()
        self._thread.join(timeout=10)
        with self._lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
