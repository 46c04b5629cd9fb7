"""The records that cross the worker boundary: `StepCall` in, `WorkResult` out.

Owns what the engine hands a runner (and a runner a worker), what comes back,
and the `Output`/`Provenance` pair that keeps every value with where it came
from. A provenance is a summary of constant size, whatever the plan: the
origins its own step added, the ids of its direct inputs, and the untrusted
origins it derives from (at most `UNTRUSTED_KEPT`, nearest first, with a
mark when more were left out); `derive_untrusted` makes it. The whole chain
is found on demand by following the inputs through the run's outputs
(`lineage`). All are `Record`s (frozen dataclasses with a stable JSON form),
so a distributed runner can ship them as they are. Imports `plan`,
`records`, `usage` and `workers.outputs`.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from planexec.plan.model import Step
from planexec.records import OMIT_EMPTY, Record, quick_init
from planexec.usage import Usage
from planexec.workers.outputs import DEFAULT_MAX_OUTPUT_BYTES, encode

__all__ = ["UNTRUSTED_KEPT", "Output", "Provenance", "Source", "StepCall", "WorkResult", "derive_untrusted", "lineage", "merge_sources"]

SourceKind = Literal["user", "plan", "tool", "model", "person"]
UNTRUSTED_KEPT = 8  # untrusted origins a provenance names; more are marked, and found by `lineage`


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

    @property
    def key(self) -> str:
        """``read_file@read``: the origin in a few bytes, as a provenance summary names it (``(model)@s1`` for another kind)."""
        return f"{self.tool if self.kind == 'tool' else f'({self.kind})'}@{self.step_id or ''}"

    @classmethod
    def from_key(cls, key: str, *, untrusted: bool = True) -> Source:
        """The origin a `key` names (a step id never holds ``@``)."""
        name, _, step_id = key.rpartition("@")
        if name.startswith("(") and name.endswith(")") and name[1:-1] in ("user", "plan", "model", "person"):
            return cls(kind=name[1:-1], step_id=step_id or None, untrusted=untrusted)  # type: ignore[arg-type]
        return cls(kind="tool", step_id=step_id or None, tool=name, untrusted=untrusted)


def merge_sources(*groups: Iterable[Source]) -> list[Source]:
    """The union of sources, each once, in first-seen order."""
    return list(dict.fromkeys(s for group in groups for s in group))


def derive_untrusted(own: Iterable[Source], inputs: Iterable[Output]) -> tuple[list[str], bool]:
    """The untrusted origins (`Source.key`) of a value made from `inputs` by a step that added `own`, and whether more were left out.

    At most `UNTRUSTED_KEPT`: its own first (they name this step, so no
    input names them), then each input's in order, each once. Constant work
    a step whatever the plan: an input brings at most `UNTRUSTED_KEPT`, and
    once the list is full one is read only to learn whether it brings more.
    """
    kept: list[str] = []
    more = False
    for out in inputs:
        prov = out.provenance
        if not prov.untrusted:
            continue
        named = prov.untrusted_from or prov.untrusted_keys()
        more = more or prov.more_untrusted
        room = UNTRUSTED_KEPT - len(kept)
        if not kept:  # the first untrusted input: its origins are distinct already
            kept = named[:room]
            more = more or len(named) > room
        elif room <= 0:
            if not more:
                more = any(key not in kept for key in named)
        else:
            for key in named:
                if key in kept:
                    continue
                if len(kept) >= UNTRUSTED_KEPT:
                    more = True
                    break
                kept.append(key)
    mine = [s.key for s in own if s.untrusted] if own else None
    if mine:
        room = max(UNTRUSTED_KEPT - len(mine), 0)
        more = more or len(kept) > room or len(mine) > UNTRUSTED_KEPT
        kept = mine[:UNTRUSTED_KEPT] + kept[:room]
    return kept, more


def lineage(
    outputs: Iterable[Output], output_of: Callable[[str], Output | None], *, untrusted_only: bool = False, limit: int | None = None
) -> list[Source]:
    """Every origin `outputs` derive from: each one's own step's, then its inputs', breadth first, each once.

    `output_of` finds a step's output by id in the run (the run state, or a
    stored run's records); an input no longer there (replaced by a replan)
    is passed over, the untrusted origins its dependent named kept. With
    `untrusted_only`, only untrusted origins, and only untrusted inputs
    are followed (a trusted value has no untrusted ancestor). Work in
    proportion to the ancestry, done only when asked (a denial's
    explanation, ``planexec show``, the console). With a `limit`, the walk
    stops once it has found more than `limit` origins (the nearest first):
    the list then holds ``limit + 1``, which says that more exist.
    """
    found: dict[Source, None] = {}
    queue = deque(out.provenance for out in outputs)
    seen = {prov.step_id for prov in queue}
    while queue:
        if limit is not None and len(found) > limit:
            break
        prov = queue.popleft()
        if untrusted_only and not prov.untrusted:
            continue
        for source in prov.sources:
            if not untrusted_only or source.untrusted:
                found.setdefault(source)
        lost = False
        for step_id in prov.inputs:
            if step_id in seen:
                continue
            seen.add(step_id)
            upstream = output_of(step_id)
            if upstream is None:
                lost = True
            else:
                queue.append(upstream.provenance)
        if lost:
            for key in prov.untrusted_from:  # what this summary named and the walk cannot reach
                found.setdefault(Source.from_key(key))
    return list(found) if limit is None else list(found)[: limit + 1]


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class Provenance(Record):
    """Which run, plan version, step, attempt, worker and tool produced a value, and what it derives from.

    Its size does not grow with the plan: `sources` are the origins its own
    step added (the tools whose output it read), `inputs` the steps whose
    outputs it took (its references), and `untrusted_from` the untrusted
    origins it derives from, here or upstream (`Source.key`), nearest
    first and at most `UNTRUSTED_KEPT`; `more_untrusted` says more were left
    out. Whether it is untrusted is decided from that summary; `lineage`
    follows `inputs` for the whole chain. The three summary fields are
    written only when set. A provenance recorded before the summary (store
    schema 5) held every ancestor's sources in `sources`, and is read as it was.
    """

    run_id: str
    plan_id: str
    plan_version: int
    step_id: str
    worker: str
    action: str
    attempt: int = 1
    tools: list[str] = field(default_factory=list)  # tools that ran to produce it (never a refused call)
    sources: list[Source] = field(default_factory=list)  # what its own step added; empty: the plan and its inputs alone
    inputs: Annotated[list[str], OMIT_EMPTY] = field(default_factory=list)  # steps whose outputs it took
    untrusted_from: Annotated[list[str], OMIT_EMPTY] = field(default_factory=list)  # untrusted origins' keys
    more_untrusted: Annotated[bool, OMIT_EMPTY] = False  # more than `UNTRUSTED_KEPT`: `lineage` finds them all

    @property
    def untrusted(self) -> bool:
        """True when it derives from untrusted text, here or upstream."""
        return bool(self.untrusted_from) or any(s.untrusted for s in self.sources)

    def untrusted_keys(self) -> list[str]:
        """The untrusted origins it names, as keys (a store of schema 5 kept them among `sources`)."""
        return self.untrusted_from or [s.key for s in self.sources if s.untrusted]

    def untrusted_labels(self) -> list[str]:
        """The untrusted origins it names, as a person reads them (`Source.label`): every one unless `more_untrusted`."""
        return [Source.from_key(key).label() for key in self.untrusted_keys()]

    def untrusted_origins(self) -> list[Source]:
        """The untrusted origins it names."""
        return [Source.from_key(key) for key in self.untrusted_keys()]


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
    (with their error), for steps that accept failed inputs; `model` names
    the model the attempt runs on when the step's cascade or a model router
    chose one (the runner hands the call to the worker on that model).
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
    model: Annotated[str | None, OMIT_EMPTY] = None  # the model this attempt runs on (a cascade's); None: the worker's own

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
    read), never its inputs': the engine keeps those as the step's `inputs`
    and the untrusted ones they name (see `Provenance`).
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
