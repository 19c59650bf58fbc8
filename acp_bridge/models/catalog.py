"""The models a user configured (`--model`, repeated) and what each can do. Pure.

A spec is `echo`, `script:PATH` or `openai:NAME`, optionally followed by `#` and
comma-separated flags that override what this module knows of the model:

    images / no-images        the model takes image blocks (promptCapabilities.image)
    reasoning / no-reasoning  the model takes a reasoning effort (the `thought_level` option)

Without flags, `echo` and `script:` models take neither; an `openai:` model is looked
up in the tables below by the longest prefix of its name (after a router prefix such
as `openai/`). docs/models.md lists the tables for users.

`replay:SOURCE` takes everything after `replay:` as its source, `#` included (a path
may hold one): it takes no flags. A replay is offered as the models it recorded, each
a stand-in (`ModelEntry.replay`) that takes what that model took
(acp_bridge.models.replay_models, docs/snapshots.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from acp_bridge.errors import ModelSpecError

NEEDS_ARG: Final[Mapping[str, str]] = {
    "script": "script:PATH needs the path of a model script",
    "openai": "openai:MODEL needs a model name, e.g. openai:gpt-4o",
    "replay": "replay:SOURCE needs a recorded session: a log file or a session id in the store",
}
KINDS: Final = tuple(NEEDS_ARG)
FLAGS: Final = ("images", "no-images", "reasoning", "no-reasoning")

# The reasoning efforts offered as `thought_level` (OpenAI's `reasoning_effort` values
# every reasoning model takes), and the one a session starts with (OpenAI's default).
EFFORT_LEVELS: Final = ("low", "medium", "high")
DEFAULT_EFFORT: Final = "medium"

# openai: models that take images in a user message (`image_url` parts). The longest
# prefix wins, so a text-only variant is listed after its family as False.
IMAGE_MODELS: Final[Mapping[str, bool]] = {
    "gpt-4o": True, "chatgpt-4o": True, "gpt-4.1": True, "gpt-4-turbo": True, "gpt-4-vision": True,
    "gpt-5": True, "o1": True, "o1-mini": False, "o3": True, "o3-mini": False, "o4-mini": True,
    "claude-3": True, "claude-sonnet-4": True, "claude-opus-4": True, "gemini": True,
    "llava": True, "bakllava": True, "llama3.2-vision": True, "llama4": True, "qwen2.5vl": True,
    "qwen2.5-vl": True, "qwen2-vl": True, "qwen-vl": True, "pixtral": True, "minicpm-v": True,
    "gemma3": True, "mistral-small3.1": True,
}

# openai: models that take `reasoning_effort`.
REASONING_MODELS: Final[Mapping[str, bool]] = {
    "o1": True, "o1-mini": False, "o3": True, "o3-mini": True, "o4-mini": True,
    "gpt-5": True, "gpt-5-chat": False,
}


@dataclass(frozen=True)
class ModelEntry:
    """One configured model: `spec` without its flags (the value of the `model` config
    option and of `turn/start.model`), and what it takes."""

    spec: str
    images: bool = False
    reasoning: bool = False
    # A stand-in: the recording (a `replay:` SOURCE) that serves this model's calls.
    replay: str | None = None

    @property
    def kind(self) -> str:
        """What makes the model: `replay` for a stand-in, else its spec's kind."""
        return "replay" if self.replay is not None else spec_kind(self.spec)

    @property
    def label(self) -> str:
        """A short name for a menu: the model's name, a script's file name."""
        kind = spec_kind(self.spec)
        if kind == "openai":
            return self.spec.partition(":")[2]
        if kind == "script":
            return "script " + self.spec.partition(":")[2].rsplit("/", 1)[-1]
        return self.spec


def spec_kind(spec: str) -> str:
    return "echo" if spec == "echo" else spec.partition(":")[0]


def lookup(table: Mapping[str, bool], name: str) -> bool:
    """The table's value for the longest prefix of `name` (lower-cased, without a
    router prefix), False when none matches."""
    name = name.rsplit("/", 1)[-1].lower()
    best = max((p for p in table if name.startswith(p)), key=len, default=None)
    return table[best] if best is not None else False


def parse_spec(text: str) -> ModelEntry:
    """A `--model` value as a ModelEntry; ModelSpecError says what is wrong with it."""
    if text.startswith("replay:"):
        if text == "replay:":
            raise ModelSpecError(NEEDS_ARG["replay"])
        return ModelEntry(text)  # the source whole: a path may hold a '#'
    spec, hash_, flag_text = text.partition("#")
    flags = [f.strip() for f in flag_text.split(",")] if hash_ else []
    unknown = [f for f in flags if f not in FLAGS]
    if unknown:
        raise ModelSpecError(f"model {text!r}: unknown flag {unknown[0]!r} after '#'; "
                             f"use {', '.join(FLAGS)}")
    kind, _, arg = spec.partition(":")
    if kind in KINDS and not arg:
        raise ModelSpecError(NEEDS_ARG[kind])
    if spec != "echo" and kind not in KINDS:
        raise ModelSpecError(f"unknown model {spec!r}: use echo, script:PATH, openai:NAME or replay:SOURCE")
    images = kind == "openai" and lookup(IMAGE_MODELS, arg)
    reasoning = kind == "openai" and lookup(REASONING_MODELS, arg)
    for flag in flags:
        if flag.endswith("images"):
            images = flag == "images"
        else:
            reasoning = flag == "reasoning"
    return ModelEntry(spec, images=images, reasoning=reasoning)


def parse_specs(texts: Iterable[str]) -> tuple[ModelEntry, ...]:
    """The configured models, the first being the default; the same model twice is
    refused (the config option's values must be unique)."""
    entries: list[ModelEntry] = []
    for text in texts:
        entry = parse_spec(text)
        if any(e.spec == entry.spec for e in entries):
            raise ModelSpecError(f"model {entry.spec!r} is given twice")
        entries.append(entry)
    if not entries:
        raise ModelSpecError("no model configured")
    return tuple(entries)


def find(entries: Sequence[ModelEntry], spec: object) -> ModelEntry | None:
    return next((e for e in entries if e.spec == spec), None)
