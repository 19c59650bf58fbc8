"""Progress on stderr for long work: `sessions show` or `export` of a big session,
building or catching up the search index (`index`, `--rebuild`, and the first `search`
or `stats` on a store), a `fork` of a big session. One line, rewritten in place at most
a few times a second, shown only when stderr is a terminal (for show and export: and
stdout is not, since on the terminal the transcript is its own progress) and the work
has taken more than a second; erased when the work ends. In a pipe nothing is written.

Counted work (`set`: records, bytes, sessions of a total) draws the count; work that
counts nothing it can see (a fork's copy, inside the store) `ticks`: a thread redraws
the elapsed time until `done`."""

from __future__ import annotations

import os
import sys
import threading
import time

SHOW_AFTER = 1.0  # seconds of work before a progress line appears
EVERY = 0.25  # seconds between updates of the line


class Progress:
    def __init__(self, label: str, *, enabled: bool | None = None) -> None:
        if enabled is None:
            enabled = _isatty(sys.stderr) and not _isatty(sys.stdout)
        self.label = label
        self.enabled = enabled
        self.count = 0
        self.total: int | None = None
        self.unit = ""
        self.shown = False
        self._start = time.monotonic()
        self._next = self._start + SHOW_AFTER
        self._lock = threading.Lock()
        self._ticking: threading.Event | None = None

    def set(self, count: int, unit: str, total: int | None = None) -> None:
        """`count` `unit`s done so far (of `total`, if known)."""
        self.count, self.unit, self.total = count, unit, total
        if self.enabled and time.monotonic() >= self._next:
            self._draw()

    def add(self, count: int, unit: str) -> None:
        self.set(self.count + count, unit)

    def tick(self, what: str) -> None:
        """Work that counts nothing: `what` and the time it has taken, redrawn by a
        thread of its own until `done`."""
        self.unit = what
        if not self.enabled:
            return
        stop = self._ticking = threading.Event()

        def run() -> None:
            while not stop.wait(max(0.0, self._next - time.monotonic())):
                self._draw()

        threading.Thread(target=run, name="progress", daemon=True).start()

    def text(self, now: float) -> str:
        """The line as drawn at `now` (time.monotonic)."""
        seconds = f"({now - self._start:.0f} s)"
        if self._ticking is not None:
            return f"{self.label}: {self.unit} {seconds}"
        if self.unit == "bytes":
            amount = f"{self.count / 1e6:,.1f} MB"
        elif self.total is not None:
            amount = f"{self.count:,} of {self.total:,} {self.unit}"
        else:
            amount = f"{self.count:,} {self.unit}"
        return f"{self.label}: {amount} {'done' if self.total is not None else 'read'} {seconds}"

    def _draw(self) -> None:
        with self._lock:
            if self._ticking is not None and self._ticking.is_set():
                return  # done meanwhile: the line stays erased
            now = time.monotonic()
            self._next = now + EVERY
            sys.stderr.write(f"\r\x1b[K{self.text(now)}")
            sys.stderr.flush()
            self.shown = True

    def done(self) -> None:
        """Stop ticking; erase the line, if one was shown."""
        if self._ticking is not None:
            self._ticking.set()
        with self._lock:
            if self.shown:
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
                self.shown = False


def on_terminal() -> bool:
    """Whether stderr is a terminal: the progress of work whose output is not stdout's."""
    return _isatty(sys.stderr)


def _isatty(stream: object) -> bool:
    try:
        return os.isatty(stream.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False
