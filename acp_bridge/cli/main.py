"""`acp-bridge` / `python -m acp_bridge`: the command line (DESIGN.md section 6).

Only argparse and os are imported here: the agent's start-up path stays lean, and each
subcommand imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import typing

from acp_bridge import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acp-bridge", description="An ACP agent with a durable session log."
    )
    parser.add_argument("--version", action="version", version=f"acp-bridge {__version__}")
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="the stdio ACP agent (the default)")
    for p in (parser, serve):
        _serve_options(p)
    # Listed for --help only: main() hands these to their own modules before parsing,
    # so their imports stay off the agent's start-up path.
    commands.add_parser("chat", help="a terminal chat with the agent (acp-bridge chat --help)")
    commands.add_parser("sessions", help="list, show and export stored sessions")
    commands.add_parser("wrap", help="record any ACP agent's turns: acp-bridge wrap [options] -- COMMAND [ARGS...]")
    demo = commands.add_parser("demo", help="show the durable log surviving a kill -9")
    demo.add_argument("--store", help="keep the demo store under this folder")
    return parser


def _serve_options(p: argparse.ArgumentParser) -> None:
    _store_options(p)
    p.add_argument("--model", default=os.environ.get("ACP_BRIDGE_MODEL", "echo"),
                   help="echo (default), script:PATH, openai:NAME ($ACP_BRIDGE_MODEL)")
    p.add_argument("--max-steps", type=int, default=50, help="model calls per turn at most (default 50)")
    _log_options(p)


def _store_options(p: argparse.ArgumentParser) -> None:
    """The store options `serve` and `wrap` share."""
    p.add_argument("--store", default=None,
                   help="session store folder (default: $ACP_BRIDGE_HOME, else $XDG_STATE_HOME/acp-bridge); "
                        "postgres: a connection string (default: $ACP_BRIDGE_POSTGRES, else libpq's PG* variables)")
    p.add_argument("--backend", choices=("jsonl", "sqlite", "postgres"), default=os.environ.get("ACP_BRIDGE_BACKEND", "jsonl"),
                   help="session store backend (default jsonl; $ACP_BRIDGE_BACKEND)")


def _log_options(p: argparse.ArgumentParser) -> None:
    """The log options `serve` and `wrap` share."""
    p.add_argument("--log-level", default=os.environ.get("ACP_BRIDGE_LOG_LEVEL", "warning"),
                   choices=("debug", "info", "warning", "error"), help="stderr log level (default warning)")
    p.add_argument("--log-file", default=None, help="write logs to this file instead of stderr")


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    if raw[:1] == ["chat"]:
        from acp_bridge.cli.chat.main import main as chat_main

        return chat_main(raw[1:])
    if raw[:1] == ["sessions"]:
        from acp_bridge.cli.sessions.main import main as sessions_main

        return sessions_main(raw[1:])
    if raw[:1] == ["wrap"]:
        return _wrap(raw[1:])
    args = _parser().parse_args(raw)
    if args.command == "demo":
        from acp_bridge.cli.demo import run

        return run(args.store)
    from acp_bridge.agent.serve import serve

    store = _writable_store(args.store, args.backend)
    if store is None:
        return 1
    args.store = store
    return serve(args)


class _OneLineParser(argparse.ArgumentParser):
    """A usage error is one line on stderr and exit status 2 (DESIGN.md section 6)."""

    def error(self, message: str) -> typing.NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(2)


def _wrap(raw: list[str]) -> int:
    """`acp-bridge wrap [options] -- COMMAND [ARGS...]`: our options before `--`, the
    wrapped agent's command line after it, untouched (its own options are its own)."""
    cut = raw.index("--") if "--" in raw else len(raw)
    parser = _OneLineParser(prog="acp-bridge wrap", description="Record any ACP agent's turns in the session log: "
                            "acp-bridge wrap [options] -- COMMAND [ARGS...]")
    _store_options(parser)
    _log_options(parser)
    parser.add_argument("--seed-fresh", action="store_true",
                        help="when a loaded session cannot be loaded or resumed by the wrapped agent, seed its "
                             "fresh session with the transcript (one prompt: a model call of the wrapped agent)")
    args = parser.parse_args(raw[:cut])
    args.wrapped = raw[cut + 1:]
    if not args.wrapped:
        parser.error("no agent to wrap: acp-bridge wrap [options] -- COMMAND [ARGS...]")
    store = _writable_store(args.store, args.backend)
    if store is None:
        return 1
    args.store = store
    from acp_bridge.wrap.serve import serve

    return serve(args)


def _writable_store(option: str | None, backend: str) -> str | None:
    """The store folder `serve` will use, or None after one line on stderr saying why
    the agent cannot write it: checked before the agent starts, so an unusable store is
    never chmodded or half-used, and the editor sees the reason at once. A PostgreSQL
    store is a connection string: only its shape is checked here (the server is
    reached at the first session, without delaying `initialize`)."""
    from pathlib import Path

    if backend == "postgres":
        from session.backends.postgres_conninfo import problem, resolve

        conninfo = resolve(option, os.environ)
        if (why := problem(conninfo)) is not None:
            print(f"acp-bridge: {why}", file=sys.stderr)
            return None
        return conninfo

    from session import StoreIOError, default_store_dir
    from session.files import check_store_writable

    store = Path(option) if option else default_store_dir()
    try:
        check_store_writable(store)
    except StoreIOError as exc:
        print(f"acp-bridge: {exc}", file=sys.stderr)
        return None
    return str(store)


if __name__ == "__main__":
    sys.exit(main())
