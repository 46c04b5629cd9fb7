"""Watching model calls: the seam through which telemetry sees every call a model makes.

Owns `CallObserver` (told when a call starts; the `CallWatch` it returns is
told of each retry and of how the call ended), `watch_model_calls` (install
one observer for the process, or None to stop), `watched` and
`watched_stream` (one call reported to the observer installed, if any) and
`observed` (a model given as an object, wrapped so that its calls are
reported too). `ManagedModel`, which every model named ``"provider:model"``
is, reports its calls itself; a `Team` wraps the models it is given as
objects with `observed` while telemetry is on. With no observer installed a
call costs one global read, and nothing is wrapped. An observer that raises
is logged and ignored: watching never breaks a call. Imports `models.base`
only; never the engine, planner or telemetry.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from planexec.models.base import Model, ModelDelta, ModelRequest, ModelResponse, StreamingModel, stream_response

__all__ = [
    "CallObserver",
    "CallWatch",
    "ObservedModel",
    "ObservedStreamingModel",
    "call_observer",
    "observed",
    "retried",
    "watch_model_calls",
    "watched",
    "watched_stream",
]

log = logging.getLogger("planexec.models")


class CallWatch(Protocol):
    """One model call being watched: told of each retry, then once of how it ended."""

    def retried(self, error: BaseException, delay: float) -> None:
        """The call failed with a retryable `error` and is tried again after `delay` seconds."""
        ...

    def ended(self, response: ModelResponse | None, error: BaseException | None) -> None:
        """The call ended: with its (priced) `response`, or with `error` (a cancellation included)."""
        ...


class CallObserver(Protocol):
    """What telemetry installs: told of every model call as it starts."""

    def started(self, model: str, request: ModelRequest, *, base_url: str | None = None) -> CallWatch:
        """A call of the model named `model` (``"provider:model"``) starts with `request`."""
        ...


_observer: CallObserver | None = None


def watch_model_calls(observer: CallObserver | None) -> CallObserver | None:
    """Report every model call of this process to `observer` (None: to nobody); returns the observer it replaces."""
    global _observer
    previous, _observer = _observer, observer
    return previous


def call_observer() -> CallObserver | None:
    """The observer installed, or None."""
    return _observer


class _Quiet:
    """A watch that does nothing: what a call gets when its observer failed to start watching it."""

    def retried(self, error: BaseException, delay: float) -> None:
        """Nothing."""

    def ended(self, response: ModelResponse | None, error: BaseException | None) -> None:
        """Nothing."""


def _start(observer: CallObserver, model: str, request: ModelRequest, base_url: str | None) -> CallWatch:
    try:
        return observer.started(model, request, base_url=base_url)
    except Exception:  # a broken observer must not break the call
        log.exception("model call observer %r failed", observer)
        return _Quiet()


def _end(watch: CallWatch, response: ModelResponse | None, error: BaseException | None) -> None:
    try:
        watch.ended(response, error)
    except Exception:
        log.exception("model call watch %r failed", watch)


def retried(watch: CallWatch | None, error: BaseException, delay: float) -> None:
    """Tell `watch` (if any) that the call is retried; a failing watch is logged."""
    if watch is None:
        return
    try:
        watch.retried(error, delay)
    except Exception:
        log.exception("model call watch %r failed", watch)


async def watched(
    observer: CallObserver,
    model: str,
    request: ModelRequest,
    call: Callable[[CallWatch], Awaitable[ModelResponse]],
    *,
    base_url: str | None = None,
) -> ModelResponse:
    """`call(watch)` reported to `observer`: started now, ended with its response or its error."""
    watch = _start(observer, model, request, base_url)
    try:
        response = await call(watch)
    except BaseException as exc:
        _end(watch, None, exc)
        raise
    _end(watch, response, None)
    return response


async def watched_stream(
    observer: CallObserver,
    model: str,
    request: ModelRequest,
    stream: Callable[[CallWatch], AsyncIterator[ModelDelta | ModelResponse]],
    *,
    base_url: str | None = None,
) -> AsyncIterator[ModelDelta | ModelResponse]:
    """`stream(watch)` reported to `observer`: ended with the final response, an error, or a reader who stopped early."""
    watch = _start(observer, model, request, base_url)
    final: ModelResponse | None = None
    items = stream(watch)
    try:
        async for item in items:
            if isinstance(item, ModelResponse):
                final = item
            yield item
    except BaseException as exc:  # GeneratorExit too: the reader stopped before the end
        _end(watch, None, exc)
        raise
    finally:
        close = getattr(items, "aclose", None)
        if close is not None:  # a reader who stops early stops the model's stream too
            await close()
    _end(watch, final, None)


class ObservedModel:
    """A model whose calls are reported to the observer installed (see the module docstring); all else is the inner model's."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, name: str) -> Any:
        # what a caller reads of a model (supports_tools, constrained_decoding, base_url, ...) is the inner model's
        if name == "inner":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"observed({self.inner!r})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The inner model's call, reported."""
        observer = _observer
        if observer is None:
            return await self.inner.complete(request)
        return await watched(observer, self.name, request, lambda _: self.inner.complete(request), base_url=_base_url(self.inner))


class ObservedStreamingModel(ObservedModel):
    """An `ObservedModel` of a model that streams."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelDelta | ModelResponse]:
        """The inner model's stream, reported as one call."""
        observer = _observer
        inner = self.inner
        if observer is None:
            return stream_response(inner, request)
        return watched_stream(observer, self.name, request, lambda _: stream_response(inner, request), base_url=_base_url(inner))


def observed(model: Model) -> Model:
    """`model` wrapped so its calls are reported (a streaming model stays one); a model already reporting is returned as is."""
    if isinstance(model, ObservedModel) or getattr(model, "reports_calls", False):
        return model
    return ObservedStreamingModel(model) if isinstance(model, StreamingModel) else ObservedModel(model)


def _base_url(model: Model) -> str | None:
    url = getattr(model, "base_url", None)
    return url if isinstance(url, str) else None
