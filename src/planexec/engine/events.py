"""Events: frozen, past-tense records of every transition in a run.

Owns the event classes, the `Event` union (discriminated by ``type``) and
`parse_event` to read one back from its JSON form (`event.to_json()` writes
it). Each event carries the run id, a per-run sequence number and a UTC
timestamp. Events are `Record`s: frozen dataclasses, cheap to build on the
engine's hot path. Imports `calls`, `records`, `results` and `usage`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from planexec.engine.results import ErrorInfo, ReplanRequest, RunStatus
from planexec.plan.diff import PlanDiff
from planexec.plan.model import Plan
from planexec.records import OMIT_EMPTY, Record, quick_init
from planexec.usage import Usage
from planexec.workers.gate import CallRecord, CallRequest
from planexec.workers.io import Output

__all__ = [
    "ApprovalDecided",
    "ApprovalRequested",
    "Event",
    "JoinerDecided",
    "PlanCompleted",
    "PlanDrafted",
    "PlanRevised",
    "PlanStepParsed",
    "ReplanStarted",
    "RollbackFinished",
    "RollbackStarted",
    "RunFinished",
    "RunResumed",
    "RunStarted",
    "StepCancelled",
    "StepEscalated",
    "StepFailed",
    "StepJudged",
    "StepReady",
    "StepRerouted",
    "StepResolved",
    "StepRetried",
    "StepRouted",
    "StepScheduled",
    "StepSkipped",
    "StepStarted",
    "StepSucceeded",
    "SubRunEvent",
    "ToolCallDecided",
    "parse_event",
]


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def _no_usage(usage: Usage) -> bool:
    return usage.is_zero()


# an attempt's usage, left out of the JSON when it is zero (a tool step: most steps of a large plan), zero when absent
AttemptUsage = Annotated[Usage, Field(exclude_if=_no_usage)]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Event(Record):
    run_id: str
    seq: int  # position in the run's event stream, from 0
    at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(_Event):
    """The engine accepted a validated plan and began."""

    type: Literal["run_started"] = "run_started"
    plan_id: str
    plan_version: int
    content_hash: str
    goal: str
    step_ids: list[str]
    # how the run was set up, for whoever resumes it (e.g. the tools modules its registry came from)
    setup: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanDrafted(_Event):
    """The planner wrote a draft; `problems` is empty when it was accepted, else it went back for repair."""

    type: Literal["plan_drafted"] = "plan_drafted"
    attempt: int
    model: str
    problems: list[str]
    usage: Usage
    wall_time: float
    version: int = 1  # the plan version it drafts (a replan drafts version 2 and on)
    text: Annotated[str, OMIT_EMPTY] = ""  # what the model wrote (redacted like every event; store schema 9 and on)
    content_hash: Annotated[str, OMIT_EMPTY] = ""  # the plan it became, when accepted


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplanStarted(_Event):
    """The planner was asked for a new version of the plan (the steps still running have ended)."""

    type: Literal["replan_started"] = "replan_started"
    version: int  # the version being replaced
    reason: str
    source: str
    step_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRevised(_Event):
    """A new version of the plan replaced the old; its finished steps are kept, never run again."""

    type: Literal["plan_revised"] = "plan_revised"
    version: int
    revises: int
    content_hash: str
    reason: str
    diff: PlanDiff
    step_ids: list[str]
    usage: Usage
    plan: Plan  # the whole new version, so a reader of the events alone can follow the run


@dataclass(frozen=True, slots=True, kw_only=True)
class StepJudged(_Event):
    """A critic judged an attempt's output against the step's success criteria."""

    type: Literal["step_judged"] = "step_judged"
    step_id: str
    attempt: int
    critic: str
    approved: bool
    judged: bool
    reasons: list[str]
    tools_used: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDecided(_Event):
    """A tool call a worker asked for inside a step: allowed and run, or refused with the rule and the provenance chain."""

    type: Literal["tool_call_decided"] = "tool_call_decided"
    step_id: str
    call: CallRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinerDecided(_Event):
    """After the steps ended, the joiner decided to finish (with the answer) or to replan."""

    type: Literal["joiner_decided"] = "joiner_decided"
    action: Literal["finish", "replan"]
    reason: str
    usage: Usage


@dataclass(frozen=True, slots=True, kw_only=True)
class SubRunEvent(_Event):
    """An event of a sub-team's run, relayed into its parent's stream (`event` is its JSON form)."""

    type: Literal["sub_run_event"] = "sub_run_event"
    step_id: str  # the parent's step the sub-team works on
    depth: int  # the sub-run's level: 1 under the top run, 2 under that
    event: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequested(_Event):
    """A plan version (`step_id` None), a step, or one tool call inside a step waits for approval of exactly this content."""

    type: Literal["approval_requested"] = "approval_requested"
    step_id: str | None
    content_hash: str
    plan_version: int
    call: CallRequest | None = None  # a single tool call inside the step (its digest is `content_hash`), not the step


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalDecided(_Event):
    """The approval asked for was given or refused."""

    type: Literal["approval_decided"] = "approval_decided"
    step_id: str | None
    content_hash: str
    approved: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RollbackStarted(_Event):
    """The run aborted after steps with side effects: its rollback plan runs (as the sub-run ``<run>/rollback``)."""

    type: Literal["rollback_started"] = "rollback_started"
    after: list[str]  # the side-effecting steps that had succeeded
    step_ids: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class RollbackFinished(_Event):
    """The rollback plan ended; its own outcome."""

    type: Literal["rollback_finished"] = "rollback_finished"
    status: RunStatus
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResumed(_Event):
    """A stopped run goes on in this process: finished steps are kept, interrupted ones re-run or held for a person."""

    type: Literal["run_resumed"] = "run_resumed"
    plan_version: int
    kept: list[str]  # steps that had ended, never run again
    rerun: list[str]  # steps that were running and run again (idempotent, or a person said retry)
    held: list[str]  # steps that were running, may not run again, and wait for a decision


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResolved(_Event):
    """A person decided about a step held after a crash: retry it, skip it, or mark it done with a value."""

    type: Literal["step_resolved"] = "step_resolved"
    step_id: str
    decision: Literal["retry", "skip", "mark_done"]
    value: Any = None
    by: str = "person"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanStepParsed(_Event):
    """A streamed plan's step was complete and valid, and joined the running graph."""

    type: Literal["plan_step_parsed"] = "plan_step_parsed"
    step_id: str
    worker: str
    action: str
    depends_on: list[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanCompleted(_Event):
    """A streamed plan ended and the whole plan validated; it is the run's plan from now on."""

    type: Literal["plan_completed"] = "plan_completed"
    content_hash: str
    step_ids: list[str]


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StepReady(_Event):
    """Every dependency of the step ended and it cannot start yet: it waits for a free slot (a concurrency
    limit, its worker's cap) or for a person's approval. A step that starts at once has no `StepReady`:
    its `StepStarted` says both (one event a step fewer to build, deliver and store)."""

    type: Literal["step_ready"] = "step_ready"
    step_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StepScheduled(_Event):
    """Every input of the step is ready and its time has not come: it waits until `due` (its `not_before`, or
    the next opening of its tool's window, `why` says which), then starts (or waits for a slot)."""

    type: Literal["step_scheduled"] = "step_scheduled"
    step_id: str
    due: datetime
    why: str = ""


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StepStarted(_Event):
    """An attempt began on a worker (on `model`, when the step's cascade or a model router chose one)."""

    type: Literal["step_started"] = "step_started"
    step_id: str
    worker: str
    action: str
    attempt: int
    model: Annotated[str | None, OMIT_EMPTY] = None


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StepSucceeded(_Event):
    """An attempt produced an output that passed the step's success criteria (usage: this attempt's)."""

    type: Literal["step_succeeded"] = "step_succeeded"
    step_id: str
    attempt: int
    wall_time: float
    usage: AttemptUsage = field(default_factory=Usage)
    output: Output
    model: Annotated[str | None, OMIT_EMPTY] = None  # the model the attempt ran on, when one was chosen for it


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StepFailed(_Event):
    """An attempt failed; `then` says what follows: the failure action's next move, or ``escalate`` (the step's
    cascade moves to its next model, `StepEscalated`). Usage: this attempt's."""

    type: Literal["step_failed"] = "step_failed"
    step_id: str
    attempt: int
    worker: str
    error: ErrorInfo
    then: Literal["retry", "fallback", "skip", "abort", "replan", "escalate", "none"]
    wall_time: float
    usage: AttemptUsage = field(default_factory=Usage)
    model: Annotated[str | None, OMIT_EMPTY] = None  # the model the attempt ran on, when one was chosen for it


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRouted(_Event):
    """A step with a cascade of models got its starting model: `router` picked `start` of `models`, for `reason`
    (`difficulty`: the step's declared one, kept for routers that learn from past runs)."""

    type: Literal["step_routed"] = "step_routed"
    step_id: str
    models: list[str]
    start: str
    router: str
    reason: str
    difficulty: Annotated[str | None, OMIT_EMPTY] = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepEscalated(_Event):
    """Attempt `attempt` failed (rule `reason`) on `from_model`: the next attempt runs on `to_model`, the cascade's next."""

    type: Literal["step_escalated"] = "step_escalated"
    step_id: str
    attempt: int
    from_model: str
    to_model: str
    reason: str


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StepRetried(_Event):
    """The step will be tried again after `delay` seconds."""

    type: Literal["step_retried"] = "step_retried"
    step_id: str
    next_attempt: int
    delay: float


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRerouted(_Event):
    """The step was handed to its fallback worker."""

    type: Literal["step_rerouted"] = "step_rerouted"
    step_id: str
    from_worker: str
    to_worker: str


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StepSkipped(_Event):
    """The step did not run because an input step did not succeed."""

    type: Literal["step_skipped"] = "step_skipped"
    step_id: str
    because: str
    reason: str


@quick_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StepCancelled(_Event):
    """The step was stopped (`was_running`) or never started because the run ended."""

    type: Literal["step_cancelled"] = "step_cancelled"
    step_id: str
    was_running: bool
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFinished(_Event):
    """The run ended; every step is in a terminal state."""

    type: Literal["run_finished"] = "run_finished"
    status: RunStatus
    reason: str | None = None
    answer: Any = None
    answer_untrusted: Annotated[list[str], OMIT_EMPTY] = field(default_factory=list)  # see `RunResult.answer_untrusted`
    wall_time: float
    usage: Usage
    replan: ReplanRequest | None = None
    error: ErrorInfo | None = None
    due: Annotated[datetime | None, OMIT_EMPTY] = None  # a run stopped as scheduled: when its first scheduled step may start


Event = Annotated[
    RunStarted
    | PlanDrafted
    | ReplanStarted
    | PlanRevised
    | StepJudged
    | ToolCallDecided
    | JoinerDecided
    | SubRunEvent
    | RunResumed
    | StepResolved
    | ApprovalRequested
    | ApprovalDecided
    | RollbackStarted
    | RollbackFinished
    | PlanStepParsed
    | PlanCompleted
    | StepReady
    | StepScheduled
    | StepStarted
    | StepSucceeded
    | StepFailed
    | StepRetried
    | StepRouted
    | StepEscalated
    | StepRerouted
    | StepSkipped
    | StepCancelled
    | RunFinished,
    Field(discriminator="type"),
]

_EVENT: TypeAdapter[Any] = TypeAdapter(Event)


def parse_event(data: dict[str, Any] | str | bytes) -> Any:
    """Read an event back from its JSON form (a dict or JSON text)."""
    if isinstance(data, (str, bytes)):
        return _EVENT.validate_json(data)
    return _EVENT.validate_python(data)
