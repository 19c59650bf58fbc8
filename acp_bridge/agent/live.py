"""A session made live in this process: its log, its turn runner, and the wiring of
what the turn does to the client.

The agent makes a stored session live on `session/new`, `session/load` and
`session/resume`. From then on every event the runner writes is mapped to
`session/update`s (acp_bridge.host.updates) the moment it is in the log, a running
tool's interim output goes out as `tool_call_update`s, and the first prompt names the
session (`session_info_update`). The MCP servers the client passes are connected with
it (`LiveSession.connect_mcp`; acp_bridge.tools.mcp_servers) and stopped when it closes. This module is imported with the first session, not
on the way to the `initialize` answer: it brings the runner, the client services and
the local machine's services with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.abc

from acp_bridge.agent.client_services import AcpClientServices
from acp_bridge.agent.runner import TurnRunner
from acp_bridge.errors import AcpBridgeError, PromptInProgressError
from acp_bridge.host.advertised import client_support
from acp_bridge.host.commands import Command, invoked, run_command
from acp_bridge.host.engine import TurnEnd
from acp_bridge.host.listing import iso_time
from acp_bridge.host.tuning import Tuning
from acp_bridge.host.updates import UpdateContext, updates_for
from acp_bridge.models import Model
from acp_bridge.models.options import Choice
from acp_bridge.rpc.connection import Connection
from acp_bridge.tools import permissions
from acp_bridge.tools.local import LocalServices
from session import SessionLog
from session.events import CONFIG_SET, TURN_START, USER_MESSAGE, Event
from session.titles import title_from_content
from session.transcript import Transcript, history_budget
from session.typed import typed

if TYPE_CHECKING:
    from acp_bridge.prices import CostMeter
    from acp_bridge.tools.environment import Secrets
    from acp_bridge.tools.mcp_servers import McpServers


Admit = Callable[["LiveSession", list[Any]], list[Any]]
"""The prompt as the session's model can take it, or an error (the agent's checks)."""


@dataclass
class LiveSession:
    """One live session of our agent: the host's `Turns` of it."""

    log: SessionLog
    runner: TurnRunner
    choice: Choice
    ctx: UpdateContext
    admit: Admit
    mcp: McpServers | None = None  # the MCP servers the client passed, connected
    mcp_given: list[Any] = field(default_factory=list)  # as the client passed them
    commands: list[Command] = field(default_factory=list)  # its slash commands (acp_bridge.agent.commands)
    # The elicitation modes the client shows: its MCP servers are told they may ask.
    elicitation_modes: frozenset[str] = frozenset()
    # The mode the log recorded when the session was made live (its default if none).
    loaded_mode: str = permissions.DEFAULT_MODE

    async def prompt(self, prompt: list[Any], params: Mapping[str, Any]) -> TurnEnd:
        found = invoked(prompt, self.commands)
        if found is not None:  # a slash command: a turn of its own, without the model
            return TurnEnd(await run_command(found, lambda how, body: self.runner.record_turn(how, prompt, body)))
        end = TurnEnd(await self.runner.prompt(self.admit(self, prompt)))
        with contextlib.suppress(AcpBridgeError):  # the turn is answered as it ended, whatever
            await self.keep_mode()  # a switch made while it ran: durable before the answer
        return end

    def cancel(self, by: str, params: Mapping[str, Any] | None) -> bool:
        return self.runner.cancel(by)

    def stop(self) -> None:
        self.runner.stop()

    def switch(self, model: Model, choice: Choice) -> None:
        """Run the next turn with `model` at `choice` (recorded by the caller)."""
        self.choice = choice
        self.runner.model, self.runner.effort = model, choice.effort
        self.ctx = replace(self.ctx, context_window=model.context_window)

    async def close(self, *, stopping: bool = False) -> None:
        """Keep a mode switch no turn recorded, close the log, then stop the session's
        MCP servers."""
        try:
            with contextlib.suppress(AcpBridgeError):  # the close's to log, as any write of it
                await self.keep_mode()
            await self.runner.close()
        finally:
            if self.mcp is not None:
                await self.mcp.close()
                self.mcp = None

    async def keep_mode(self) -> None:
        """Record the mode if it differs from the one the log last recorded
        (`recorded_mode`): a `config/set mode`, durable, so a reload carries on in it as
        it carries on with a switched model (`last_mode`). Called at the switch; a switch
        made while a turn runs (the turn's permissions follow it at once) cannot be
        written then, the log having one writer, and is written when that turn ends or,
        at the latest, when the session closes. A store failure here loses the switch as
        it would lose any write: the caller's error (the switch's answer), or the
        close's to log."""
        recorded = recorded_mode(self.log.events) or self.loaded_mode
        if self.runner.mode != recorded and not self.log.closed and not self.log.tracker.in_turn:
            with contextlib.suppress(PromptInProgressError):
                await self.runner.record_setting(permissions.MODE_OPTION, self.runner.mode)

    async def connect_mcp(self, servers: list[Any] | None, task_group: anyio.abc.TaskGroup) -> dict[str, Any]:
        """Connect the MCP servers the client passed (checked by host.params) and offer
        their tools with the built-in ones, replacing the servers of an earlier open.
        Returns `{"mcpServers": [...]}` for the answer's `_meta.acpBridge` (empty without
        servers). The SDK is imported only if there are servers."""
        servers = servers or []
        if self.mcp is not None and servers == self.mcp_given:
            return {"mcpServers": self.mcp.status()}
        if self.mcp is not None:
            await self.mcp.close()
            self.mcp = None
            self.runner.set_tools(None)
        self.mcp_given = list(servers)
        if not servers:
            return {}
        from acp_bridge.tools import ALL_TOOLS
        from acp_bridge.tools.mcp_servers import McpServers

        header = self.log.header
        roots = [Path(header["cwd"]), *(Path(p) for p in header.get("additionalDirectories", []))]
        mcp = McpServers.from_acp(servers, cwd=roots[0], roots=roots, task_group=task_group,
                                  elicitation=bool(self.elicitation_modes),
                                  on_complete=self.runner.services.elicitation_complete)
        self.mcp = mcp
        # A server's tools/list_changed: the next step is offered its new list.
        mcp.on_change = lambda: self.runner.set_tools([*ALL_TOOLS, *mcp.tools])
        await mcp.start()
        self.runner.set_tools([*ALL_TOOLS, *mcp.tools])
        return {"mcpServers": mcp.status()}


def recorded_mode(events: Sequence[Event]) -> str | None:
    """The last mode `events` record, a switch (`config/set mode`) or a turn's
    (`turn/start.mode`), whichever is later; None if they record none."""
    for event in reversed(events):
        ev = typed(event)
        if ev["type"] == CONFIG_SET and ev["data"]["configId"] == permissions.MODE_OPTION \
                and ev["data"]["value"] in permissions.MODES:
            return ev["data"]["value"]
        if ev["type"] == TURN_START:
            return ev["data"].get("mode", permissions.DEFAULT_MODE)
    return None


def last_mode(events: Sequence[Event]) -> str:
    """The mode a session carries on with: the last its log records (`recorded_mode`),
    by the rule the model follows (acp_bridge.models.options.stored_choice;
    docs/persistence.md, "Mode and model survive a reload")."""
    return recorded_mode(events) or permissions.DEFAULT_MODE


def make_live(
    session_log: SessionLog,
    *,
    conn: Connection,
    model: Model,
    choice: Choice,
    capabilities: dict[str, Any],
    local: LocalServices,
    admit: Admit,
    max_steps: int,
    transcript: Transcript | None = None,
    always_allowed: set[permissions.Rule] | None = None,
    tuning: Tuning | None = None,
    cost: CostMeter | None = None,
    secrets: Callable[[], Secrets] | None = None,
) -> LiveSession:
    """The live session of an opened log: a runner whose events reach the client over
    `conn`. `transcript` and `always_allowed` come from a streamed load (which keeps
    only the last turn in memory); otherwise the runner derives them from the log."""
    sid = session_log.id
    services = AcpClientServices(conn, sid, capabilities, local)

    async def on_event(event: Event) -> None:
        for update in updates_for(event, live.ctx):
            conn.notify_update(sid, update)
        ev = typed(event)
        if ev["type"] == USER_MESSAGE and ev["data"]["turn"] == 1:
            title = title_from_content(ev["data"]["content"])
            if title is not None:  # the session is named by its first prompt
                conn.notify_update(sid, {"sessionUpdate": "session_info_update", "title": title,
                                         "updatedAt": iso_time(event["time"])})

    async def on_progress(update: dict[str, Any]) -> None:
        conn.notify_update(sid, update)

    def on_notice(update: dict[str, Any]) -> None:
        if live.ctx.support.notices:  # live only, never recorded: a notice is no history
            conn.notify_update(sid, update)

    if transcript is None:
        transcript = Transcript(budget=history_budget(model.context_window))
    runner = TurnRunner(session_log, model, services, mode=last_mode(session_log.events), max_steps=max_steps,
                        on_event=on_event, on_progress=on_progress, on_notice=on_notice, transcript=transcript,
                        always_allowed=always_allowed, effort=choice.effort, tuning=tuning,
                        secrets=secrets)
    # `on_event` reads `live.ctx`: a model switch replaces it (`LiveSession.switch`).
    context = UpdateContext(replay=False, context_window=model.context_window, cost=cost,
                            support=client_support(capabilities))
    live = LiveSession(session_log, runner, choice, context, admit, elicitation_modes=services.elicitation_modes,
                       loaded_mode=runner.mode)
    return live

