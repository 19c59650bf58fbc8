"""Our agent's slash commands (acp_bridge.host.commands has what a command is, how a
prompt runs one and the turn that records it; docs/protocol.md, "Slash commands").

Each does what its ACP method does, by the same path: `/mode NAME` is
`session/set_mode` (the next turn's `turn/start.mode`, as the command's own turn
records it; `current_mode_update` and `config_option_update`), `/model NAME` is
`session/set_config_option` of `model` (a durable `config/set` before the command's
turn; `config_option_update`), `/title` sets the title (`config/set session/title` in
its turn; `session_info_update`), `/export` writes the transcript
(acp_bridge.host.export). `/fork` joins them with `session/fork` (one entry of
`session_commands`). Without input `/mode` and `/model` say what there is to choose.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from acp_bridge.host.commands import TITLE, Command, Outcome
from acp_bridge.host.export import export_command
from acp_bridge.models.catalog import ModelEntry
from acp_bridge.tools import permissions

if TYPE_CHECKING:
    from acp_bridge.agent.live import LiveSession

ModeSwitch = Callable[["LiveSession", str], None]
ModelSwitch = Callable[["LiveSession", str], Awaitable[None]]


def session_commands(live: LiveSession, *, models: tuple[ModelEntry, ...], store: Path | str, backend: str,
                     switch_mode: ModeSwitch, switch_model: ModelSwitch) -> list[Command]:
    """The commands of `live`, in the order the editor lists them. `/model` is there
    when there is another model to switch to."""
    async def mode(given: str) -> Outcome:
        if not given:
            choices = "; ".join(f"{m} ({name}: {text})" for m, (name, text) in permissions.MODES.items())
            return Outcome(f"The mode is {live.runner.mode}. Modes: {choices}")
        switch_mode(live, given)  # an unknown mode: InvalidParamsError, the command's error
        name, text = permissions.MODES[given]
        return Outcome(f"Mode: {given} ({name}: {text})")

    async def model(given: str) -> Outcome:
        if not given:
            return Outcome(f"The model is {live.choice.model.spec}. Models: {', '.join(m.spec for m in models)}")
        await switch_model(live, given)  # unknown, needs a key, cannot be made: the command's error
        return Outcome(f"Model: {live.choice.model.spec} (from the next turn on)")

    commands = [
        TITLE,
        export_command(live.log, store, backend),
        Command("mode", "Switch the mode: when the agent asks before acting", mode,
                hint=" | ".join(permissions.MODES)),
    ]
    if len(models) > 1:
        commands.append(Command("model", "Switch the model of the next turns", model,
                                hint=" | ".join(m.spec for m in models)))
    return commands
