"""The models: the interface (acp_bridge.models.base, re-exported here) and
`load_model`, which makes one from its `--model` spec, and `check_spec`, which checks a
spec at start-up without making the model.

The implementations (echo, script, openai) are imported by `load_model` when their spec
is asked for, not with this package: httpx stays off the start-up path unless an
`openai:` model is used, and they import the interface from `base`, never from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from acp_bridge.errors import ModelSpecError
from acp_bridge.models.base import (
    CONTEXT_LENGTH,
    Finish,
    FinishReason,
    Model,
    ModelChunk,
    ModelRequest,
    ReasoningDelta,
    Retrying,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
)
from acp_bridge.models.catalog import ModelEntry, parse_spec

__all__ = [
    "CONTEXT_LENGTH",
    "Finish",
    "FinishReason",
    "Model",
    "ModelChunk",
    "ModelEntry",
    "ModelRequest",
    "ModelSpecError",
    "ReasoningDelta",
    "Retrying",
    "TextDelta",
    "ToolCallChunk",
    "UsageChunk",
    "check_spec",
    "load_model",
]

if TYPE_CHECKING:
    from pathlib import Path

NEEDS_HTTPX = "openai:MODEL needs the httpx package: pip install httpx"


def load_model(spec: str | ModelEntry, *, store_dir: Path | str | None = None, backend: str = "jsonl") -> Model:
    """Make a model from its spec: `echo`, `script:PATH`, `openai:NAME` (each maybe with
    `#flags`, acp_bridge.models.catalog) or `replay:SOURCE` (a session log file, or a
    session id in the store at `store_dir`), or from a parsed entry (a recorded model's
    stand-in is served by its recording)."""
    entry = spec if isinstance(spec, ModelEntry) else parse_spec(spec)
    if entry.replay is not None:  # a recorded model's stand-in (acp_bridge.models.replay_models)
        from acp_bridge.models.replay import ReplayModel

        return ReplayModel.from_source(entry.replay, store_dir=store_dir, backend=backend, stands_for=entry.spec)
    if entry.spec == "echo":
        from acp_bridge.models.echo import EchoModel

        return EchoModel()
    kind, _, arg = entry.spec.partition(":")
    if kind == "script":
        from acp_bridge.models.script import ScriptModel

        return ScriptModel.from_file(arg)
    if kind == "openai":
        try:
            from acp_bridge.models.openai import OpenAIModel
        except ModuleNotFoundError as exc:  # httpx: a dependency only this provider imports
            if exc.name != "httpx":
                raise
            raise ModelSpecError(NEEDS_HTTPX) from None

        return OpenAIModel.from_env(arg, images=entry.images)
    if kind == "replay":
        from acp_bridge.models.replay import ReplayModel

        return ReplayModel.from_source(arg, store_dir=store_dir, backend=backend)
    raise ModelSpecError(unknown_model(entry.spec))


def check_spec(spec: str, env: Mapping[str, str] | None = None, *, store_dir: Path | str | None = None,
               backend: str = "jsonl") -> None:
    """Raise ModelSpecError unless `load_model(spec)` can make the model with `env` (default
    the process's): everything `load_model` would refuse, checked without making it and
    without importing httpx (the agent's start-up path stays lean). A missing API key is
    not refused here: an `openai:` model without one offers an auth method instead
    (docs/protocol.md, "Auth"). A `replay:` recording is read and checked whole."""
    entry = parse_spec(spec)
    if entry.spec == "echo":
        return
    kind, _, arg = entry.spec.partition(":")
    if kind == "script":
        from acp_bridge.models.script import read_script

        read_script(arg)
        return
    if kind == "openai":
        import importlib.util
        import os

        from acp_bridge.models.openai_env import read_env

        read_env(arg, os.environ if env is None else env)
        if importlib.util.find_spec("httpx") is None:
            raise ModelSpecError(NEEDS_HTTPX)
        return
    if kind == "replay":
        from acp_bridge.models.replay_models import offered

        load_model(entry, store_dir=store_dir, backend=backend)
        offered([entry], store_dir=store_dir, backend=backend, env=env)  # its stand-ins
        return
    raise ModelSpecError(unknown_model(spec))


def unknown_model(spec: str) -> str:
    return f"unknown model {spec!r}: use echo, script:PATH, openai:MODEL or replay:SOURCE"
