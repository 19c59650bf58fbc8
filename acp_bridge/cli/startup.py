"""Start-up, shared by every program of the command line: the options of the agent's
programs (store, backend, model, logs) and the checks of their values, made before
anything is served or stored (DESIGN.md section 6; docs/protocol.md, "Start-up").

Fail fast: each value that can be checked before serving is checked here, whether it
came from a flag or from the environment: the model spec (`acp_bridge.models.check_spec`:
the script file is read and checked whole; the openai endpoint settings), the backend
name, the log level, the log file and the store folder. A bad value raises `ConfigError`,
which names the option (the flag, or the environment variable the value came from) and
what is wrong; `acp_bridge.cli.main.main` is the one place that turns it into `refuse`:
one line on stderr and exit status 2, no traceback unless the log level is debug. An
editor shows that line in its agent log.

Only argparse, os and sys are imported at module level: `acp-bridge` imports this on
every start, and the agent's start-up path stays lean. The checks import what they use.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
import typing

from acp_bridge.cli.stores import DEFAULT_STORE_LABEL, accessible, check_readable, recognised
from acp_bridge.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from acp_bridge.prices import Prices

LOG_LEVELS = ("debug", "info", "warning", "error")
DEFAULT_MODEL = "echo"
DEFAULT_BACKEND = "jsonl"
DEFAULT_LOG_LEVEL = "warning"
DEFAULT_MAX_STEPS = 50
EXIT_CONFIG = 2


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line on stderr and exit status 2 (DESIGN.md section 6)."""

    def error(self, message: str) -> typing.NoReturn:
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(EXIT_CONFIG)


def refuse(prog: str, exc: ConfigError, *, debug: bool) -> int:
    """The one way a configuration error ends a program: one line, exit status 2 (the
    traceback before it at the debug log level)."""
    if debug:
        import traceback

        traceback.print_exception(exc)
    print(f"{prog}: {exc}", file=sys.stderr, flush=True)
    return EXIT_CONFIG


def wants_debug(argv: list[str]) -> bool:
    """Whether `argv` (our options, before any `--`) or the environment asks for the
    debug log level; read raw, as the value being refused may be the log level itself."""
    own = argv[:argv.index("--")] if "--" in argv else argv
    for at, arg in enumerate(own):
        if arg.lower() == "--log-level=debug" or (arg == "--log-level" and own[at + 1:at + 2] == ["debug"]):
            return True
    return os.environ.get("ACP_BRIDGE_LOG_LEVEL", "").strip().lower() == "debug"


# --- the options ------------------------------------------------------------------------


def store_options(p: argparse.ArgumentParser, default: object = None) -> None:
    """The store options of every program that runs the agent (`default`: the value of
    an option not given)."""
    p.add_argument("--store", default=default,
                   help="session store folder (default: $ACP_BRIDGE_HOME, else $XDG_STATE_HOME/acp-bridge)")
    # The names are checked against session.DURABLE_BACKENDS when the program starts
    # (importing `session` to build --help would slow every start).
    p.add_argument("--backend", default=default, metavar="NAME",
                   help=f"session store backend: jsonl, sqlite or postgres (default {DEFAULT_BACKEND}; $ACP_BRIDGE_BACKEND)")


def log_options(p: argparse.ArgumentParser, default: object = None) -> None:
    p.add_argument("--log-level", default=default, metavar="LEVEL",
                   help=f"{', '.join(LOG_LEVELS)} (default {DEFAULT_LOG_LEVEL}; $ACP_BRIDGE_LOG_LEVEL)")
    p.add_argument("--log-file", default=default, help="write logs to this file instead of stderr")


def serve_options(p: argparse.ArgumentParser, *, given_only: bool = False) -> None:
    """The options of `acp-bridge serve` (and of `setup`, which writes them out).
    `given_only` (the `serve` subcommand: `acp-bridge [options] serve [options]`): an
    option not given after `serve` leaves what was given before it."""
    unset = argparse.SUPPRESS if given_only else None
    store_options(p, unset)
    p.add_argument("--model", action="append", default=unset,
                   help="echo (default), script:PATH, openai:NAME, maybe with #images,reasoning; repeat it to "
                        "offer several (the first is the default; else $ACP_BRIDGE_MODEL)")
    p.add_argument("--max-steps", type=int, default=argparse.SUPPRESS if given_only else DEFAULT_MAX_STEPS,
                   help=f"model calls per turn at most (default {DEFAULT_MAX_STEPS})")
    p.add_argument("--prices", metavar="FILE", default=unset,
                   help="model prices (TOML or JSON, docs/search.md), for usage_update.cost (else "
                        "$ACP_BRIDGE_PRICES, else STORE/prices.toml if there is one)")
    log_options(p, unset)


# --- the checks -------------------------------------------------------------------------


class AgentSettings(typing.NamedTuple):
    """The checked start-up values of a program that runs the agent (or the wrapper)."""

    store: Path | str  # a folder, or a PostgreSQL connection string
    backend: str
    model: list[str] | None  # the configured models, the first the default; None for the wrapper
    max_steps: int
    log_level: str
    log_file: str | None
    prices: Prices | None = None  # the agent's price file, read and checked (read_prices)


def agent_settings(args: argparse.Namespace, *, model: bool = True) -> AgentSettings:
    """Check the options of `serve`, `wrap`, `chat` or `setup` in `args` (flags, else the
    environment, else the defaults); ConfigError for the first that cannot work."""
    given, option = chosen(args, "backend", "ACP_BRIDGE_BACKEND")
    backend = check_backend(given, option)
    level = check_log_level(*chosen(args, "log_level", "ACP_BRIDGE_LOG_LEVEL"))
    log_file = getattr(args, "log_file", None)
    if log_file:
        check_log_file(log_file)
    max_steps = getattr(args, "max_steps", None)
    if max_steps is None:
        max_steps = DEFAULT_MAX_STEPS
    if max_steps < 1:
        raise ConfigError("--max-steps", f"must be at least 1, got {max_steps}")
    store, label = store_choice(args, backend)
    if not isinstance(store, str):
        backend = recognised(store, backend, given, option)
    specs = check_models(args, store, backend) if model else None
    if not isinstance(store, str):
        check_writable_store(store, label)
    prices = read_prices(getattr(args, "prices", None), backend, store) if model else None
    if model:
        check_mcp_timeouts(os.environ)
    return AgentSettings(store, backend, specs, max_steps, level, log_file, prices)


MAX_COUNT = 1_000_000_000  # far past any store, and an int every backend's LIMIT takes


def count(text: str) -> int:
    """The argparse type of a count a person gives (`-n N`): a whole number from 1 to
    MAX_COUNT; anything else is one line and exit status 2, not a traceback or a silent
    "everything" (`-n 0` and `-n -1` were taken)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be 1 to {MAX_COUNT:,}, got {text}")
    return value


def reader_settings(args: argparse.Namespace) -> tuple[str, Path | str]:
    """(backend, store) of `acp-bridge sessions`, checked: the store found or named, its
    backend recognised (acp_bridge.cli.stores; docs/cli.md, "The store")."""
    given, option = chosen(args, "backend", "ACP_BRIDGE_BACKEND")
    backend = check_backend(given, option)
    store, label = store_choice(args, backend)
    if isinstance(store, str):  # a PostgreSQL connection string, its shape checked
        return backend, store
    check_readable(store, label)
    return recognised(store, backend, given, option), store


def chosen(args: argparse.Namespace, name: str, env_var: str) -> tuple[str | None, str]:
    """(the value of option `name`: its flag, else `$env_var`, else None; the option's
    name as the person gave it, for the error line)."""
    flag = "--" + name.replace("_", "-")
    value = getattr(args, name, None)
    if value is not None:
        return str(value), flag
    env = os.environ.get(env_var)
    if env:
        return env, f"${env_var}"
    return None, flag


def check_backend(value: str | None, option: str) -> str:
    from session import DURABLE_BACKENDS

    name = (value or DEFAULT_BACKEND).strip()
    if name == "postgres":
        import importlib.util

        # Found, not imported: the driver is imported at the first session, after
        # `initialize` (docs/persistence.md, "PostgreSQL"); without it nothing can work.
        if importlib.util.find_spec("psycopg") is None:
            raise ConfigError(option, "the postgres backend needs psycopg 3, which is not installed: "
                              "pip install 'acp-bridge[postgres]'")
    if name in DURABLE_BACKENDS:
        return name
    choices = _either(DURABLE_BACKENDS)
    if name == "memory":
        raise ConfigError(option, f"the memory backend keeps nothing on disk (it is for tests); use {choices}")
    raise ConfigError(option, f"unknown backend {name!r}; use {choices}")


def check_mcp_timeouts(env: typing.Mapping[str, str]) -> None:
    """The MCP timeouts our agent reads (acp_bridge.tools.mcp_spec), checked before it
    serves: a bad one was logged and replaced at the first MCP server, unseen."""
    from acp_bridge.tools.mcp_spec import CALL_TIMEOUT_ENV, START_TIMEOUT_ENV, timeout_problem

    for variable in (START_TIMEOUT_ENV, CALL_TIMEOUT_ENV):
        raw = env.get(variable)
        if raw and (problem := timeout_problem(raw.strip())) is not None:
            raise ConfigError(f"${variable}", problem)


def check_log_level(value: str | None, option: str) -> str:
    level = (value or DEFAULT_LOG_LEVEL).strip().lower()
    if level not in LOG_LEVELS:
        raise ConfigError(option, f"unknown log level {value!r}; use {_either(LOG_LEVELS)}")
    return level


def check_log_file(path: str) -> None:
    """The log file can be appended to, or created: asked with access(2), so nothing is
    created before every other value has been checked."""
    from pathlib import Path

    file = Path(path)
    if file.is_dir():
        raise ConfigError("--log-file", f"{file} is a folder")
    if file.exists():
        if not accessible(file, os.W_OK):
            raise ConfigError("--log-file", f"cannot write {file}: {os.strerror(errno.EACCES)}")
        return
    folder = file.parent
    if not folder.is_dir():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError("--log-file", f"cannot create {file}: {folder} {why}")
    if not accessible(folder, os.W_OK | os.X_OK):
        raise ConfigError("--log-file", f"cannot create {file}: {folder} is not writable: {os.strerror(errno.EACCES)}")


def check_models(args: argparse.Namespace, store: Path | str, backend: str) -> list[str]:
    """The models `--model` (repeated) names, else `$ACP_BRIDGE_MODEL`, else echo: each
    checked, and the list as a whole (no model twice). `store` and `backend` are where a
    `replay:` model finds a recording named by session id."""
    from acp_bridge.errors import ModelSpecError
    from acp_bridge.models.catalog import parse_specs

    given = getattr(args, "model", None)
    if isinstance(given, str):
        given = [given]
    if given:
        specs, option = list(given), "--model"
    else:
        env = os.environ.get("ACP_BRIDGE_MODEL")
        specs, option = [env or DEFAULT_MODEL], ("$ACP_BRIDGE_MODEL" if env else "--model")
    for spec in specs:
        check_model(spec, option, store, backend)
    try:
        parse_specs(specs)
    except ModelSpecError as exc:
        raise ConfigError(option, str(exc)) from exc
    return specs


def check_model(spec: str, option: str, store: Path | str | None = None, backend: str = DEFAULT_BACKEND) -> str:
    from acp_bridge.errors import ModelSpecError
    from acp_bridge.models import check_spec

    try:
        check_spec(spec, store_dir=store, backend=backend)
    except ModelSpecError as exc:
        raise ConfigError(option, str(exc)) from exc
    return spec


def store_choice(args: argparse.Namespace, backend: str = DEFAULT_BACKEND) -> tuple[Path | str, str]:
    """The store `args` chooses (a folder; for postgres a connection string, whose shape
    is checked: the server is reached at the first session, not before `initialize`),
    and where the choice came from (for the error)."""
    from pathlib import Path

    from session import default_store_dir

    value = getattr(args, "store", None)
    if backend == "postgres":
        from session.backends.postgres_conninfo import ENV_VAR, problem, resolve

        conninfo = resolve(value, os.environ)
        label = "--store" if value else f"${ENV_VAR}"
        if (why := problem(conninfo)) is not None:
            raise ConfigError(label, why)
        return conninfo, label
    if value:
        return Path(value), "--store"
    label = ("$ACP_BRIDGE_HOME" if os.environ.get("ACP_BRIDGE_HOME") else
             "$XDG_STATE_HOME" if os.environ.get("XDG_STATE_HOME") else DEFAULT_STORE_LABEL)
    return default_store_dir(), label


def check_writable_store(store: Path, option: str) -> None:
    """The agent can write the store (session.files.check_store_writable): checked
    before it starts, so an unusable store is never chmodded or half-used."""
    from session import StoreIOError
    from session.files import check_store_writable

    try:
        check_store_writable(store)
    except StoreIOError as exc:
        raise ConfigError(option, str(exc)) from exc


PRICES_FILE = "prices.toml"  # a store's own price file, in its folder


def read_prices(value: str | None, backend: str, store: Path | str) -> Prices | None:
    """The price file (docs/search.md, "Prices"): `--prices FILE` (`value`), else
    `$ACP_BRIDGE_PRICES`, else the file store's `prices.toml` if it has one; read and
    checked whole (TOML, or JSON for a `.json` file). None without one; ConfigError for
    a file that cannot be read or used."""
    import json
    import tomllib
    from pathlib import Path

    from acp_bridge.errors import PriceFileError
    from acp_bridge.prices import parse_prices

    option = "--prices"
    if not value and os.environ.get("ACP_BRIDGE_PRICES"):
        value, option = os.environ["ACP_BRIDGE_PRICES"], "$ACP_BRIDGE_PRICES"
    if not value:
        if backend == "postgres" or not (Path(store) / PRICES_FILE).is_file():
            return None
        value, option = str(Path(store) / PRICES_FILE), f"the store's {PRICES_FILE}"
    path = Path(value)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(option, f"cannot read the price file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        return parse_prices(data, str(path))
    except (ValueError, PriceFileError) as exc:  # TOML and JSON syntax errors are ValueErrors
        raise ConfigError(option, str(exc) if isinstance(exc, PriceFileError) else f"{path}: {exc}") from None


def _either(names: typing.Sequence[str]) -> str:
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
