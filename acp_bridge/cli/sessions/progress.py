"""Progress on stderr for a long `sessions show` or `export`: one line, rewritten in
place at most a few times a second, shown only when stderr is a terminal, stdout is not
(the output is going to a file or a pipe: on the terminal the transcript is its own
progress), and the work has taken more than a second; erased when the work ends."""

from __future__ import annotations

import os
import sys
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
        self.unit = ""
        self.shown = False
        self._start = time.monotonic()
        self._next = self._start + SHOW_AFTER

    def set(self, count: int, unit: str) -> None:
        """`count` `unit`s done so far."""
        self.count, self.unit = count, unit
        if self.enabled and time.monotonic() >= self._next:
            self._draw()

    def add(self, count: int, unit: str) -> None:
        self.set(self.count + count, unit)

    def _draw(self) -> None:
        now = time.monotonic()
        self._next = now + EVERY
        if self.unit == "bytes":
            amount = f"{self.count / 1e6:,.1f} MB"
        else:
            amount = f"{self.count:,} {self.unit}"
        sys.stderr.write(f"\r\x1b[K{self.label}: {amount} read ({now - self._start:.0f} s)")
        sys.stderr.flush()
        self.shown = True

    def done(self) -> None:
        """Erase the line, if one was shown."""
        if self.shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            self.shown = False


def _isatty(stream: object) -> bool:
    try:
        return os.isatty(stream.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False
