"""What the MCP server's tools answer: typed records with a stable JSON form, each an output schema for the client.

Owns the answers of every tool (`PlannedRun`, `StartedRun`, `RunDetails`,
`RunList`, `TemplateList`, `ApprovalList`, `Decision`) and the parts they
share (`PolicyReview`, `PendingApproval`, `StepLine`, `RunLine`). They are
pydantic models, not `planexec.records.Record` dataclasses, because the MCP
SDK derives a tool's output schema from a pydantic return type. Plans,
usage and step outputs are carried in their own JSON forms (``dict``).
Imports nothing of ours.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ApprovalList",
    "Decision",
    "PendingApproval",
    "PlannedRun",
    "PolicyReview",
    "RunDetails",
    "RunLine",
    "RunList",
    "StartedRun",
    "StepLine",
    "TemplateLine",
    "TemplateList",
]


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PolicyReview(_Answer):
    """The project's policies on a plan: any reject rejects, else any escalate asks a person, else approve."""

    decision: Literal["approve", "escalate", "reject"]
    verdicts: list[dict[str, Any]] = Field(default_factory=list, description="each policy's verdict: policy, decision, reasons, steps")


class PendingApproval(_Answer):
    """A request that waits for a person: a plan version, a step, or one tool call in a step."""

    approval_id: int
    run_id: str
    kind: Literal["plan", "step", "call"]
    step_id: str | None = None
    content_hash: str = Field(description="what exactly is approved: the plan's, the step's or the call's hash")
    requested_at: str
    what: str
    details: str
    decide_with: str = Field(description="the command a person decides it with (or the console, or decide_approval)")


class PlannedRun(_Answer):
    """A plan stored as a run that waits: a person approves its content hash, then a worker runs it."""

    run_id: str
    state: Literal["waiting_for_approval", "queued", "rejected"] = Field(
        description="waiting_for_approval: a person approves it first; queued: approved, a worker takes it; rejected: a policy denied it"
    )
    goal: str
    source: str = Field(description="where the plan came from: the planner, the plan library, a template")
    plan: dict[str, Any] = Field(description="the plan as JSON: its steps, dependencies and parameters")
    content_hash: str
    steps: int
    review: PolicyReview
    draft_problems: list[str] = Field(
        default_factory=list, description="the validation problems of the planner's earlier drafts, which it repaired"
    )
    usage: dict[str, Any] = Field(default_factory=dict, description="what planning used: tokens, model calls, cost")
    next: str


class StartedRun(_Answer):
    """A run handed to the workers (it runs once a person approves it); `next` says what happens now."""

    run_id: str
    state: str = Field(description="waiting_for_approval, queued, running, or how the run ended")
    pid: int | None = Field(None, description="the process that runs it, once a worker took it")
    pending: list[PendingApproval] = Field(default_factory=list)
    next: str
    planned: PlannedRun | None = Field(None, description="run_template: the plan it stored")


class StepLine(_Answer):
    """One step of a run as its events tell it."""

    step_id: str
    state: str
    worker: str = ""
    action: str = ""
    instruction: str | None = None
    attempts: int = 0
    output: Any = None
    error: str | None = None


class RunDetails(_Answer):
    """One stored run: where it is, its plan, each step, what waits for a person, its answer and usage."""

    run_id: str
    goal: str
    state: str = Field(description="waiting_for_approval, queued, running, interrupted, or how it ended")
    reason: str | None = None
    plan_id: str
    plan_version: int
    content_hash: str
    started_at: str
    finished_at: str | None = None
    wall_time: float | None = None
    steps: list[StepLine] = Field(default_factory=list)
    pending: list[PendingApproval] = Field(default_factory=list)
    answer: Any = None
    usage: dict[str, Any] = Field(default_factory=dict)
    next: str


class RunLine(_Answer):
    """One run in a list."""

    run_id: str
    goal: str
    state: str
    started_at: str
    finished_at: str | None = None
    steps: int
    cost: float
    waiting_for_approval: bool


class RunList(_Answer):
    """Runs, newest first."""

    store: str
    runs: list[RunLine]


class TemplateLine(_Answer):
    """A saved plan of the plan library (its latest version)."""

    name: str
    version: int
    params: list[str]
    description: str = ""
    goal: str = ""
    steps: int = 0


class TemplateList(_Answer):
    """The plan library."""

    templates: list[TemplateLine]


class ApprovalList(_Answer):
    """What waits for a person, oldest first."""

    approvals: list[PendingApproval]


class Decision(_Answer):
    """What the person using the client decided about one pending approval (nothing, when they declined to answer)."""

    run_id: str
    what: str
    state: Literal["approved", "denied", "undecided"]
    by: str | None = None
    reason: str | None = None
    next: str
