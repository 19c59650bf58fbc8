"""`acp-bridge sessions list|show ID|export ID`: stored sessions for people at a terminal.

    acp-bridge sessions [--store DIR|CONNINFO] [--backend jsonl|sqlite|postgres] list [--cwd DIR] [--json] [-n N]
    acp-bridge sessions show ID [--full]
    acp-bridge sessions export ID [--format md|html|jsonl]
    acp-bridge sessions serve [--port N]
    acp-bridge sessions fork ID [--at-turn N]
    acp-bridge sessions delete ID [--yes]
`--store` and `--backend` are accepted before or after the subcommand; they default as
for the agent (`$ACP_BRIDGE_HOME` / `$XDG_STATE_HOME/acp-bridge`, for postgres
`$ACP_BRIDGE_POSTGRES` or libpq's `PG*` variables; `$ACP_BRIDGE_BACKEND` or jsonl). `acp-bridge sessions` alone lists.

Decisions (DESIGN.md section 6 leaves the details open):

- **Read-only, always** (but `fork`, which adds a session, and `delete`: fork.py, delete.py). Stores are opened with `session.open_reader`, which never
  takes a session's owner lock, repairs, or creates anything in the store: not the
  store folder, not a lock file, not `torn/`. `show` and `export` work on a session
  that a live agent owns at that moment. Every command streams: `list` reads each
  log in one pass, checked as a load checks, keeping only its last turn, the count of
  the turns before it and their tokens (`acp_bridge.cli.sessions.source.summarize`);
  `show` and `export --format md` read the log once and print each turn when it is
  complete (`walk.py`: the summary comes after the turns; docs/chat.md); `export
  --format jsonl` copies the stored form a piece at a time. 18-26 MB of peak RSS for
  a 1M-event session on either backend (bench/sessions_memory.py). SQLite is opened
  with `mode=ro` (SQLite may leave its empty `-wal`/`-shm` side files, with the database
  file's mode; the database itself is not written). `SessionStore.load` is never called:
  it takes ownership and writes the repair.
- **Unrepaired logs are shown as loading would leave them.** A log that ends inside a
  turn whose agent is gone (a crash nobody has loaded since) gets the crash-repair
  closers (`session.interrupted_turn_closers`) appended in memory only; the turn is
  marked "interrupted (crash; not yet repaired on disk)" and the synthetic results
  "(not yet on disk)". A torn tail that loading would cut is reported, not shown.
- **Running is not interrupted.** Whether a live agent owns the session is read from
  `/proc/locks` (the owner lock is an flock; the kernel lists it with the holder's pid),
  never by trying the lock, which could make a starting agent fail. If the open turn's
  owner is alive, the turn is shown as "running (in process PID)" as far as it is on
  disk, without closers: a tool call without a result is "(no result yet)". Where
  `/proc/locks` does not exist (not Linux), an open turn is shown with the closers and
  marked "interrupted (crash, or still running; not yet repaired on disk)".
- **Damage.** `show` and `export --format md` refuse a log that `load` would refuse,
  with the same `SessionCorruptError` / `SessionVersionError` message, exit 1 (the turns
  of the blocks before the damage are out already). `list`
  does not stop at one damaged session: it lists it with the status "damaged" (and the
  message in `--json`). `export --format jsonl` is the raw stored form and does not
  parse the log, so a damaged log can still be taken out for inspection.
- **Ids** (source.match_prefix): unknown, exit 1 naming the store; invalid, too short or
  ambiguous, exit 2; no path is ever built from what was typed.
- **list** columns: id, updated (local time), turns, the status of the last turn,
  input/output tokens, cwd, title; newest first (`updatedAt` as the store defines it:
  the file's mtime for JSONL, the last event's time for SQLite). Status: `completed`,
  `max_tokens`, `max_steps`, `refusal`, `cancelled`, `error: MESSAGE`, `interrupted`,
  `interrupted (unrepaired)` (open turn, no live owner), `running` (open turn, live
  owner), `open (running or interrupted)` (owner unknown), `damaged`, `no turns`. A
  session's facts come from the search index's rows while they are fresh (listing.py,
  `Summaries`; the list never makes or updates the index), else from its log, one
  streamed pass (the same output either way); `--cwd` matches the session cwd exactly (after making DIR absolute). `--json`
  prints one JSON array (times as epoch ms and local ISO 8601).
- **Token totals** add up the `usage` of every `assistant/message`: input and output
  always; cache read/write and reasoning tokens when any were reported.
- **show** is plain text, no colours. Per turn: a header line ("Turn 2 — interrupted
  (crash)"), when it started, how long it took, mode and model; the prompt; per step the
  reasoning (marked "Thinking:", lines prefixed "| "), the assistant text (from the
  `assistant/message`, else from the streamed chunks, marked partial), each tool call
  (name, kind, title, id, compact arguments, the permission decision and who made it,
  result with an "[error: CODE]" mark, diffs summarized); then the end reason and the turn's tokens.
  Tool arguments and results are cut to their first lines unless `--full`. Control
  characters in text from the log are shown escaped (`\\x1b`), in `show` and in the
  Markdown: an escape sequence in a tool's output must not drive the reader's terminal.
- **Wrapped sessions** are read like any other; `show` and the Markdown name the agent
  (name, version, own session id, command line); notices shown, `wrapped/update`s not
  (docs/wrap.md, "Everything else sees wrapped sessions").
- **export --format md**: the same content as Markdown, nothing cut, results and
  arguments in fences longer than any backtick run inside them, diffs as `diff` blocks.
  **--format jsonl**: the stored lines exactly: for JSONL the file's bytes (as one read
  saw them); for SQLite the stored header, then one line per event row in seq order,
  `{"type","seq","time","data"}` with the stored data bytes verbatim (the JSONL
  backend's line format).

- **export --format html** and **serve**: html.py, serve.py; docs/html.md.

Only argparse, os and sys are imported at module level: `acp-bridge` builds its parser on
every start (the agent's start-up path stays lean); the rest when a command runs.
"""
from __future__ import annotations

import argparse
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from acp_bridge.cli.sessions.progress import Progress


EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
PROG = "acp-bridge sessions"


# --- the command line ------------------------------------------------------------------


def add_parser(subparsers: Any) -> None:
    """Add `sessions` (with list, show, export) to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "sessions",
        help="list, show, export and serve stored sessions",
        description="List stored sessions, show a transcript, export Markdown, HTML or raw "
        "events, or serve them to a browser on 127.0.0.1.",
    )
    _configure(parser)


def main(argv: list[str] | None = None) -> int:
    """`acp-bridge sessions ...` on its own: parse `argv` and run. Returns the exit code."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="List stored sessions, show a transcript, export Markdown, HTML or raw "
        "events, or serve them to a browser on 127.0.0.1.",
    )
    _configure(parser)
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    return run(args)


def _configure(parser: argparse.ArgumentParser) -> None:
    from acp_bridge.cli.sessions.search import count  # its check imported when -n is given

    _store_options(parser)
    commands = parser.add_subparsers(dest="sessions_command",
                                     metavar="{list,show,export,serve,fork,delete,search,stats,index}")
    ls = _command(
        commands,
        "list", aliases=["ls"], help="stored sessions, newest first (the default)",
        description="Stored sessions, newest first: id, last update, turns, status of the "
        "last turn, tokens, cwd, title.",
    )
    ls.add_argument("--cwd", metavar="DIR", help="only sessions whose cwd is DIR")
    ls.add_argument("--json", action="store_true", help="machine-readable JSON")
    ls.add_argument("-n", "--limit", type=count, metavar="N", help="at most N sessions")
    show = _command(
        commands,
        "show", help="a session's transcript as readable text",
        description="A session's transcript as plain text (read-only, also while an agent "
        "has the session open).",
    )
    show.add_argument("session_id", metavar="ID", help="a session id, or a unique prefix of it")
    show.add_argument("--full", action="store_true",
                      help="print tool arguments, results and diffs in full")
    export = _command(
        commands,
        "export", help="a session as Markdown, as a web page or as its raw stored events",
        description="Write a session to stdout as Markdown, as a self-contained HTML page, "
        "or as its stored JSONL lines.",
    )
    export.add_argument("session_id", metavar="ID", help="a session id, or a unique prefix of it")
    export.add_argument("--format", choices=("md", "html", "jsonl"), default="md",
                        help="md (default): a Markdown transcript; html: a self-contained web "
                             "page (docs/html.md); jsonl: the stored lines")
    serve = _command(
        commands,
        "serve", help="a local read-only web page of the store (127.0.0.1, a token in its URL)",
        description="Serve the session list and transcripts on 127.0.0.1 until Ctrl-C; the URL, "
        "with its random token, is printed on stderr (docs/html.md).",
    )
    serve.add_argument("--port", type=int, default=0, metavar="N",
                       help="the port to listen on (default: a random free one)")
    serve.add_argument("--index", metavar="FILE", help="the search index file (as for search)")
    fork = _command(
        commands,
        "fork", help="a new session holding a session's turns (prints its id)",
        description="Copy a session's turns, up to its end or to turn N, into a new session of the "
        "store (the original is not changed, also while an agent has it open); print the new id.",
    )
    fork.add_argument("session_id", metavar="ID", help="a session id, or a unique prefix of it")
    fork.add_argument("--at-turn", type=int, metavar="N",
                      help="the last turn the fork holds (default: the last that ended; 0: none)")
    from acp_bridge.cli.sessions.delete import delete_options

    delete_options(_command(commands, "delete", help="remove a session from the store (asks first)",
                            description="Remove a session from the store, once confirmed (--yes when not at "
                                        "a terminal); refused while an agent has it open."))
    _search_parsers(commands)


def _search_parsers(commands: Any) -> None:
    from acp_bridge.cli.sessions.search import search_options
    from acp_bridge.cli.sessions.stats import stats_options

    search = _command(
        commands,
        "search", help="full-text search of every prompt, answer, thought, tool call and output",
        description="The turns whose texts match QUERY, best first, with a snippet; the store's "
        "search index is brought up to date first (docs/search.md).",
    )
    search_options(search)
    stats = _command(
        commands,
        "stats", help="turns, tokens, errors and cost, by day, model, agent, cwd or session",
        description="Turns, tokens, failed, interrupted and cancelled turns, slash commands and cost, "
        "grouped; each turn counted once, where it ran, not again in forks (docs/search.md, \"How it counts\").",
    )
    stats_options(stats)
    index = _command(
        commands,
        "index", help="bring the search index up to date (--watch: keep it so)",
        description="Bring the store's search index up to date; with --watch, keep doing so "
        "until Ctrl-C, so a turn is searchable within a second of its end (docs/search.md).",
    )
    index.add_argument("--index", metavar="FILE", help="the search index file (as for search)")
    index.add_argument("--watch", action="store_true", help="keep the index up to date until Ctrl-C")
    index.add_argument("--every", type=float, default=0.5, metavar="SECONDS",
                       help="with --watch: seconds between two passes (default 0.5)")
    index.add_argument("--rebuild", action="store_true", help="make the index again from every log")


def _command(commands: Any, name: str, **texts: Any) -> argparse.ArgumentParser:
    """A subcommand of `acp-bridge sessions`, with the store options every one takes."""
    parser: argparse.ArgumentParser = commands.add_parser(name, **texts)
    _store_options(parser)
    return parser


def _store_options(parser: argparse.ArgumentParser) -> None:
    # Accepted at every level, defaults suppressed: a value given before `sessions` (to
    # the agent's own parser) or before the subcommand is not overwritten by a default
    # further down. `run` applies the defaults.
    parser.add_argument(
        "--store", metavar="DIR", default=argparse.SUPPRESS,
        help="session store folder (default: $ACP_BRIDGE_HOME, else $XDG_STATE_HOME/acp-bridge); "
             "postgres: a connection string (default: $ACP_BRIDGE_POSTGRES, else libpq's PG* variables)",
    )
    parser.add_argument(
        "--backend", metavar="NAME", default=argparse.SUPPRESS,
        help="store backend: jsonl, sqlite or postgres (default: $ACP_BRIDGE_BACKEND, else jsonl)",
    )


def run(args: argparse.Namespace) -> int:
    """Run a parsed `sessions` command. Returns the exit code; errors go to stderr. A bad
    store or backend raises acp_bridge.cli.startup.ConfigError (one line, exit status 2)."""
    from acp_bridge.cli.startup import reader_settings

    backend, root = reader_settings(args)
    command = getattr(args, "sessions_command", None) or "list"
    if command == "serve":  # opens the store per request, in the server's threads
        from acp_bridge.cli.sessions.serve import serve

        return serve(backend, root, args)
    if command in ("search", "stats", "index"):
        return _indexed(command, backend, root, args)
    from acp_bridge.cli.sessions.source import Source, resolve_id
    from acp_bridge.errors import AmbiguousIdError
    from session import (
        InvalidSessionIdError,
        SessionError,
        SessionNotFoundError,
    )
    from session.errors import ForkTurnError

    source = Source(backend, root)
    progress: Progress | None = None
    try:
        if command in ("list", "ls"):
            from acp_bridge.cli.sessions.listing import list_text

            _write(list_text(source, args))
            return EXIT_OK
        # What show and export need, imported past the list (its first page: < 0.3 s).
        from acp_bridge.cli.sessions.progress import Progress
        from acp_bridge.cli.sessions.transcripts import markdown_chunks, show_chunks
        from acp_bridge.cli.sessions.walk import Walk

        progress = Progress(f"{PROG} {command}")
        sid = resolve_id(source, args.session_id)
        if command == "delete":
            from acp_bridge.cli.sessions.delete import run_delete

            return run_delete(source, backend, root, sid, args, f"{PROG} delete")
        if command == "fork":
            from acp_bridge.cli.sessions.fork import fork

            if args.at_turn is not None and args.at_turn < 0:
                return _fail("--at-turn must be 0 or more", EXIT_USAGE)
            _write(fork(backend, root, sid, args.at_turn) + "\n")
            return EXIT_OK
        if command == "export" and args.format == "jsonl":
            for piece in source.raw_chunks(sid):
                _write_bytes(piece)
                progress.add(len(piece), "bytes")
            sys.stdout.buffer.flush()
            return EXIT_OK
        walk = Walk(source, sid, lambda records: progress.set(records, "records"))
        try:
            if command == "export" and args.format == "html":
                from acp_bridge.cli.sessions.html import html_chunks

                for chunk in html_chunks(walk, source):  # UTF-8, as the page declares
                    _write_bytes(chunk.encode("utf-8", "replace"))
                sys.stdout.buffer.flush()
                return EXIT_OK
            chunks = show_chunks(walk, source, full=args.full) if command == "show" \
                else markdown_chunks(walk, source)
            for chunk in chunks:
                _write(chunk)
        finally:
            walk.close()
        return EXIT_OK
    except (AmbiguousIdError, InvalidSessionIdError, ForkTurnError) as exc:
        return _fail(str(exc), EXIT_USAGE)
    except SessionNotFoundError as exc:
        return _fail(f"{exc} (store {source.root}, {source.name} backend)", EXIT_FAIL)
    except SessionError as exc:
        return _fail(str(exc), EXIT_FAIL)
    except BrokenPipeError:  # e.g. `| head`: stop quietly
        _silence_stdout()
        return EXIT_OK
    except OSError as exc:
        return _fail(f"cannot read the store {source.root}: {exc}", EXIT_FAIL)
    except _sqlite_error() as exc:
        return _fail(f"cannot read the store {source.root}: {exc}", EXIT_FAIL)
    finally:
        if progress is not None:
            progress.done()
        source.close()


def _indexed(command: str, backend: str, root: Any, args: argparse.Namespace) -> int:
    """`search`, `stats` and `index`: the store's search index, kept up to date."""
    from acp_bridge.cli.sessions.source import Source
    from acp_bridge.errors import ConfigError
    from session import SearchQueryError, SessionError

    source = Source(backend, root)
    prog = f"{PROG} {command}"
    try:
        if command == "search":
            from acp_bridge.cli.sessions.search import run_search

            return run_search(source, args, prog)
        if command == "stats":
            from acp_bridge.cli.sessions.stats import run_stats

            return run_stats(source, args, prog)
        from acp_bridge.cli.sessions.indexer import run_index

        return run_index(source, args, prog)
    except (SearchQueryError, ConfigError) as exc:  # a query, a time, a price file, --every
        return _fail(f"{command}: {exc}", EXIT_USAGE)
    except SessionError as exc:
        return _fail(f"{command}: {exc}", EXIT_FAIL)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except (OSError, _sqlite_error()) as exc:
        return _fail(f"{command}: cannot read the store {source.root}: {exc}", EXIT_FAIL)
    finally:
        source.close()


def _fail(message: str, code: int) -> int:
    from acp_bridge.cli.safe_text import clean

    print(f"{PROG}: {clean(message)}", file=sys.stderr)  # may quote what a log holds
    return code


def _sqlite_error() -> type[Exception]:
    import sqlite3

    return sqlite3.Error


def _silence_stdout() -> None:
    import contextlib

    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:  # a terminal that cannot show some character
        encoding = sys.stdout.encoding or "utf-8"
        sys.stdout.write(text.encode(encoding, "replace").decode(encoding))
    sys.stdout.flush()


def _write_bytes(data: bytes) -> None:
    """Bytes as they are (the stored form), after any text already written."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
