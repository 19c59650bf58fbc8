"""The environment of `openai:MODEL`, read and checked without httpx: the command line
checks it at start-up (`acp_bridge.models.check_spec`) so a bad value is refused before
anything is served, and the provider reads it the same way when it is made.

The key (`OPENAI_API_KEY`) is not read here: whether one is needed is the endpoint's
business (a local Ollama takes none), and it never leaves the provider.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from acp_bridge.errors import ModelSpecError

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# The variables that configure the provider, secrets excluded: `acp-bridge setup` copies
# those that are set into an editor's settings (OPENAI_API_KEY never).
SETTINGS_VARS = ("OPENAI_BASE_URL", "ACP_BRIDGE_CONTEXT_WINDOW", "ACP_BRIDGE_OPENAI_TIMEOUT",
                 "ACP_BRIDGE_OPENAI_ATTEMPTS")


@dataclass(frozen=True)
class OpenAIEnv:
    base_url: str
    context_window: int | None  # None: the provider's table of known models decides
    timeout: float | None  # None: the provider's default
    attempts: int | None


def base_url(env: Mapping[str, str] | None = None) -> str:
    """The endpoint `OPENAI_BASE_URL` names (unchecked), else OpenAI's."""
    env = os.environ if env is None else env
    return env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL


def url_problem(url: str) -> str | None:
    """Why `url` cannot be the provider's endpoint (`OPENAI_BASE_URL`), or None: the
    agent's start-up and `acp-bridge login` check it alike."""
    if not url.startswith(("http://", "https://")) or not urlsplit(url).hostname:
        return f"OPENAI_BASE_URL={url!r} must be an http:// or https:// URL, e.g. http://localhost:11434/v1"
    return None


def read_env(model: str, env: Mapping[str, str]) -> OpenAIEnv:
    """The provider's settings for `openai:{model}` from `env`; ModelSpecError (naming the
    variable) for a value that cannot work."""
    if not model:
        raise ModelSpecError("openai:MODEL needs a model name, e.g. openai:gpt-4o")
    url = base_url(env)
    if (problem := url_problem(url)) is not None:
        raise ModelSpecError(problem)
    window = _number(env, "ACP_BRIDGE_CONTEXT_WINDOW", int)
    attempts = _number(env, "ACP_BRIDGE_OPENAI_ATTEMPTS", int)
    return OpenAIEnv(base_url=url,
                     context_window=None if window is None else int(window),
                     timeout=_number(env, "ACP_BRIDGE_OPENAI_TIMEOUT", float),
                     attempts=None if attempts is None else int(attempts))


def _number(env: Mapping[str, str], key: str, kind: type[int] | type[float]) -> float | None:
    raw = env.get(key, "").strip()
    if not raw:
        return None
    try:
        value = float(int(raw)) if kind is int else float(raw)
    except ValueError:
        raise ModelSpecError(f"{key}={raw!r} is not {'a whole' if kind is int else 'a'} number") from None
    if not (math.isfinite(value) and value > 0):
        raise ModelSpecError(f"{key} must be positive, got {raw!r}")
    return value
