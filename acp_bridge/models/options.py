"""A session's settings beyond the mode: its model and, for a model that takes a
reasoning effort, its thought level (ACP session config options). Pure. The mode's own
option is acp_bridge.tools.permissions' (`mode_state`); our agent lists it first.

The configured models (`--model`, repeated; the first is the default) are offered as
the `model` option (category `model`); a model that takes a reasoning effort adds the
`thought_level` option. A switch is recorded at once as a `config/set` event and every
turn records what it ran with on `turn/start` (`model`, `thoughtLevel`), so a loaded
session carries on with the last of either (`stored_choice`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from acp_bridge.models.catalog import DEFAULT_EFFORT, EFFORT_LEVELS, ModelEntry, find
from session.events import CONFIG_SET, TURN_START, Event
from session.typed import typed

MODEL_OPTION: Final = "model"
THOUGHT_OPTION: Final = "thought_level"

_EFFORT_TEXT: Final = {
    "low": ("Low", "Think briefly: faster and cheaper."),
    "medium": ("Medium", "The model's usual amount of reasoning."),
    "high": ("High", "Think longer on hard problems: slower, more tokens."),
}


@dataclass(frozen=True)
class Choice:
    """The model a session runs and its reasoning effort (None: the model takes none)."""

    model: ModelEntry
    effort: str | None = None


def choice_for(entry: ModelEntry, effort: str | None) -> Choice:
    """`entry` with `effort` if it takes one (else the default effort), or none."""
    if not entry.reasoning:
        return Choice(entry, None)
    return Choice(entry, effort if effort in EFFORT_LEVELS else DEFAULT_EFFORT)


def model_option(models: Sequence[ModelEntry], current: ModelEntry) -> dict[str, Any]:
    return {"id": MODEL_OPTION, "name": "Model", "description": "The model that answers the next prompt.",
            "category": "model", "type": "select", "currentValue": current.spec,
            "options": [{"value": m.spec, "name": m.label, "description": _model_text(m)} for m in models]}


def _model_text(entry: ModelEntry) -> str:
    takes = [what for what, yes in (("images", entry.images), ("a reasoning effort", entry.reasoning)) if yes]
    return f"{entry.spec}: takes {' and '.join(takes) if takes else 'text only'}"


def thought_option(effort: str) -> dict[str, Any]:
    return {"id": THOUGHT_OPTION, "name": "Thought level", "description": "How hard the model reasons.",
            "category": "thought_level", "type": "select", "currentValue": effort,
            "options": [{"value": level, "name": _EFFORT_TEXT[level][0], "description": _EFFORT_TEXT[level][1]}
                        for level in EFFORT_LEVELS]}


def model_options(models: Sequence[ModelEntry], choice: Choice) -> list[dict[str, Any]]:
    """The model option, and the thought level where it applies."""
    options = [model_option(models, choice.model)]
    if choice.effort is not None:
        options.append(thought_option(choice.effort))
    return options


def stored_choice(events: Iterable[Event], models: Sequence[ModelEntry]) -> Choice:
    """The choice a session's log ends with: the last model and thought level recorded
    (`config/set` or `turn/start`). A model no longer configured gives way to the
    default, the first configured one."""
    model, effort = stored_settings(events)
    return choice_for(find(models, model) or models[0], effort)


def stored_settings(events: Iterable[Event]) -> tuple[Any, Any]:
    """The last model and thought level a log recorded (None where it recorded none)."""
    model: Any = None
    effort: Any = None
    for event in reversed(list(events)):
        ev = typed(event)
        if ev["type"] == CONFIG_SET:
            if model is None and ev["data"]["configId"] == MODEL_OPTION:
                model = ev["data"]["value"]
            if effort is None and ev["data"]["configId"] == THOUGHT_OPTION:
                effort = ev["data"]["value"]
        elif ev["type"] == TURN_START:
            model = ev["data"].get("model") if model is None else model
            effort = ev["data"].get("thoughtLevel") if effort is None else effort
        if model is not None and effort is not None:
            break
    return model, effort
