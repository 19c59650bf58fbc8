"""`acp-bridge sessions stats` (issue 26, point 2) over the store of
tests/support/search_store.py: turns, tokens, failed, interrupted and cancelled turns
grouped by day, model, agent, cwd or not at all, over a period, as a table and JSON;
cost from a price file (TOML or JSON; `--prices`, $ACP_BRIDGE_PRICES or the store's
own prices.toml), else what a wrapped agent reported, else counted as unknown, never
as zero. The expected figures are summed here from the usage the store was written
with."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.search_store import DAY0, DAY1, USAGE_OURS, USAGE_WRAPPED, Stored, write_store
from tests.test_sessions_cli import cli

PRICES = """
currency = "USD"
[models."openai:gpt-4o"]
input = 2.50
output = 10.00
cache_read = 1.25
input_includes_cache = true
"""


@pytest.fixture(params=["jsonl", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def stored(tmp_path: Path, kind: str) -> Stored:
    return write_store(tmp_path / "store", kind, tmp_path)


def stats(root: Path | str, kind: str, *args: str) -> dict[str, Any]:
    result = cli("--store", str(root), "--backend", kind, "stats", *args, "--json")
    assert result.code == 0, result.err
    out: dict[str, Any] = orjson.loads(result.raw)
    return out


def summed(usages: list[dict[str, int]]) -> dict[str, int]:
    keys = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens", "reasoningTokens")
    return {k: sum(u.get(k, 0) for u in usages) for k in keys}


def by_group(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["group"]: g for g in out["groups"]}


def test_groups_and_periods(tmp_path: Path, kind: str, stored: Stored) -> None:
    root = tmp_path / "store"
    ours, wrapped = summed(USAGE_OURS), summed(USAGE_WRAPPED)
    out = stats(root, kind, "--by", "agent")
    groups = by_group(out)
    assert set(groups) == {"acp-bridge", "claude-code"}
    assert groups["acp-bridge"]["tokens"] == ours and groups["claude-code"]["tokens"] == wrapped
    assert {k: groups["acp-bridge"][k] for k in ("turns", "errors", "interrupted", "cancelled", "toolErrors")} == \
        {"turns": 2, "errors": 1, "interrupted": 0, "cancelled": 0, "toolErrors": 1}
    # The open turn (its owner gone) is interrupted; the other was cancelled.
    assert {k: groups["claude-code"][k] for k in ("turns", "errors", "interrupted", "cancelled")} == \
        {"turns": 2, "errors": 0, "interrupted": 1, "cancelled": 1}
    assert out["total"]["tokens"] == {k: ours[k] + wrapped[k] for k in ours}
    assert out["total"]["turns"] == 4
    # No price file: what the wrapped agent said its cancelled turn cost; the rest unknown.
    assert out["total"]["cost"] == [{"amount": 0.25, "currency": "USD"}]
    assert out["total"]["turnsWithoutCost"] == 3

    days = by_group(stats(root, kind, "--by", "day"))
    local = [time.strftime("%Y-%m-%d", time.localtime(ms / 1000)) for ms in (DAY0, DAY1)]
    assert list(days) == local and days[local[0]]["tokens"] == ours and days[local[1]]["turns"] == 2
    assert set(by_group(stats(root, kind, "--by", "model"))) == {"openai:gpt-4o", "claude-code"}
    assert set(by_group(stats(root, kind, "--by", "cwd"))) == {stored.cwd_a, stored.cwd_b}
    assert list(by_group(stats(root, kind, "--by", "none"))) == ["all"]
    since = time.strftime("%Y-%m-%dT%H:%M", time.localtime(DAY1 / 1000))
    assert stats(root, kind, "--since", since)["total"]["tokens"] == wrapped
    assert stats(root, kind, "--until", since)["total"]["tokens"] == ours
    assert stats(root, kind, "--cwd", stored.cwd_a, "--model", "gpt-4o")["total"]["turns"] == 2
    assert stats(root, kind, "--agent", "nobody")["groups"] == []
    # The table: a row per group, a rule, the total.
    table = cli("--store", str(root), "--backend", kind, "stats", "--by", "agent")
    assert table.code == 0
    head, *rows = table.lines
    assert head.split()[:5] == ["AGENT", "TURNS", "ERRORS", "INTERRUPTED", "CANCELLED"]
    assert rows[0].split()[:2] == ["acp-bridge", "2"] and rows[-2].startswith("total")
    assert f"{ours['inputTokens'] + wrapped['inputTokens']:,}" in rows[-2]
    assert "0.2500 USD*" in rows[-2] and rows[-1].startswith("* 3 turn(s)")
    empty = cli("--store", str(root), "--backend", kind, "stats", "--agent", "nobody")
    assert empty.code == 0 and "No turns" in empty.out


def _cost(usage: dict[str, int], price: dict[str, float]) -> float:
    fresh = usage["inputTokens"] - usage["cacheReadTokens"]  # input_includes_cache
    return (fresh * price["input"] + usage["outputTokens"] * price["output"]
            + usage["cacheReadTokens"] * price["cache_read"]) / 1_000_000


@pytest.mark.integration
def test_cost_from_a_price_file(tmp_path: Path, kind: str, stored: Stored) -> None:
    root = tmp_path / "store"
    gpt = {"input": 2.5, "output": 10.0, "cache_read": 1.25}
    expected = round(_cost(summed(USAGE_OURS), gpt), 6)
    toml = tmp_path / "prices.toml"
    toml.write_text(PRICES)
    out = stats(root, kind, "--by", "agent", "--prices", str(toml))
    groups = by_group(out)
    assert out["prices"] == str(toml)
    assert groups["acp-bridge"]["cost"] == [{"amount": expected, "currency": "USD"}]
    assert groups["acp-bridge"]["turnsWithoutCost"] == 0
    # A model the file does not price: what its agent said (0.25), and one turn unknown.
    assert groups["claude-code"]["cost"] == [{"amount": 0.25, "currency": "USD"}]
    assert groups["claude-code"]["turnsWithoutCost"] == 1
    assert out["total"]["cost"] == [{"amount": round(expected + 0.25, 6), "currency": "USD"}]
    # JSON, a pattern, and another currency; the file's price wins over the agent's word.
    data = {"currency": "EUR", "models": {"openai:gpt-4o": {"input": 2.5, "output": 10.0, "cache_read": 1.25,
                                                            "input_includes_cache": True},
                                          "claude-*": {"input": 3, "output": 15}}}
    (tmp_path / "prices.json").write_text(json.dumps(data))
    groups = by_group(stats(root, kind, "--by", "agent", "--prices", str(tmp_path / "prices.json")))
    wrapped = summed(USAGE_WRAPPED)
    claude = (wrapped["inputTokens"] * 3 + wrapped["outputTokens"] * 15) / 1_000_000
    assert groups["claude-code"]["cost"] == [{"amount": round(claude, 6), "currency": "EUR"}]
    assert groups["claude-code"]["turnsWithoutCost"] == 0
    # The store's own prices.toml, and $ACP_BRIDGE_PRICES before it.
    (root / "prices.toml").write_text(PRICES)
    assert by_group(stats(root, kind, "--by", "agent"))["acp-bridge"]["cost"] == \
        [{"amount": expected, "currency": "USD"}]
    if kind == "jsonl":  # (the env's one run, in a fresh process)
        result = cli("--store", str(root), "--backend", kind, "stats", "--by", "agent", "--json",
                     env={"ACP_BRIDGE_PRICES": str(tmp_path / "prices.json")})
        assert result.code == 0, result.err
        assert by_group(orjson.loads(result.raw))["acp-bridge"]["cost"][0]["currency"] == "EUR"


@pytest.mark.parametrize(("text", "said"), [
    ("currency = 'dollars'", "ISO 4217"),
    ("[models.x]\ninput = 1", "output is missing"),
    ("[models.x]\ninput = -1\noutput = 1", "at least 0"),
    ("[models.x]\ninput = 1\noutput = 1\ncolour = 2", "unknown key 'colour'"),
    ("models = 3", "table of model names"),
    ("this is = not toml", "prices.toml"),
])
def test_a_bad_price_file_is_a_usage_error(tmp_path: Path, stored: Stored, kind: str, text: str, said: str) -> None:
    path = tmp_path / "prices.toml"
    path.write_text(text)
    result = cli("--store", str(tmp_path / "store"), "--backend", kind, "stats", "--prices", str(path))
    assert result.code == 2 and said in result.err and "--prices" in result.err, result.err
    assert result.out == ""


def test_a_missing_price_file(tmp_path: Path, stored: Stored, kind: str) -> None:
    result = cli("--store", str(tmp_path / "store"), "--backend", kind, "stats", "--prices",
                 str(tmp_path / "nope.toml"))
    assert result.code == 2 and "cannot read the price file" in result.err


def test_stats_over_postgres(pg_dsn: str, tmp_path: Path) -> None:
    write_store(pg_dsn, "postgres", tmp_path)
    (tmp_path / "prices.toml").write_text(PRICES)
    out = stats(pg_dsn, "postgres", "--by", "agent", "--prices", str(tmp_path / "prices.toml"))
    groups = by_group(out)
    assert groups["acp-bridge"]["tokens"] == summed(USAGE_OURS)
    assert groups["claude-code"]["interrupted"] == 1 and groups["claude-code"]["cancelled"] == 1
    gpt = {"input": 2.5, "output": 10.0, "cache_read": 1.25}
    assert groups["acp-bridge"]["cost"] == [{"amount": round(_cost(summed(USAGE_OURS), gpt), 6), "currency": "USD"}]
