"""Which model does what: the planner's, the workers' and each role's, and why.

Owns `ModelChoice` (a model name and the reason it was chosen) and
`ModelSettings`, which reads `Config` and the environment and hands out
resolved models (one instance per name). Precedence, strongest first: an
explicit argument (the CLI's ``--model``), the environment
(``PLANEXEC_PLANNER_MODEL``, ``PLANEXEC_WORKER_MODEL``,
``PLANEXEC_MODEL_<ROLE>``, which may list a cascade: ``a,b``),
``planexec.toml`` (a role may take a list, its cascade), then the defaults: with
``OPENAI_API_KEY`` set, ``openai:gpt-4o-mini``; with nothing, the embedded
``local:smollm2``. Workers use the planner's model unless told otherwise.
Every api key it resolves is registered as a secret (`secrets`), so no
event, log line or printout shows it. The profile ``[planexec.model_profiles]`` gives a model name is laid over
its provider's (`models.profile`). Imports `config`, `errors`, `pricing`,
`secrets`, `models.profile` and `models.providers`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from planexec.config import Config
from planexec.models.managed import ManagedModel
from planexec.models.pricing import PriceTable
from planexec.models.profile import ProfileTable
from planexec.models.providers import ProviderOptions, parse_model_name, resolve_model
from planexec.secrets import register_secret

__all__ = ["DEFAULT_MODEL", "OPENAI_DEFAULT_MODEL", "ModelChoice", "ModelSettings"]

DEFAULT_MODEL = "local:smollm2"
OPENAI_DEFAULT_MODEL = "openai:gpt-4o-mini"


@dataclass(frozen=True)
class ModelChoice:
    """A model name and why it was chosen (shown to the user); a role's `cascade` lists the models its steps try in
    order (`name` is the first), empty for a single model."""

    name: str
    reason: str
    cascade: tuple[str, ...] = ()

    def describe(self) -> str:
        """``openai:a`` or ``openai:a → openai:b (a cascade)``."""
        return " → ".join(self.cascade) + " (a cascade)" if len(self.cascade) > 1 else self.name


class ModelSettings:
    """The models a run uses, resolved from configuration and environment."""

    def __init__(
        self,
        config: Config | None = None,
        env: Mapping[str, str] | None = None,
        *,
        planner: str | None = None,
        worker: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        seed: int | None = None,
    ) -> None:
        self.config = config if config is not None else Config()
        self.env = dict(os.environ if env is None else env)
        self.base_url = base_url
        self.api_key = api_key
        register_secret(api_key, "api_key")
        self.seed = seed
        self.prices = PriceTable.default(self.config.prices)
        self.profiles = ProfileTable(self.config.model_profiles)
        picked = self._pick(planner, "--model", "PLANEXEC_PLANNER_MODEL", self.config.planner_model, "planner_model")
        if picked is None:
            if base_url:
                picked = ModelChoice("openai:default", f"--base-url {base_url} was given")
            elif self.env.get("OPENAI_API_KEY"):
                picked = ModelChoice(OPENAI_DEFAULT_MODEL, "OPENAI_API_KEY is set and no model is configured")
            else:
                picked = ModelChoice(DEFAULT_MODEL, "nothing configured: the embedded model")
        self.planner: ModelChoice = picked
        self.worker = self._pick(
            worker, "--worker-model", "PLANEXEC_WORKER_MODEL", self.config.worker_model, "worker_model"
        ) or ModelChoice(self.planner.name, "same as the planner")
        for choice in (self.planner, self.worker, *self._role_choices().values()):
            for name in choice.cascade or (choice.name,):
                parse_model_name(name)  # a bad name fails now, naming itself, not at the first call
        self._models: dict[str, ManagedModel] = {}

    def _pick(self, given: str | None, flag: str, env_key: str, configured: str | None, key: str) -> ModelChoice | None:
        if given:
            return ModelChoice(given, f"{flag} {given}")
        if self.env.get(env_key):
            return ModelChoice(self.env[env_key], f"{env_key} is set")
        if configured:
            return ModelChoice(configured, f"{key} in planexec.toml")
        return None

    def _role_choices(self) -> dict[str, ModelChoice]:
        out = {role: _choice(names, f"role_models.{role} in planexec.toml") for role, names in self.config.role_models.items()}
        prefix = "PLANEXEC_MODEL_"
        for key, name in self.env.items():
            names = [n.strip() for n in name.split(",") if n.strip()]
            if key.startswith(prefix) and names:
                role = key[len(prefix) :].lower()
                out[role] = _choice(names if len(names) > 1 else names[0], f"{key} is set")
        return out

    def for_role(self, role: str) -> ModelChoice:
        """The model of one role: its own setting, else the workers' model."""
        return self._role_choices().get(role, self.worker)

    def cascades(self) -> dict[str, tuple[str, ...]]:
        """The roles configured with a cascade (a list of models): role -> its models, in order."""
        return {role: c.cascade for role, c in self._role_choices().items() if c.cascade}

    def options(self, provider: str) -> ProviderOptions:
        """How to reach a provider: the CLI's URL and key, then planexec.toml, then the SDK's environment."""
        configured = self.config.providers.get(provider)
        base_url = self.base_url if provider == "openai" and self.base_url else (configured.base_url if configured else None)
        api_key = self.api_key if provider == "openai" and self.api_key else None
        if api_key is None and configured and configured.api_key_env:
            api_key = self.env.get(configured.api_key_env)
            register_secret(api_key, configured.api_key_env)
        return ProviderOptions(base_url=base_url, api_key=api_key, timeout=configured.timeout if configured else None)

    def model(self, name: str) -> ManagedModel:
        """The resolved model for a name, one instance per name."""
        if name not in self._models:
            provider, _ = parse_model_name(name)
            self._models[name] = resolve_model(
                name,
                self.options(provider),
                retries=self.config.model_retries if self.config.model_retries is not None else 2,
                timeout=self.config.model_timeout or 300.0,
                prices=self.prices,
                profiles=self.profiles,
                seed=self.seed,
            )
        return self._models[name]

    def describe(self) -> list[str]:
        """One line per choice, for the CLI: ``planner: local:smollm2 (nothing configured: ...)``."""
        lines = [f"planner: {self.planner.name} ({self.planner.reason})", f"workers: {self.worker.name} ({self.worker.reason})"]
        lines += [f"role {role}: {c.describe()} ({c.reason})" for role, c in sorted(self._role_choices().items())]
        return lines


def _choice(names: str | list[str], reason: str) -> ModelChoice:
    """A role's choice: one model, or a cascade (its first model is the role's model)."""
    if isinstance(names, str):
        return ModelChoice(names, reason)
    return ModelChoice(names[0], reason, cascade=tuple(names))
