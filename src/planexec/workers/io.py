"""The records that cross the worker boundary: `StepCall` in, `WorkResult` out.

Owns what the engine hands a runner (and a runner a worker), what comes back,
and the `Output`/`Provenance` pair that keeps every value with where it came
from. All are `Record`s (frozen dataclasses with a stable JSON form), so a
distributed runner can ship them as they are. Imports `errors`, `plan`, `records`, `usage`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic_core import PydanticSerializationError, to_jsonable_python

from planexec.errors import ToolOutputError
from planexec.plan.model import Step
from planexec.records import Record
from planexec.usage import Usage

__all__ = ["Output", "Provenance", "StepCall", "WorkResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Provenance(Record):
    """Which run, plan version, step, attempt, worker and tool produced a value."""

    run_id: str
    plan_id: str
    plan_version: int
    step_id: str
    worker: str
    action: str
    attempt: int = 1
    tools: list[str] = field(default_factory=list)  # tools the worker called to produce it


@dataclass(frozen=True, slots=True, kw_only=True)
class Output(Record):
    """A step's output value (JSON-able) together with its provenance."""

    value: Any = None
    provenance: Provenance


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCall(Record):
    """One attempt at one step, as a worker receives it.

    `parameters` and `instruction` are resolved (references replaced by
    upstream outputs); `context` holds the outputs of the step's dependencies,
    keyed by step id; `failed_inputs` names dependencies that did not succeed
    (with their error), for steps that accept failed inputs.
    """

    run_id: str
    plan_id: str
    plan_version: int = 1
    goal: str = ""
    step: Step
    worker: str
    instruction: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Output] = field(default_factory=dict)
    failed_inputs: dict[str, str] = field(default_factory=dict)
    attempt: int = 1

    @property
    def step_id(self) -> str:
        """The step's id."""
        return self.step.step_id

    @property
    def action(self) -> str:
        """The tool or task the step names."""
        return self.step.action


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkResult(Record):
    """What a worker returns: the output (JSON-able), its usage and the tools it used."""

    output: Any = None
    usage: Usage = field(default_factory=Usage)
    tools: list[str] = field(default_factory=list)
    subrun: Any = None  # a sub-team's `RunResult`, kept in the step's record (the run tree)

    def as_json(self, worker: str) -> WorkResult:
        """This result with its output as JSON data; `ToolOutputError` (naming `worker`) when it cannot be stored."""
        if type(self.output) in _SCALARS:
            return self
        try:
            value = to_jsonable_python(self.output)
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            raise ToolOutputError(
                f"worker {worker!r} returned a {type(self.output).__name__} output that cannot be stored as JSON: {exc}",
                tool=self.tools[-1] if self.tools else worker,
            ) from None
        return self if value == self.output else WorkResult(output=value, usage=self.usage, tools=self.tools, subrun=self.subrun)


_SCALARS = frozenset({type(None), bool, int, float, str})
