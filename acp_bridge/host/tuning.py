"""What a host's process tunes for speed: a policy object that `serve` hands in.

Domain code never changes process-global state (the cyclic collector, the thread switch
interval) on its own: it tells its `Tuning` what it is doing, and the policy decides.
The default `Tuning` only counts; `ProcessTuning`, which `acp-bridge serve` and `wrap`
hand in, acts on what it is told (bench/README.md has the measurements behind each):

- Loads running (`load_started`/`load_ended`). A load allocates a few objects per event,
  which die young but in bulk: the cyclic collector would run full collections over
  everything the agent holds (up to half of a block's parse time). Nothing a load makes
  is cyclic, so collection waits until no load runs. And the worker thread parses while
  the event loop writes what it made; the loop waits for the GIL up to the switch
  interval (5 ms) each time, long enough for the client to drain the pipe and sit idle:
  switching more often keeps the pipe fed (the long-session replay went from 0.58 to
  0.77 of the bare loop's rate).
- The first live session (`first_session`): what is imported and built by then lives as
  long as the process, so it is kept out of every later full collection (`gc.freeze`).
- Turns running in the process, all sessions (`running_turns`, counted by the turn
  runner): a small durable commit runs on the event loop only when no other turn runs
  (acp_bridge.agent.turn_writer).
- The wrapper's start-up handshake (`handshake_started`/`handshake_ended`,
  acp_bridge.wrap.handshake): its thread answers the editor's `initialize` while the
  main thread imports the wrapper, and waits for the GIL after each of its waits; the
  interval is `HANDSHAKE_SWITCH_INTERVAL` meanwhile (a wait ~0.2 ms instead of ~5 ms).
"""

from __future__ import annotations

import gc
import sys
from typing import Final

LOAD_SWITCH_INTERVAL: Final = 0.0005  # seconds
HANDSHAKE_SWITCH_INTERVAL: Final = 0.0001  # seconds


class Tuning:
    """The neutral policy: counts what runs, changes nothing."""

    def __init__(self) -> None:
        self.running_turns = 0
        self.loads_running = 0

    def load_started(self) -> None:
        self.loads_running += 1

    def load_ended(self) -> None:
        self.loads_running = max(self.loads_running - 1, 0)

    def first_session(self) -> None:
        """A session is live in this process (called for each; acts once)."""

    def handshake_started(self) -> None:
        """A thread answers the editor's `initialize` while the main thread imports."""

    def handshake_ended(self) -> None:
        """That thread has stopped."""


class ProcessTuning(Tuning):
    """The policy of a process that serves ACP on stdio (acp-bridge serve, wrap)."""

    def __init__(self) -> None:
        super().__init__()
        self._saved = (True, 0.005)  # gc enabled, switch interval, while no load runs
        self._frozen = False
        self._before_handshake = 0.005  # the switch interval

    def load_started(self) -> None:
        if self.loads_running == 0:
            self._saved = (gc.isenabled(), sys.getswitchinterval())
            gc.disable()
            sys.setswitchinterval(min(self._saved[1], LOAD_SWITCH_INTERVAL))
        super().load_started()

    def load_ended(self) -> None:
        if self.loads_running == 0:
            return
        super().load_ended()
        if self.loads_running == 0:
            enabled, interval = self._saved
            sys.setswitchinterval(interval)
            if enabled:
                gc.enable()

    def first_session(self) -> None:
        if not self._frozen:
            gc.freeze()
            self._frozen = True

    def handshake_started(self) -> None:
        self._before_handshake = sys.getswitchinterval()
        sys.setswitchinterval(min(self._before_handshake, HANDSHAKE_SWITCH_INTERVAL))

    def handshake_ended(self) -> None:
        sys.setswitchinterval(self._before_handshake)
