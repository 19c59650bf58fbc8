"""`session/fork` through `acp-bridge wrap` (docs/wrap.md, "Fork"): passed to a child
that offers fork (our own `serve` as the child: its store holds the child's fork), and
emulated for one that does not (the SDK echo agent: a fresh child session seeded with
the fork's transcript, `_meta` saying so). Our log is forked either way."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from acp_bridge.wrap.seed import PREFACE
from session import check_invariants, open_backend
from session.backends.base import read_stored
from tests.support.acp_client import AgentProcess
from tests.support.acp_schema import validate_def
from tests.support.logs import loaded_events
from tests.support.wrapped import WrappedProcess, serve_command
from tests.test_fork_agent import fork

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

SEED_AGENT = Path(__file__).resolve().parent / "support" / "wrap_seed_agent.py"
BAD_FORK_AGENT = SEED_AGENT.with_name("bad_fork_agent.py")


def header_of(store: Path, sid: str) -> dict[str, Any]:
    line = (store / "sessions" / f"{sid}.jsonl").read_text().splitlines()[0]
    header: dict[str, Any] = json.loads(line)
    return header


def ended(store: Path, sid: str) -> list[int]:
    return [e["data"]["turn"] for e in loaded_events(store, sid) if e["type"] == "turn/end"]


def said(agent: AgentProcess, sid: str) -> str:
    return "".join(u["content"]["text"] for u in agent.updates_of(sid) if u["sessionUpdate"] == "agent_message_chunk")


async def test_a_child_that_offers_fork_forks_its_session_with_ours(tmp_path: Path, work: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    child = serve_command(theirs)
    async with WrappedProcess(ours, child) as agent:
        init = await agent.initialize()
        assert init["agentCapabilities"]["sessionCapabilities"]["fork"] == {}
        sid = await agent.new_session(work)
        await agent.prompt(sid, "one")
        await agent.prompt(sid, "two")
        child_sid = header_of(ours, sid)["wrapped"]["sessionId"]
        forked = await fork(agent, sid, work)
        fid = forked["sessionId"]
        meta = forked["_meta"]["acpBridge"]
        assert meta["wrapped"] == {"forked": "child"}
        assert meta["forkedFrom"] == {"sessionId": sid, "turn": 2} and meta["turns"] == 2
        child_fork = header_of(ours, fid)["wrapped"]["sessionId"]
        assert child_fork != child_sid
        # The child's own fork, of the child's session of the original, in its store.
        assert header_of(theirs, child_fork)["forkedFrom"] == {"sessionId": child_sid, "turn": 2}
        assert (await agent.prompt(fid, "three"))["_meta"]["acpBridge"]["turn"] == 3
        assert said(agent, fid) == "three"
        # A turn named: the child's fork would hold turns ours does not (it numbers its
        # own), so it is emulated (seeding is the child's own prompt: its turn, not ours).
        early = await fork(agent, sid, work, atTurn=1)
        assert early["_meta"]["acpBridge"]["wrapped"] == {"forked": "emulated", "seeded": True, "seedTurns": 1,
                                                          "seedLeftOut": 0}
        assert early["_meta"]["acpBridge"]["forkedFrom"] == {"sessionId": sid, "turn": 1}
    assert ended(ours, sid) == [1, 2] and ended(theirs, child_sid) == [1, 2]  # the originals, untouched
    assert ended(ours, fid) == [1, 2, 3] and ended(theirs, child_fork) == [1, 2, 3]
    # The fork goes on in another wrapper: its child loads the child's fork.
    async with WrappedProcess(ours, child) as again:
        await again.initialize()
        loaded = await again.load_session(fid, work)
        assert loaded["_meta"]["acpBridge"]["wrapped"]["restored"] == "load"
        assert (await again.prompt(fid, "four"))["_meta"]["acpBridge"]["turn"] == 4
    assert ended(theirs, child_fork) == [1, 2, 3, 4]


def stored_header(store: Path, sid: str, backend: str) -> dict[str, Any]:
    """The header of a stored session, read as stored (without its owner lock)."""
    opened = open_backend(backend, store)
    try:
        return dict(read_stored(opened.read_stream(sid)).header)
    finally:
        opened.close()


@pytest.mark.parametrize("backend", ["jsonl", "sqlite"])
async def test_fork_command_through_wrap_in_front_of_serve_is_listed_and_loads_through_wrap(
        backend: str, tmp_path: Path, work: Path) -> None:
    """Our `serve` has a `/fork` of its own: through the wrapper `/fork` is the wrapper's
    (docs/wrap.md, "Slash commands"), which has serve fork its session too, so the fork
    is the wrapper's session, listed and loaded through it, its next prompt in serve's fork."""
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    child = serve_command(theirs, backend=backend)
    async with WrappedProcess(ours, child, backend=backend) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "one")
        await agent.prompt(sid, "two")
        child_sid = stored_header(ours, sid, backend)["wrapped"]["sessionId"]
        answer = await agent.prompt(sid, "/fork")
        assert answer["stopReason"] == "end_turn"
        text = said(agent, sid)
        fid = text.split(" into ")[1].split(",")[0]
        assert text.endswith(f"Forked this session into {fid}, with its turns 1-2; open it from the session list "
                             "(session/load). The wrapped agent forked its session too.")
        assert fid in [s["sessionId"] for s in (await agent.request("session/list", {}))["sessions"]]
        # Kept for the editor: what serve sent for its fork (its commands) is recorded, not shown yet.
        assert not agent.updates_of(fid)
        loaded = await agent.load_session(fid, work)
        assert loaded["_meta"]["acpBridge"]["turns"] == 2
        assert loaded["_meta"]["acpBridge"]["wrapped"]["restored"] == "load"
        users = [u["content"]["text"] for u in agent.replayed(fid) if u["sessionUpdate"] == "user_message_chunk"]
        assert users == ["one", "two"]
        replayed = len(agent.updates_of(fid))
        assert (await agent.prompt(fid, "three"))["_meta"]["acpBridge"]["turn"] == 3
        assert "".join(u["content"]["text"] for u in agent.updates_of(fid)[replayed:]
                       if u["sessionUpdate"] == "agent_message_chunk") == "three"
    child_fork = stored_header(ours, fid, backend)["wrapped"]["sessionId"]
    assert child_fork != child_sid
    # The child's own fork of the child's session, in its store; its next turn is the fork's.
    assert stored_header(theirs, child_fork, backend)["forkedFrom"] == {"sessionId": child_sid, "turn": 2}
    ends = {name: [e["data"]["turn"] for e in loaded_events(store, s, backend) if e["type"] == "turn/end"]
            for name, store, s in [("fork", ours, fid), ("child fork", theirs, child_fork),
                                   ("original", ours, sid), ("child original", theirs, child_sid)]}
    # The original's `/fork` is a turn of ours only (never sent to the child).
    assert ends == {"fork": [1, 2, 3], "child fork": [1, 2, 3], "original": [1, 2, 3], "child original": [1, 2]}
    # The fork goes on through another wrapper too.
    async with WrappedProcess(ours, child, backend=backend) as again:
        await again.initialize()
        assert fid in [s["sessionId"] for s in (await again.request("session/list", {}))["sessions"]]
        await again.load_session(fid, work)
        assert (await again.prompt(fid, "four"))["_meta"]["acpBridge"]["turn"] == 4


async def test_a_child_without_fork_gets_a_fresh_session_seeded_with_the_fork(tmp_path: Path, work: Path) -> None:
    store, record = tmp_path / "store", tmp_path / "received.jsonl"
    async with WrappedProcess(store, [sys.executable, str(SEED_AGENT), str(record)]) as agent:
        init = await agent.initialize()
        assert init["agentCapabilities"]["sessionCapabilities"]["fork"] == {}  # ours, emulated
        sid = await agent.new_session(work)
        await agent.prompt(sid, "alpha beta")
        await agent.prompt(sid, "gamma")
        forked = await fork(agent, sid, work)
        fid = forked["sessionId"]
        assert forked["_meta"]["acpBridge"]["wrapped"] == {"forked": "emulated", "seeded": True, "seedTurns": 2,
                                                           "seedLeftOut": 0}
        # The seed's exchange is the wrapper's, not shown: only the fork's commands (ours).
        assert [u["sessionUpdate"] for u in agent.updates_of(fid)] == ["available_commands_update"]
        assert (await agent.prompt(fid, "delta"))["_meta"]["acpBridge"]["turn"] == 3
        assert said(agent, fid) == "delta "
    got = [json.loads(line) for line in record.read_text().splitlines()]
    original_child = got[0]["sessionId"]
    seed, after = got[2], got[3]
    assert seed["sessionId"] != original_child and seed["text"].startswith(PREFACE)
    assert seed["text"].index("alpha beta") < seed["text"].index("gamma")
    assert after == {"sessionId": seed["sessionId"], "text": "delta"}
    assert header_of(store, fid)["wrapped"]["sessionId"] == seed["sessionId"]
    events = loaded_events(store, fid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    assert ended(store, fid) == [1, 2, 3] and ended(store, sid) == [1, 2]
    assert not any(PREFACE in json.dumps(e) for e in events)  # the seed is no turn of ours


async def test_an_emulated_fork_is_seeded_again_when_a_new_wrapper_loads_it(tmp_path: Path, work: Path) -> None:
    """Its child session had the conversation only by the seed: a new wrapper (no
    `--seed-fresh`) whose restore of it is fresh (the agent cannot load: gemini-cli's
    load fails, the echo agent has none) seeds the fresh one again, with the fork's
    whole transcript, its own turn included (docs/wrap.md, "Fork")."""
    store, record = tmp_path / "store", tmp_path / "received.jsonl"
    command = [sys.executable, str(SEED_AGENT), str(record)]
    async with WrappedProcess(store, command) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "alpha beta")
        fid = (await fork(agent, sid, work))["sessionId"]
        await agent.prompt(fid, "gamma")
    assert header_of(store, fid)["wrapped"]["seeded"] is True
    assert "seeded" not in header_of(store, sid)["wrapped"]  # the original's context is its agent's own
    async with WrappedProcess(store, command) as again:
        await again.initialize()
        loaded = await again.load_session(fid, work)
        assert loaded["_meta"]["acpBridge"]["wrapped"] == {"restored": "fresh", "seeded": True, "seedTurns": 2,
                                                           "seedLeftOut": 0}
        await again.prompt(fid, "delta")
        original = await again.load_session(sid, work)
        assert original["_meta"]["acpBridge"]["wrapped"] == {"restored": "fresh"}  # not seeded: no --seed-fresh
    got = [json.loads(line) for line in record.read_text().splitlines()]
    seed, after = got[-2], got[-1]
    assert seed["text"].startswith(PREFACE) and seed["text"].index("alpha beta") < seed["text"].index("gamma")
    assert after == {"sessionId": seed["sessionId"], "text": "delta"}


@pytest.mark.parametrize("mode", ["error", "no-id", "same-id", "not-object"])
async def test_a_child_that_answers_its_fork_badly_gets_the_fork_emulated(
        mode: str, tmp_path: Path, work: Path) -> None:
    store, record = tmp_path / "store", tmp_path / "received.jsonl"
    child = [sys.executable, str(BAD_FORK_AGENT), str(record), mode]
    async with WrappedProcess(store, child) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "kept words")
        forked = await fork(agent, sid, work)
        fid = forked["sessionId"]
        wrapped = forked["_meta"]["acpBridge"]["wrapped"]
        assert (wrapped["forked"], wrapped["seeded"], wrapped["seedTurns"]) == ("emulated", True, 1)
        assert isinstance(wrapped["forkError"], str) and wrapped["forkError"]
        # The original's child session is still the original's alone; the fork has its own.
        assert said(agent, sid) == "kept words "
        await agent.prompt(fid, "fork words")
        await agent.prompt(sid, "original words")
        assert said(agent, fid) == "fork words "
        assert said(agent, sid) == "kept words original words "
    got = [json.loads(line) for line in record.read_text().splitlines()]
    first, asked, seed, in_fork, in_original = got
    # What the wrapper asked of the child: the unstable schema's request, for its session.
    validate_def("ForkSessionRequest", asked["fork"], unstable=True)
    assert asked["fork"] == {"sessionId": first["sessionId"], "cwd": str(work), "mcpServers": []}
    assert seed["sessionId"] != first["sessionId"] and seed["text"].startswith(PREFACE)
    assert in_fork == {"sessionId": seed["sessionId"], "text": "fork words"}
    assert in_original == {"sessionId": first["sessionId"], "text": "original words"}
    assert ended(store, fid) == [1, 2] and ended(store, sid) == [1, 2]
