"""Prices: what a model call cost, from a table the user can extend.

Owns `Price` (US dollars per million input and output tokens) and
`PriceTable` (model name or ``prefix*`` -> price; the longest match wins).
The defaults ship as ``data/prices.json``; ``[planexec.prices]`` in
``planexec.toml`` adds or overrides entries. A call to a model with no price
is counted in `Usage.unpriced_calls`, never priced at zero. Imports `usage`
only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from planexec.usage import Usage

__all__ = ["Price", "PriceTable"]


class Price(BaseModel):
    """US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)

    def of(self, input_tokens: int, output_tokens: int) -> float:
        """The cost of that many tokens."""
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


class PriceTable:
    """Prices by model name; ``"openai:gpt-4o*"`` matches every name starting with ``openai:gpt-4o``."""

    def __init__(self, prices: Mapping[str, Price | Mapping[str, float]] | None = None) -> None:
        self.exact: dict[str, Price] = {}
        self.prefixes: list[tuple[str, Price]] = []
        for key, value in (prices or {}).items():
            self.set(key, value)

    @classmethod
    def default(cls, extra: Mapping[str, Any] | None = None) -> PriceTable:
        """The shipped prices, with `extra` (e.g. from planexec.toml) added on top."""
        raw = json.loads(resources.files("planexec").joinpath("data/prices.json").read_text(encoding="utf-8"))
        table = cls({k: v for k, v in raw.items() if not k.startswith("_")})
        for key, value in (extra or {}).items():
            table.set(key, value)
        return table

    def set(self, key: str, price: Price | Mapping[str, float]) -> None:
        """Add or replace one entry."""
        value = price if isinstance(price, Price) else Price.model_validate(price)
        if key.endswith("*"):
            self.prefixes = [(p, v) for p, v in self.prefixes if p != key[:-1]] + [(key[:-1], value)]
            self.prefixes.sort(key=lambda item: len(item[0]), reverse=True)
        else:
            self.exact[key] = value

    def lookup(self, model: str) -> Price | None:
        """The price of a model name, or None when it is not known."""
        if model in self.exact:
            return self.exact[model]
        return next((price for prefix, price in self.prefixes if model.startswith(prefix)), None)

    def apply(self, model: str, usage: Usage) -> Usage:
        """`usage` of calls to `model`, with its cost set, or its calls counted as unpriced."""
        if not usage.model_calls:
            return usage
        price = self.lookup(model)
        if price is None:
            return usage.model_copy(update={"cost": 0.0, "unpriced_calls": usage.model_calls})
        return usage.model_copy(update={"cost": price.of(usage.input_tokens, usage.output_tokens), "unpriced_calls": 0})
