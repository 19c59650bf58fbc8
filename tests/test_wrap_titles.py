"""A wrapped session is titled in `session/list` whatever comes before its first prompt
(issue 23, point 5): wrapped agents send updates between `session/new` and the first
prompt (commands, modes), which the wrapper records as `wrapped/update`s ahead of the
first turn, and `list` used to look for the prompt at a fixed line.

One rule on every backend and in `acp-bridge sessions` (session.backends.base.
first_prompt_title): a session's title is its first prompt's text (turn 1's
`user/message`), folded and cut to 80 characters; none if that prompt has no text. A
JSONL store finds it without reading whole logs: the events before the first prompt are
read up to LIST_SCAN_LIMIT bytes, the prompt's own line whole.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from session import SessionStore, open_backend, open_reader
from session.backends.jsonl_read import LIST_SCAN_LIMIT
from tests.support.logs import Script, write
from tests.support.wrapped import WrappedProcess
from tests.test_sessions_cli import cli

ERROR_AGENT = Path(__file__).resolve().parent / "support" / "error_agent.py"
PROMPT = "Fix   the flaky test in\nthe parser, please"
TITLE = "Fix the flaky test in the parser, please"
MODE = {"sessionUpdate": "current_mode_update", "currentModeId": "code"}
COMMANDS = {"sessionUpdate": "available_commands_update",
            "availableCommands": [{"name": f"c{i}", "description": "d" * 300} for i in range(40)]}


@pytest.fixture(params=["memory", "jsonl", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(backend, location): a folder, or an empty PostgreSQL database."""
    if request.param == "postgres":
        return "postgres", str(request.getfixturevalue("pg_dsn"))
    return str(request.param), str(tmp_path / "store")


def titles(kind: str, location: str, backend: Any = None) -> dict[str, str | None]:
    sessions = SessionStore(backend or open_backend(kind, location))
    try:
        return {s["id"]: s["title"] for s in sessions.list()}
    finally:
        sessions.close()


def made(backend: Any, script: Script, *, wrapped: bool = True) -> str:
    log = SessionStore(backend).create(cwd="/w", wrapped={"command": ["agent"]} if wrapped else None)
    write(log, script)
    log.close()
    return log.id


def before_the_prompt(count: int) -> Script:
    """`count` updates between turns (and a setting changed), then two turns."""
    script = Script().add("wrapped/update", {"update": COMMANDS})
    for n in range(count):
        script.add("wrapped/update", {"update": {**MODE, "currentModeId": f"m{n}"}})
    script.add("config/set", {"configId": "model", "value": "fast"})
    return script.text_turn(PROMPT).text_turn("a second prompt")


@pytest.fixture
def sessions(store: tuple[str, str]) -> Iterator[tuple[str, str, dict[str, str | None], Any]]:
    """Sessions of every shape on the `store` backend, and the title each must have."""
    kind, location = store
    backend = open_backend(kind, location)
    expected: dict[str, str | None] = {}
    expected[made(backend, Script().text_turn(PROMPT), wrapped=False)] = TITLE  # our own agent's
    expected[made(backend, before_the_prompt(3))] = TITLE  # as the agents measured send them
    expected[made(backend, before_the_prompt(400))] = TITLE  # far past a fixed line
    # The first prompt is the title, even one with no text: a later prompt does not
    # name the session (the live title our agent sends is its first prompt's too).
    image = Script().add("turn/start", {"turn": 1, "trigger": {"kind": "prompt"}})
    image.add("user/message", {"turn": 1, "content": [{"type": "image", "mimeType": "image/png", "data": "AA=="}]})
    image.turn = 1
    expected[made(backend, image.start_step().chunk("a picture").message("a picture").end_step().end_turn()
                  .text_turn(PROMPT))] = None
    # A prompt longer than the scan's bound (a file pasted into it) is read whole.
    long_prompt = "Review this: " + "x" * (LIST_SCAN_LIMIT + 1000)
    expected[made(backend, Script().add("wrapped/update", {"update": MODE}).text_turn(long_prompt))] = long_prompt[:79] + "…"
    expected[made(backend, Script().add("wrapped/update", {"update": MODE}))] = None  # never prompted
    yield kind, location, expected, backend
    backend.close()


def test_every_backend_lists_the_first_prompt_whatever_precedes_it(
        sessions: tuple[str, str, dict[str, str | None], Any]) -> None:
    kind, location, expected, backend = sessions
    assert titles(kind, location, backend) == expected
    if kind == "memory":
        return
    # The same titles in `acp-bridge sessions list` (which reads each log whole) and in
    # what a reader says of a session it cannot read whole (`peek`).
    listed = orjson.loads(cli("--store", location, "--backend", kind, "list", "--json").out)
    assert {s["id"]: s["title"] for s in listed} == expected
    reader = open_reader(kind, location)
    try:
        assert {sid: reader.peek(sid).title for sid in expected} == expected
    finally:
        reader.close()


def test_jsonl_list_reads_a_bounded_part_of_each_log(tmp_path: Path) -> None:
    """Past LIST_SCAN_LIMIT bytes of events before the first prompt, a JSONL `list`
    gives up (untitled) rather than read on: listing costs no more than that per log."""
    location = str(tmp_path / "store")
    backend = open_backend("jsonl", location)
    script = Script()
    while sum(len(orjson.dumps(data)) for _, data in script.items) < LIST_SCAN_LIMIT + 10_000:
        script.add("wrapped/update", {"update": COMMANDS})
    far = made(backend, script.text_turn(PROMPT))
    near = made(backend, before_the_prompt(3))
    assert titles("jsonl", location, backend) == {far: None, near: TITLE}
    backend.close()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["jsonl", "sqlite", "postgres"])
@pytest.mark.integration
async def test_a_wrapped_session_is_titled_in_session_list(tmp_path: Path, kind: str, request: pytest.FixtureRequest,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real wrapper: the child sends 40 updates after `session/new`, all
    recorded before the first turn; `session/list` names the session by its prompt."""
    location = str(request.getfixturevalue("pg_dsn")) if kind == "postgres" else str(tmp_path / "store")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("ERROR_AGENT_UPDATES", "40")  # the wrapper's child inherits it
    agent = WrappedProcess(location, [sys.executable, str(ERROR_AGENT)], backend=kind)
    async with agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.wait_for(lambda: len(agent.updates_of(sid)) == 40)  # logged before they were sent
        assert (await agent.prompt(sid, PROMPT))["stopReason"] == "end_turn"
        listed = await agent.request("session/list", {})
    assert [(s["sessionId"], s["title"]) for s in listed["sessions"]] == [(sid, TITLE)]
