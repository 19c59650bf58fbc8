"""The models: the interface (acp_bridge.models.base, re-exported here) and
`load_model`, which makes one from its `--model` spec.

The implementations (echo, script, openai) are imported by `load_model` when their spec
is asked for, not with this package: httpx stays off the start-up path unless an
`openai:` model is used, and they import the interface from `base`, never from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

__all__ = [
    "Finish",
    "FinishReason",
    "Model",
    "ModelChunk",
    "ModelRequest",
    "ModelSpecError",
    "ReasoningDelta",
    "TextDelta",
    "ToolCallChunk",
    "UsageChunk",
    "load_model",
]

if TYPE_CHECKING:
    from pathlib import Path


def load_model(spec: str, *, store_dir: Path | None = None, backend: str = "jsonl") -> Model:
    """Make a model from its spec: `echo`, `script:PATH`, `openai:NAME`, `replay:SOURCE`
    (a session log file, or a session id in the store at `store_dir`)."""
    if spec == "echo":
        from acp_bridge.models.echo import EchoModel

        return EchoModel()
    kind, _, arg = spec.partition(":")
    if kind == "script" and arg:
        from acp_bridge.models.script import ScriptModel

        return ScriptModel.from_file(arg)
    if kind == "openai":
        try:
            from acp_bridge.models.openai import OpenAIModel
        except ModuleNotFoundError as exc:  # httpx: a dependency only this provider imports
            if exc.name != "httpx":
                raise
            raise ModelSpecError("openai:MODEL needs the httpx package: pip install httpx") from None

        return OpenAIModel.from_env(arg)
    if kind == "replay":
        from acp_bridge.models.replay import ReplayModel

        return ReplayModel.from_source(arg, store_dir=store_dir, backend=backend)
    raise ModelSpecError(f"unknown model {spec!r}: use echo, script:PATH, openai:MODEL or replay:SOURCE")
