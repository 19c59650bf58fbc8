"""The wrapper's own slash commands (docs/wrap.md, "Slash commands, logout, elicitation,
usage"), on the shared machinery of acp_bridge.host.commands.

- **Offered** beside the wrapped agent's: its `available_commands_update` is recorded as
  it came (`wrapped/update`) and kept (`WrappedSession.commands`); the editor is shown
  its list unchanged and first, then ours that none of its commands names
  (`host.commands.merged`), `/fork` always ours (in the place of the agent's own
  `/fork`, if it has one: its fork would be out of the wrapper's reach); live
  (`shown`), on replay (the same, through the replay encoder), after the answer of
  `session/new` and `session/fork` and before the answer of `session/load` and
  `session/resume` (`offer`), so ours are offered when the agent sends none.
- **Run** when a prompt invokes one that the agent's list does not name (or `/fork`):
  a prompt `/NAME` for another name the agent has is the agent's, passed on
  unchanged. A command of ours is a turn of its own, not sent to the agent
  (`command_turn`): `turn/start {trigger: {kind: "command", name}}` naming the agent
  the session is in once the command ran (an `/agent` switch is recorded before the
  turn), the prompt, the answer step, `turn/end`, in one durable commit, shown to the
  editor as a replay shows it.
- `/fork [N]` forks the session as `session/fork` does (acp_bridge.host.fork, through
  the engine's `fork`: the agent's own fork, else a fresh session seeded); the fork is
  open in the wrapper, its agent session kept for the editor's `session/load`. `/agent`
  (wrap --agent with more than one agent) moves the session (acp_bridge.wrap.moves).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from acp_bridge.errors import CommandError
from acp_bridge.host.advertised import NEITHER, ClientSupport
from acp_bridge.host.commands import (
    Command,
    Outcome,
    commands_update,
    fork_command,
    merged,
    run_command,
)
from acp_bridge.host.engine import TurnEnd
from acp_bridge.host.replay import ReplayEncoder
from acp_bridge.host.updates import UpdateContext, updates_for
from acp_bridge.rpc.connection import Connection
from acp_bridge.wrap.initialize import obj
from acp_bridge.wrap.record import TurnRecorder
from acp_bridge.wrap.sessions import WrappedSession
from acp_bridge.wrap.turns import WrappedTurns
from session.events import CONFIG_SET, WRAPPED_UPDATE, Event
from session.items import Item

if TYPE_CHECKING:
    from acp_bridge.host.fork import Sessions

COMMANDS_UPDATE = "available_commands_update"


def their_commands(update: Any) -> list[Any] | None:
    """The list of an `available_commands_update` of the agent's, None for another update."""
    if isinstance(update, dict) and update.get("sessionUpdate") == COMMANDS_UPDATE:
        given = update.get("availableCommands")
        return given if isinstance(given, list) else []
    return None


class CommandsOfLog:
    """What a load keeps of the log for the commands (a `LoadSink`): the agent's last
    list, as it sent it, since the session's last switch of agent (a `config/set` with
    `wrapped`: the new agent's commands are its own)."""

    def __init__(self) -> None:
        self.theirs: list[Any] | None = None

    def feed(self, event: Event) -> None:
        if event["type"] == WRAPPED_UPDATE:
            theirs = their_commands(event["data"]["update"])
            if theirs is not None:
                self.theirs = theirs
        elif event["type"] == CONFIG_SET and isinstance(event["data"].get("wrapped"), dict):
            self.theirs = None


def shown(update: Any, ours: Sequence[Command]) -> Any:
    """`update` as the editor is shown it: the agent's command list with ours after it."""
    theirs = their_commands(update)
    return update if theirs is None else {**update, "availableCommands": merged(theirs, ours)}


def replay_encoder(sid: str, commands_of: Callable[[str], list[Command]],
                   support: ClientSupport = NEITHER) -> ReplayEncoder:
    """A replay of the wrapped session `sid`: the child's lists shown with ours; its
    compactions to an editor that advertised them (`support`)."""
    return ReplayEncoder(sid, None, wrapped=True, shown=lambda update: shown(update, commands_of(sid)),
                         support=support)


def offer(peer: Connection, ws: WrappedSession, ours: Sequence[Command], *, after_answer: bool = True) -> None:
    """The commands of `ws` (the agent's as it last gave them, then ours): right after
    the answer of `session/new` or `session/fork` (the editor learns the session's id
    from it), before the answer of a load or resume (`after_answer` False: nothing of
    the session follows that answer, docs/protocol.md, "Sessions")."""
    update = commands_update(merged(ws.commands, ours))
    if after_answer:
        peer.notify_update_after_answer(ws.id, update)
    else:
        peer.notify_update(ws.id, update)


def wrapper_fork(host: Sessions[WrappedTurns], sid: str) -> Command:
    """`/fork [N]` of the session `sid`: a fork as `session/fork` makes it, with the
    session's own cwd, MCP servers and directories; the answer names the fork and how
    the agent's side was made."""
    async def run(given: str) -> Outcome:
        from acp_bridge.host.fork import (  # (a fork's path only: issue 32)
            fork_at,
            fork_opened,
            forked_text,
        )

        at_turn = fork_at(given)
        turns = host.find(sid)
        assert turns is not None  # its own prompt runs the command
        answer, plan = await fork_opened(host, sid, turns.session.session_params(), at_turn=at_turn)
        how = obj(obj(obj(answer.get("_meta")).get("acpBridge")).get("wrapped"))
        if how.get("forked") == "child":
            side = "forked its session too"
        else:
            side = "was given a fresh session" + (", shown the fork's conversation" if how.get("seeded") else "")
        return Outcome(f"{forked_text(answer['sessionId'], plan)} The wrapped agent {side}.")

    # Ours even where the agent has a `/fork`: the agent's would fork in its own store,
    # where the editor cannot reach the fork through the wrapper; ours forks our log and
    # has the agent fork its session too when it offers `session/fork` (docs/wrap.md).
    return replace(fork_command(run), over_theirs=True)


def agent_command(names: Sequence[str], current: Callable[[], str],
                  switch: Callable[[str], Awaitable[str]]) -> Command:
    """`/agent [NAME]` (`wrap --agent` with more than one agent: acp_bridge.wrap.moves):
    without a name, the agents and the `current` one; with one, `switch` to it (its
    answer's text). An unknown name is the command's error."""
    async def run(given: str) -> Outcome:
        now = current()
        if not given:
            return Outcome(f"The agent is {now}. Agents: "
                           + ", ".join(f"{n} (current)" if n == now else n for n in names))
        if given not in names:
            raise CommandError(f"no agent named {given!r}: this wrapper has {', '.join(names)}")
        if given == now:
            return Outcome(f"The agent is {now} already.")
        return Outcome(await switch(given))

    return Command("agent", "Hand this session to another wrapped agent", run, hint=" | ".join(names))


async def command_turn(turns: WrappedTurns, found: tuple[Command, str], prompt: list[Any],
                       peer: Connection) -> TurnEnd:
    """Run a command of ours and record its turn (module docstring); its `turn/end`,
    every event of the turn shown to the editor once it is durable."""
    ws = turns.session

    async def record(trigger: dict[str, Any], body: Callable[[int], list[Item]]) -> Event:
        child = turns.child  # after the command ran: the agent it placed the session in
        turn = ws.log.tracker.turn + 1
        recorder = TurnRecorder(turn, agent=child.agent_name, mode=ws.mode, name=child.agent_label)
        items: list[Item] = [*recorder.prompt(prompt, trigger), *body(turn)]
        events = ws.log.extend(items)
        context = UpdateContext(replay=False, wrapped=True)
        for event in events:
            for update in updates_for(event, context):
                peer.notify_update(ws.id, update)
        return events[-1]

    return TurnEnd(await run_command(found, record))
