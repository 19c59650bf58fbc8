"""`acp-bridge` / `python -m acp_bridge`: the command line (DESIGN.md section 6).

Only `sys` is imported with this module: each subcommand imports what it needs when it
runs (argparse and `startup`, the start-up checks, too), so the agent's start-up path
stays lean and `acp-bridge wrap -- COMMAND` spawns its child before any of it (issue
32). Every start-up value is checked before anything is served
(`acp_bridge.cli.startup`); `main` is the one place where a bad one becomes one line on
stderr and exit status 2.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing's, without importing typing here (mypy takes any TYPE_CHECKING as True)

if TYPE_CHECKING:
    import argparse

    from acp_bridge.wrap.serve import Early

SUBCOMMANDS = ("serve", "chat", "sessions", "wrap", "demo", "setup", "login", "snapshot", "import")


def _parser() -> argparse.ArgumentParser:
    from acp_bridge import __version__
    from acp_bridge.cli.startup import OneLineParser, serve_options

    parser = OneLineParser(prog="acp-bridge", description="An ACP agent with a durable session log.")
    parser.add_argument("--version", action="version", version=f"acp-bridge {__version__}")
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="the stdio ACP agent (the default)")
    serve_options(parser)
    serve_options(serve, given_only=True)  # `acp-bridge --model x serve` keeps the model
    # Listed for --help only: main() hands these to their own modules before parsing,
    # so their imports stay off the agent's start-up path.
    commands.add_parser("chat", help="a terminal chat with the agent (acp-bridge chat --help)")
    commands.add_parser("sessions", help="list, show, export and serve stored sessions")
    commands.add_parser("import", help="import other agents' own transcripts (Claude Code, ...) into the store")
    commands.add_parser("login", help="store the API key of openai: models (checked first; file mode 0600)")
    commands.add_parser("wrap", help="record any ACP agent's turns: acp-bridge wrap [options] -- COMMAND [ARGS...]")
    commands.add_parser("setup", help="print an editor's settings entry for this agent: acp-bridge setup zed")
    commands.add_parser("snapshot", help="record ACP scenarios; check them offline (acp-bridge snapshot --help)")
    demo = commands.add_parser("demo", help="show the durable log surviving a kill -9")
    demo.add_argument("--store", help="keep the demo store under this folder")
    return parser


EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program Ctrl-C stopped


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    try:
        return _run(raw)
    except KeyboardInterrupt as interrupt:
        return interrupted(_prog(raw, sessions=True), interrupt)
    except Exception as exc:
        from acp_bridge.errors import ConfigError

        if not isinstance(exc, ConfigError):
            raise
        from acp_bridge.cli.startup import refuse, wants_debug

        return refuse(_prog(raw), exc, debug=wants_debug(raw))


def _prog(raw: list[str], *, sessions: bool = False) -> str:
    """`acp-bridge` and the subcommand `raw` runs, for a message (`sessions`: and the
    sessions command, when it comes first)."""
    command = f" {raw[0]}" if raw[:1] and raw[0] in SUBCOMMANDS[1:] else ""
    if sessions and command == " sessions" and len(raw) > 1 and not raw[1].startswith("-"):
        command += f" {raw[1]}"
    return f"acp-bridge{command}"


def interrupted(prog: str, interrupt: KeyboardInterrupt) -> int:
    """The one rule for Ctrl-C (docs/cli.md, "Interrupts"): one line on stderr, no
    traceback, exit status 130. What was written so far is consistent (every write is a
    transaction or an atomic rename); a command that can say how far it got re-raises
    KeyboardInterrupt with that as its argument, and it is said here."""
    said = str(interrupt.args[0]) if interrupt.args else ""
    import contextlib

    with contextlib.suppress(OSError, ValueError):  # a closed or broken stdout
        sys.stdout.flush()
    print(f"\n{prog}: interrupted{'; ' + said if said else ''}", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


def _run(raw: list[str]) -> int:
    import os

    if raw[:1] == ["login"] or os.environ.get("ACP_BRIDGE_LOGIN") == "1":  # the latter: an editor's terminal auth
        from acp_bridge.cli.login import main as login_main

        return login_main(raw[1:] if raw[:1] == ["login"] else [])
    if raw[:1] == ["chat"]:
        from acp_bridge.cli.chat.main import main as chat_main

        return chat_main(raw[1:])
    if raw[:1] == ["sessions"]:
        from acp_bridge.cli.sessions.main import main as sessions_main

        return sessions_main(raw[1:])
    if raw[:1] == ["import"]:
        from acp_bridge.cli.importer.main import main as import_main

        return import_main(raw[1:])
    if raw[:1] == ["wrap"]:
        return _wrap(raw[1:], _early_child(raw[1:]))
    if raw[:1] == ["setup"]:
        from acp_bridge.cli.setup import main as setup_main

        return setup_main(raw[1:])
    if raw[:1] == ["snapshot"]:
        from acp_bridge.cli.snapshot import main as snapshot_main

        return snapshot_main(raw[1:])
    from acp_bridge.cli.startup import agent_settings, check_writable_store

    parser = _parser()
    args, unknown = parser.parse_known_args(raw)
    if args.command not in (None, "serve") and raw[:1] != [args.command]:
        # The options before a subcommand are the agent's: they would be lost, or taken
        # for the agent (`acp-bridge --store X sessions` would serve the agent).
        parser.error(f"options before {args.command!r} are the agent's (serve's): "
                     f"give them after it (acp-bridge {args.command} --help)")
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "demo":
        from pathlib import Path

        from acp_bridge.cli.demo import run

        if args.store:
            check_writable_store(Path(args.store), "--store")
        return run(args.store)
    settings = agent_settings(args)
    args.store, args.backend, args.model = str(settings.store), settings.backend, settings.model
    args.log_level, args.max_steps, args.prices = settings.log_level, settings.max_steps, settings.prices
    from acp_bridge.agent.serve import serve

    return serve(args)


def _early_child(raw: list[str]) -> Early | None:
    """`wrap [options] -- COMMAND`: COMMAND's process, spawned before the options are
    read (argparse and the start-up checks take ~10 ms the child can use to boot: issue
    32, bench/README.md), and the start-up handshake with it begun, held: it answers
    the editor only once the options are taken (`_wrap` stops both if they are refused).
    With `--agent`, the command is known only once the options are read (`_wrap` spawns
    it then)."""
    cut = raw.index("--") if "--" in raw else len(raw)
    if not raw[cut + 1:]:
        return None
    from acp_bridge.wrap.serve import greet, start_child

    early = start_child(raw[cut + 1:])
    greet(early, None, held=True)
    return early


def _wrap(raw: list[str], early: Early | None) -> int:
    """`acp-bridge wrap [options] -- COMMAND [ARGS...]`: our options before `--`, the
    wrapped agent's command line after it, untouched (its own options are its own).
    `early`: COMMAND's process, spawned already (stopped here if the options are
    refused)."""
    try:
        from acp_bridge.cli.wrap_options import wrap_args

        args = wrap_args(raw)
    except BaseException:  # refused (ConfigError, argparse's exit), or --help
        if early is not None:
            early.discard()
        raise
    # The child first, the wrapper's imports after: it boots while they run.
    from acp_bridge.wrap.serve import greet, serve, start_child

    if early is None:
        early = start_child(args.agents[0][1] if args.agents else args.wrapped)
        greet(early, [name for name, _ in args.agents] if args.agents else None)
    else:
        early.release()
    return serve(args, early)


if __name__ == "__main__":
    sys.exit(main())
