"""What a model's tokens cost: the price file (docs/search.md, "Prices"), parsed and
checked, and the cost of a step's usage. Pure: the file is read by its callers (the
agent's start-up, `acp-bridge sessions stats`: acp_bridge.cli.startup.read_prices),
which hand its parsed content here.

    currency = "USD"                 # ISO 4217, for every model of the file
    [models."openai:gpt-4o"]         # a model as turns record it (`turn/start.model`)
    input = 2.50                     # per million tokens
    output = 10.00
    cache_read = 1.25                # optional, default: the input price
    cache_write = 3.125              # optional, default: the input price
    input_includes_cache = true      # the recorded input tokens count the cache reads
                                     # (OpenAI's API does) so they are priced once
    [models."openai:gpt-4o-mini*"]   # a pattern: `*` stands for any characters

A model is priced by its exact entry, else by the first pattern (in the file's order)
that matches it. Reasoning tokens are not priced apart: providers count them in the
output tokens. A model without an entry has no cost (None), never zero.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from acp_bridge.errors import PriceFileError
from session.events import ASSISTANT_MESSAGE, CONTEXT_COMPACTION, TURN_START, Event
from session.typed import typed

# Cost figures are kept to this many decimals (a millionth of the currency's unit).
DIGITS = 6
_PRICE_FIELDS = ("input", "output", "cache_read", "cache_write")
_FIELDS = frozenset({*_PRICE_FIELDS, "input_includes_cache"})
_CURRENCY = re.compile(r"[A-Z]{3}")


@dataclass(frozen=True)
class Price:
    """A model's prices per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float
    input_includes_cache: bool = False

    def cost(self, usage: Mapping[str, Any]) -> float:
        """The cost of one usage record (`session.events.Usage`: token counts)."""
        tokens = {name: _count(usage.get(key)) for name, key in
                  (("input", "inputTokens"), ("output", "outputTokens"),
                   ("cache_read", "cacheReadTokens"), ("cache_write", "cacheWriteTokens"))}
        if self.input_includes_cache:
            tokens["input"] = max(0, tokens["input"] - tokens["cache_read"])
        total: float = sum(tokens[name] * float(getattr(self, name)) for name in _PRICE_FIELDS)
        return total / 1_000_000


@dataclass(frozen=True)
class Prices:
    """The models of a price file, and its currency."""

    currency: str
    exact: Mapping[str, Price]
    patterns: tuple[tuple[re.Pattern[str], Price], ...] = ()
    where: str = ""

    def price_of(self, model: str | None) -> Price | None:
        if model is None:
            return None
        found = self.exact.get(model)
        if found is not None:
            return found
        return next((price for pattern, price in self.patterns if pattern.fullmatch(model)), None)

    def cost(self, model: str | None, usage: Mapping[str, Any]) -> float | None:
        """What `usage` cost on `model`, or None where the model has no price."""
        price = self.price_of(model)
        return None if price is None else price.cost(usage)


def parse_prices(data: Any, where: str) -> Prices:
    """A price file's parsed content (a TOML or JSON document) as `Prices`; raises
    PriceFileError naming the first thing wrong."""
    if not isinstance(data, dict):
        raise PriceFileError(f"{where}: not a table of prices")
    unknown = set(data) - {"currency", "models"}
    if unknown:
        raise PriceFileError(f"{where}: unknown key {sorted(unknown)[0]!r} (the keys are currency and models)")
    currency = data.get("currency", "USD")
    if not isinstance(currency, str) or not _CURRENCY.fullmatch(currency):
        raise PriceFileError(f"{where}: currency must be an ISO 4217 code such as \"USD\", not {currency!r}")
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise PriceFileError(f"{where}: models must be a table of model names")
    exact: dict[str, Price] = {}
    patterns: list[tuple[re.Pattern[str], Price]] = []
    for name, entry in models.items():
        price = _price(entry, f"{where}: model {name!r}")
        if "*" in name:
            patterns.append((re.compile(".*".join(re.escape(part) for part in name.split("*"))), price))
        else:
            exact[name] = price
    return Prices(currency, exact, tuple(patterns), where)


def _price(entry: Any, where: str) -> Price:
    if not isinstance(entry, dict):
        raise PriceFileError(f"{where}: not a table (input = ..., output = ...)")
    unknown = set(entry) - _FIELDS
    if unknown:
        raise PriceFileError(f"{where}: unknown key {sorted(unknown)[0]!r} "
                             f"(the keys are {', '.join(sorted(_FIELDS))})")
    values: dict[str, float] = {}
    for field in _PRICE_FIELDS:
        value = entry.get(field)
        if value is None and field in ("input", "output"):
            raise PriceFileError(f"{where}: {field} is missing (a price per million tokens)")
        if value is None:
            value = values["input"]  # cached tokens cost what input does, unless priced
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
            raise PriceFileError(f"{where}: {field} must be a number of at least 0, not {value!r}")
        values[field] = float(value)
    includes = entry.get("input_includes_cache", False)
    if not isinstance(includes, bool):
        raise PriceFileError(f"{where}: input_includes_cache must be true or false, not {includes!r}")
    return Price(values["input"], values["output"], values["cache_read"], values["cache_write"], includes)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class CostMeter:
    """A session's cumulative cost as its events come (a live turn, a replay, a load):
    the model is each turn's (`turn/start.model`), and a step adds the cost of its
    `assistant/message` usage when that model has a price. `total` is None until a
    priced step came. A wrapped agent's steps (`silent`) are its own to price: it may
    send its cost in its `usage_update`s, which are passed on as they came."""

    def __init__(self, prices: Prices) -> None:
        self.prices = prices
        self.model: str | None = None
        self.total: float | None = None

    def turn(self, model: object) -> None:
        self.model = model if isinstance(model, str) else None

    def step(self, usage: Mapping[str, Any]) -> float | None:
        """The cumulative cost after a step of this usage; None if its model has no price."""
        cost = self.prices.cost(self.model, usage)
        if cost is None:
            return None
        self.total = (self.total or 0.0) + cost
        return self.total

    def feed(self, event: Event) -> None:
        """One stored event (what a load reads before the session is live)."""
        ev = typed(event)
        if ev["type"] == TURN_START:
            self.turn(ev["data"].get("model"))
        elif ev["type"] == ASSISTANT_MESSAGE and not ev["data"].get("silent") \
                and isinstance(usage := ev["data"].get("usage"), dict):
            self.step(usage)
        elif ev["type"] == CONTEXT_COMPACTION and isinstance(usage := ev["data"].get("usage"), dict):
            self.step(usage)  # a compaction's summary call (acp_bridge.host.updates counts it live)

    def amount(self) -> dict[str, Any] | None:
        """ACP's `Cost` (`{amount, currency}`) of the total so far, or None."""
        if self.total is None:
            return None
        return {"amount": round(self.total, DIGITS), "currency": self.prices.currency}
