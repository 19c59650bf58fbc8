"""`acp-bridge import PATH... [--store DIR] [--backend NAME] [--from FORMAT] [--watch]`:
other agents' own transcripts into the store, each a session (docs/import.md); with
`--watch`, then followed.

A PATH is a file, or a folder searched for transcripts. Each file gets one line on
stdout: the session it became and how many turns were added; each problem one line on
stderr (a file that is not a transcript, a line that is not JSON, a torn last line, a
session the store cannot take), and the rest is imported. The exit status is 1 only if
nothing could be imported (a file already imported counts as imported), 2 for options
that cannot work.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse

    from acp_bridge.cli.importer.native import NativeSession
    from acp_bridge.cli.importer.store import Outcome
    from session.store import SessionStore

HEAD_LINES = 20  # the lines a file's format is recognised by


def _parser() -> argparse.ArgumentParser:
    from acp_bridge.cli.importer.formats import FORMATS
    from acp_bridge.cli.startup import OneLineParser, store_options

    parser = OneLineParser(prog="acp-bridge import",
                           description="Import other agents' own transcripts into the session store.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="a transcript, or a folder searched for them")
    parser.add_argument("--from", dest="source", choices=FORMATS,
                        help="the agent that wrote them (default: recognised from each file's content)")
    parser.add_argument("--watch", action="store_true",
                        help="then keep following the paths: a file that changes or appears is imported again "
                             "(its new turns added), until interrupted")
    parser.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                        help="with --watch: how often the paths are looked at (default 2)")
    store_options(parser)
    return parser


def main(argv: list[str]) -> int:
    from acp_bridge.cli.startup import agent_settings
    from session import SessionStore, open_backend

    parser = _parser()
    args = parser.parse_args(argv)
    if not 0 < args.interval <= 3600:
        parser.error(f"--interval must be above 0 and at most 3600 seconds, got {args.interval}")
    settings = agent_settings(args, model=False)
    store = SessionStore(open_backend(settings.backend, settings.store))
    from acp_bridge.cli.importer.store import recorded_live
    from acp_bridge.cli.sessions.progress import Progress

    imported = 0
    progress = Progress("acp-bridge import")  # on a terminal's stderr when stdout is not one
    try:
        live = recorded_live(store)  # the sessions wrap recorded: not imported again
        seen: dict[Path, tuple[int, int]] = {}
        files = [file for path in args.paths for file in _files(Path(path))]
        try:
            for done, file in enumerate(files):
                seen[file] = _stamp(file)
                imported += _import(store, live, file, args.source)
                progress.set(done + 1, "files", len(files))
        except KeyboardInterrupt:  # each session is written whole or not at all
            raise KeyboardInterrupt(f"{len(seen) - 1:,} of {len(files):,} files imported, each session "
                                    f"whole; importing again goes on from there") from None
        finally:
            progress.done()
        if args.watch:
            return _watch(store, live, args, seen)
    finally:
        store.close()
    return 0 if imported else 1


def _stamp(file: Path) -> tuple[int, int]:
    """What says a file changed: its size and modification time (ns); (-1, -1) if gone."""
    try:
        stat = file.stat()
    except OSError:
        return (-1, -1)
    return (stat.st_size, stat.st_mtime_ns)


def _watch(store: SessionStore, live: dict[str, str], args: argparse.Namespace,
           seen: dict[Path, tuple[int, int]]) -> int:
    """`--watch`: every `--interval` seconds, each file under the paths that appeared or
    changed since it was last imported, and has not changed since the look before, is
    imported again (idempotent: only its new turns are added; a turn is imported once,
    so a file is left alone while the agent is writing it). Polling, not inotify: it works on every file system, and a look at a
    folder of history costs one stat per file. Ends with Ctrl-C or SIGTERM, status 0."""
    import signal
    import time

    def stop(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    settling: dict[Path, tuple[int, int]] = {}  # changed at the last look: imported once it stays so
    try:
        while True:
            time.sleep(args.interval)
            for path in args.paths:
                for file in _files(Path(path), quiet=True):
                    stamp = _stamp(file)
                    if seen.get(file) == stamp:
                        continue
                    if settling.get(file) != stamp:  # still being written: a turn may be half there
                        settling[file] = stamp
                        continue
                    seen[file] = stamp
                    settling.pop(file, None)
                    _import(store, live, file, args.source)
    except KeyboardInterrupt:
        return 0


def _files(path: Path, *, quiet: bool = False) -> Iterator[Path]:
    """The files under `path`; `quiet`: no line for a folder without any or a path that
    is not there (`--watch` looks again and again)."""
    from acp_bridge.cli.importer.formats import NAMES, SUFFIXES

    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if (p.suffix in SUFFIXES or p.name in NAMES) and p.is_file())
        if not found and not quiet:
            _problem(f"{path}: no transcript in this folder")
        yield from found
    elif path.exists():
        yield path
    elif not quiet:
        _problem(f"{path}: no such file or folder")


def _import(store: SessionStore, live: dict[str, str], file: Path, chosen: str | None) -> int:
    """Import one file; how many of its sessions are in the store now."""
    from acp_bridge.cli.importer.formats import FORMATS, OPENCODE, READERS, detect

    natives: list[tuple[str, NativeSession]] = []
    try:
        with open(file, "rb") as f:
            head = [line for _, line in zip(range(HEAD_LINES), f, strict=False)]
            if chosen == OPENCODE or (chosen is None and head and _is_database(head[0])):
                return _import_database(store, live, file)
            kind = chosen or detect(head)
            if kind is None:
                _problem(f"{file}: not a transcript of any agent this build reads ({', '.join(FORMATS)}); skipped")
                return 0
            f.seek(0)
            natives.append((kind, READERS[kind](f, str(file))))
    except OSError as exc:
        _problem(f"{file}: cannot be read: {exc.strerror or exc}; skipped")
        return 0
    return sum(_store(store, live, file, kind, native) for kind, native in natives)


def _is_database(first: bytes) -> bool:
    from acp_bridge.cli.importer.opencode_db import is_database

    return is_database(first)


def _import_database(store: SessionStore, live: dict[str, str], file: Path) -> int:
    """An opencode database: each of its sessions."""
    import sqlite3

    from acp_bridge.cli.importer.opencode_db import sessions

    done = 0
    try:
        for native in sessions(file):
            done += _store(store, live, file, "opencode", native)
    except sqlite3.Error as exc:
        _problem(f"{file}: not an opencode database that can be read ({exc}); skipped")
    return done


def _store(store: SessionStore, live: dict[str, str], file: Path, kind: str, native: NativeSession) -> int:
    """Write one read session; 1 if it is in the store now, else 0."""
    from acp_bridge.errors import AcpBridgeError

    for line in native.problems:
        _problem(line)
    if native.source is None:
        return 0
    if not native.turns:
        _problem(f"{file}: no prompt in this {kind} session ({native.source.session_id}); nothing imported")
        return 0
    from acp_bridge.cli.importer.store import write

    try:
        outcome = write(store, native, live)
    except AcpBridgeError as exc:
        _problem(f"{file}: session {native.source.session_id} not imported: {exc}")
        return 0
    print(_said(file, kind, outcome, native.unknown), flush=True)
    return 0 if outcome.state == "refused" else 1


def _said(file: Path, kind: str, outcome: Outcome, unknown: dict[str, int]) -> str:
    if outcome.state == "new":
        what = f"imported as session {outcome.session_id} ({outcome.turns} turn(s))"
    elif outcome.state == "added":
        what = f"{outcome.added} new turn(s) added to session {outcome.session_id} ({outcome.turns} in all)"
    elif outcome.state == "live":
        what = f"recorded live by acp-bridge wrap as session {outcome.session_id}; not imported again"
    elif outcome.state == "unchanged":
        what = f"already imported as session {outcome.session_id} ({outcome.turns} turn(s)); nothing to add"
    else:
        what = f"session {outcome.session_id} not changed: {outcome.why}"
    kept = f"; kept raw, of record types it does not know: {', '.join(f'{k} x{n}' for k, n in sorted(unknown.items()))}" \
        if unknown else ""
    return f"{file} ({kind}): {what}{kept}"


def _problem(line: str) -> None:
    print(f"acp-bridge import: {line}", file=sys.stderr, flush=True)
