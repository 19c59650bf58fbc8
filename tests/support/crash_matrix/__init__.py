"""The kill -9 crash matrix: scripted sessions through the real stdio agent, killed
with SIGKILL at chosen and at random points, then loaded by a new agent process.

Each kill point runs one agent process ("A") on one scripted session (text, reasoning,
tool calls with and without permission, failed and cancelled turns, several turns) and
SIGKILLs it at the point: after the Nth `session/update` received, while a permission
request is pending, while a command runs, right after the Nth prompt answer, after a
random delay, or after the last answer. Then one new agent process ("B") per backend
loads every killed session over the wire (`session/load`), checks the repair report
and the replay, prompts it once more and closes it; finally every log is read back
in-process (`SessionStore.load`) and compared with what was on disk right after each
answer and right after the kill:

- A died of the SIGKILL (not of its own accord before it);
- every answered turn is durable, settled as its `turn/end` says, and byte-identical
  (JSONL lines / SQLite rows) from the moment its answer arrived to the end;
- no permission request and no side effect (a written file, a started command)
  without its `tool/call` on disk first;
- the load answers; the interrupted turn (if the log ended inside one) is closed with
  exactly `interrupted_turn_closers(events before the load)`, ending in
  `turn/end {interrupted, crash}`; a closed log is left untouched;
- the replay holds every turn, and starts with exactly what A streamed live for its
  answered turns; the text of every message A streamed live, the one the kill cut
  included, is a prefix of that message's text in the replay (log before send);
- the next prompt is turn N+1 and ends `end_turn`; the final log passes
  `check_invariants(closed=True)` and its model transcript has no unanswered call.

Modules: `scenarios` (the scripted sessions, the kill points), `kill` (phase A: run and
kill), `reload` (phases B and C: load over the wire, then in-process), `oracle` (the
record of one kill point, an independent reading of the stored log, the checks),
`matrix` (the whole run on one backend and its report), `wrap` (the same through
`acp-bridge wrap` around our own serve, the wrapper or its child killed:
`run_matrix(..., wrap="wrapper" | "child")`; `run_passing`, the run the tests make of it). Used by
tests/test_crash_matrix.py (the CI sample and the soak form) and by
bench/crash_matrix.py (the command line of the long form).
"""

from .matrix import Report, format_counts, run_matrix, run_passing
from .oracle import Raw, Run, check_final, parse_raw
from .scenarios import CI_SAMPLE, SCENARIOS, KillPoint, Scenario, random_point, sample_points

__all__ = [
    "CI_SAMPLE",
    "SCENARIOS",
    "KillPoint",
    "Raw",
    "Report",
    "Run",
    "Scenario",
    "check_final",
    "format_counts",
    "parse_raw",
    "random_point",
    "run_matrix",
    "run_passing",
    "sample_points",
]
