"""`acp-bridge sessions delete ID [--yes]`: remove a session from the store (issue 36,
point 8; docs/cli.md, "Deleting a session").

Decisions:
- **Confirmed, or refused.** At a terminal it names the session (id, title, turns,
  last update) and asks; anything but `y`/`yes` keeps it. Without a terminal (a script,
  a pipe) it is refused unless `--yes` says so: a script that forgot the flag must not
  delete by reading its next input line as consent.
- **Never under a running agent.** The delete takes the session's owner lock as the
  agent's `session/delete` does (`SessionStore.delete`): a session an agent has open
  is refused (`session_locked`), not pulled from under it.
- **What goes with it:** the log (and, JSONL, its title file and lock file; SQLite,
  its rows and tail file). Forks of it are sessions of their own and stay; the search
  index drops it at its next update (`sessions index`, any search). The torn tails
  repair kept (`torn/`) stay for inspection.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from pathlib import Path
    from typing import Any

    from acp_bridge.cli.sessions.source import Source

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def delete_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("session_id", metavar="ID", help="a session id, or a unique prefix of it")
    parser.add_argument("--yes", action="store_true", help="do not ask (needed when not at a terminal)")


def run_delete(source: Source, backend: str, location: Path | str, sid: str, args: Any, prog: str) -> int:
    """Delete `sid` once confirmed; the exit status (errors of the SessionError family
    are raised for the caller's one mapping)."""
    from acp_bridge.cli.safe_text import clean

    if not args.yes:
        if not sys.stdin.isatty():
            print(f"{prog}: not deleting {sid} without a confirmation: give --yes (stdin is not a terminal)",
                  file=sys.stderr)
            return EXIT_USAGE
        question = f"Delete session {sid} ({clean(describe(source, sid))})? This cannot be undone. [y/N] "
        try:
            answer = input(question)
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print(f"{prog}: kept {sid}", file=sys.stderr)
            return EXIT_FAIL
    delete(backend, location, sid)
    print(f"{prog}: deleted {sid}", file=sys.stderr)
    return EXIT_OK


def describe(source: Source, sid: str) -> str:
    """Title, turns and last update of `sid`, for the question (best effort: a damaged
    log is still deletable)."""
    import time

    from session import SessionError

    try:
        stored = source.summary(sid)
    except SessionError as exc:
        return f"cannot be read: {exc}"
    turns = stored.earlier_turns + (1 if any(e["type"] == "turn/start" for e in stored.events) else 0)
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(stored.updated / 1000))
    title = f"{stored.title!r}, " if stored.title else ""
    return f"{title}{turns} turn{'s' if turns != 1 else ''}, updated {when}"


def delete(backend: str, location: Path | str, sid: str) -> None:
    """Remove `sid` from the store, under its owner lock (SessionLockedError when an
    agent has it open)."""
    from session import SessionStore, open_backend

    store = SessionStore(open_backend(backend, location))
    try:
        store.delete(sid)
    finally:
        store.close()
