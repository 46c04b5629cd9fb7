"""Prices: what a model call cost, from a table the user can extend.

Owns `Price` (US dollars per million tokens: input, output, and the
prompt cache's reads and writes) and `PriceTable` (model name or
``prefix*`` -> price; the longest match wins). The defaults ship as
``data/prices.json``; ``[planexec.prices]`` in ``planexec.toml`` adds or
overrides entries. A call to a model with no price is counted in
`Usage.unpriced_calls`, never priced at zero. A price without a cache rate
charges the tokens read from or written to a prompt cache at its input
rate, as a provider that does not discount them bills them; give the rates
of one that does. Imports `usage` only.
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
    """US dollars per million tokens: `input`, `output`, and input read from (`cached_input`) or written to (`cache_write`) a prompt cache.

    A cache rate left out (None) is the `input` rate.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cached_input: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)

    def of(self, input_tokens: int, output_tokens: int, *, cached_input_tokens: int = 0, cache_write_tokens: int = 0) -> float:
        """The cost of that many tokens; the cached and written ones are parts of `input_tokens` (see `usage`)."""
        cached = self.input if self.cached_input is None else self.cached_input
        write = self.input if self.cache_write is None else self.cache_write
        uncached = max(input_tokens - cached_input_tokens - cache_write_tokens, 0)
        dollars = uncached * self.input + cached_input_tokens * cached + cache_write_tokens * write + output_tokens * self.output
        return dollars / 1_000_000

    def of_usage(self, usage: Usage) -> float:
        """The cost of the tokens a `Usage` counts."""
        return self.of(
            usage.input_tokens,
            usage.output_tokens,
            cached_input_tokens=usage.cached_input_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )


class PriceTable:
    """Prices by model name; ``"openai:gpt-4o*"`` matches every name starting with ``openai:gpt-4o``."""

    def __init__(self, prices: Mapping[str, Price | Mapping[str, float | None]] | None = None) -> None:
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

    def set(self, key: str, price: Price | Mapping[str, float | None]) -> None:
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
        return usage.model_copy(update={"cost": price.of_usage(usage), "unpriced_calls": 0})
