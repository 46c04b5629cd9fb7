"""Usage accounting: tokens and cost, as reported by a worker or a model call.

Owns the `Usage` record, the `Budget` a run may not exceed, and the
per-attempt `UsageMeter` that models report to. Imports nothing from planexec, so models, workers, events and the
engine can all share it.

Cached tokens follow OpenAI's convention: `input_tokens` counts every
prompt token, and `cached_input_tokens` (read from the provider's prompt
cache) and `cache_write_tokens` (written to it) are parts of it, so
``input_tokens - cached_input_tokens - cache_write_tokens`` were read at the
full price. Providers whose count leaves them out (Anthropic's
``input_tokens`` excludes cache reads and writes) add them back when they
build a `Usage`. A record stored before these fields existed loads with 0.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

from pydantic import BaseModel, ConfigDict

__all__ = ["Budget", "Usage", "UsageMeter", "record_usage", "start_meter", "stop_meter"]


class Usage(BaseModel):
    """Tokens in and out, model calls and cost in US dollars; adds with `+`.

    `input_tokens` counts every prompt token; `cached_input_tokens` of them
    were read from the provider's prompt cache and `cache_write_tokens` of
    them written to it (see the module docstring). `cost` is the cost of
    the calls whose price is known; `unpriced_calls` counts the calls whose
    model has no price, so an unknown cost is never shown as zero (see
    `cost_known`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    cost: float = 0.0
    unpriced_calls: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0

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
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def uncached_input_tokens(self) -> int:
        """Input tokens read at the full price: neither read from nor written to a prompt cache."""
        return max(self.input_tokens - self.cached_input_tokens - self.cache_write_tokens, 0)

    def describe_cache(self) -> str:
        """`` (800 cached, 300 written to cache)`` when a prompt cache was used, else ``""``; follows "N tokens in"."""
        parts = [f"{self.cached_input_tokens} cached"] if self.cached_input_tokens else []
        parts += [f"{self.cache_write_tokens} written to cache"] if self.cache_write_tokens else []
        return f" ({', '.join(parts)})" if parts else ""

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
        return not (
            self.input_tokens
            or self.output_tokens
            or self.model_calls
            or self.cost
            or self.unpriced_calls
            or self.cached_input_tokens
            or self.cache_write_tokens
        )


_NOTHING = Usage()  # records are frozen: one zero serves every meter that counts nothing


class Budget(BaseModel):
    """Limits on what a run may use: model calls, tokens (in + out) and cost in dollars (None: no limit)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_model_calls: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None

    def exceeded(self, used: Usage) -> str | None:
        """Which limit `used` is over, as text, or None."""
        if self.max_model_calls is not None and used.model_calls > self.max_model_calls:
            return f"{used.model_calls} model calls > {self.max_model_calls}"
        if self.max_tokens is not None and used.total_tokens > self.max_tokens:
            return f"{used.total_tokens} tokens > {self.max_tokens}"
        if self.max_cost is not None and used.cost > self.max_cost:
            return f"${used.cost:.4f} > ${self.max_cost:.4f}"
        return None


class UsageMeter:
    """Counts the usage of every model call made while it is active (see `metering`).

    The engine opens one per step attempt, so an attempt cut off by its
    timeout or a cancel still accounts for the calls it had finished.
    Models report to it through `record_usage`.
    """

    __slots__ = ("total",)

    def __init__(self) -> None:
        # shared: a tool step's record keeps its meter's total, and a fresh zero each was 460 bytes a step
        self.total = _NOTHING

    def add(self, usage: Usage) -> None:
        """Count one call's usage."""
        self.total = self.total + usage


_meter: ContextVar[UsageMeter | None] = ContextVar("planexec_usage_meter", default=None)


def record_usage(usage: Usage) -> None:
    """Report a model call's usage to the meter of the current step attempt, if there is one."""
    meter = _meter.get()
    if meter is not None:
        meter.add(usage)


def start_meter() -> tuple[UsageMeter, Token[UsageMeter | None]]:
    """Open a meter for the current context; `stop_meter(token)` closes it."""
    meter = UsageMeter()
    return meter, _meter.set(meter)


def stop_meter(token: Token[UsageMeter | None]) -> None:
    """Close the meter opened with `start_meter`."""
    _meter.reset(token)
