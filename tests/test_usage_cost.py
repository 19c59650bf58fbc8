"""`usage_update.cost` (issue 26, point 2): with a price file (`--prices`, checked at
start-up as every option is), our agent's usage updates carry the session's cumulative
cost (ACP's `Cost {amount, currency}`), live, replayed by `session/load` and on after
a load; a model the file does not price sends none. The real agent process, every
message it sends validated against the ACP schema."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.acp_client import AgentProcess, write_script

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

PRICES = """
currency = "EUR"
[models."script*"]
input = 2.0
output = 8.0
"""
STEPS: list[dict[str, Any]] = [{"text": "one", "usage": {"inputTokens": 1000, "outputTokens": 100}},
         {"text": "two", "usage": {"inputTokens": 3000, "outputTokens": 500}}]


def price(usage: dict[str, int]) -> float:
    return (usage["inputTokens"] * 2.0 + usage["outputTokens"] * 8.0) / 1_000_000


def costs(updates: list[dict[str, Any]]) -> list[Any]:
    return [u.get("cost") for u in updates if u["sessionUpdate"] == "usage_update"]


async def test_usage_updates_carry_the_sessions_cost(tmp_path: Path, work: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES)
    model = write_script(tmp_path / "script.json", *STEPS)
    totals = [round(sum(price(s["usage"]) for s in STEPS[:n]), 6) for n in (1, 2)]
    store = tmp_path / "store"
    async with AgentProcess(store, model=model, args=("--prices", str(prices))) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "first")
        await agent.prompt(sid, "second")
        assert costs(agent.updates_of(sid)) == [{"amount": t, "currency": "EUR"} for t in totals[:2]]
        assert not agent.violations
    async with AgentProcess(store, model=model, args=("--prices", str(prices))) as agent:
        await agent.initialize()
        await agent.load_session(sid, work)
        # The replay counts from the session's start; the next turn goes on from there.
        assert costs(agent.replayed(sid)) == [{"amount": t, "currency": "EUR"} for t in totals[:2]]
        await agent.prompt(sid, "third")  # (a fresh process's script model starts at its first step)
        after = round(totals[1] + price(STEPS[0]["usage"]), 6)
        assert costs(agent.updates_of(sid))[-1] == {"amount": after, "currency": "EUR"}
        assert not agent.violations
    # Without a price for the model (or without a file): no cost, the rest unchanged.
    other = tmp_path / "other.toml"
    other.write_text('[models."openai:*"]\ninput = 1\noutput = 1\n')
    async with AgentProcess(tmp_path / "store2", model=model, args=("--prices", str(other))) as agent:
        await agent.initialize()
        sid = await agent.new_session(work)
        await agent.prompt(sid, "first")
        assert costs(agent.updates_of(sid)) == [None]


def test_a_bad_price_file_stops_the_agent_at_start_up(tmp_path: Path) -> None:
    bad = tmp_path / "prices.toml"
    bad.write_text('[models.x]\ninput = "cheap"\noutput = 1\n')
    proc = subprocess.run([sys.executable, "-m", "acp_bridge", "--store", str(tmp_path / "store"),
                           "--prices", str(bad)], stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stdout == b""  # stdout is the protocol's
    assert b"--prices" in proc.stderr and b"input must be a number" in proc.stderr
