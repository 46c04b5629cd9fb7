"""What every model named in configuration gets: retries, a per-call timeout and prices.

Owns `ManagedModel`, a wrapper around any provider's `Model`, whose
`profile` is the provider's with planexec.toml's overrides and the price
table's price (`models.profile`). A call that
fails with a retryable `ModelError` (rate limit, server error, timeout) is
tried again after an exponential backoff with jitter (or the wait the
provider asked for), up to `retries` more times; each call is bounded by
`timeout` seconds; the usage of every successful call is priced from a
`PriceTable`. A streamed call is retried only while nothing has been yielded
yet, so a caller never sees text twice. Each call (its retries included) is
reported to the observer telemetry installs (`models.observe`), if any.
Imports `errors`, `usage`, `pricing`, `models.base`, `models.profile` and `models.observe`;
never the engine, planner or telemetry.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from planexec.errors import ModelError, ModelTimeoutError
from planexec.models import observe
from planexec.models.base import Model, ModelDelta, ModelRequest, ModelResponse, stream_response
from planexec.models.observe import CallWatch
from planexec.models.pricing import PriceTable
from planexec.models.profile import ModelProfile, ProfileTable, profile_of
from planexec.usage import record_usage

__all__ = ["ManagedModel"]


class ManagedModel:
    """A provider's model with retries, a per-call timeout and pricing.

    `retries` is how many times a retryable failure is tried again;
    `backoff` the first wait in seconds (doubling, capped at `max_backoff`,
    with up to 25% jitter from `seed`); `timeout` bounds each call (None:
    the provider's own). `sleep` is injectable so tests do not wait.
    """

    reports_calls = True  # to `models.observe`'s observer: `observed` leaves it as it is

    def __init__(
        self,
        inner: Model,
        *,
        retries: int = 2,
        timeout: float | None = 120.0,
        backoff: float = 0.5,
        max_backoff: float = 20.0,
        prices: PriceTable | None = None,
        profiles: ProfileTable | None = None,
        seed: int | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be 0 or more")
        self.inner = inner
        self.name = inner.name
        self.retries = retries
        self.timeout = timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.prices = prices if prices is not None else PriceTable.default()
        self.random = random.Random(seed)
        self.sleep = sleep
        self.attempts = 0  # calls sent, retries included
        profile = profile_of(inner)
        self.profile_source = "its provider's"  # where `profile` came from, for people
        if profiles is not None and profiles.overrides(self.name):
            profile = profiles.apply(self.name, profile)
            self.profile_source = "model_profiles in planexec.toml over its provider's"
        if profile.price is None and (price := self.prices.lookup(self.name)) is not None:
            profile = profile.model_copy(update={"price": price})
        self.profile: ModelProfile = profile

    def __repr__(self) -> str:
        return f"ManagedModel({self.inner!r}, retries={self.retries}, timeout={self.timeout})"

    @property
    def base_url(self) -> str | None:
        """The endpoint the provider was pointed at, when not its own (a local server, a proxy)."""
        url = getattr(self.inner, "base_url", None)
        return url if isinstance(url, str) else None

    def delay(self, retry: int, error: ModelError) -> float:
        """Seconds to wait before retry number `retry` (1-based)."""
        if error.retry_after is not None:
            return min(max(float(error.retry_after), 0.0), self.max_backoff)
        base: float = min(self.backoff * 2 ** (retry - 1), self.max_backoff)
        return base * (1 + 0.25 * self.random.random())

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One call, retried on retryable errors, each attempt bounded by the timeout."""
        observer = observe.call_observer()
        if observer is None:
            return await self._complete(request, None)
        return await observe.watched(observer, self.name, request, lambda watch: self._complete(request, watch), base_url=self.base_url)

    async def _complete(self, request: ModelRequest, watch: CallWatch | None) -> ModelResponse:
        retry = 0
        while True:
            self.attempts += 1
            try:
                async with asyncio.timeout(self.timeout):
                    response = await self.inner.complete(request)
                return self._priced(response)
            except TimeoutError:
                error: ModelError = self._timed_out()
            except ModelError as exc:
                error = exc
            retry += 1
            if not error.retryable or retry > self.retries:
                raise error
            delay = self.delay(retry, error)
            observe.retried(watch, error, delay)
            await self.sleep(delay)

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelDelta | ModelResponse]:
        """Stream one call; retried like `complete` only until the first delta arrived."""
        observer = observe.call_observer()
        if observer is None:
            return self._stream(request, None)
        return observe.watched_stream(observer, self.name, request, lambda watch: self._stream(request, watch), base_url=self.base_url)

    async def _stream(self, request: ModelRequest, watch: CallWatch | None) -> AsyncIterator[ModelDelta | ModelResponse]:
        retry = 0
        while True:
            self.attempts += 1
            yielded = False
            try:
                async with asyncio.timeout(self.timeout):
                    async for item in stream_response(self.inner, request):
                        if isinstance(item, ModelResponse):
                            yield self._priced(item)
                            return
                        yielded = True
                        yield item
                raise ModelError(f"model {self.name!r} ended its stream without a final response", model=self.name)
            except TimeoutError:
                error: ModelError = self._timed_out()
            except ModelError as exc:
                error = exc
            retry += 1
            if yielded or not error.retryable or retry > self.retries:
                raise error
            delay = self.delay(retry, error)
            observe.retried(watch, error, delay)
            await self.sleep(delay)

    def _timed_out(self) -> ModelTimeoutError:
        return ModelTimeoutError(f"model {self.name!r} did not answer within {self.timeout:g}s", model=self.name)

    def _priced(self, response: ModelResponse) -> ModelResponse:
        name = self.name
        if self.prices.lookup(name) is None and response.model:
            # a name like 'openai:my-deployment' may still be priced by the id the server returned
            name = f"{self.name.split(':', 1)[0]}:{response.model}"
        priced = response.model_copy(update={"usage": self.prices.apply(name, response.usage)})
        record_usage(priced.usage)  # the step attempt's meter, so a timed-out attempt still counts it
        return priced
