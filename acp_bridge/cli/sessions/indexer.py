"""The search index brought up to date (docs/search.md): where it is, and `catch_up`,
which every `sessions search`, `stats` and `index` runs first.

A pass asks the store for every session's stamp (one stat per JSONL log, one query
for a SQL store: no log is read), drops the sessions that are gone, and reads only
the logs whose stamp changed, each from where the index stopped (facts.TurnFeed), in a
transaction of its own. Logs are read through `session`'s read-only reader: no lock,
no repair, nothing written to the store, and an agent writing meanwhile is never
waited for (its SQLite and PostgreSQL commits do not wait on a reader; the index has
its own file or tables). One indexer at a time: a search that finds another one at
work (a `sessions index --watch`) waits for it a moment, then reads what is there.

Nothing in the index is trusted blindly: an index of another format or store is made
again; one its database finds damaged is deleted and made again (once per pass); a
log whose stamp changed is read from where the index stopped only if the record there
is still the one the index read (else from its start: `Rewound`); a log that cannot
be read is kept as damaged, and read again when it changes.

An index that cannot be written (a full disk: `IndexUnwritable`) ends the pass where it
is, each session's write being a transaction of its own: what the index holds is
searched (the report says it could not be brought up to date), `index` exits 1 saying
so, and `index --watch` says it once and tries again at each pass.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

# facts (the turns, the view) and session.search are imported where they are used:
# `sessions list` imports this module for `open_briefs` alone.

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

    from acp_bridge.cli.sessions.source import Source
    from session.backends.base import Stamp
    from session.search.base import Briefs, SearchIndex, SessionRow

INDEX_FILE = "search.sqlite3"
WAIT = 2.0  # seconds a search waits for another indexer's pass to end


def index_path(backend: str, root: Path | str, option: str | None) -> Path | None:
    """The FTS5 file of a store: `--index FILE`, else `STORE/index/search.sqlite3` for a
    file store; None for a PostgreSQL store without `--index` (its tables)."""
    from pathlib import Path

    if option:
        return Path(option).absolute()
    if backend == "postgres":
        return None
    return Path(root) / "index" / INDEX_FILE


def open_index(backend: str, root: Path | str, option: str | None) -> SearchIndex:
    """The store's index (not opened yet: that happens at its first use)."""
    path = index_path(backend, root, option)
    if path is None:
        from session.search.pg import PgIndex

        return PgIndex(str(root))
    from session.search.fts import FtsIndex

    return FtsIndex(path, _identity(backend, root))


def open_briefs(backend: str, root: Path | str) -> Briefs:
    """The store's index in its own place, read-only, for `sessions list`
    (session.search.base.Briefs: never made or written here)."""
    path = index_path(backend, root, None)
    if path is None:
        from session.search.pg import PgBriefs

        return PgBriefs(str(root))
    from session.search.fts_read import FtsBriefs

    return FtsBriefs(path, _identity(backend, root))


def _identity(backend: str, root: Path | str) -> str:
    """The store an index file says it indexes: an index copied from another is not trusted."""
    from session import shown_store

    where = os.path.realpath(root) if backend != "postgres" else shown_store(root)
    return f"{backend}:{where}"


@dataclass
class Report:
    """What a pass did."""

    read: int = 0  # logs read (whole or from where the index stopped)
    indexed: list[str] = field(default_factory=list)  # their ids, in the order read
    unchanged: int = 0
    dropped: int = 0  # sessions gone from the store
    damaged: list[tuple[str, str]] = field(default_factory=list)  # (id, why), this pass
    # (id, why) of the logs an earlier pass found unreadable and that have not changed
    # since: still left out of every search and sum, and said so each time.
    still_damaged: list[tuple[str, str]] = field(default_factory=list)
    rebuilt: str | None = None  # why the index was made again, if it was
    busy: bool = False  # another indexer was at work: nothing was done
    unwritable: str | None = None  # why the index could not be written: the pass ended there
    seconds: float = 0.0


def catch_up(source: Source, index: SearchIndex, *, wait: float = WAIT,
             progress: Callable[[int, int], None] | None = None) -> Report:
    """Bring `index` up to date with `source` (see the module's docstring)."""
    from session.search.base import IndexDamaged, IndexUnwritable

    report = Report()
    start = time.monotonic()
    if not index.lock(wait):
        report.busy = True
        return report
    try:
        try:
            try:
                _pass(source, index, report, progress)
            except IndexDamaged as exc:
                index.rebuild(f"it was damaged ({exc})")
                _pass(source, index, report, progress)
        except IndexUnwritable as exc:
            report.unwritable = str(exc)
        report.rebuilt = index.rebuilt
    finally:
        index.unlock()
    report.seconds = time.monotonic() - start
    return report


def catch_up_shown(source: Source, index: SearchIndex, prog: str, *, wait: float = WAIT) -> Report:
    """`catch_up` with its progress on a terminal's stderr ("indexing: 3,210 of 5,000
    sessions done"; nothing in a pipe, nothing for a pass under a second)."""
    from acp_bridge.cli.sessions.progress import Progress, on_terminal

    progress = Progress(f"{prog}: indexing", enabled=on_terminal())
    try:
        return catch_up(source, index, wait=wait,
                        progress=lambda done, total: progress.set(done, "sessions", total))
    finally:
        progress.done()


def indexed_text(prog: str, report: Report, where: str) -> str:
    """What a pass of `index --watch` indexed: the sessions it read, by id."""
    ids = report.indexed
    named = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    parts = [f"indexed {len(ids)} session(s): {named}" if ids else ""]
    if report.dropped:
        parts.append(f"dropped {report.dropped} gone from the store")
    if report.damaged:
        parts.append(f"{len(report.damaged)} that cannot be read")
    return f"{prog}: {where}: {'; '.join(p for p in parts if p)} ({report.seconds:.2f} s)"


def _pass(source: Source, index: SearchIndex, report: Report,
          progress: Callable[[int, int], None] | None) -> None:
    from session.search.base import Changes, stamp_text

    fingerprint = source.reader.fingerprint()  # before the stamps: a write after it changes it
    if fingerprint is not None and fingerprint == index.fingerprint():
        # Nothing written since a whole pass began with this: no stamp to compare.
        unreadable = index.unreadable()
        report.unchanged = len(index.stamps())
        report.still_damaged = sorted((sid, why) for sid, (_, why) in unreadable.items())
        return
    found = index.changes(str(source.location) if source.name == "postgres" else None)
    if found is None:
        stamps = source.reader.stamps()
        known = index.stamps()  # each session's row is read only if its log changed
        found = Changes([(sid, stamp, sid in known) for sid, stamp in stamps.items()
                         if known.get(sid) != stamp_text(stamp)], sorted(known.keys() - stamps.keys()), len(stamps))
    changed, gone = found.changed, found.gone
    index.drop(gone)
    report.dropped += len(gone)
    report.unchanged = found.stored - len(changed)
    again = {sid for sid, _, _ in changed}
    report.still_damaged = sorted((sid, why) for sid, (_, why) in index.unreadable().items()
                                  if sid not in again and sid not in gone)
    done = 0
    try:
        for sid, stamp, known_row in changed:
            index_session(source, index, sid, stamp, index.session(sid) if known_row else None, report)
            done += 1
            if progress is not None:
                progress(done, len(changed))
    except KeyboardInterrupt:  # each session's write is a transaction: say how far it got
        if done:
            index.relink()  # what was read is searched once, as after a whole pass
        raise KeyboardInterrupt(f"the index was left at {report.unchanged + done:,} of {found.stored:,} "
                                f"sessions; the next search or index goes on from there") from None
    if changed or gone:
        index.relink()  # the turns forks copied, linked to where they ran (after every log read)
    index.keep_fingerprint(fingerprint)  # a whole pass: the next may skip it if nothing changed


def index_session(source: Source, index: SearchIndex, sid: str, stamp: Stamp,
                  previous: SessionRow | None, report: Report) -> None:
    """Read one log into the index: from where it stopped, or (no usable previous row,
    or the log changed behind it) from the start."""
    from acp_bridge.cli.sessions.facts import TurnFeed
    from session import SearchIndexError, SessionError, SessionNotFoundError
    from session.search.base import Rewound

    resume = previous if previous is not None and previous.at is not None and not previous.damaged else None
    try:
        while True:
            stream = source.reader.stream(sid, resume.at if resume is not None else None)
            try:
                feed = TurnFeed(sid, stream, stamp, resume)
                index.replace(sid, resume.at_turn + 1 if resume is not None and resume.at_turn is not None
                              else 0, feed)
            except Rewound:
                if resume is None:
                    raise
                resume = None  # read it whole
                continue
            finally:
                stream.close()
            report.read += 1
            report.indexed.append(sid)
            return
    except SessionNotFoundError:  # deleted meanwhile
        index.drop([sid])
        report.dropped += 1
    except SearchIndexError:  # the index's own failure, not the log's
        raise
    except (SessionError, OSError) as exc:
        message = exc.message if isinstance(exc, SessionError) else f"cannot read: {exc}"
        row = _damaged_row(source, sid, stamp, message)
        index.damaged(row)
        report.damaged.append((sid, message))


def _damaged_row(source: Source, sid: str, stamp: Stamp, message: str) -> SessionRow:
    from acp_bridge.cli.sessions.facts import session_row
    from session import SessionError
    from session.search.base import SessionRow

    header, _, title = source.peek(sid)
    header = header or {}
    row = SessionRow(sid, int(header.get("createdAt") or 0), str(header.get("cwd", "")), "", title, stamp,
                     damaged=message)
    try:
        stream = source.reader.stream(sid)  # the header may still say who it is
    except (SessionError, OSError):  # best effort: the log is damaged already
        return row
    try:
        row.agent = session_row(sid, stream, stamp).agent
    finally:
        stream.close()
    return row


def notes(prog: str, report: Report, index: SearchIndex, *, left_out: str = "it is not searched",
          unwritable: bool = True) -> list[str]:
    """What a reader of the results should know about the index (for stderr): every
    log it could not read, this pass or an earlier one, is left out (`left_out` says of
    what: the search, `stats`' sums); that it cannot be written only with `unwritable`
    (a watcher says it once)."""
    from acp_bridge.cli.sessions.text import one_line

    out = []
    if report.rebuilt:
        out.append(f"{prog}: the search index {index.where} was made again: {report.rebuilt}")
    if report.busy:
        out.append(f"{prog}: another indexer is updating {index.where}; the last turns may be missing")
    if report.unwritable and unwritable:
        out.append(f"{prog}: cannot write the search index {index.where} ({one_line(report.unwritable)}): "
                   "it could not be brought up to date; the last turns may be missing from it")
    damaged = [*report.damaged, *report.still_damaged]
    for sid, why in damaged[:5]:
        out.append(f"{prog}: session {sid} cannot be read, so {left_out}: {one_line(why)}")
    if len(damaged) > 5:
        out.append(f"{prog}: and {len(damaged) - 5} more session(s) that cannot be read")
    return out


def _stop_on_sigterm() -> None:
    """SIGTERM stops `--watch` as Ctrl-C does (a supervisor's stop; a job started in the
    background by a shell ignores SIGINT): between two writes, each a transaction."""
    import signal

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)


def run_index(source: Source, args: Any, prog: str) -> int:
    """`sessions index [--rebuild] [--watch [--every S]]`: a line per pass that did
    something. The watcher runs at a lower CPU priority (nice 10): it must never take
    the machine from an agent that is answering."""
    import sys

    from acp_bridge.errors import ConfigError

    every = float(args.every)
    if not 0.05 <= every <= 3600:
        raise ConfigError("--every", f"must be 0.05 to 3600 seconds, not {args.every}")
    index = open_index(source.name, source.location, args.index)
    try:
        if args.rebuild:
            if not index.lock(WAIT):
                print(f"{prog}: another indexer is at work on {index.where}; try again", file=sys.stderr)
                return 1
            index.rebuild("--rebuild")
        if args.watch:
            os.nice(10)
            _stop_on_sigterm()
        passes = 0
        told = False  # that the index cannot be written: said once until it can again
        while True:
            try:
                report = catch_up_shown(source, index, prog, wait=every if args.watch else WAIT)
            except KeyboardInterrupt as interrupt:
                if not args.watch:
                    raise
                return _stopped_watching(prog, index, interrupt)
            passes += 1
            if passes > 1:
                report.still_damaged = []  # said at the first pass: a watcher does not repeat it
            for line in notes(prog, report, index, unwritable=not told):
                print(line, file=sys.stderr, flush=True)
            if told and not report.unwritable:
                print(f"{prog}: the search index {index.where} is written again", file=sys.stderr, flush=True)
            told = report.unwritable is not None
            if not args.watch or passes == 1:
                print(f"{prog}: {index.where}: {report.read} log(s) read, {report.unchanged} unchanged, "
                      f"{report.dropped} gone, in {report.seconds:.2f} s", file=sys.stderr, flush=True)
            elif report.read or report.dropped or report.damaged:
                print(indexed_text(prog, report, index.where), file=sys.stderr, flush=True)
            if args.watch and passes == 1:
                print(f"{prog}: watching {source.root} every {every:g} s (Ctrl-C stops)", file=sys.stderr,
                      flush=True)
            if not args.watch:
                return 1 if report.busy or report.unwritable else 0
            index.rebuilt = None
            try:
                time.sleep(every)
            except KeyboardInterrupt as interrupt:
                return _stopped_watching(prog, index, interrupt)
    finally:
        index.close()


def _stopped_watching(prog: str, index: SearchIndex, interrupt: KeyboardInterrupt) -> int:
    """Ctrl-C (or SIGTERM) is how `index --watch` is stopped: its normal end, said, exit 0
    (every other command takes it as an interrupt: acp_bridge.cli.main.interrupted)."""
    import sys

    where = f" ({interrupt.args[0]})" if interrupt.args else ""
    print(f"{prog}: stopped watching {index.where}{where}", file=sys.stderr, flush=True)
    return 0
