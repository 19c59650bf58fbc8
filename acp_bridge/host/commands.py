"""Slash commands (ACP `available_commands_update`): the table of a session of ours,
what the editor is offered, how a prompt that runs one is told from any other, and the
turn that records it. Our agent's table is acp_bridge.agent.commands; the wrapper offers
the commands of the table below its wrapped agent's own (`merged`).

A command is a turn of its own (docs/protocol.md, "Slash commands"): `turn/start` with
`trigger {kind: "command", name}`, the prompt as typed (`user/message`), then what it
did as the agent's answer: one step with its text (`assistant/chunk`, `assistant/
message`), `turn/end completed`; or, when it could not do what it says, `turn/end error
{step: 0, message, code: "command_failed"}`, which is the command's answer (settled
`end_turn`, the editor shown what was wrong: acp_bridge.host.settlement, `end_notice`),
not a failed turn (`auth` for a model that needs a key is one: the client must log in). The
settings a command changes inside its turn (the title: `config/set session/title`) come
first. The prompt is answered from that `turn/end` as any prompt, so live, on a reload
and in `acp-bridge sessions` the command and its result read the same; and the model
sees it next turn as it sees any turn (a mode or model switch, a file written, are
things it should know).

A prompt runs a command when its first content block is text that starts with `/NAME`
(the name, then whitespace or the end) of a command in the table; the rest of that text,
stripped, is the command's input. Anything else, `/usr/bin` among it, is a prompt.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from acp_bridge.errors import AuthRequiredError, CommandError
from session.errors import AcpBridgeError
from session.events import COMMAND_FAILED, TITLE_CONFIG, Event, reason
from session.items import (
    Item,
    assistant_chunk,
    assistant_message,
    config_set,
    step_end,
    step_start,
    turn_end,
)

COMMAND_TRIGGER: Final = "command"  # turn/start.trigger.kind of a command's turn
_INVOKED: Final = re.compile(r"\s*/(\S+)(.*)", re.DOTALL)  # the name, then whitespace (or the end)


@dataclass(frozen=True)
class Outcome:
    """What a command did: the agent's answer (`text`) and the settings it recorded in
    its turn (`config/set` configId, value)."""

    text: str
    settings: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Command:
    """One command: its name, what the editor shows of it, the input it takes (ACP's
    `UnstructuredCommandInput.hint`; None: it takes none), and what runs it (the text
    after the name in; its `Outcome` out, or an AcpBridgeError saying why it could not)."""

    name: str
    description: str
    run: Callable[[str], Awaitable[Outcome]]
    hint: str | None = None
    # Offered and run through `acp-bridge wrap` even where the wrapped agent has a
    # command of the same name, whose own is then neither offered nor run (the
    # wrapper's `/fork`: its fork must be one the wrapper can list and load).
    over_theirs: bool = False

    def available(self) -> dict[str, Any]:
        """As ACP's `AvailableCommand`."""
        shown: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.hint is not None:
            shown["input"] = {"hint": self.hint}
        return shown


def commands_update(available: list[Any]) -> dict[str, Any]:
    """The `session/update` that offers `available` (AvailableCommand objects)."""
    return {"sessionUpdate": "available_commands_update", "availableCommands": available}


def merged(theirs: Any, ours: Sequence[Command]) -> list[Any]:
    """A wrapped agent's commands as it sent them, unchanged and first, then ours that
    none of them names: where both have a name, the agent's is the one offered (and
    run: `invoked` with `unshadowed`), but for ours that take the name over
    (`Command.over_theirs`), offered in the place of the agent's."""
    sent = list(theirs) if isinstance(theirs, list) else []
    taken = names_of(sent)
    over = {c.name: c.available() for c in ours if c.over_theirs and c.name in taken}
    if over:
        sent = [over.get(str(c.get("name")), c) if isinstance(c, dict) else c for c in sent]
    return [*sent, *(c.available() for c in ours if c.name not in taken)]


def unshadowed(theirs: Any, ours: Sequence[Command]) -> list[Command]:
    """Ours that no command of a wrapped agent's list `theirs` names, and those that take
    the name over: the ones offered beside its own, and the ones a prompt may run
    (`invoked`)."""
    taken = names_of(theirs) if isinstance(theirs, list) else set()
    return [c for c in ours if c.over_theirs or c.name not in taken]


def names_of(available: Iterable[Any]) -> set[str]:
    return {c["name"] for c in available if isinstance(c, dict) and isinstance(c.get("name"), str)}


def invoked(prompt: list[Any], commands: Sequence[Command]) -> tuple[Command, str] | None:
    """The command `prompt` runs and its input, or None for a prompt."""
    first = prompt[0] if prompt else None
    if not isinstance(first, dict) or first.get("type") != "text" or not isinstance(first.get("text"), str):
        return None
    found = _INVOKED.match(first["text"])
    if found is None:
        return None
    command = next((c for c in commands if c.name == found[1]), None)
    return None if command is None else (command, found[2].strip())


def trigger(command: Command) -> dict[str, Any]:
    return {"kind": COMMAND_TRIGGER, "name": command.name}


async def outcome_of(command: Command, given: str) -> Outcome | AcpBridgeError:
    """Run `command`: what it did, or the domain error that says why it could not
    (recorded as its turn's end, not raised: the prompt is answered from the log)."""
    try:
        return await command.run(given)
    except AcpBridgeError as exc:
        return exc


Record = Callable[[dict[str, Any], Callable[[int], list[Item]]], Awaitable[Event]]
"""What records a command's turn: given its `trigger` and its events after the prompt
(`body(turn)`), it writes `turn/start` (the engine's own fields), the prompt, then the
body, in one durable commit; the `turn/end`."""


async def run_command(found: tuple[Command, str], record: Record) -> Event:
    """Run the command a prompt invoked (`invoked`), then record its turn: what it did
    comes first (a switch it made is recorded before its turn, as its own), the turn
    after; its `turn/end`. Our agent's and the wrapper's, one copy."""
    command, given = found
    outcome = await outcome_of(command, given)
    return await record(trigger(command), lambda turn: answer_items(turn, outcome))


def answer_items(turn: int, outcome: Outcome | AcpBridgeError) -> list[Item]:
    """The events of a command's turn after its prompt: its settings and its answer,
    then its `turn/end` (module docstring)."""
    if isinstance(outcome, AcpBridgeError):
        code = "auth" if isinstance(outcome, AuthRequiredError) else COMMAND_FAILED
        return [turn_end(turn, reason("error", step=0, message=outcome.message or type(outcome).__name__,
                                      code=code, retryable=False))]
    items: list[Item] = [config_set(config_id, value, turn) for config_id, value in outcome.settings]
    items += [step_start(turn, 1), assistant_chunk(turn, 1, "text", outcome.text),
              assistant_message(turn, 1, [{"type": "text", "text": outcome.text}]), step_end(turn, 1),
              turn_end(turn, reason("completed"))]
    return items


async def run_title(given: str) -> Outcome:
    """`/title NEW TITLE`: the session's title from now on (`config/set session/title`,
    shown as `session_info_update`, live and on every load)."""
    title = " ".join(given.split())
    if not title:
        raise CommandError("/title needs the new title: /title NEW TITLE")
    return Outcome(f"The session is now titled “{title}”.", ((TITLE_CONFIG, title),))


TITLE = Command("title", "Rename this session", run_title, hint="the new title")


def fork_command(run: Callable[[str], Awaitable[Outcome]]) -> Command:
    """The `/fork [N]` command (our agent's and the wrapper's), run by `run`
    (acp_bridge.host.fork: what a fork does)."""
    return Command("fork", "Fork this session into a new one", run, hint="the last turn it holds (optional)")
