"""The records that cross the worker boundary: `StepCall` in, `WorkResult` out.

Owns what the engine hands a runner (and a runner a worker), what comes back,
and the `Output`/`Provenance` pair that keeps every value with where it came
from. All are typed records with a stable JSON form, so a distributed runner
can ship them as they are. Imports `plan` and `usage` only.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .plan import Step
from .usage import Usage

__all__ = ["Output", "Provenance", "StepCall", "WorkResult"]


class Provenance(BaseModel):
    """Which run, plan version, step, attempt, worker and tool produced a value."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    plan_id: str
    plan_version: int
    step_id: str
    worker: str
    action: str
    attempt: int = 1
    tools: list[str] = Field(default_factory=list, description="tools the worker called to produce it")


class Output(BaseModel):
    """A step's output value (JSON-able) together with its provenance."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: Any = None
    provenance: Provenance


class StepCall(BaseModel):
    """One attempt at one step, as a worker receives it.

    `parameters` and `instruction` are resolved (references replaced by upstream outputs);
    `context` holds the outputs of the step's dependencies, keyed by step id.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    plan_id: str
    plan_version: int = 1
    goal: str = ""
    step: Step
    worker: str
    instruction: str = Field("", description="the step's instruction with references resolved")
    parameters: dict[str, Any] = Field(default_factory=dict)
    context: dict[str, Output] = Field(default_factory=dict)
    failed_inputs: dict[str, str] = Field(
        default_factory=dict, description="dependencies that did not succeed, with their error, for tolerant steps"
    )
    attempt: int = 1

    @property
    def step_id(self) -> str:
        """The step's id."""
        return self.step.step_id

    @property
    def action(self) -> str:
        """The tool or task the step names."""
        return self.step.action


class WorkResult(BaseModel):
    """What a worker returns: the output (JSON-able), its usage and the tools it used."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    output: Any = None
    usage: Usage = Field(default_factory=Usage)
    tools: list[str] = Field(default_factory=list)
