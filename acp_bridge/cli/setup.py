"""`acp-bridge setup zed [options] [-- COMMAND [ARGS...]]`: print the settings entry that
makes an editor launch this agent, ready to paste.

    acp-bridge setup zed --model openai:gpt-4o
    acp-bridge setup zed --name "claude (recorded)" -- npx @zed-industries/claude-code-acp

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
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
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

EDITORS = ("zed",)
DEFAULT_NAME = "acp-bridge"
NOTE = ("Paste this into Zed's settings.json (command palette: \"zed: open settings file\"), "
        "merging it into \"agent_servers\" if you have one; the agent is then in the Agent "
        "Panel's new-thread menu as {name!r}.")
KEY_NOTE = ("OPENAI_API_KEY is not written here: add it to \"env\" yourself, or start Zed with "
            "it in its environment.")


def main(argv: list[str]) -> int:
    at = argv.index("--") if "--" in argv else len(argv)
    wrapped = argv[at + 1:] if at < len(argv) else None
    parser = OneLineParser(
        prog="acp-bridge setup", usage="%(prog)s zed [options] [-- COMMAND [ARGS...]]",
        description="Print the settings entry that makes an editor launch acp-bridge (with a "
                    "command after --: acp-bridge wrap in front of that agent).")
    parser.add_argument("editor", choices=EDITORS, help="the editor (zed)")
    parser.add_argument("--name", help=f"the agent's name in the editor (default {DEFAULT_NAME!r})")
    serve_options(parser)
    args = parser.parse_args(argv[:at])
    if wrapped is not None:
        if not wrapped:
            parser.error("no agent to wrap after --: acp-bridge setup zed [options] -- COMMAND [ARGS...]")
        if args.model is not None or args.max_steps != DEFAULT_MAX_STEPS:
            parser.error("--model and --max-steps are acp-bridge's own agent's; a wrapped agent takes its own")
    settings = agent_settings(args, model=wrapped is None)
    name = args.name or DEFAULT_NAME
    entry = zed_entry(settings, wrapped, os.environ)
    print(json.dumps({"agent_servers": {name: entry}}, indent=2, ensure_ascii=False))
    print(NOTE.format(name=name), file=sys.stderr)
    if settings.model is not None and any(m.startswith("openai:") for m in settings.model):
        print(KEY_NOTE, file=sys.stderr)
    return 0


def zed_entry(settings: AgentSettings, wrapped: list[str] | None, env: Mapping[str, str]) -> dict[str, Any]:
    """Zed's `agent_servers` entry for these checked settings (see the module's decisions)."""
    command, prefix = executable()
    args = [*prefix, "wrap" if wrapped is not None else "serve", "--store", str(Path(settings.store).absolute())]
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
    if wrapped is not None:
        args += ["--", *wrapped]
    extra: dict[str, str] = {}
    if settings.model is not None and any(m.startswith("openai:") for m in settings.model):
        from acp_bridge.models.openai_env import SETTINGS_VARS

        extra = {key: env[key] for key in SETTINGS_VARS if env.get(key)}
    return {"type": "custom", "command": command, "args": args, "env": extra}


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
