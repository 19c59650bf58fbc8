"""The context window of a model named by its spec (`turn/start.model`), found as the
model finds it but without making it: no script read, no httpx imported. It gives
`usage_update.size` for a turn replayed from a log (acp_bridge.host.replay) and a
`replay:` model's window (that of the model it recorded).
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def context_window_of(spec: str | None, env: Mapping[str, str] | None = None) -> int | None:
    """The window of the model of `spec` (without `#flags`): `$ACP_BRIDGE_CONTEXT_WINDOW`
    first for an `openai:` model (it sets the window of every such model), then the
    model's own; None for a spec whose window is known only once it is made (`replay:`),
    or that is not a model."""
    kind, _, name = (spec or "").partition(":")
    if kind == "openai":
        env = os.environ if env is None else env
        if env.get("ACP_BRIDGE_CONTEXT_WINDOW", "").isdigit():
            return int(env["ACP_BRIDGE_CONTEXT_WINDOW"])
        from acp_bridge.models.openai_request import context_window

        return context_window(name)
    if kind == "echo":
        from acp_bridge.models.echo import EchoModel

        return EchoModel.context_window
    if kind == "script":
        from acp_bridge.models.script import ScriptModel

        return ScriptModel.context_window
    return None
