"""Switching traces on and off for the process.

Owns `Telemetry` (what is on: the tracer, the settings, the open spans) and
the switch: `configure` (what a `Team` and every command call with
``[planexec.telemetry]``: on when it or the ``OTEL_*`` variables ask, else
nothing happens and OpenTelemetry is not even imported; the first
configuration of a process wins), `enable` (on now, with settings or a
tracer provider of the caller's, as a test's in-memory exporter), `disable`
and `active`. While on, every model call is reported to its `ModelSpans`
(`models.observe`): a model named ``"provider:model"`` reports its own, a
model given as an object does once `traced` (a `Team` does that). At exit the spans still open end and our own provider
is flushed. Imports `config`, `models.observe`, `telemetry` (`settings`,
`otel`, `kit`, `calls`).
"""

from __future__ import annotations

import atexit
import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from planexec.config import TelemetryConfig
from planexec.models.base import Model
from planexec.models.observe import observed, watch_model_calls
from planexec.telemetry.calls import ModelSpans
from planexec.telemetry.kit import Kit
from planexec.telemetry.otel import context_api, trace_api, tracer_provider
from planexec.telemetry.settings import TelemetrySettings, resolve_settings

__all__ = ["Telemetry", "active", "configure", "disable", "enable", "traced"]

TRACER = "planexec"
MAX_PENDING = 64  # run spans opened by planning that no run took yet (a goal planned and never run)


class Telemetry:
    """Traces switched on: the settings, the tracer provider, and the span builders' `kit`.

    `owned` says the provider is ours (built from the settings) and is shut
    down with us; an application's own provider is only flushed.
    `pending` holds the run spans a `Team` opened while routing or planning
    a goal, until the run of that goal takes one (`scopes`).
    """

    def __init__(self, settings: TelemetrySettings, provider: Any, *, owned: bool) -> None:
        self.settings = settings
        self.provider = provider
        self.owned = owned
        self.kit = Kit(trace=trace_api(), context=context_api(), tracer=provider.get_tracer(TRACER), capture=settings.capture_content)
        self.calls = ModelSpans(self.kit)
        self.pending: dict[tuple[int, str], Any] = {}

    def __repr__(self) -> str:
        return f"Telemetry(exporter={self.settings.exporter!r}, capture_content={self.settings.capture_content}, owned={self.owned})"

    def close(self) -> None:
        """End the spans still pending, then flush (and shut down, when ours) the provider."""
        pending, self.pending = list(self.pending.values()), {}
        for span in pending:
            span.set_attribute("planexec.run.started", False)
            span.end()
        if self.owned:
            self.provider.shutdown()
        else:
            flush = getattr(self.provider, "force_flush", None)
            if flush is not None:
                flush()


_active: Telemetry | None = None
_exit_hook = False


def active() -> Telemetry | None:
    """The telemetry switched on in this process, or None."""
    return _active


def enable(settings: TelemetrySettings | None = None, *, provider: Any = None, capture_content: bool | None = None) -> Telemetry:
    """Switch traces on now (replacing any on before): spans go to `provider`, else where `settings` say.

    `ConfigError` (with the install hint) when OpenTelemetry is missing.
    """
    global _active, _exit_hook
    settings = settings if settings is not None else TelemetrySettings()
    if capture_content is not None:
        settings = dataclasses.replace(settings, capture_content=capture_content)
    owned = False
    if provider is None:
        provider, owned = tracer_provider(settings)
    telemetry = Telemetry(settings, provider, owned=owned)
    disable()
    _active = telemetry
    watch_model_calls(telemetry.calls)
    if not _exit_hook:  # registered after the SDK's own hook, so it runs before it: our spans end, then it flushes
        atexit.register(disable)
        _exit_hook = True
    return telemetry


def configure(config: TelemetryConfig | None = None, env: Mapping[str, str] | None = None) -> Telemetry | None:
    """Traces on when ``[planexec.telemetry]`` or the ``OTEL_*`` variables ask (the first configuration wins); None when off."""
    if _active is not None:
        return _active
    settings = resolve_settings(config, os.environ if env is None else env)
    if settings is None:
        return None
    return enable(settings)


def disable() -> None:
    """Switch traces off: model calls are no longer watched, open spans end, our provider is flushed and shut down."""
    global _active
    telemetry, _active = _active, None
    if telemetry is None:
        return
    watch_model_calls(None)
    telemetry.close()


def traced(model: Model) -> Model:
    """`model` with its calls traced while telemetry is on: a model given as an object (a model named ``"provider:model"`` is already)."""
    return observed(model)
