"""What a model can do: its `ModelProfile`, set by its provider and overridable per model in planexec.toml.

Owns `ModelProfile` (tool calling, structured output, grammar decoding, the
context window, prompt caching, whether it writes compact plans well, its
size class and price), `profile_of` (the one place a model's profile is
read: a model without one is a capable model that writes JSON plans) and
`ProfileTable` (``[planexec.model_profiles]``: a model name or ``prefix*``
-> the fields it overrides; the longest match wins). The planner, its
bounds, the default plan format, the grants prompt and the role workers'
tool calling read the profile; nothing guesses from a model's class, its
name or whether it has a ``base_url``: a 70B model behind vLLM, Ollama or
any OpenAI-compatible gateway is a capable model unless its profile says
``size = "small"``. Imports `errors` and `pricing`.

    [planexec.model_profiles."openai:smollm2"]   # a 135M model behind llama.cpp's server
    size = "small"                               # the short prompt and bounds of the embedded model
    compact_plans = false                        # it writes JSON plans better
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planexec.errors import ConfigError
from planexec.models.pricing import Price

__all__ = ["CAPABLE", "EMBEDDED", "ModelProfile", "ProfileTable", "profile_of"]


class ModelProfile(BaseModel):
    """What a model can do, as the planner and the workers need to know it.

    `size` ``"small"`` gets the short planning prompt (no capability grants,
    no named answer step, the nearest example last) and the short bounds of
    a small model (`team.assembly.bounds_for`); ``"capable"`` the full
    prompt. `grammar`: the model decodes under a GBNF grammar (the positional
    plan schema and a compact plan's grammar are sent). `compact_plans`: it
    writes the compact plan form well, which is then its default.
    `tool_calling`: role workers use native tool calls (else JSON replies
    under the output schema). `price` is filled from the price table
    (``[planexec.prices]``) when the model is resolved by name.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: Literal["small", "capable"] = "capable"
    tool_calling: bool = Field(True, description="calls tools natively")
    structured_output: bool = Field(True, description="answers under a JSON Schema")
    grammar: bool = Field(False, description="decodes under a GBNF grammar, so every schema keyword is enforced")
    compact_plans: bool = Field(False, description="writes the compact plan form (one line a step) well: its default format")
    prompt_caching: bool = Field(False, description="its provider caches a repeated prompt prefix")
    context_window: int | None = Field(None, gt=0, description="tokens it reads at most (None: not known)")
    price: Price | None = Field(None, description="US dollars per million tokens (None: not known)")

    @property
    def small(self) -> bool:
        """True for a small model (short prompt, short plans)."""
        return self.size == "small"

    @property
    def plan_format(self) -> Literal["json", "compact"]:
        """The plan form this model writes by default."""
        return "compact" if self.compact_plans else "json"

    def describe(self) -> str:
        """One line for people: ``capable, tool calls, structured output, compact plans, prompt caching``."""
        flags = [
            ("tool calls", self.tool_calling),
            ("structured output", self.structured_output),
            ("grammar decoding", self.grammar),
            ("compact plans", self.compact_plans),
            ("prompt caching", self.prompt_caching),
        ]
        parts = [self.size, *(name for name, on in flags if on)]
        if self.context_window:
            parts.append(f"{self.context_window:,}-token context")
        return ", ".join(parts)


CAPABLE = ModelProfile()
"""A model that says nothing about itself: capable, native tool calls, structured output, JSON plans."""

EMBEDDED = ModelProfile(size="small", tool_calling=False, grammar=True, compact_plans=False)
"""The embedded SmolLM2-135M: small, no native tool calls, every reply decoded under a grammar, JSON plans."""


def profile_of(model: object) -> ModelProfile:
    """A model's profile: its ``profile`` attribute, else `CAPABLE`."""
    profile = getattr(model, "profile", None)
    return profile if isinstance(profile, ModelProfile) else CAPABLE


class ProfileTable:
    """Profile overrides by model name; ``"openai:llama*"`` matches every name starting with ``openai:llama``."""

    def __init__(self, overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.exact: dict[str, dict[str, Any]] = {}
        self.prefixes: list[tuple[str, dict[str, Any]]] = []
        for key, fields in (overrides or {}).items():
            if "price" in fields:
                raise ConfigError(f"model_profiles.{key!r} in planexec.toml: a price is set in [planexec.prices], not in a profile")
            try:
                ModelProfile.model_validate(fields)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())
                raise ConfigError(f"model_profiles.{key!r} in planexec.toml: {problems}") from None
            if key.endswith("*"):
                self.prefixes.append((key[:-1], dict(fields)))
            else:
                self.exact[key] = dict(fields)
        self.prefixes.sort(key=lambda item: len(item[0]), reverse=True)

    def overrides(self, model: str) -> dict[str, Any]:
        """The fields planexec.toml sets for a model name (exact name first, then the longest prefix), or none."""
        if model in self.exact:
            return self.exact[model]
        return next((fields for prefix, fields in self.prefixes if model.startswith(prefix)), {})

    def apply(self, model: str, profile: ModelProfile) -> ModelProfile:
        """`profile` with what planexec.toml says of `model` laid over it."""
        fields = self.overrides(model)
        return ModelProfile.model_validate({**profile.model_dump(), **fields}) if fields else profile
