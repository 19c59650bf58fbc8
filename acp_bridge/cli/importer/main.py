"""`acp-bridge import PATH... [--store DIR] [--backend NAME] [--from FORMAT]`: other
agents' own transcripts into the store, each a session (docs/import.md).

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
    store_options(parser)
    return parser


def main(argv: list[str]) -> int:
    from acp_bridge.cli.startup import agent_settings
    from session import SessionStore, open_backend

    args = _parser().parse_args(argv)
    settings = agent_settings(args, model=False)
    store = SessionStore(open_backend(settings.backend, settings.store))
    from acp_bridge.cli.importer.store import recorded_live

    imported = 0
    try:
        live = recorded_live(store)  # the sessions wrap recorded: not imported again
        for path in args.paths:
            for file in _files(Path(path)):
                imported += _import(store, live, file, args.source)
    finally:
        store.close()
    return 0 if imported else 1


def _files(path: Path) -> Iterator[Path]:
    from acp_bridge.cli.importer.formats import NAMES, SUFFIXES

    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if (p.suffix in SUFFIXES or p.name in NAMES) and p.is_file())
        if not found:
            _problem(f"{path}: no transcript in this folder")
        yield from found
    elif path.exists():
        yield path
    else:
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
