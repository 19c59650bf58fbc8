"""`acp-bridge wrap --agent NAME=COMMAND ...`: a session handed from one wrapped agent to
another between turns (docs/wrap.md, "Several agents: handing a session to another
agent"). The wrapper is one engine over N agents (acp_bridge.wrap.engine, one
`ChildDriver` each); a session names the agent it is placed in (`State.agent`). This
module holds what `--agent` adds: the `agent` config option beside the child's
(`Mover.offered`), the move itself (`Mover.move`, from `session/set_config_option` of
that option and from `/agent`), and what a load reads of the log to place a session
(`AgentOfLog`).

A move is a move of the session's lifecycle (acp_bridge.wrap.lifecycle):

1. `SwitchAsked`: refused while a prompt of the session runs (-32001), or another move
   does; the session is the target's from now on (`Moving` keeps where it was);
2. the target agent is started if it is not running, given a fresh session and seeded
   with the transcript so far (acp_bridge.wrap.seed); a prompt that comes meanwhile
   waits for the move (`Waiting`);
3. the move is recorded and made durable before the answer: `config/set {configId:
   "agent", value: NAME, wrapped: {command, sessionId, agentInfo?}}`, then `Moved`;
4. the source's child session is closed (if it can close sessions), and its process
   stopped (its whole group) if no live session of ours is placed in it.

A failure before 3 (the agent cannot be started, refuses `session/new`) is `MoveFailed`:
the session goes back to where `Moving` says it was, as it was, and the error is the
answer. A load places the session in the agent of its last turn (`turn/start.agent`)
or of a later move (`AgentOfLog`, `Mover.placement`); an agent no longer configured
gives way to the default; a fork of a stored session is made by the agent a load would
place it in (`Mover.of_stored`).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio

from acp_bridge.errors import InvalidParamsError, PromptInProgressError, RequestRefusedError
from acp_bridge.wrap.children import close_child
from acp_bridge.wrap.commands import CommandsOfLog
from acp_bridge.wrap.driver import ChildDriver
from acp_bridge.wrap.initialize import obj
from acp_bridge.wrap.signals import Act, Moved, MoveFailed, SwitchAsked
from acp_bridge.wrap.state import Moving, Place, Unplaced
from acp_bridge.wrap.turns import WrappedTurns
from session.events import CONFIG_SET, TURN_START, Event, Header, WrappedInfo
from session.items import config_set

if TYPE_CHECKING:
    from session import SessionStore

log = logging.getLogger("acp_bridge.wrap.moves")

AGENT_OPTION: Final = "agent"  # our option's id, and the `configId` its moves are recorded under
OTHER_ID: Final = "acp-bridge.agent"  # its id where the child has an option `agent` of its own
OTHER_CATEGORY: Final = "_agent"  # its category where the child has a `model` option (ACP: `_` is free)


class AgentOfLog(CommandsOfLog):
    """What a load needs of the log to place a session (a `LoadSink`): the agent of its
    last turn or later move, whether it ever moved, and each agent's own session id
    as its last move to that agent recorded it; and the agent's commands."""

    def __init__(self) -> None:
        super().__init__()
        self.agent: str | None = None
        self.moved = False
        self.sessions: dict[str, str] = {}
        self._turn = 0  # the last turn started so far
        self._at: dict[str, int] = {}  # the turn during or after which `sessions[name]` was recorded

    def feed(self, event: Event) -> None:
        super().feed(event)
        data = event["data"]
        if event["type"] == TURN_START:
            if isinstance(data.get("turn"), int):
                self._turn = data["turn"]
            if isinstance(data.get("agent"), str):
                self.agent = data["agent"]
        elif (event["type"] == CONFIG_SET and data.get("configId") == AGENT_OPTION
              and isinstance(data.get("wrapped"), dict) and isinstance(data.get("value"), str)):
            self.agent, self.moved = data["value"], True
            sid = data["wrapped"].get("sessionId")
            if isinstance(sid, str):
                self.sessions[data["value"]] = sid
                self._at[data["value"]] = self._turn

    def session_of(self, name: str, command: list[str], header: Header) -> str | None:
        """The child session of agent `name` this session may take again. In a fork, a
        move recorded up to the fork's turn is the original's (its child session is
        the original's): the fork's own is the one its header names, if it is that
        agent's; none else (a fresh session, seeded)."""
        forked = header.get("forkedFrom")
        if forked is None or self._at.get(name, -1) > forked["turn"]:
            return self.sessions.get(name)
        wrapped = header.get("wrapped")
        if wrapped is not None and wrapped.get("command") == command:
            return wrapped.get("sessionId")
        return None


def option_id(child_options: list[Any]) -> str:
    """Our option's id beside the child's options: `agent`, unless the child has one."""
    return OTHER_ID if any(obj(o).get("id") == AGENT_OPTION for o in child_options) else AGENT_OPTION


def agent_option(agents: Mapping[str, list[str]], current: str, child_options: list[Any]) -> dict[str, Any]:
    """The `agent` config option (ACP SessionConfigOption, a select): category `model`
    unless the child offers a `model` option of its own (then `_agent`)."""
    model_taken = any(obj(o).get("category") == "model" for o in child_options)
    return {"id": option_id(child_options), "name": "Agent",
            "description": "The wrapped agent that answers the next prompt (acp-bridge wrap --agent); a switch "
                           "starts it and shows it the conversation so far",
            "category": OTHER_CATEGORY if model_taken else "model", "type": "select", "currentValue": current,
            "options": [{"value": name, "name": name, "description": Path(command[0]).name}
                        for name, command in agents.items()]}


class Mover:
    """The `agent` option and the moves of a wrapper of several named agents."""

    def __init__(self, drivers: Mapping[str, ChildDriver]) -> None:
        self.drivers = drivers
        self.default = next(iter(drivers.values()))  # the first: the engine's default
        self.commands = {name: list(d.config.command) for name, d in drivers.items()}
        # The child's config options of each live session, as it last gave them.
        self._options: weakref.WeakKeyDictionary[WrappedTurns, list[Any]] = weakref.WeakKeyDictionary()

    def named(self, name: Any) -> str:
        if not isinstance(name, str) or name not in self.drivers:
            raise InvalidParamsError(f"no agent named {name!r}: this wrapper has {', '.join(self.drivers)}",
                                     field="value")
        return name

    # --- the agent a stored session is placed in ------------------------------------

    def placed(self, name: str | None, wrapped: WrappedInfo | None) -> ChildDriver:
        """The agent named `name` (the log's last turn's or move's), else the one with the
        header's command, else the default."""
        driver = self.drivers.get(name or "")
        if driver is not None:
            return driver
        command = wrapped.get("command") if wrapped is not None else None
        return next((d for d in self.drivers.values() if d.config.command == command), self.default)

    def of_stored(self, store: SessionStore, session_id: str) -> ChildDriver:
        """The agent a load of the stored `session_id` would place it in (its log read
        as stored, without its lock)."""
        from session.backends.base import read_stored

        stored = read_stored(store.backend.read_stream(session_id))  # closes it
        sink = AgentOfLog()
        for event in stored.events:
            sink.feed(event)
        return self.placed(sink.agent, stored.header.get("wrapped"))

    def placement(self, sink: AgentOfLog, header: Header, last: str | None,
                  carried: bool) -> tuple[ChildDriver, str | None, bool]:
        """Where a session a load opened (`sink`: its log read, `header`) is placed: the
        agent `placed` gives, and the child session of it to take again and whether its
        context came there by a move (`last` and `carried`, the header's, unless it ever
        moved: then its moves' own, and carried: a fresh one is seeded)."""
        name = sink.agent
        if name is not None and name not in self.drivers:
            log.warning("session %s: its agent %r is not configured here: placed in the default, %r",
                        header["id"], name, self.default.name)
        driver = self.placed(name, header.get("wrapped"))
        if sink.moved:  # its child sessions are its moves' (a fresh one is seeded)
            last, carried = sink.session_of(driver.name, list(driver.config.command), header), True
        return driver, last, carried

    # --- the `agent` option and a move ------------------------------------------------

    def is_ours(self, turns: WrappedTurns, config_id: Any) -> bool:
        """Whether `config_id` is our option's id beside the session's child options."""
        return bool(config_id == option_id(self._options.get(turns, [])))

    def offered(self, turns: WrappedTurns, result: dict[str, Any]) -> dict[str, Any]:
        """`result` (an answer that may carry the child's config options) with ours
        after the child's; the child's kept for the next answer that omits them."""
        given = result.get("configOptions")
        if isinstance(given, list):
            self._options[turns] = given
        theirs = self._options.get(turns, [])
        option = agent_option(self.commands, turns.session.state.agent, theirs)
        return {**result, "configOptions": [*theirs, option]}

    def shown(self, turns: WrappedTurns, update: Any) -> Any:
        """The child's `config_option_update` (its whole set, which an editor puts in
        place of what it had) with ours added; the log keeps it as the child sent it."""
        if isinstance(update, dict) and update.get("sessionUpdate") == "config_option_update" \
                and isinstance(update.get("configOptions"), list):
            return {**update, **self.offered(turns, {"configOptions": update["configOptions"]})}
        return update

    async def move(self, turns: WrappedTurns, name: Any, *, in_command: bool = False) -> dict[str, Any]:
        """The move itself (steps 1-4 of the module docstring), for the option and for
        `/agent` (which runs in the session's prompt: its turn is recorded after the
        move); the answer's fields and `_meta`."""
        name = self.named(name)
        ws = turns.session
        acts = ws.to(SwitchAsked(name, in_command=in_command, kept=(ws.mode, ws.commands, ws.carried)))
        if Act.REFUSE_BUSY in acts:
            raise PromptInProgressError(ws.id)
        if Act.REFUSE_MOVING in acts:
            raise RequestRefusedError(f"session {ws.id} is being handed to another agent already; wait",
                                      code="switching")
        if Act.UNCHANGED in acts:
            return self.offered(turns, {})
        moving = ws.state.moving
        assert moving is not None and Act.PLACE in acts
        source, target = self.drivers[moving.source], self.drivers[name]
        done = turns.move_done = anyio.Event()
        # The target's mode is what its session/new says (none: none), its commands what
        # it sends; it is shown the conversation, as it came there by a move.
        ws.mode, ws.commands, ws.carried = None, None, True
        try:
            try:
                placing = await target.place(turns)
                child_sid = ws.state.child_sid
                assert child_sid is not None
                ws.log.extend([config_set(AGENT_OPTION, name, wrapped=target.wrapped(child_sid))])
                await anyio.to_thread.run_sync(ws.log.sync)
            except BaseException:
                self._went_back(turns, moving, target)
                with anyio.CancelScope(shield=True):  # an agent started for nothing goes again
                    await target.stop_unused()
                raise
            ws.to(Moved())
            log.info("session %s: handed from agent %s to %s (its session %s, %s)", ws.id, source.name, name,
                     child_sid, "seeded" if placing.seeded.get("seeded")
                     else placing.seeded.get("seedError", "nothing to seed"))
            with anyio.CancelScope(shield=True):  # recorded: the source goes whatever happens to us
                await self._leave(source, turns, moving.back)
        finally:
            done.set()
        self._options[turns] = []  # the source's are gone; the target's, if it gave any:
        result = placing.result
        answer = self.offered(turns, {"configOptions": result["configOptions"]}
                              if isinstance(result.get("configOptions"), list) else {})
        answer["_meta"] = {"acpBridge": {"wrapped": {"agent": name, "restored": placing.way, **placing.seeded}}}
        return answer

    @staticmethod
    def _went_back(turns: WrappedTurns, moving: Moving, target: ChildDriver) -> None:
        ws = turns.session
        target.forget(turns)
        ws.to(MoveFailed())
        ws.mode, ws.commands, ws.carried = moving.kept

    async def _leave(self, source: ChildDriver, turns: WrappedTurns, back: Place) -> None:
        """The session left `source`: its child session there closed, the process
        stopped if no session is placed in it any more."""
        link = source.link
        child_sid = None if isinstance(back, Unplaced) or link is None or back.generation != link.generation \
            else back.child_sid
        if child_sid is not None:
            wait = 0.0 if source.sessions.is_stuck(child_sid) else source.cancel_grace
            await close_child(link, child_sid, source.caps, wait)
        source.forget(turns)
        await source.stop_unused()


def answer_text(answer: dict[str, Any], name: str) -> str:
    """What `/agent NAME` answers once the move is made."""
    how = answer["_meta"]["acpBridge"]["wrapped"]
    told = "shown the conversation so far" if how.get("seeded") else (
        f"not shown the conversation ({how['seedError']})" if how.get("seedError") else "a fresh session")
    return f"Agent: {name} (from the next prompt on; {told})."

