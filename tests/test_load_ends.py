"""A load or resume ends with its answer (docs/protocol.md, "Sessions"; docs/wrap.md,
"Load"): what belongs to the session's state (its commands, its title; its modes and
options are in the answer) goes before the answer, and nothing of the session follows
it until the client's next request on it. Real processes on JSONL and SQLite: our own
`serve`, `wrap` in front of `serve`, and `wrap` in front of tests/support/late_agent.py,
a raw agent that sends updates right after its own load answer and again whenever it is
poked (`_late/poke`, a request on no session), after the wrapper has answered.

That nothing follows the answer is read once the agent has answered a later request on
no session (`session/list`, `_late/poke`): whatever it would have sent after the load's
answer was written before that one (serve: in the same write as the answer; through
wrap: the child's updates are handled before its answer to the poke behind them)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import late_agent
from tests.support.acp_client import AgentProcess
from tests.support.logs import loaded_events
from tests.support.wrapped import WrappedProcess, serve_command

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

BACKENDS = ["jsonl", "sqlite"]
LATE_AGENT = [sys.executable, str(Path(late_agent.__file__))]
OURS_FORK = {"name": "fork", "description": "Fork this session into a new one",
             "input": {"hint": "the last turn it holds (optional)"}}


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [u["sessionUpdate"] for u in updates]


def commands(updates: list[dict[str, Any]]) -> list[list[str]]:
    return [[c["name"] for c in u["availableCommands"]] for u in updates
            if u["sessionUpdate"] == "available_commands_update"]


def history(updates: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The conversation of a stream: each text chunk's kind and text."""
    return [(u["sessionUpdate"], u["content"]["text"]) for u in updates
            if u["sessionUpdate"] in ("user_message_chunk", "agent_message_chunk")]


def said(updates: list[dict[str, Any]]) -> str:
    """The agent's text of a stream, its chunks joined."""
    return "".join(text for kind, text in history(updates) if kind == "agent_message_chunk")


async def opened_quietly(agent: AgentProcess, sid: str, work: Path, method: str) -> dict[str, Any]:
    """`method` (load or resume) of `sid`, then a request on no session answered: its
    answer, once nothing of the session was sent after it."""
    answer: dict[str, Any] = await agent.request(method, {"sessionId": sid, "cwd": str(work), "mcpServers": []})
    await agent.request("session/list", {})
    assert agent.after_answer(sid, method) == [], agent.after_answer(sid, method)
    return answer


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("wrapped", [False, True], ids=["serve", "wrap-serve"])
async def test_load_and_resume_end_with_their_answer(backend: str, wrapped: bool, tmp_path: Path,
                                                     work: Path) -> None:
    store, theirs = tmp_path / "store", tmp_path / "theirs"

    def agent() -> AgentProcess:
        if wrapped:
            return WrappedProcess(store, serve_command(theirs, backend=backend), backend=backend)
        return AgentProcess(store, backend=backend)

    async with agent() as first:
        await first.initialize()
        made = await first.request("session/new", {"cwd": str(work), "mcpServers": []})
        sid = made["sessionId"]
        await first.prompt(sid, "the first words")
        await first.prompt(sid, "/title Kept title")
        # After session/new the commands may follow the answer (the client needs the id).
        await first.wait_for(lambda: bool(commands(first.updates_of(sid))))
        offered = commands(first.updates_of(sid))[0]
        live = said(first.updates_of(sid))
    assert "fork" in offered

    async with agent() as second:
        await second.initialize()
        loaded = await opened_quietly(second, sid, work, "session/load")
        replay = second.replayed(sid)
        # The session's state before the answer: the title ends the replay, its commands follow.
        # It ends with the session's state: the title, then the command list; the child's
        # own list, read behind its load answer, may come before ours or just after it,
        # but before our answer either way (it failed CI when it came after).
        ending = kinds(replay)
        while ending and ending[-1] == "available_commands_update":
            ending.pop()
        assert ending and ending[-1] == "session_info_update" and len(ending) < len(kinds(replay)), kinds(replay)
        # (through wrap, the child's list recorded at session/new is replayed in its place too)
        assert replay[-2]["title"] == "Kept title" and commands(replay)[-1] == offered
        assert all(listed == offered for listed in commands(replay))
        assert [text for kind, text in history(replay) if kind == "user_message_chunk"] == [
            "the first words", "/title Kept title"]
        assert said(replay) == live and "Kept title" in live
        assert loaded["modes"] == made["modes"] and loaded["configOptions"] == made["configOptions"]

        resumed = await opened_quietly(second, sid, work, "session/resume")
        assert commands(second.replayed(sid, "session/resume")) == [offered]  # nothing replayed but the state
        assert kinds(second.replayed(sid, "session/resume")) == ["available_commands_update"]
        assert resumed["modes"] == made["modes"]

        # The next prompt's stream is its own.
        seen = len(second.updates_of(sid))
        await second.prompt(sid, "more words")
        assert said(second.updates_of(sid)[seen:]) == "more words"
    turns = [e["data"]["turn"] for e in loaded_events(store, sid, backend) if e["type"] == "turn/end"]
    assert turns == [1, 2, 3]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_what_a_wrapped_child_sends_after_its_load_answer_waits_for_the_next_request(
        backend: str, tmp_path: Path, work: Path) -> None:
    store = tmp_path / "store"
    async with WrappedProcess(store, LATE_AGENT, backend=backend) as first:
        await first.initialize()
        sid = await first.new_session(work)
        await first.prompt(sid, "first words")
        # The child's list, shown with ours (after ours alone, if the child's came late).
        await first.wait_for(lambda: commands(first.updates_of(sid))[-1:] == [["late", "fork"]])

    async with WrappedProcess(store, LATE_AGENT, backend=backend) as second:
        await second.initialize()
        loaded = await second.load_session(sid, work)
        assert loaded["_meta"]["acpBridge"]["wrapped"]["restored"] == "load"
        # The child speaks again now, after our answer: held from the editor.
        await second.request("_late/poke", {})
        assert second.after_answer(sid) == [], second.after_answer(sid)
        replay = second.replayed(sid)
        # It ends with the session's state: the title, then the command list; the child's
        # own list, read behind its load answer, may come before ours or just after it,
        # but before our answer either way (it failed CI when it came after).
        ending = kinds(replay)
        while ending and ending[-1] == "available_commands_update":
            ending.pop()
        assert ending and ending[-1] == "session_info_update" and len(ending) < len(kinds(replay)), kinds(replay)
        assert history(replay) == [("user_message_chunk", "first words"), ("agent_message_chunk", "first words")]

        # The next request on the session: what was held goes first, then the prompt's own.
        seen = len(second.updates_of(sid))
        await second.prompt(sid, "second words")
        sent = second.updates_of(sid)[seen:]
        assert sent[-3:] == [
            {"sessionUpdate": "session_info_update", "title": late_agent.POKED_TITLE},
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": late_agent.POKED_TEXT}},
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "second words"}},
        ], sent
        # What the child sent right behind its load answer came before our answer (read
        # with that answer too: the session is the child's again as its answer is read):
        # never after ours.
        assert all(u["sessionUpdate"] in ("available_commands_update", "session_info_update") for u in sent[:-3])
        assert all(names == ["late", "fork"] for names in commands(sent))

    # Recorded as the child sent them: a later load replays them, and ends with its answer again.
    events = loaded_events(store, sid, backend)
    between = [e["data"]["update"] for e in events if e["type"] == "wrapped/update"]
    assert {"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": late_agent.POKED_TEXT}} in between
    async with WrappedProcess(store, LATE_AGENT, backend=backend) as third:
        await third.initialize()
        await third.load_session(sid, work)
        await third.request("_late/poke", {})
        assert third.after_answer(sid) == [], third.after_answer(sid)
        replay = third.replayed(sid)
        assert history(replay) == [("user_message_chunk", "first words"), ("agent_message_chunk", "first words"),
                                   ("agent_message_chunk", late_agent.POKED_TEXT),
                                   ("user_message_chunk", "second words"), ("agent_message_chunk", "second words")]
        # The load ends with the session's state: our title (the child's last one) and
        # commands, then what the child sent right behind its own load answer (recorded now,
        # sent before our answer: its state too), never a chunk of history.
        closing = next(i for i, u in enumerate(replay) if "updatedAt" in u)
        assert replay[closing] == {"sessionUpdate": "session_info_update", "title": late_agent.POKED_TITLE,
                                   "updatedAt": replay[closing]["updatedAt"]}
        after = kinds(replay[closing + 1:])  # the child's two, if they came in time (else held)
        assert after in (["available_commands_update"],
                         ["available_commands_update", "session_info_update", "available_commands_update"]), after
        assert commands(replay)[-1] == ["late", "fork"]
        # A close drops what was held (the log has it): nothing of the session is sent.
        shown = len(third.updates_of(sid))
        assert await third.request("session/close", {"sessionId": sid}) == {}
        await third.request("session/list", {})
        assert len(third.updates_of(sid)) == shown
