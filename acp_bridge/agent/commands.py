"""Our agent's slash commands (acp_bridge.host.commands has what a command is, how a
prompt runs one and the turn that records it; docs/protocol.md, "Slash commands").

Each does what its ACP method does, by the same path: `/mode NAME` is
`session/set_mode` (the next turn's `turn/start.mode`, as the command's own turn
records it; `current_mode_update` and `config_option_update`), `/model NAME` is
`session/set_config_option` of `model` (a durable `config/set` before the command's
turn; `config_option_update`), `/title` sets the title (`config/set session/title` in
its turn; `session_info_update`), `/export` writes the transcript
(acp_bridge.host.export), `/fork [N]` forks the session in the store as
`session/fork` does (up to its last ended turn, or turn N), for the client to open
with `session/load` (acp_bridge.host.fork.fork_stored). Without input `/mode` and
`/model` say what there is to choose.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from acp_bridge.host.commands import TITLE, Command, Outcome, fork_command
from acp_bridge.host.export import export_command
from acp_bridge.host.fork import fork_at, fork_stored, forked_text
from acp_bridge.models.catalog import ModelEntry
from acp_bridge.tools import permissions
from session import SessionStore

if TYPE_CHECKING:
    from acp_bridge.agent.live import LiveSession

ModeSwitch = Callable[["LiveSession", str], Awaitable[None]]
ModelSwitch = Callable[["LiveSession", str], Awaitable[None]]


def session_commands(live: LiveSession, *, models: tuple[ModelEntry, ...], store: Path | str, backend: str,
                     switch_mode: ModeSwitch, switch_model: ModelSwitch,
                     sessions: Callable[[], SessionStore]) -> list[Command]:
    """The commands of `live`, in the order the editor lists them. `/model` is there
    when there is another model to switch to."""
    async def mode(given: str) -> Outcome:
        if not given:
            choices = "; ".join(f"{m} ({name}: {text})" for m, (name, text) in permissions.MODES.items())
            return Outcome(f"The mode is {live.runner.mode}. Modes: {choices}")
        await switch_mode(live, given)  # an unknown mode: InvalidParamsError, the command's error
        name, text = permissions.MODES[given]
        return Outcome(f"Mode: {given} ({name}: {text})")

    async def model(given: str) -> Outcome:
        if not given:
            return Outcome(f"The model is {live.choice.model.spec}. Models: {', '.join(m.spec for m in models)}")
        await switch_model(live, given)  # unknown, needs a key, cannot be made: the command's error
        return Outcome(f"Model: {live.choice.model.spec} (from the next turn on)")

    async def fork(given: str) -> Outcome:
        header, plan = await fork_stored(sessions(), live.log, fork_at(given))
        return Outcome(forked_text(header["id"], plan))

    commands = [
        TITLE,
        fork_command(fork),
        export_command(live.log, store, backend),
        Command("mode", "Switch the mode: when the agent asks before acting", mode,
                hint=" | ".join(permissions.MODES)),
    ]
    if len(models) > 1:
        commands.append(Command("model", "Switch the model of the next turns", model,
                                hint=" | ".join(m.spec for m in models)))
    return commands
