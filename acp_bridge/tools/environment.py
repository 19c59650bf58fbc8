"""What the processes the agent starts are given of its environment, and the secrets
taken out of what they print before it is recorded (docs/protocol.md, "Secrets").

- **Withheld.** A command, a terminal (tools/local_terminal.py: `run_command` on this
  machine, and `acp-bridge chat`'s `terminal/*`) gets the agent's environment without
  the secrets it holds: the variables of `WITHHELD` and every variable whose name ends
  in `_API_KEY` or `_TOKEN` (any case). An MCP server (tools/mcp_transport.py) gets
  the MCP SDK's short safe list (HOME, PATH, ...), which holds none of them.
- **Passed on, explicitly.** `$ACP_BRIDGE_PASS_ENV` names variables (spaces or commas
  between them) to hand on all the same, to commands, terminals and MCP servers alike
  (`GITHUB_TOKEN` for a `gh` the model runs). What a client gives a terminal or an MCP
  server (`terminal/create`'s and `McpServer`'s `env`) is given as it is: the client
  passed it on itself.
- **Redacted, as a second line.** What a tool returns is recorded (the log, then the
  search index, the exports, the served pages, the client and the model's next request
  all read it from there), so before it is, every value of a secret the agent holds is
  replaced by `[redacted: NAME]` (`Secrets.redact_json`): a command the client's own
  terminal ran, in an environment we do not choose, or a file the model read that
  quotes the key. The values are the withheld variables' (passed on or not), the
  `openai:` key from its file, and the PostgreSQL store's password; one shorter than
  `MIN_SECRET` characters is no secret worth mangling the output for (`TOKEN=1`).

Pure: the caller hands in the environment and the values it knows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

WITHHELD = ("OPENAI_API_KEY", "ACP_BRIDGE_POSTGRES", "PGPASSWORD")
"""The variables the agent reads a secret from, by name: the `openai:` models' key, the
PostgreSQL store's connection string (which may hold its password) and libpq's
password. Any `*_API_KEY` or `*_TOKEN` is withheld as well (`withheld`)."""
WITHHELD_SUFFIXES = ("_API_KEY", "_TOKEN")
PASS_ENV = "ACP_BRIDGE_PASS_ENV"
MIN_SECRET = 8

_NAMES = re.compile(r"[^\s,]+")


def withheld(name: str) -> bool:
    """Whether a variable of this name is a secret of the agent's (see the module)."""
    upper = name.upper()
    return upper in WITHHELD or upper.endswith(WITHHELD_SUFFIXES)


def passed_on(environ: Mapping[str, str]) -> frozenset[str]:
    """The names `$ACP_BRIDGE_PASS_ENV` lists."""
    return frozenset(_NAMES.findall(environ.get(PASS_ENV, "")))


def command_environment(environ: Mapping[str, str], given: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a command or terminal: `environ` without its withheld
    variables (but those `$ACP_BRIDGE_PASS_ENV` names), then what the client `given`."""
    keep = passed_on(environ)
    out = {name: value for name, value in environ.items() if name in keep or not withheld(name)}
    out.update(given or {})
    return out


def passed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables `$ACP_BRIDGE_PASS_ENV` names that `environ` has: what an MCP server
    gets of the agent's own environment besides the SDK's safe list."""
    keep = passed_on(environ)
    return {name: value for name, value in environ.items() if name in keep}


@dataclass(frozen=True)
class Secrets:
    """Secret values and the name each is redacted as, longest first (a secret that
    holds another is replaced whole)."""

    pairs: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, environ: Mapping[str, str], others: Iterable[tuple[str, str | None]] = ()) -> Secrets:
        """The withheld variables' values in `environ`, and `others` ((name, value):
        the key file's key, the store's password; a None value is left out)."""
        found: dict[str, str] = {}
        for name, value in [*((n, v) for n, v in environ.items() if withheld(n)), *others]:
            if value is not None and len(value.strip()) >= MIN_SECRET:
                found.setdefault(value.strip(), name)
        ordered = sorted(found.items(), key=lambda pair: len(pair[0]), reverse=True)
        return cls(tuple((value, f"[redacted: {name}]") for value, name in ordered))

    def redact(self, text: str) -> str:
        for value, label in self.pairs:
            if value in text:
                text = text.replace(value, label)
        return text

    def redact_json(self, value: Any) -> Any:
        """`value` (a tool result's content, its display) with every string in it
        redacted, keys included."""
        if not self.pairs:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, list):
            return [self.redact_json(v) for v in value]
        if isinstance(value, dict):
            return {self.redact(k): self.redact_json(v) for k, v in value.items()}
        return value
