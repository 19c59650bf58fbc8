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

`logout` (advertised as `agentCapabilities.auth.logout` with those methods) forgets the
key: the file `acp-bridge login` stored, and `OPENAI_API_KEY` in this process (the
editor's setting comes back when it starts the agent again). Every `session/new`,
model switch and prompt looks for the key first, so from then on they are -32000
`auth_required` until a key is there again (`authenticate` hands it to the models).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from acp_bridge.errors import AuthRequiredError
from acp_bridge.models.base import Model
from acp_bridge.models.catalog import ModelEntry

if TYPE_CHECKING:
    from acp_bridge.tools.environment import Secrets

log = logging.getLogger("acp_bridge.agent.auth")

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



def require_key(entry: ModelEntry, methods: list[str], made: Mapping[str, Model]) -> None:
    """AuthRequiredError unless `entry` can run: an `openai:` model needs a key. A key
    that came since the model was made (`acp-bridge login`) is handed to it."""
    if entry.kind != "openai":
        return
    from acp_bridge.models.openai_key import find_key

    key = find_key()
    if key is None:
        raise missing_key_error(entry, methods)
    _hand_key(key, [made[entry.spec]] if entry.spec in made else [])


async def authenticate(models: Sequence[ModelEntry], methods: list[str], made: Mapping[str, Model]) -> None:
    """`authenticate`: a key must be there, and the provider must not refuse it."""
    from acp_bridge.models.openai_env import base_url
    from acp_bridge.models.openai_key import check_key, find_key

    key = find_key()
    if key is None:
        raise missing_key_error(next(m for m in models if m.kind == "openai"), methods)
    checked = await check_key(base_url(), key)
    if not checked.ok:
        raise AuthRequiredError(f"the API key was not accepted: {checked.message}", methods)
    log.info("authenticate: %s", checked.message)  # names the URL and the status, never the key
    _hand_key(key, list(made.values()))


def logout() -> str | None:
    """`logout`: the key forgotten (acp_bridge.models.openai_key.forget_key); the key
    file it removed, if there was one. OSError if it cannot be removed."""
    from acp_bridge.models.openai_key import forget_key

    removed = forget_key()
    log.info("logout: %s", f"removed {removed}" if removed is not None else "no key file to remove")
    return str(removed) if removed is not None else None


def held_secrets(store: object, backend: str) -> Secrets:
    """The secrets the agent holds now, which tool output is redacted of before it is
    recorded (acp_bridge.tools.environment): its withheld variables, the `openai:` key
    (from its file too: `acp-bridge login` may have stored one since start-up) and a
    PostgreSQL store's password. Asked for each tool result: a few µs, and a key that
    came late is covered."""
    import os

    from acp_bridge.models.openai_key import KEY_ENV, find_key
    from acp_bridge.tools.environment import Secrets

    others: list[tuple[str, str | None]] = [(KEY_ENV, find_key())]
    if backend == "postgres" and isinstance(store, str):
        from session.backends.postgres_conninfo import password

        others.append(("the store's password", password(store)))
    return Secrets.of(os.environ, others)


def _hand_key(key: str, models: Sequence[Model]) -> None:
    for model in models:
        use_key = getattr(model, "use_key", None)  # openai: models only
        if use_key is not None and getattr(model, "api_key", None) != key:
            use_key(key)
