"""What a run leaves behind: each step's record and the run's result.

Owns `StepState`, `RunStatus`, `ErrorInfo`, `StepRecord`, `ReplanRequest`
and `RunResult`, all typed records with a stable JSON form. The engine fills
them; the CLI, store and UI read them. Imports `calls`, `plan`, `usage` and
`errors`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planexec.errors import ReplanRequested, RunAbortedError, RunCancelledError, RunError
from planexec.plan.diff import PlanDiff
from planexec.plan.model import Plan
from planexec.usage import Usage
from planexec.workers.gate import CONTRACT_STOPS, CallRecord
from planexec.workers.io import Output, Source, lineage

__all__ = [
    "CONTRACT_STOPS",
    "ErrorInfo",
    "ModelAttempt",
    "PlanVersion",
    "ReplanRequest",
    "RunResult",
    "RunStatus",
    "StepRecord",
    "StepState",
    "describe_answer_origins",
    "describe_refused",
    "refused_by_rule",
]


class StepState(str, Enum):
    """Where a step is. The last four are terminal: a step ends in exactly one of them."""

    PENDING = "pending"
    READY = "ready"
    SCHEDULED = "scheduled"  # its inputs are ready and its time has not come (`Step.not_before`, a tool's window)
    RUNNING = "running"
    NEEDS_DECISION = "needs_decision"  # it was running when the process died and may not simply run again
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """True for succeeded, failed, skipped and cancelled."""
        return self in (StepState.SUCCEEDED, StepState.FAILED, StepState.SKIPPED, StepState.CANCELLED)


class RunStatus(str, Enum):
    """How a run ended."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"  # every step succeeded
    PARTIAL = "partial"  # it finished, but some steps failed or were skipped under `skip`
    ABORTED = "aborted"  # a failure action aborted it
    CANCELLED = "cancelled"  # stopped from outside
    REPLAN_REQUESTED = "replan_requested"  # a step asked for a new plan
    FAILED = "failed"  # it could not go on: an invalid streamed plan, a replan that failed, a budget, a joiner
    NEEDS_DECISION = "needs_decision"  # resumed after a crash, a step that was running needs a person (`planexec resolve`)
    WAITING = "waiting"  # stored and not started: its plan waits for a person's approval, or for a worker to take it (the queue)
    SCHEDULED = "scheduled"  # its next steps wait for their time: stopped, for a worker to resume it when due (`RunResult.due`)
    INCOMPLETE = "incomplete"  # the contract refused a call the work needed (quarantine, an untrusted argument): not done, and why


class ErrorInfo(BaseModel):
    """A failure as data: the rule it broke, the exception type and message."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: str = Field(
        description="a step's: timeout, tool_input, tool_output, reference, check_failed, incomplete (out of turns with work left), "
        "worker, exception, approval_required (nobody could approve the step or one of the plan's own calls), approval_denied, "
        "outside_grant, untrusted_argument and quarantine (the contract refused the step's own call, or a single agent's "
        "escalation: the run ends incomplete); a run's: replan_limit, replan_loop, replan_invalid, replan_widens, "
        "replan_effects (a revision that acts, and no person to approve it), replanner, joiner, budget, plan_rejected, engine"
    )
    type: str
    message: str

    def render(self) -> str:
        """``rule: message``."""
        return f"{self.rule}: {self.message}"


def _none(value: Any) -> bool:
    return value is None


def _empty(value: Any) -> bool:
    return not value


class ModelAttempt(BaseModel):
    """One attempt of a step that ran on a model chosen for it (its cascade's, a model router's): the model, what the
    attempt used, and how it ended (`error` None: it succeeded; `then`: what followed a failure, ``escalate`` to the
    cascade's next model or the failure action's move)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attempt: int
    model: str
    usage: Usage = Field(default_factory=Usage)
    error: ErrorInfo | None = None
    then: str | None = None


class StepRecord(BaseModel):
    """One step's whole story: state, attempts, timings, usage, output or error."""

    model_config = ConfigDict(extra="forbid")

    step_id: str
    state: StepState = StepState.PENDING
    worker: str = ""
    action: str = ""
    attempts: int = 0
    started_at: datetime | None = None
    finished_at: datetime | None = None
    wall_time: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    output: Output | None = None
    error: ErrorInfo | None = None
    reason: str | None = Field(None, description="why it was skipped or cancelled, or what was done after it failed")
    due: datetime | None = Field(
        None, exclude_if=_none, description="when a scheduled step may start (its not_before, or its tool's next window)"
    )
    verdicts: list[dict[str, Any]] = Field(default_factory=list, description="critics' verdicts on its attempts, with reasons")
    subrun: RunResult | None = Field(None, description="the run of the sub-team that did this step (the run tree)")
    calls: list[CallRecord] = Field(default_factory=list, description="every tool call its worker asked for: run, or refused with the rule")
    model: str | None = Field(
        None, exclude_if=_none, description="the model of its last attempt, or of its next one after an escalation (a cascade's)"
    )
    model_attempts: list[ModelAttempt] = Field(
        default_factory=list,
        exclude_if=_empty,
        description="its attempts on models chosen for it (a cascade's): each one's model, usage and outcome",
    )

    @property
    def refused(self) -> list[CallRecord]:
        """The calls the gate refused."""
        return [c for c in self.calls if not c.allowed]


class ReplanRequest(BaseModel):
    """Why a new plan is wanted: a step's `replan` failure action, a failed success check, or the joiner."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step_id: str | None = Field(None, description="the step that failed; None when the joiner asked")
    reason: str
    error: ErrorInfo | None = None
    source: Literal["failure_action", "check_failed", "joiner"] = "failure_action"


class PlanVersion(BaseModel):
    """One version of a run's plan: the plan, why it was written, what changed, what it cost.

    `superseded` holds the records of the steps the next version dropped
    (the failed step, and steps that never ran), so no attempt is forgotten.
    """

    model_config = ConfigDict(extra="forbid")

    version: int
    plan: Plan
    reason: str = "the first plan"
    diff: PlanDiff | None = None
    remaining_hash: str | None = None
    usage: Usage = Field(default_factory=Usage, description="what writing this version cost (replans only)")
    superseded: dict[str, StepRecord] = Field(default_factory=dict)


def refused_by_rule(records: Iterable[StepRecord]) -> dict[str, int]:
    """How many calls the gate refused in these step records, by rule, most first."""
    counts = Counter(call.rule or "refused" for rec in records for call in rec.calls if not call.allowed)
    return dict(counts.most_common())


def describe_answer_origins(keys: list[str]) -> str:
    """What a face says of an answer made from untrusted text (`RunResult.answer_untrusted`); empty when it holds none."""
    if not keys:
        return ""
    return "the answer contains text from " + ", ".join(Source.from_key(key).label() for key in keys)


def describe_refused(counts: dict[str, int]) -> str:
    """``3 refused tool calls: approval_required 2, quarantine 1`` (empty when none were)."""
    if not counts:
        return ""
    total = sum(counts.values())
    return f"{total} refused tool call{'s' if total != 1 else ''}: " + ", ".join(f"{rule} {n}" for rule, n in counts.items())


class RunResult(BaseModel):
    """The outcome of a run: status, every step's record, the answer and total usage."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    plan: Plan
    status: RunStatus
    reason: str | None = None
    steps: dict[str, StepRecord]
    answer: Any = None
    answer_untrusted: list[str] = Field(
        default_factory=list,
        description="the untrusted origins the answer derives from, as keys ('read_file@read'): the answer step's or the sinks' "
        "(every output's when a joiner or a synthesizer made it), at most eight; empty: the answer holds no outside text",
    )
    started_at: datetime
    finished_at: datetime
    wall_time: float
    usage: Usage = Field(default_factory=Usage, description="everything: planning, steps and synthesis")
    planning_usage: Usage = Field(default_factory=Usage, description="the planner's drafts that led to this plan")
    synthesis_usage: Usage = Field(default_factory=Usage)
    overhead: dict[str, Usage] = Field(
        default_factory=dict, description="work around the run by role (a router, a joiner): counted in `usage`"
    )
    replan: ReplanRequest | None = None
    due: datetime | None = Field(None, exclude_if=_none, description="a run stopped as scheduled: when its first scheduled step may start")
    error: ErrorInfo | None = Field(
        None, description="why a run that could not go on stopped (rule: replan_limit, replan_loop, replan_invalid, replanner, joiner)"
    )
    versions: list[PlanVersion] = Field(default_factory=list, description="every version of the plan, the first first")
    refused_calls: dict[str, int] = Field(
        default_factory=dict,
        description="tool calls the gate refused in this run, by rule (a sub-team's are in its own result); empty: none",
    )
    rollback: RunResult | None = Field(None, description="the rollback plan's own run, when an abort after side effects ran it")

    def origins(self, step_id: str, *, untrusted_only: bool = False) -> list[Source]:
        """Every origin a step's output derives from, upstream included (its provenance is a summary: see
        `planexec.workers.io.lineage`); [] when the step has no output."""
        superseded = {sid: rec for v in self.versions for sid, rec in v.superseded.items()}

        def output_of(sid: str) -> Output | None:
            rec = self.steps.get(sid) or superseded.get(sid)
            return rec.output if rec is not None else None

        found = output_of(step_id)
        return lineage([found], output_of, untrusted_only=untrusted_only) if found is not None else []

    def answer_origins(self) -> list[Source]:
        """The untrusted origins the answer derives from (`answer_untrusted`, as sources: `Source.label` says them)."""
        return [Source.from_key(key) for key in self.answer_untrusted]

    def answer_warning(self) -> str:
        """``the answer contains text from read_file in step 'read' (untrusted)``; empty when it holds no outside text."""
        return describe_answer_origins(self.answer_untrusted)

    def usage_by_role(self) -> dict[str, Usage]:
        """Usage per role: ``planner``, each worker that ran steps, ``synthesizer`` (roles that used nothing are left out)."""
        out: dict[str, Usage] = {}
        if not self.planning_usage.is_zero():
            out["planner"] = self.planning_usage
        superseded = [rec for v in self.versions for rec in v.superseded.values()]
        for rec in [*self.steps.values(), *superseded]:
            if not rec.usage.is_zero():
                out[rec.worker] = out.get(rec.worker, Usage()) + rec.usage
        if not self.synthesis_usage.is_zero():
            out["synthesizer"] = self.synthesis_usage
        for role, used in self.overhead.items():
            if not used.is_zero():
                out[role] = out.get(role, Usage()) + used
        return out

    def calls_by_level(self) -> dict[int, dict[str, int]]:
        """Model calls per level of the run tree (0: this run; 1: its sub-teams; ...), by kind.

        Kinds: ``planner`` (drafts and replans), ``workers`` (steps, critics
        included), ``synthesizer``, and overhead roles such as ``joiner`` or
        ``router``. A sub-team step's calls count at the level below.
        """
        levels: dict[int, dict[str, int]] = {}

        def walk(result: RunResult, level: int) -> None:
            row = levels.setdefault(level, {"planner": 0, "workers": 0, "synthesizer": 0})
            row["planner"] += result.planning_usage.model_calls
            row["synthesizer"] += result.synthesis_usage.model_calls
            for role, used in result.overhead.items():
                row[role] = row.get(role, 0) + used.model_calls
            superseded = [rec for v in result.versions for rec in v.superseded.values()]
            for rec in [*result.steps.values(), *superseded]:
                calls = rec.usage.model_calls
                if rec.subrun is not None:
                    walk(rec.subrun, level + 1)
                    calls -= rec.subrun.usage.model_calls  # what the step itself added (a critic, an earlier attempt)
                row["workers"] += calls

        walk(self, 0)
        return levels

    def __repr__(self) -> str:
        # short on purpose: asyncio.run reprs a task's result, and a full dump of a big run takes seconds
        return f"RunResult(run_id={self.run_id!r}, status={self.status.value!r}, steps={len(self.steps)}, wall_time={self.wall_time:.3f})"

    @property
    def ok(self) -> bool:
        """True when every step succeeded."""
        return self.status is RunStatus.SUCCEEDED

    def outputs(self) -> dict[str, Any]:
        """Output values of the steps that succeeded, by step id."""
        return {sid: r.output.value for sid, r in self.steps.items() if r.output is not None}

    def raise_for_status(self) -> RunResult:
        """Return self when the run succeeded or finished partially; raise the matching `RunError` otherwise."""
        failed = next((s for s, r in self.steps.items() if r.state is StepState.FAILED), None)
        msg = f"run {self.run_id} {self.status.value}" + (f": {self.reason}" if self.reason else "")
        if self.status in (RunStatus.ABORTED, RunStatus.INCOMPLETE):
            raise RunAbortedError(msg, run_id=self.run_id, step_id=failed)
        if self.status is RunStatus.CANCELLED:
            raise RunCancelledError(msg, run_id=self.run_id)
        if self.status is RunStatus.REPLAN_REQUESTED and self.replan is not None:
            raise ReplanRequested(msg, run_id=self.run_id, step_id=self.replan.step_id, reason=self.replan.reason)
        if self.status in (RunStatus.RUNNING, RunStatus.FAILED):
            raise RunError(msg, run_id=self.run_id)
        return self


StepRecord.model_rebuild()
PlanVersion.model_rebuild()
