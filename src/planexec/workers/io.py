"""The records that cross the worker boundary: `StepCall` in, `WorkResult` out.

Owns what the engine hands a runner (and a runner a worker), what comes back,
and the `Output`/`Provenance` pair that keeps every value with where it came
from. All are `Record`s (frozen dataclasses with a stable JSON form), so a
distributed runner can ship them as they are. Imports `plan`, `records`, `usage` and `workers.outputs`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from planexec.plan.model import Step
from planexec.records import Record, quick_init
from planexec.usage import Usage
from planexec.workers.outputs import DEFAULT_MAX_OUTPUT_BYTES, encode

__all__ = ["Output", "Provenance", "Source", "StepCall", "WorkResult", "merge_sources"]

SourceKind = Literal["user", "plan", "tool", "model", "person"]


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Source(Record):
    """One origin of a value: the user's goal, a plan literal, a tool's output (which step, which tool), a model, a person.

    `untrusted` marks text from outside (a file, a page, a message, an MCP
    result): it may carry instructions, so it is data, never a command.
    """

    kind: SourceKind
    step_id: str | None = None
    tool: str | None = None
    untrusted: bool = False

    def label(self) -> str:
        """``read_file in step 'read' (untrusted)``: the source as a person reads it."""
        if self.kind == "tool":
            text = f"{self.tool} in step {self.step_id!r}"
        elif self.kind == "model":
            text = f"the model of step {self.step_id!r}"
        else:
            text = {"user": "the user's goal", "plan": "the reviewed plan", "person": "a person"}[self.kind]
        return f"{text} (untrusted)" if self.untrusted else text


def merge_sources(*groups: Iterable[Source]) -> list[Source]:
    """The union of sources, each once, in first-seen order: a derived value keeps every origin."""
    return list(dict.fromkeys(s for group in groups for s in group))


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Provenance(Record):
    """Which run, plan version, step, attempt, worker and tool produced a value, and every source it derives from."""

    run_id: str
    plan_id: str
    plan_version: int
    step_id: str
    worker: str
    action: str
    attempt: int = 1
    tools: list[str] = field(default_factory=list)  # tools that ran to produce it (never a refused call)
    sources: list[Source] = field(default_factory=list)  # the union of its origins; empty: the plan alone

    @property
    def untrusted(self) -> bool:
        """True when any source is untrusted text."""
        return any(s.untrusted for s in self.sources)


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Output(Record):
    """A step's output value (JSON-able) together with its provenance."""

    value: Any = None
    provenance: Provenance

    @property
    def untrusted(self) -> bool:
        """True when the value derives from untrusted text."""
        return self.provenance.untrusted


@quick_init
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


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class WorkResult(Record):
    """What a worker returns: the output (JSON-able), its usage, the tools that ran and what the output derives from.

    `sources` are the origins the worker added (each tool whose output it
    read); the engine adds the sources of the step's referenced inputs.
    `refused` lists the calls the gate refused (tool, rule, reason), which
    never count as used.
    """

    output: Any = None
    usage: Usage = field(default_factory=Usage)
    tools: list[str] = field(default_factory=list)
    subrun: Any = None  # a sub-team's `RunResult`, kept in the step's record (the run tree)
    sources: list[Source] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self, worker: str, *, step_id: str | None = None, max_bytes: int | None = DEFAULT_MAX_OUTPUT_BYTES) -> WorkResult:
        """This result with its output as JSON data of at most `max_bytes` (see `planexec.workers.outputs`).

        `ToolOutputError` naming the step, the tool (or `worker`), the place
        in the value and its type or size when it cannot be stored. The engine
        does the same off its event loop, bounded by the step's timeout.
        """
        tool, label = self.origin(worker)
        return self.with_output(encode(self.output, step_id=step_id, tool=tool, label=label, max_bytes=max_bytes))

    def origin(self, worker: str) -> tuple[str, str]:
        """(the tool or worker answerable for the output, how a message names it): the last tool that ran, else `worker`."""
        if self.tools:
            return self.tools[-1], f"tool {self.tools[-1]!r}"
        return worker, f"worker {worker!r}"

    def with_output(self, value: Any) -> WorkResult:
        """This result with `value` as its output (itself when `value` is its output already)."""
        return self if value is self.output else dataclasses.replace(self, output=value)
