"""OpenTelemetry itself, loaded only once traces are switched on: its API, and the tracer provider spans go to.

Owns the lazy imports (`trace_api`, `context_api`; a missing package is a
`ConfigError` with the install hint, never a traceback) and
`tracer_provider`: the provider the application installed, when it
installed one (Logfire, its own SDK setup, ``opentelemetry-instrument``), or
for ``exporter = "none"`` the API's global proxy (which follows whatever the
application sets later); otherwise one of our own, with the console tree
(`tree.TreeExporter`, one span at a time) or the OTLP/HTTP exporter (in
batches). Ours never becomes the process's global provider, and the SDK
flushes it when the process exits. Nothing here is imported while traces
are off. Imports `errors`, `telemetry.settings` and `telemetry.tree`.
"""

from __future__ import annotations

from typing import Any

from planexec.errors import ConfigError
from planexec.telemetry.settings import TelemetrySettings
from planexec.telemetry.tree import TreeExporter

__all__ = ["INSTALL_HINT", "context_api", "trace_api", "tracer_provider"]

INSTALL_HINT = "pip install 'planexec[otel]' (opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)"


def _missing(what: str, exc: ImportError) -> ConfigError:
    return ConfigError(
        f"telemetry is switched on ([planexec.telemetry] or OTEL_*), but {what} is not installed ({exc.name}): {INSTALL_HINT}"
    )


def trace_api() -> Any:
    """The ``opentelemetry.trace`` module."""
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise _missing("the OpenTelemetry API", exc) from None
    return trace


def context_api() -> Any:
    """The ``opentelemetry.context`` module."""
    try:
        from opentelemetry import context
    except ImportError as exc:
        raise _missing("the OpenTelemetry API", exc) from None
    return context


def tracer_provider(settings: TelemetrySettings) -> tuple[Any, bool]:
    """(the provider planexec's spans go to, whether it is ours to shut down); see the module docstring."""
    trace = trace_api()
    current = trace.get_tracer_provider()
    if settings.exporter == "none" or not isinstance(current, trace.ProxyTracerProvider):
        return current, False  # the application's: it exports them where it wants
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError as exc:
        raise _missing("the OpenTelemetry SDK", exc) from None
    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
    if settings.exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(TreeExporter()))  # type: ignore[arg-type]  # an exporter by its methods
    else:
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(settings)))
    return provider, True


def _otlp_exporter(settings: TelemetrySettings) -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise _missing("the OTLP/HTTP exporter", exc) from None
    # None leaves the endpoint and headers to OTEL_EXPORTER_OTLP_* (else http://localhost:4318/v1/traces)
    return OTLPSpanExporter(endpoint=settings.endpoint, headers=settings.headers)
