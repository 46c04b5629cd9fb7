"""Usage accounting: tokens and cost, as reported by a worker or a model call.

Owns the `Usage` record only. Imports nothing from planexec, so models,
workers, events and the engine can all share it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Usage"]


class Usage(BaseModel):
    """Tokens in and out, model calls and cost in US dollars; adds with `+`.

    `cost` is the cost of the calls whose price is known; `unpriced_calls`
    counts the calls whose model has no price, so an unknown cost is never
    shown as zero (see `cost_known`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    cost: float = 0.0
    unpriced_calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        # tool steps add zeros thousands of times: skip building a new record then
        if other.is_zero():
            return self
        if self.is_zero():
            return other
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            model_calls=self.model_calls + other.model_calls,
            cost=self.cost + other.cost,
            unpriced_calls=self.unpriced_calls + other.unpriced_calls,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def cost_known(self) -> bool:
        """True when every call that cost something has a price."""
        return self.unpriced_calls == 0

    def describe_cost(self) -> str:
        """``$0.0012``, ``unknown``, or ``>= $0.0012 (3 calls unpriced)``."""
        if self.cost_known:
            return f"${self.cost:.4f}"
        if self.unpriced_calls >= self.model_calls and not self.cost:
            return "unknown"
        return f">= ${self.cost:.4f} ({self.unpriced_calls} call{'s' if self.unpriced_calls != 1 else ''} unpriced)"

    def is_zero(self) -> bool:
        """True when nothing was used (tool-only steps)."""
        return not (self.input_tokens or self.output_tokens or self.model_calls or self.cost or self.unpriced_calls)
