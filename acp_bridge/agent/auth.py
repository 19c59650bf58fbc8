"""Authentication for `openai:` models (ACP `authMethods`, `authenticate`).

One key serves every `openai:` model: `OPENAI_API_KEY`, else the key file that
`acp-bridge login` writes (acp_bridge.models.openai_key). When an `openai:` model is
configured, `initialize` offers:

- `openai-api-key` (an `agent` method): its description says what to do (set the
  variable in the agent's environment, or run `acp-bridge login`); `authenticate` with
  it checks that a key is there and that the provider does not refuse it.
- `openai-api-key-terminal` (a `terminal` method), only to clients that advertise
  `auth.terminal`: the client runs the agent's own command in a terminal with
  `ACP_BRIDGE_LOGIN=1`, which asks for the key, checks it and stores it (0600).

A session whose model needs a key that is not there cannot start (`session/new`, a
switch to that model, a prompt): -32000 `auth_required`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from acp_bridge.agent.errors import AuthRequiredError
from acp_bridge.models.catalog import ModelEntry

AGENT_METHOD: Final = "openai-api-key"
TERMINAL_METHOD: Final = "openai-api-key-terminal"
# Set by a terminal auth: the agent's command logs in instead of serving (cli/main.py).
LOGIN_ENV: Final = "ACP_BRIDGE_LOGIN"


def needs_auth(models: Sequence[ModelEntry]) -> bool:
    return any(entry.kind == "openai" for entry in models)


def auth_methods(models: Sequence[ModelEntry], client_capabilities: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The `authMethods` of the `initialize` answer (none without an `openai:` model)."""
    if not needs_auth(models):
        return []
    methods: list[dict[str, Any]] = [{
        "id": AGENT_METHOD, "name": "OpenAI API key",
        "description": ("Set OPENAI_API_KEY in the agent's environment (any value for a local server "
                        "that does not check keys), or run `acp-bridge login` in a terminal to store "
                        "a key; then authenticate to check it."),
    }]
    auth = client_capabilities.get("auth")
    if isinstance(auth, Mapping) and auth.get("terminal") is True:
        methods.append({"type": "terminal", "id": TERMINAL_METHOD, "name": "Enter an OpenAI API key",
                        "description": "Type the key in a terminal; it is checked and stored for acp-bridge (0600).",
                        "env": {LOGIN_ENV: "1"}})
    return methods


def method_ids(models: Sequence[ModelEntry], client_capabilities: Mapping[str, Any]) -> list[str]:
    return [m["id"] for m in auth_methods(models, client_capabilities)]


def missing_key_error(entry: ModelEntry, methods: list[str]) -> AuthRequiredError:
    return AuthRequiredError(
        f"{entry.spec} needs an API key: set OPENAI_API_KEY in the agent's environment or run "
        "`acp-bridge login` in a terminal, then authenticate", methods)

