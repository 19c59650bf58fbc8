"""The options of `acp-bridge wrap` that are the wrapper's own: the agents it may hand a
session to (`--agent NAME=COMMAND`, or one command after `--`), checked as it will
spawn them, and the cancel grace; `wrap_args` reads and checks them all (the store and
log options are every agent's: acp_bridge.cli.startup). `setup zed` and `chat --wrap`
check the same values with the same functions."""

from __future__ import annotations

import argparse

from acp_bridge.cli.startup import OneLineParser, agent_settings, chosen, log_options, store_options
from acp_bridge.errors import ConfigError

# `wrap --cancel-grace`: how long a cancelled prompt waits for the wrapped agent's own
# answer before the wrapper answers it (docs/wrap.md, "The cancel grace"). Well-behaved
# agents answer within milliseconds, or a second or two while a tool is stopped; five
# seconds is long enough for those and short enough for someone waiting on a stop button.
DEFAULT_CANCEL_GRACE = 5.0
MAX_CANCEL_GRACE = 600.0


def cancel_grace_option(p: argparse.ArgumentParser, *, passed: bool = False) -> None:
    """`--cancel-grace` of `acp-bridge wrap` (`passed`: `chat --wrap`, which hands it on)."""
    p.add_argument("--cancel-grace", metavar="SECONDS",
                   help=("with --wrap: " if passed else "") + "how long a cancelled prompt waits for the wrapped "
                        "agent's answer before acp-bridge answers it `cancelled` itself "
                        f"(default {DEFAULT_CANCEL_GRACE:g}; $ACP_BRIDGE_CANCEL_GRACE)")


def cancel_grace(args: argparse.Namespace) -> float:
    """The wrapper's cancel grace: `--cancel-grace`, else `$ACP_BRIDGE_CANCEL_GRACE`,
    else the default; ConfigError unless it is a number of seconds above 0 (a grace of
    none would end every cancelled turn before the agent could say so) and at most
    MAX_CANCEL_GRACE."""
    value, option = chosen(args, "cancel_grace", "ACP_BRIDGE_CANCEL_GRACE")
    if value is None:
        return DEFAULT_CANCEL_GRACE
    try:
        seconds = float(value.strip())
    except ValueError:
        raise ConfigError(option, f"not a number of seconds: {value!r}") from None
    if not 0 < seconds <= MAX_CANCEL_GRACE:  # NaN is refused here too
        raise ConfigError(option, f"must be more than 0 and at most {MAX_CANCEL_GRACE:g} seconds, got {value}")
    return seconds


def wrap_agents(values: list[str] | None, command: list[str]) -> list[tuple[str, list[str]]]:
    """`wrap --agent NAME=COMMAND ...`, checked: (name, argv) per agent in order, the
    first the default; COMMAND is one string, split as a POSIX shell splits it (shlex).
    ConfigError for a value without `=`, an empty or repeated name, an empty or
    unbalanced COMMAND, a program that is not found, or `--agent` together with `--
    COMMAND` (the one-agent form)."""
    import shlex

    if values and command:
        raise ConfigError("--agent", "give the agents with --agent NAME=COMMAND or one with -- COMMAND, not both")
    agents: list[tuple[str, list[str]]] = []
    for value in values or ():
        name, eq, line = value.partition("=")
        name = name.strip()
        if not eq:
            raise ConfigError("--agent", f"expected NAME=COMMAND, got {value!r}")
        if not name or any(c.isspace() or not c.isprintable() for c in name):
            raise ConfigError("--agent", f"an agent needs a name without spaces before '=': {value!r}")
        if any(name == other for other, _ in agents):
            raise ConfigError("--agent", f"agent {name!r} is given twice")
        try:
            argv = shlex.split(line)
        except ValueError as exc:
            raise ConfigError("--agent", f"cannot split the command of {name!r} ({exc}): {line!r}") from None
        if not argv:
            raise ConfigError("--agent", f"agent {name!r} has no command")
        check_runnable(argv, "--agent", f" (agent {name!r})")
        agents.append((name, argv))
    return agents


def check_runnable(argv: list[str], option: str, which: str = "") -> None:
    """ConfigError naming `option` unless `argv[0]` is a program that can run (on
    `$PATH`, or a path to an executable file), as the wrapper will spawn it."""
    import shutil

    if shutil.which(argv[0]) is None:
        raise ConfigError(option, f"cannot run {argv[0]!r}{which}: not found or not executable")


def wrap_args(raw: list[str]) -> argparse.Namespace:
    """`wrap`'s options, checked."""
    cut = raw.index("--") if "--" in raw else len(raw)
    parser = OneLineParser(prog="acp-bridge wrap", description="Record any ACP agent's turns in the session log: "
                           "acp-bridge wrap [options] -- COMMAND [ARGS...]")
    store_options(parser)
    log_options(parser)
    parser.add_argument("--seed-fresh", action="store_true",
                        help="when a loaded session cannot be loaded or resumed by the wrapped agent, seed its "
                             "fresh session with the transcript (one prompt: a model call of the wrapped agent)")
    cancel_grace_option(parser)
    parser.add_argument("--agent", action="append", metavar="NAME=COMMAND",
                        help="an agent the editor may hand a session to (COMMAND split as a shell would); give "
                             "several, the first the default; instead of -- COMMAND")
    args = parser.parse_args(raw[:cut])
    args.wrapped = raw[cut + 1:]
    args.agents = wrap_agents(args.agent, args.wrapped)
    if not args.wrapped and not args.agents:
        parser.error("no agent to wrap: acp-bridge wrap [options] -- COMMAND [ARGS...] or --agent NAME=COMMAND ...")
    settings = agent_settings(args, model=False)
    args.store, args.backend, args.log_level = str(settings.store), settings.backend, settings.log_level
    args.cancel_grace = cancel_grace(args)
    return args
