"""Whether traces are on, and where they go: ``[planexec.telemetry]`` read together with the standard ``OTEL_*`` variables.

Owns `TelemetrySettings` and `resolve_settings`. Nothing is on by default:
traces are on when ``[planexec.telemetry]`` names an exporter (or says
``enabled = true``), or when the environment asks for them the standard way
(``OTEL_TRACES_EXPORTER=otlp|console``, or an ``OTEL_EXPORTER_OTLP_ENDPOINT``
/ ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``). ``OTEL_SDK_DISABLED=true`` and
``enabled = false`` turn them off whatever else says so; an
``OTEL_TRACES_EXPORTER`` we do not export to (``zipkin``) leaves them off. The file wins over
the environment for each setting it gives. Prompts and outputs are left out
unless ``capture_content = true`` (or
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``). The values of
OTLP headers are secrets (`secrets`): registered, so nothing prints them.
Reads the environment only; imports `config`, `errors` and `secrets`, and
no OpenTelemetry module.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote

from planexec.config import TelemetryConfig
from planexec.errors import ConfigError
from planexec.secrets import register_secret

__all__ = ["EXPORTERS", "Exporter", "TelemetrySettings", "resolve_settings"]

Exporter = Literal["console", "otlp", "none"]
EXPORTERS: tuple[Exporter, ...] = ("console", "otlp", "none")

log = logging.getLogger("planexec.telemetry")
TRACES_PATH = "/v1/traces"
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class TelemetrySettings:
    """Traces on, with this exporter: where spans go, what they may hold, the service they come from.

    `endpoint` is the OTLP/HTTP traces URL (``.../v1/traces``) or None for
    the exporter's own default (``OTEL_EXPORTER_OTLP_*``, else
    ``http://localhost:4318``); `headers` None leaves them to
    ``OTEL_EXPORTER_OTLP_HEADERS``.
    """

    exporter: Exporter = "none"
    endpoint: str | None = None
    headers: dict[str, str] | None = field(default=None, repr=False)  # secrets: never shown
    capture_content: bool = False
    service_name: str = "planexec"


def resolve_settings(config: TelemetryConfig | None = None, env: Mapping[str, str] | None = None) -> TelemetrySettings | None:
    """The settings of the traces `config` and `env` ask for, or None when traces are off; `ConfigError` names a bad value."""
    config = config if config is not None else TelemetryConfig()
    env = env if env is not None else {}
    if _true(env.get("OTEL_SDK_DISABLED")) or config.enabled is False:
        return None
    exporter = config.exporter or _env_exporter(env)
    if exporter is None or (exporter == "none" and config.exporter is None):
        if not config.enabled:  # nothing asked for traces (OTEL_TRACES_EXPORTER=none says so too)
            return None
        exporter = "none"  # enabled = true alone: the application's tracer provider
    endpoint = _traces_url(config.endpoint) if config.endpoint else None
    return TelemetrySettings(
        exporter=exporter,
        endpoint=endpoint,
        headers=_headers(config.headers_env, env) if config.headers_env else None,
        capture_content=config.capture_content or _true(env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")),
        service_name=config.service_name or env.get("OTEL_SERVICE_NAME") or "planexec",
    )


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in _TRUE


def _env_exporter(env: Mapping[str, str]) -> Exporter | None:
    named = (env.get("OTEL_TRACES_EXPORTER") or "").split(",")[0].strip().lower()
    if named:
        if named not in EXPORTERS:  # set for another program's exporter (zipkin, ...): not ours to follow
            log.warning("OTEL_TRACES_EXPORTER=%s: planexec exports traces to %s only; its traces stay off", named, ", ".join(EXPORTERS))
            return None
        return named  # one of EXPORTERS, as checked just above
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return "otlp"
    return None


def _traces_url(endpoint: str) -> str:
    """A collector's base URL (``http://host:4318``) gets the traces path; a URL that has it already is kept."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith(TRACES_PATH) else endpoint + TRACES_PATH


def _headers(name: str, env: Mapping[str, str]) -> dict[str, str]:
    """``key=value,key2=value2`` (values URL-encoded, as in ``OTEL_EXPORTER_OTLP_HEADERS``) from the variable `name`."""
    text = env.get(name)
    if text is None:
        raise ConfigError(f"[planexec.telemetry] headers_env names {name!r}, which is not set")
    headers: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{name}: a header is written key=value, separated by commas; got {item.split('=')[0]!r}…")
        key = unquote(key.strip()).lower()
        headers[key] = unquote(value.strip())
        register_secret(headers[key], f"{name}:{key}")
    return headers
