"""The plan: `Plan`, `Step`, failure actions, success criteria and references.

Owns the typed plan and its stable JSON form (a step may name the models its
worker tries, in order, and how hard it is), the JSON Schema export, the
content hash, and references from a step's parameters to earlier outputs
(``${step_id}`` or ``${step_id.items.0.name}``, whole or inside a string).
Structural checks that need no registry live in `validation`. Imports only
`errors`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    computed_field,
    field_validator,
    model_validator,
)

from planexec.errors import PlanParseError, Problem
from planexec.plan.capabilities import Grant
from planexec.plan.references import find_references
from planexec.plan.windows import Window, WindowError, parse_windows

__all__ = [
    "Criterion",
    "FailureAction",
    "JsonSchemaCriterion",
    "NotEmptyCriterion",
    "Plan",
    "PredicateCriterion",
    "RegexCriterion",
    "RollbackPlan",
    "Step",
]

STEP_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$"

RiskLevel = Literal["low", "medium", "high", "critical"]
Difficulty = Literal["easy", "hard"]
# the shape of a model name, 'provider:model' (whether the provider exists is the registry's to say, at validation)
_MODEL_NAME = re.compile(r"^[a-z][a-z0-9_-]*:\S.*$")
FailureKind = Literal["abort", "retry", "skip", "fallback", "replan"]


_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)  # a `not_before` lies between these: it can be read in UTC and in any zone,
_LATEST = datetime(9999, 1, 1, tzinfo=UTC)  # and a window can be searched for weeks after it
_CACHED = ("content_hash", "references", "dependencies", "parsed_windows")

# one set object per distinct set of given field names (see `_Record._share_fields_set`)
_FIELD_SETS: dict[frozenset[str], set[str]] = {}


class _derived(cached_property[Any]):
    """functools' `cached_property` without its lock (Python 3.11 takes an RLock on every first read, 1 µs a
    step for each of a step's references and dependencies): two threads reading it first compute the same value."""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__[self.attrname] = self.func(instance)
        return value


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, ignored_types=(_derived,))

    @model_validator(mode="after")
    def _share_fields_set(self) -> Any:
        # pydantic gives every instance its own set of the field names it was given: 728 bytes for a step
        # with five, more than the step's own fields (73 MB of a 100,000-step plan). A frozen record never
        # changes it (copies get their own), so records given the same names share one set.
        given = self.__pydantic_fields_set__
        shared = _FIELD_SETS.setdefault(frozenset(given), given)
        if shared is not given:
            object.__setattr__(self, "__pydantic_fields_set__", shared)
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Any:
        """A copy with `update` applied; derived values (hash, dependencies) are recomputed, never copied."""
        copy = super().model_copy(update=update, deep=deep)
        for name in _CACHED:
            copy.__dict__.pop(name, None)
        return copy


# --- failure actions -------------------------------------------------------


class FailureAction(_Record):
    """What happens when a step fails.

    ``abort`` cancels what runs and ends the run; ``retry`` tries again up to
    `max_attempts` with exponential backoff and jitter, then applies `then`;
    ``skip`` records the failure and skips dependents that do not accept
    failed inputs; ``fallback`` re-runs the step on `worker`; ``replan`` ends
    the run with a request for a new plan. A bare string is shorthand for
    ``{"kind": ...}``.
    """

    kind: FailureKind = "abort"
    max_attempts: int = Field(3, ge=1, le=100, description="attempts in all, for kind=retry")
    backoff: float = Field(0.5, ge=0, description="seconds before the first retry")
    backoff_multiplier: float = Field(2.0, ge=1)
    backoff_max: float = Field(30.0, ge=0)
    jitter: float = Field(0.1, ge=0, le=1, description="fraction of the delay drawn at random")
    worker: str | None = Field(None, description="the worker to fall back to, for kind=fallback")
    then: Literal["abort", "skip", "fallback", "replan"] = Field("abort", description="what to do once retries are exhausted")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"kind": data}
        return data

    def retry_delay(self, attempt: int, draw: float) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based); `draw` in [0, 1)."""
        base = min(self.backoff_max, self.backoff * self.backoff_multiplier ** (attempt - 1))
        return base * (1 - self.jitter * draw)

    def next_action(self, attempt: int, *, retryable: bool, rerouted: bool) -> str:
        """What follows failed attempt `attempt`: ``retry``, ``fallback``, ``skip``, ``replan`` or ``abort``."""
        if self.kind == "retry" and attempt < self.max_attempts and retryable and not rerouted:
            return "retry"
        action = self.then if self.kind == "retry" else self.kind
        if action == "fallback" and rerouted:
            # the fallback failed too; for kind=fallback, `then` says what comes next
            action = self.then if self.kind == "fallback" and self.then != "fallback" else "abort"
        return action


# a step without its own failure action shares this one (records are frozen): one per step was 550 bytes
_DEFAULT_FAILURE_ACTION = FailureAction()


# --- success criteria ------------------------------------------------------


class NotEmptyCriterion(_Record):
    """The output is not None, not an empty string, list or mapping."""

    kind: Literal["not_empty"] = "not_empty"


class RegexCriterion(_Record):
    """The output (or the value at `path` in it), as text, matches `pattern`."""

    kind: Literal["regex"] = "regex"
    pattern: str
    path: str | None = None


class JsonSchemaCriterion(_Record):
    """The output validates against a JSON Schema."""

    kind: Literal["json_schema"] = "json_schema"
    json_schema: dict[str, Any] = Field(alias="schema")


class PredicateCriterion(_Record):
    """A named predicate function, registered like a tool, returns true."""

    kind: Literal["predicate"] = "predicate"
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class CriticCriterion(_Record):
    """A critic worker judges the output against `criteria` (the step's instruction when empty).

    The critic must check with a tool (run the code, re-read the file,
    recompute) before approving; an approval without a tool call is no
    judgement, and the check fails. Its verdict and reasons are recorded.
    """

    kind: Literal["critic"] = "critic"
    worker: str = "critic"
    criteria: str = ""


Criterion = Annotated[
    NotEmptyCriterion | RegexCriterion | JsonSchemaCriterion | PredicateCriterion | CriticCriterion,
    Field(discriminator="kind"),
]


def _criteria_shorthand(value: Any) -> Any:
    # "all_tests_pass" -> a predicate; "not_empty" -> the built-in check.
    if value is None:
        return []
    if isinstance(value, (str, dict)):
        value = [value]
    out = []
    for item in value:
        if item == "not_empty":
            out.append({"kind": "not_empty"})
        elif isinstance(item, str):
            out.append({"kind": "predicate", "name": item})
        else:
            out.append(item)
    return out


def criterion_label(criterion: Criterion) -> str:
    """A short human name for a criterion, used in errors and events."""
    if isinstance(criterion, PredicateCriterion):
        return f"predicate {criterion.name!r}"
    if isinstance(criterion, RegexCriterion):
        return f"regex {criterion.pattern!r}"
    if isinstance(criterion, CriticCriterion):
        return f"critic {criterion.worker!r}"
    return criterion.kind


# --- durations -------------------------------------------------------------

_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*$")


def _parse_duration(value: Any) -> Any:
    # Accept "15 minutes", "2h", "30 s" besides ISO 8601 and plain seconds.
    if isinstance(value, str):
        m = _DURATION.match(value.lower())
        if m and m.group(2) in _UNITS:
            return timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])
    return value


# --- steps and plans -------------------------------------------------------

_NO_REFERENCES: frozenset[str] = frozenset()  # most steps refer to nothing: one empty set for all


class StepResources(_Record):
    """What one step's task takes on a cluster runner (`planexec.scale`, Ray): over what its tool declares."""

    num_cpus: float | None = Field(None, ge=0, description="CPUs the step holds while it runs")
    num_gpus: float | None = Field(None, ge=0, description="GPUs the step holds")
    memory: int | None = Field(None, ge=0, description="bytes of memory it is scheduled with (a reservation, not a limit)")
    resources: dict[str, float] = Field(default_factory=dict, description="custom resources by name, as the nodes declare them")


class Step(_Record):
    """One unit of work: which worker performs which action with which parameters."""

    step_id: str = Field(alias="id", pattern=STEP_ID_PATTERN, max_length=64, description="unique within the plan")
    action: str = Field(description="the tool or task name the worker performs")
    worker: str = Field("tool", description="the role that performs the step; 'tool' calls the action directly")
    instruction: str = Field("", description="the narrow natural-language task; may reference outputs like parameters")
    parameters: dict[str, Any] = Field(
        default_factory=dict,
        description="arguments; a string '${step_id}' or '${step_id.path}' references an earlier output",
    )
    depends_on: list[str] = Field(default_factory=list, description="ordering only: run after these; data flows through references")
    success_criteria: list[Criterion] = Field(default_factory=list)
    failure_action: FailureAction = Field(default_factory=lambda: _DEFAULT_FAILURE_ACTION)
    timeout: float | None = Field(None, gt=0, description="seconds; the engine default when absent")
    requires_approval: bool = False
    accepts_failed_inputs: bool = Field(False, description="run even when a dependency failed or was skipped")
    resources: StepResources | None = Field(
        None,
        # absent from the plan's JSON (and its content hash) unless given: plans written before it keep their hashes
        exclude_if=lambda value: value is None,
        description="what the step takes on a cluster runner (Ray), over its tool's declared resources; ignored when run locally",
    )
    capabilities: list[Grant] | None = Field(
        None,
        description="the tools a role worker may call in this step, and within what; absent: all its tools, side effects asked per call",
    )
    output_schema: dict[str, Any] | None = Field(
        None, description="JSON Schema the worker's answer must match: a typed slot later steps can reference"
    )
    not_before: datetime | None = Field(
        None,
        exclude_if=lambda value: value is None,  # absent unless set: plans without it keep their hashes
        description="the earliest time the step may start, ISO 8601 with its zone (2026-12-05T02:00-05:00); it waits as 'scheduled'",
    )
    untrusted_from: list[str] | None = Field(
        None,
        exclude_if=lambda value: value is None,  # absent unless set: plans without it keep their hashes
        description="set by the engine on a step a replanner wrote with words copied from untrusted output (these origins): "
        "its worker starts quarantined and its literals are not trusted values",
    )
    models: list[str] | None = Field(
        None,
        exclude_if=lambda value: value is None,  # absent unless set: plans without it keep their hashes
        description="the models its worker tries in order, 'provider:model' each (a cascade): the next when an attempt fails, "
        "before the failure action; absent: the worker's own model, or its role's cascade",
    )
    difficulty: Difficulty | None = Field(
        None,
        exclude_if=lambda value: value is None,  # absent unless set: plans without it keep their hashes
        description="how hard its author judges the step: a model router may start a hard step on a stronger model",
    )

    @field_validator("success_criteria", mode="before")
    @classmethod
    def _criteria(cls, value: Any) -> Any:
        return _criteria_shorthand(value)

    @field_validator("models")
    @classmethod
    def _models(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("an empty list names no model: leave models out for the worker's own model")
        for name in value:
            if not _MODEL_NAME.match(name):
                raise ValueError(f"{name!r} is not a model name: write 'provider:model', as 'openai:gpt-4o-mini'")
        twice = sorted({name for name in value if value.count(name) > 1})
        if twice:
            raise ValueError(f"{', '.join(map(repr, twice))} named twice: a cascade tries each model once, then the next")
        return value

    @field_validator("failure_action", mode="before")
    @classmethod
    def _failure(cls, value: Any) -> Any:
        return _DEFAULT_FAILURE_ACTION if value is None else value

    @field_validator("not_before")
    @classmethod
    def _zoned(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.utcoffset() is None:
            raise ValueError(f"{value.isoformat()} has no zone: write it with one, as 2026-12-05T02:00-05:00 or ...Z")
        if value is not None and not _EARLIEST <= value < _LATEST:  # the engine searches windows weeks past it, in UTC
            raise ValueError(f"{value.isoformat()} is out of range: a step's time lies between 0001-01-02 and 9999-01-01 (UTC)")
        return value

    def on_worker(self, worker: str | None) -> Step:
        """The step as `worker` runs it (a fallback that took it over): itself when that is its own worker, or None.
        What it may do twice or undo (idempotent, side effects) is the worker's it ran on, not the plan's."""
        return self if not worker or worker == self.worker else self.model_copy(update={"worker": worker})

    @_derived
    def references(self) -> frozenset[str]:
        """Step ids this step's parameters and instruction refer to."""
        found = find_references([self.parameters, self.instruction])
        return frozenset(ref for ref, _ in found) if found else _NO_REFERENCES

    @_derived
    def dependencies(self) -> list[str]:
        """Declared dependencies plus those implied by references, in a stable order."""
        deps = list(dict.fromkeys(self.depends_on))
        if len(deps) == len(self.depends_on) and (not self.references or self.references.issubset(deps)):
            return self.depends_on  # the usual cases: the same list, not a copy per step (both are read-only)
        deps += sorted(self.references - set(deps))
        return deps


class RollbackPlan(_Record):
    """Steps that undo what a plan did (validated with the plan; running them on abort comes with durable runs)."""

    goal: str = ""
    steps: list[Step] = Field(default_factory=list)


# the canonical JSON a content hash is taken of: sorted keys, compact, text as written
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_STEPS: TypeAdapter[list[Step]] = TypeAdapter(list[Step])  # dumps a batch of steps in one call
_HASH_BATCH = 256  # steps (a batch as Python data is a few hundred KB)


class Plan(_Record):
    """A typed DAG of steps toward a goal, with a stable JSON form and a content hash."""

    plan_id: str = Field(min_length=1, max_length=200)
    goal: str
    steps: list[Step] = Field(min_length=1)
    rollback_plan: RollbackPlan | str | None = Field(None, description="inline steps or the name of a saved plan")
    estimated_duration: timedelta | None = None
    risk_level: RiskLevel = "low"
    answer_step: str | None = Field(None, description="the step whose output is the run's answer")
    version: int = Field(1, ge=1)
    revises: int | None = Field(None, ge=1, description="the version this one revises")
    windows: dict[str, list[str]] | None = Field(
        None,
        exclude_if=lambda value: not value,  # absent unless set: plans without it keep their hashes
        description="maintenance windows by tool: a step calling the tool starts only inside one ('Sat 02:00-04:00 America/New_York')",
    )

    @field_validator("windows", mode="before")
    @classmethod
    def _windows(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        out: dict[str, Any] = {}
        for tool, spec in value.items():
            spec = [spec] if isinstance(spec, str) else spec
            try:
                out[tool] = [w.text for w in parse_windows(spec)]
            except WindowError as exc:
                raise ValueError(f"tool {tool!r}: {exc}") from None
            except TypeError:
                raise ValueError(f"tool {tool!r}: a window is text, or a list of them") from None
        return out

    @cached_property
    def parsed_windows(self) -> dict[str, list[Window]]:
        """`windows` read (each tool's list of `Window`); empty when the plan has none."""
        return {tool: parse_windows(spec) for tool, spec in (self.windows or {}).items()}

    @field_validator("estimated_duration", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return _parse_duration(value)

    @model_validator(mode="before")
    @classmethod
    def _drop_hash(cls, data: Any) -> Any:
        # content_hash is derived; a dumped plan carries it and must load back.
        if isinstance(data, dict) and "content_hash" in data:
            data = {k: v for k, v in data.items() if k != "content_hash"}
        return data

    @computed_field  # type: ignore[prop-decorator]  # pydantic documents computed_field over cached_property; mypy cannot see through it
    @cached_property
    def content_hash(self) -> str:
        """sha256 of what the plan does (steps, goal, rollback, risk, answer, windows), not of its id or version.

        The canonical JSON of those fields (sorted keys, compact) is hashed
        a step at a time: the same bytes as encoding the whole at once, without
        holding a 100,000-step plan as Python data (190 MB) to do it.
        """
        head = self.model_dump(mode="json", by_alias=True, include={"goal", "rollback_plan", "risk_level", "answer_step"})
        text = _CANONICAL.encode(head)
        digest = hashlib.sha256(text[:-1].encode())  # "steps" sorts after every other key: it goes last
        digest.update(b',"steps":[')
        steps = self.steps
        # a batch of steps at a time, each batch one call to the dumper and one to the encoder (a list encodes
        # as its items joined by ","): the same bytes, a fifth less time than a step at a time
        for start in range(0, len(steps), _HASH_BATCH):
            blob = _CANONICAL.encode(_STEPS.dump_python(steps[start : start + _HASH_BATCH], mode="json", by_alias=True))[1:-1]
            digest.update((blob if start == 0 else "," + blob).encode())
        digest.update(b"]")
        if self.windows:  # "windows" sorts after "steps"; absent when empty, so plans without windows keep their hashes
            digest.update(b',"windows":' + _CANONICAL.encode(self.windows).encode())
        digest.update(b"}")
        return "sha256:" + digest.hexdigest()

    def step(self, step_id: str) -> Step:
        """The step with this id; KeyError naming it when absent."""
        for s in self.steps:
            if s.step_id == step_id:
                return s
        raise KeyError(f"plan {self.plan_id!r} has no step {step_id!r}")

    @property
    def step_ids(self) -> list[str]:
        """Step ids in plan order."""
        return [s.step_id for s in self.steps]

    def sinks(self) -> list[str]:
        """Steps no other step depends on, in plan order."""
        used: set[str] = set()
        for s in self.steps:
            used.update(s.dependencies)
        return [s.step_id for s in self.steps if s.step_id not in used]

    def to_json(self, *, indent: int | None = 2) -> str:
        """The stable JSON form: what the plan decides, without defaults (each step keeps its worker), and its content hash.

        A reviewer reads what the planner chose, not eight fields of a default
        failure action per step; `from_json` restores the defaults, so the
        plan and its content hash come back the same.
        """
        data: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        _keep_kinds(data, self.model_dump(mode="json", by_alias=True))
        _keep_workers(data, self.steps)
        if isinstance(self.rollback_plan, RollbackPlan):
            _keep_workers(data["rollback_plan"], self.rollback_plan.steps)
        data["content_hash"] = self.content_hash
        return json.dumps(data, indent=indent, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> Plan:
        """Parse a plan from JSON text; `PlanParseError` lists every shape problem."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanParseError([Problem("malformed_json", f"{exc.msg} at line {exc.lineno} column {exc.colno}")]) from None
        except (ValueError, RecursionError) as exc:  # not UTF-8, or nested too deeply to read
            raise PlanParseError([Problem("malformed_json", f"{type(exc).__name__}: {exc}")]) from None
        return cls.from_data(data)

    @classmethod
    def from_data(cls, data: Any) -> Plan:
        """Validate a decoded JSON object as a plan; `PlanParseError` lists every problem."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise PlanParseError(_shape_problems(exc, data), plan_id=_plan_id_of(data)) from None


def _keep_kinds(short: Any, full: Any) -> None:
    """Put back each ``kind`` a default-free dump dropped: it tags a union (criteria), so a reader needs it."""
    if isinstance(short, dict) and isinstance(full, dict):
        if "kind" in full and "kind" not in short:
            short["kind"] = full["kind"]
        for key, value in short.items():
            _keep_kinds(value, full.get(key))
    elif isinstance(short, list) and isinstance(full, list):
        for a, b in zip(short, full):
            _keep_kinds(a, b)


def _keep_workers(data: dict[str, Any], steps: list[Step]) -> None:
    """Every dumped step names its worker, the default ``tool`` too: who does a step is a decision worth reading."""
    for dumped, step in zip(data.get("steps", []), steps):
        dumped.setdefault("worker", step.worker)


def _plan_id_of(data: Any) -> str | None:
    return data.get("plan_id") if isinstance(data, dict) and isinstance(data.get("plan_id"), str) else None


def _shape_problems(exc: ValidationError, data: Any) -> list[Problem]:
    """Turn pydantic errors into Problems that name the step and field."""
    problems = []
    for err in exc.errors():
        loc = list(err["loc"])
        step_id = None
        if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
            try:
                raw = data["steps"][loc[1]]
                step_id = raw.get("id") or raw.get("step_id") if isinstance(raw, dict) else None
            except (KeyError, IndexError, TypeError):
                step_id = None
            step_id = step_id if isinstance(step_id, str) else f"#{loc[1]}"
            loc = loc[2:]
        # drop discriminator tags pydantic puts in the location
        field = ".".join(str(p) for p in loc if not (isinstance(p, str) and p.endswith("Criterion")))
        rule = {"missing": "missing_field", "extra_forbidden": "unknown_field"}.get(err["type"], err["type"])
        problems.append(Problem(rule, err["msg"], step_id=step_id, field=field or None))
    return problems
