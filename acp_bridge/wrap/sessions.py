"""A wrapped session, as plain data: our log, what the editor gave it, what the child
said of it, and its lifecycle `State` (acp_bridge.wrap.state). It knows nothing of the
engine or the child's process: the drivers that act on it (acp_bridge.wrap.turns, the
host's `Turns` of it; acp_bridge.wrap.upstream, what the child sends; acp_bridge.wrap.
driver, the child's runs; acp_bridge.wrap.moves) hand it what they need, and move its
state only through `WrappedSession.to`, the one call of `lifecycle.step`.

The editor sees our session ids (the log's); each maps to the wrapped agent's own id,
which is only valid on the run of the child that made it (the `generation` in its
place); a session whose place is on an earlier run is restored first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from acp_bridge.wrap.lifecycle import step
from acp_bridge.wrap.record import TurnRecorder
from acp_bridge.wrap.signals import Act, Event
from acp_bridge.wrap.state import State
from session import SessionLog


@dataclass(eq=False)
class WrappedSession:
    """One session of ours, live in this process, and what we know of the child's."""

    log: SessionLog
    cwd: str
    state: State
    mcp_servers: list[Any] = field(default_factory=list)
    additional_directories: list[str] | None = None
    mode: str | None = None  # the child's current mode, as it last said
    recorder: TurnRecorder | None = None  # the running turn's
    # The child's slash commands, as its last `available_commands_update` gave them (None:
    # none yet); the wrapper's own are offered and run beside them (acp_bridge.wrap.commands).
    commands: list[Any] | None = None
    # A fresh child session of it is seeded with the transcript even without
    # `--seed-fresh`: its context came to its agent that way already (it moved there, or
    # it is an emulated fork).
    carried: bool = False
    was: State | None = None  # the state before the last step (what an act may need of it)
    # From the answer of a load or resume of it to the editor's next request on it: the
    # child's updates recorded then, held from the editor (a load ends with its answer:
    # docs/wrap.md, "Load"); None: none are held, they go on as they come.
    held: list[Any] | None = None

    @property
    def id(self) -> str:
        return self.log.id

    def to(self, event: Event) -> tuple[Act, ...]:
        """Move the state by `event` (lifecycle.step); the acts to perform."""
        self.was = self.state
        self.state, acts = step(self.state, event)
        return acts

    def session_params(self) -> dict[str, Any]:
        """The params that place a session in the child (new, load, resume)."""
        params: dict[str, Any] = {"cwd": self.cwd, "mcpServers": self.mcp_servers}
        if self.additional_directories:
            params["additionalDirectories"] = self.additional_directories
        return params

    def took_state(self, result: Any) -> None:
        """Keep what the child said of the session's state (its current mode)."""
        self.mode = mode_of(result) or self.mode


def mode_of(said: Any) -> str | None:
    """The current mode a child's answer (`session/new`, load, resume, fork) or
    `config_option_update` gives: its `modes.currentModeId`, else the value of its config
    option of category `mode` (opencode gives its mode only so); None if it gives none."""
    if not isinstance(said, dict):
        return None
    modes = said.get("modes")
    current = modes.get("currentModeId") if isinstance(modes, dict) else None
    if isinstance(current, str):
        return current
    options = said.get("configOptions")
    for option in options if isinstance(options, list) else ():
        value = option.get("currentValue") if isinstance(option, dict) and option.get("category") == "mode" else None
        if isinstance(value, str):
            return value
    return None
