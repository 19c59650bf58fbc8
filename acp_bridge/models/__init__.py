"""The models: the interface (acp_bridge.models.base, re-exported here) and
`load_model`, which makes one from its `--model` spec.

The implementations (echo, script, openai) are imported by `load_model` when their spec
is asked for, not with this package: httpx stays off the start-up path unless an
`openai:` model is used, and they import the interface from `base`, never from here.
"""

from __future__ import annotations

from acp_bridge.models.base import (
    Finish,
    FinishReason,
    Model,
    ModelChunk,
    ModelRequest,
    ModelSpecError,
    ReasoningDelta,
    TextDelta,
    ToolCallChunk,
    UsageChunk,
)
from acp_bridge.models.catalog import ModelEntry, parse_spec

__all__ = [
    "Finish",
    "FinishReason",
    "Model",
    "ModelChunk",
    "ModelEntry",
    "ModelRequest",
    "ModelSpecError",
    "ReasoningDelta",
    "TextDelta",
    "ToolCallChunk",
    "UsageChunk",
    "load_model",
]


def load_model(spec: str | ModelEntry) -> Model:
    """Make a model from its spec: `echo`, `script:PATH`, `openai:NAME`, each maybe
    with `#flags` (acp_bridge.models.catalog), or from a parsed entry."""
    entry = spec if isinstance(spec, ModelEntry) else parse_spec(spec)
    if entry.spec == "echo":
        from acp_bridge.models.echo import EchoModel

        return EchoModel()
    kind, _, arg = entry.spec.partition(":")
    if kind == "script":
        from acp_bridge.models.script import ScriptModel

        return ScriptModel.from_file(arg)
    try:
        from acp_bridge.models.openai import OpenAIModel
    except ModuleNotFoundError as exc:  # httpx: a dependency only this provider imports
        if exc.name != "httpx":
            raise
        raise ModelSpecError("openai:MODEL needs the httpx package: pip install httpx") from None

    return OpenAIModel.from_env(arg, images=entry.images)
