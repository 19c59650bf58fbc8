"""The command line of `acp-bridge chat`: its options, `--wrap -- COMMAND [ARGS...]`, and
the agent child it starts from them (`acp-bridge serve`, or `acp-bridge wrap`)."""

from __future__ import annotations

import argparse
import os
import sys

from acp_bridge.cli.wrap_options import cancel_grace_option


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", help="session store folder, for postgres a connection string (passed to the agent)")
    p.add_argument("--backend", metavar="NAME", help="session store backend (passed to the agent)")
    p.add_argument("--model", action="append",
                   help="model spec: echo, script:PATH, openai:MODEL; repeat it to offer several, "
                        "switched with /model (passed to the agent)")
    p.add_argument("--max-steps", type=positive_int, help="model calls per turn at most (passed to the agent)")
    p.add_argument("--cwd", default=".", help="working directory of new sessions (default: the current one)")
    p.add_argument("--load", metavar="ID", help="start by loading this session instead of a new one")
    p.add_argument("--wrap", action="store_true",
                   help="talk to the agent COMMAND given after `--`, through `acp-bridge wrap` (recorded "
                        "in the store); --model and --max-steps are then the wrapped agent's business")
    p.add_argument("--seed-fresh", action="store_true",
                   help="with --wrap: when the wrapped agent cannot restore a loaded session, send its fresh "
                        "session the conversation so far (acp-bridge wrap --seed-fresh)")
    cancel_grace_option(p, passed=True)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    options(subparsers.add_parser("chat", help="talk to the agent at a terminal",
                                   description="A terminal ACP client for acp-bridge."))


def split_wrapped(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """(the chat's own options, the command after the first `--` or None if none)."""
    if "--" not in argv:
        return list(argv), None
    at = argv.index("--")
    return argv[:at], argv[at + 1:]


def wrap_problem(args: argparse.Namespace) -> str | None:
    """Why `--wrap` and the command after `--` do not fit together, or None."""
    wrapped = getattr(args, "wrapped", None)
    if not args.wrap:
        if getattr(args, "seed_fresh", False):
            return "--seed-fresh is the wrapper's: it is only taken with --wrap"
        if getattr(args, "cancel_grace", None) is not None:
            return "--cancel-grace is the wrapper's: it is only taken with --wrap"
        return None if wrapped is None else "a command after -- is only taken with --wrap"
    if not wrapped:
        return "--wrap needs the agent's command after --: acp-bridge chat --wrap -- COMMAND [ARGS...]"
    if args.model is not None or args.max_steps is not None:
        return "--model and --max-steps are acp-bridge's own agent's; a wrapped agent takes its own options"
    return None


def _postgres(args: argparse.Namespace) -> bool:
    return (args.backend or os.environ.get("ACP_BRIDGE_BACKEND")) == "postgres"


def agent_env(args: argparse.Namespace) -> dict[str, str] | None:
    """The child's environment: ours, plus for postgres the `--store` connection string
    in `$ACP_BRIDGE_POSTGRES`, so that a password in it is not on the child's command
    line, which every user of the machine can read in the process list."""
    if not (_postgres(args) and args.store):
        return None
    return {**os.environ, "ACP_BRIDGE_POSTGRES": args.store}


def agent_command(args: argparse.Namespace) -> list[str]:
    """The child the chat starts: `acp-bridge serve`, or `acp-bridge wrap [--seed-fresh]
    [--cancel-grace S] -- COMMAND` (the same store options; `-m acp_bridge` so the chat's
    own interpreter runs it)."""
    wrap = bool(getattr(args, "wrap", False))
    command = [sys.executable, "-m", "acp_bridge", "wrap" if wrap else "serve"]
    store = None if _postgres(args) else args.store  # a connection string goes by agent_env
    given = [("--store", store), ("--backend", args.backend)]
    if not wrap:
        given += [("--model", spec) for spec in args.model or ()]
        given += [("--max-steps", args.max_steps)]
    for flag, value in given:
        if value is not None:
            command += [flag, str(value)]
    if wrap:
        command += ["--seed-fresh"] if getattr(args, "seed_fresh", False) else []
        grace = getattr(args, "cancel_grace", None)
        command += ["--cancel-grace", str(grace)] if grace is not None else []
        command += ["--", *args.wrapped]
    return command
