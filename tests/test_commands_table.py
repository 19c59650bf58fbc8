"""The command machinery every engine shares (acp_bridge.host.commands): which prompt
runs a command, the ACP `AvailableCommand` each is offered as (checked against the
vendored schema), and the merge the wrapper offers (a wrapped agent's own commands
unchanged and first, ours only where none of them has the name, but for one of ours
that takes its name over: the wrapper's `/fork`)."""

from __future__ import annotations

from typing import Any

import pytest

from acp_bridge.host.commands import (
    TITLE,
    Command,
    Outcome,
    commands_update,
    invoked,
    merged,
    names_of,
    unshadowed,
)
from tests.support.acp_schema import validate_def


async def _nothing(given: str) -> Outcome:
    return Outcome(given)


FORK = Command("fork", "Fork this session", _nothing, hint="a turn")
EXPORT = Command("export", "Export", _nothing)


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


@pytest.mark.parametrize(("prompt", "expected"), [
    (text("/title A new name "), ("title", "A new name")),
    (text("  /fork\n3"), ("fork", "3")),
    (text("/export"), ("export", "")),
    (text("/exports"), None),  # another name
    (text("/usr/bin/env"), None),
    (text("say /title x"), None),
    ([{"type": "image", "data": "", "mimeType": "image/png"}, *text("/title x")], None),  # not the first block
    ([], None),
])
def test_which_prompt_runs_a_command(prompt: list[Any], expected: tuple[str, str] | None) -> None:
    found = invoked(prompt, [TITLE, FORK, EXPORT])
    assert (None if found is None else (found[0].name, found[1])) == expected


def test_the_commands_are_acp_available_commands() -> None:
    update = commands_update([c.available() for c in (TITLE, FORK, EXPORT)])
    validate_def("SessionUpdate", update)
    assert [c.get("input") for c in update["availableCommands"]] == [{"hint": "the new title"}, {"hint": "a turn"},
                                                                     None]


def test_the_wrapped_agents_commands_come_first_and_win_their_names() -> None:
    theirs = [{"name": "fork", "description": "the agent's own fork", "_meta": {"x": 1}},
              {"name": "compact", "description": "Compact", "input": {"hint": "focus"}}, "not a command"]
    offered = merged(theirs, [TITLE, FORK])
    assert offered[:3] == theirs  # unchanged, even what we cannot read
    assert offered[3:] == [TITLE.available()]  # ours where no name of theirs is
    assert names_of(offered) == {"fork", "compact", "title"}
    assert merged(None, [FORK]) == [FORK.available()]  # an agent that sends none
    # a prompt for a name they have is theirs: the wrapper passes it on
    ours_left = [c for c in (TITLE, FORK) if c.name not in names_of(theirs)]
    assert invoked(text("/fork 2"), ours_left) is None
    assert invoked(text("/title t"), ours_left) is not None


def test_a_command_of_ours_that_takes_its_name_over_replaces_theirs() -> None:
    ours_fork = Command("fork", "Fork this session", _nothing, over_theirs=True)
    theirs = [{"name": "fork", "description": "the agent's own fork"},
              {"name": "title", "description": "the agent's own title"}, "not a command"]
    offered = merged(theirs, [TITLE, ours_fork])
    # Theirs with ours in the place of the one it takes over: `/fork` is ours, `/title` theirs.
    assert offered == [ours_fork.available(), theirs[1], theirs[2]]
    assert [c.name for c in unshadowed(theirs, [TITLE, ours_fork])] == ["fork"]
    found = invoked(text("/fork 2"), unshadowed(theirs, [TITLE, ours_fork]))
    assert found is not None and found[0] is ours_fork and found[1] == "2"
    assert invoked(text("/title t"), unshadowed(theirs, [TITLE, ours_fork])) is None
    assert merged(theirs[1:], [ours_fork]) == [*theirs[1:], ours_fork.available()]  # none of theirs to leave out
