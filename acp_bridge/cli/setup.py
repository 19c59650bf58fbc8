"""`acp-bridge setup zed [options] [-- COMMAND [ARGS...]]`: print the settings entry that
makes an editor launch this agent, ready to paste.

    acp-bridge setup zed --model openai:gpt-4o
    acp-bridge setup zed --name "claude (recorded)" -- npx @zed-industries/claude-code-acp
    acp-bridge setup zed --agent claude="npx @zed-industries/claude-code-acp" --agent codex=codex-acp

Zed's `settings.json` takes custom ACP agents under `agent_servers` (its docs, "External
Agents": `{"type": "custom", "command", "args", "env"}`). The entry is printed on stdout
as JSON and nothing else; a note on how to use it goes to stderr.

Decisions:
- The options are those of `acp-bridge serve` (or, with a command after `--`, of
  `acp-bridge wrap`), checked exactly as the agent will check them (a bad value is one
  line and exit status 2, as at start-up), so an entry that is printed starts.
- `command` is the absolute path of the installed `acp-bridge` executable that runs this
  command (not its symlink target: a pipx or venv upgrade keeps the path), else the one
  beside this Python, else this Python with `-m acp_bridge`.
- `args` name every chosen value explicitly, from flags or from the environment, with
  paths made absolute (an editor starts the agent from another folder and with another
  environment): the store always, the model, backend, max steps, log level and log file
  when they are not the defaults. `env` carries the provider settings of an `openai:`
  model that are set here (`OPENAI_BASE_URL`...), never `OPENAI_API_KEY`: a secret is
  not printed; the note says how to give it.
- A PostgreSQL store (issue 36) is passed on as given, a connection string unchanged;
  with none given, libpq's `PG*` variables set here go into `env` (the editor starts the
  agent in its own environment). A password is never written: a connection string
  holding one is refused (point it at ~/.pgpass), `PGPASSWORD` is left out and the note
  says so.
- The wrapped agents are checked as the wrapper checks them: the program after `--`,
  and each `--agent NAME=COMMAND` (a multi-agent entry: `wrap --agent ...`), must be
  found and executable here.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from acp_bridge.cli.startup import (
    DEFAULT_BACKEND,
    DEFAULT_LOG_LEVEL,
    DEFAULT_MAX_STEPS,
    DEFAULT_MODEL,
    AgentSettings,
    OneLineParser,
    agent_settings,
    serve_options,
)
from acp_bridge.cli.wrap_options import check_runnable, wrap_agents
from acp_bridge.errors import ConfigError

EDITORS = ("zed",)
DEFAULT_NAME = "acp-bridge"
NOTE = ("Paste this into Zed's settings.json (command palette: \"zed: open settings file\"), "
        "merging it into \"agent_servers\" if you have one; the agent is then in the Agent "
        "Panel's new-thread menu as {name!r}.")
PG_PASSWORD_NOTE = ("PGPASSWORD is not written here: put the password in ~/.pgpass (or $PGPASSFILE), which "
                    "libpq reads for the editor's agent too.")
# libpq's environment (its docs, "Environment Variables") that says where the store is,
# copied into the entry when set here: the editor starts the agent with its own
# environment. PGPASSWORD is left out on purpose.
LIBPQ_VARS = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE", "PGSERVICEFILE",
              "PGPASSFILE", "PGSSLMODE", "PGSSLROOTCERT", "PGSSLCERT", "PGSSLKEY", "PGAPPNAME", "PGOPTIONS",
              "PGCONNECT_TIMEOUT", "PGTARGETSESSIONATTRS")
KEY_NOTE = ("OPENAI_API_KEY is not written here: add it to \"env\" yourself, or start Zed with "
            "it in its environment.")


def main(argv: list[str]) -> int:
    at = argv.index("--") if "--" in argv else len(argv)
    wrapped = argv[at + 1:] if at < len(argv) else None
    parser = OneLineParser(
        prog="acp-bridge setup", usage="%(prog)s zed [options] [-- COMMAND [ARGS...] | --agent NAME=COMMAND ...]",
        description="Print the settings entry that makes an editor launch acp-bridge (with a "
                    "command after --, or --agent: acp-bridge wrap in front of those agents).")
    parser.add_argument("editor", choices=EDITORS, help="the editor (zed)")
    parser.add_argument("--name", help=f"the agent's name in the editor (default {DEFAULT_NAME!r})")
    parser.add_argument("--agent", action="append", metavar="NAME=COMMAND",
                        help="an agent acp-bridge wrap offers (as wrap --agent); give several, the first the default")
    serve_options(parser)
    args = parser.parse_args(argv[:at])
    if wrapped is not None and not wrapped:
        parser.error("no agent to wrap after --: acp-bridge setup zed [options] -- COMMAND [ARGS...]")
    wrapping = bool(wrapped or args.agent)
    if wrapping and (args.model is not None or args.max_steps != DEFAULT_MAX_STEPS):
        parser.error("--model and --max-steps are acp-bridge's own agent's; a wrapped agent takes its own")
    agents = wrap_agents(args.agent, wrapped or [])  # checked as the wrapper will: found, executable
    if wrapped:
        check_runnable(wrapped, "--")
    settings = agent_settings(args, model=not wrapping)
    name = args.name or DEFAULT_NAME
    entry = zed_entry(settings, wrapped, os.environ, agents=agents)
    print(json.dumps({"agent_servers": {name: entry}}, indent=2, ensure_ascii=False))
    print(NOTE.format(name=name), file=sys.stderr)
    if settings.model is not None and any(m.startswith("openai:") for m in settings.model):
        print(KEY_NOTE, file=sys.stderr)
    if settings.backend == "postgres" and os.environ.get("PGPASSWORD"):
        print(PG_PASSWORD_NOTE, file=sys.stderr)
    return 0


def zed_entry(settings: AgentSettings, wrapped: list[str] | None, env: Mapping[str, str],
              *, agents: Sequence[tuple[str, list[str]]] = ()) -> dict[str, Any]:
    """Zed's `agent_servers` entry for these checked settings (see the module's decisions)."""
    command, prefix = executable()
    extra: dict[str, str] = {}
    args = [*prefix, "wrap" if wrapped or agents else "serve", *_store_args(settings, env, extra)]
    if settings.backend != DEFAULT_BACKEND:
        args += ["--backend", settings.backend]
    if settings.model is not None and settings.model != [DEFAULT_MODEL]:
        for spec in settings.model:
            args += ["--model", absolute_model(spec)]
    if settings.max_steps != DEFAULT_MAX_STEPS:
        args += ["--max-steps", str(settings.max_steps)]
    if settings.log_level != DEFAULT_LOG_LEVEL:
        args += ["--log-level", settings.log_level]
    if settings.prices is not None:  # the file read now: the editor's agent reads the same
        args += ["--prices", str(Path(settings.prices.where).absolute())]
    if settings.log_file:
        args += ["--log-file", str(Path(settings.log_file).absolute())]
    for agent, argv in agents:
        args += ["--agent", f"{agent}={shlex.join(argv)}"]
    if wrapped:
        args += ["--", *wrapped]
    if settings.model is not None and any(m.startswith("openai:") for m in settings.model):
        from acp_bridge.models.openai_env import SETTINGS_VARS

        extra.update({key: env[key] for key in SETTINGS_VARS if env.get(key)})
    return {"type": "custom", "command": command, "args": args, "env": extra}


def _store_args(settings: AgentSettings, env: Mapping[str, str], extra: dict[str, str]) -> list[str]:
    """The store as the editor's agent must be told it: a folder made absolute; a
    PostgreSQL connection string unchanged (never a password: ConfigError), or none,
    with libpq's `PG*` variables that are set here (but `PGPASSWORD`) put in `extra`."""
    if not isinstance(settings.store, str):
        return ["--store", str(Path(settings.store).absolute())]
    from session.backends.postgres_conninfo import has_password

    if has_password(settings.store):
        raise ConfigError("--store", "the connection string holds a password, which would be written in clear "
                                     "into settings.json: leave it out and put it in ~/.pgpass (or $PGPASSFILE)")
    extra.update({key: value for key, value in env.items() if key in LIBPQ_VARS and value})
    return ["--store", settings.store] if settings.store.strip() else []


def executable() -> tuple[str, list[str]]:
    """(the command, the arguments before ours) that run this installation of acp-bridge."""
    launched = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if launched is not None and launched.name == "acp-bridge" and launched.is_file():
        return str(launched.absolute()), []
    beside = Path(sys.executable).parent / "acp-bridge"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside), []
    return sys.executable, ["-m", "acp_bridge"]


def absolute_model(spec: str) -> str:
    """`script:PATH` with PATH made absolute (it resolves against the agent's folder)."""
    kind, _, arg = spec.partition(":")
    return f"script:{Path(arg).absolute()}" if kind == "script" else spec
