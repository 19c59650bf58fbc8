"""An imported session goes on in another ACP agent: a codex session imported from its
rollout, loaded through `acp-bridge wrap --seed-fresh` in front of another agent (the
test's seedable agent), is handed to it as a hand-over is (its fresh session seeded with
the transcript: the prompts and the agent's answers), and its next turn is the
imported session's turn 3 (docs/import.md, docs/wrap.md "Load")."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from acp_bridge.cli.importer.main import main as import_main
from acp_bridge.wrap.seed import PREFACE
from session import check_invariants
from tests.support.logs import loaded_events
from tests.support.wrapped import WrappedProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

ROLLOUT = next((Path(__file__).parent / "recorded" / "native" / "codex-0.171.0").glob("*.jsonl"))
AGENT = Path(__file__).resolve().parent / "support" / "wrap_seed_agent.py"


@pytest.mark.parametrize("how", ["--seed-fresh", "--agent"])
async def test_an_imported_codex_session_goes_on_in_another_agent(
        tmp_path: Path, work: Path, capsys: pytest.CaptureFixture[str], how: str) -> None:
    """Seeded as a hand-over is, with or without --seed-fresh: its context is another
    agent's (the `--agent` case failed before: the fresh child was not shown it)."""
    store, record = tmp_path / "store", tmp_path / "received.jsonl"
    assert import_main([str(ROLLOUT), "--store", str(store)]) == 0
    sid = capsys.readouterr().out.split("imported as session ")[1].split()[0]
    child = [sys.executable, str(AGENT), str(record), "--ask"]
    if how == "--agent":
        spec = (f"--agent=other={shlex.join(child)}",)
        agent: list[str] = []
    else:
        spec, agent = ("--seed-fresh",), child
    async with WrappedProcess(store, agent, wrap_args=spec) as wrapped:
        await wrapped.initialize()
        loaded = await wrapped.load_session(sid, work)
        assert loaded["_meta"]["acpBridge"]["wrapped"] == {
            "restored": "fresh", "seeded": True, "seedTurns": 2, "seedLeftOut": 0,
            **({"agent": "other"} if how == "--agent" else {})}
        after = await wrapped.prompt(sid, "and now?")
        assert after["_meta"]["acpBridge"]["turn"] == 3
    got = [json.loads(line) for line in record.read_text().splitlines()]
    seed = got[0]["text"]
    assert seed.startswith(PREFACE)
    for said in ("Say hello.", "Hello from the fake model.", "RUN: cat notes.txt", "The command said: "):
        assert said in seed, said  # the prompts and the agent's answers, as a hand-over seeds them
    assert got[-1]["text"] == "and now?" and got[-1]["sessionId"] == got[0]["sessionId"]
    events = loaded_events(store, sid)
    check_invariants(events, closed=True)  # type: ignore[arg-type]
    assert [e["data"]["trigger"].get("imported") for e in events if e["type"] == "turn/start"] == [
        "codex", "codex", None]  # two imported turns, then one of the other agent's
