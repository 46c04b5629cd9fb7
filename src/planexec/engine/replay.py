"""A run rebuilt from its stored events: each step's record, the run's outcome, and what was in flight.

Owns `RunView` and `replay`. Reading only the events (and, optionally, the
plan, for the workers and actions of steps that never started), `replay`
gives every step a `StepRecord` (state, attempts, timings, usage, output,
error, critics' verdicts, the model of each attempt that ran on a chosen one), keeps the records a plan revision dropped, and
lists the steps that had started an attempt that never ended: after a
crash, those are what resuming has to decide about. `worked` sums the time
of every process that worked on the run (its start and each resume, each
from its first event to its last), which a killed process never reports. A `RunResumed` makes
the run running again; a person's `StepResolved` is left to `resume` to
apply. Pure: no I/O.
Imports `events`, `plan`, `results`, `usage` and `workers.io` (whose `lineage` `RunView.origins` follows).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from planexec.engine.results import (
    ErrorInfo,
    ModelAttempt,
    RunStatus,
    StepRecord,
    StepState,
    describe_answer_origins,
    refused_by_rule,
)
from planexec.plan.model import Plan
from planexec.records import Record
from planexec.usage import Usage
from planexec.workers.io import Output, Source, lineage

__all__ = ["RunView", "replay"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunView(Record):
    """A run as its events tell it (see `replay`)."""

    run_id: str
    goal: str = ""
    plan_id: str = ""
    plan_version: int = 1
    status: RunStatus = RunStatus.RUNNING
    reason: str | None = None
    steps: dict[str, StepRecord] = field(default_factory=dict)
    superseded: dict[str, StepRecord] = field(default_factory=dict)
    in_flight: list[str] = field(default_factory=list)
    sub_events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    wall_time: float | None = None
    usage: Usage = field(default_factory=Usage)
    answer: Any = None
    answer_untrusted: list[str] = field(default_factory=list)  # see `RunResult.answer_untrusted`
    error: ErrorInfo | None = None
    due: datetime | None = None  # a run stopped as scheduled: when its first scheduled step may start
    last_seq: int = -1
    processes: int = 0  # how many processes worked on the run: its start, then each resume
    worked: float = 0.0  # seconds, summed over every process, from its first event to its last

    def output_of(self, step_id: str) -> Output | None:
        """The recorded output of a step (of the current plan, else of one a replan replaced), or None."""
        rec = self.steps.get(step_id) or self.superseded.get(step_id)
        return rec.output if rec is not None else None

    def answer_warning(self) -> str:
        """``the answer contains text from read_file in step 'read' (untrusted)``; empty when it holds no outside text."""
        return describe_answer_origins(self.answer_untrusted)

    def refused_calls(self) -> dict[str, int]:
        """The tool calls the gate refused in the run, by rule (`RunResult.refused_calls` of a stored run)."""
        return refused_by_rule([*self.steps.values(), *self.superseded.values()])

    def origins(self, step_ids: Iterable[str], *, untrusted_only: bool = False, limit: int | None = None) -> list[Source]:
        """Every origin the outputs of `step_ids` derive from, upstream included (see `workers.io.lineage`; with
        `limit`, the nearest ``limit + 1`` at most: one more than `limit` says there are more)."""
        found = [out for out in map(self.output_of, step_ids) if out is not None]
        return lineage(found, self.output_of, untrusted_only=untrusted_only, limit=limit) if found else []


def replay(events: Iterable[Any], plan: Plan | None = None) -> RunView:
    """Rebuild a run from its events, in order; `plan` names the workers and actions of steps that never started."""
    known = {s.step_id: s for s in plan.steps} if plan is not None else {}
    steps: dict[str, StepRecord] = {}
    superseded: dict[str, StepRecord] = {}
    sub_events: dict[str, list[dict[str, Any]]] = {}
    run: dict[str, Any] = {}

    def record(step_id: str) -> StepRecord:
        rec = steps.get(step_id)
        if rec is None:
            step = known.get(step_id)
            rec = steps[step_id] = StepRecord(step_id=step_id, worker=step.worker if step else "", action=step.action if step else "")
        return rec

    segment: list[datetime] = []  # the current process's first and last event times
    worked = 0.0
    processes = 0
    for ev in events:
        kind = ev.type
        run.setdefault("run_id", ev.run_id)
        run["last_seq"] = ev.seq
        if kind in ("run_started", "run_resumed"):
            if segment:  # the process before ended (finished, or killed) at its last event
                worked += (segment[1] - segment[0]).total_seconds()
            segment = [ev.at, ev.at]
            processes += 1
        elif segment:
            segment[1] = max(segment[1], ev.at)
        if kind == "run_started":
            run.update(goal=ev.goal, plan_id=ev.plan_id, plan_version=ev.plan_version, started_at=ev.at)
            for sid in ev.step_ids:
                record(sid)
        elif kind == "plan_step_parsed":
            rec = record(ev.step_id)
            rec.worker, rec.action = ev.worker, ev.action
        elif kind == "plan_revised":
            kept = set(ev.diff.kept)
            for sid in [s for s in steps if s not in kept]:
                superseded[sid] = steps.pop(sid)
            known = {s.step_id: s for s in ev.plan.steps}
            run["plan_version"] = ev.version
            for sid in ev.step_ids:
                record(sid)
        elif kind == "sub_run_event":
            sub_events.setdefault(ev.step_id, []).append(ev.event)
        elif kind == "run_resumed":  # running again: what the earlier RunFinished said no longer holds
            run.update(
                status=RunStatus.RUNNING,
                reason=None,
                finished_at=None,
                wall_time=None,
                error=None,
                answer=None,
                answer_untrusted=[],
                due=None,
            )
        elif kind == "run_finished":
            run.update(
                status=ev.status,
                reason=ev.reason,
                answer=ev.answer,
                answer_untrusted=ev.answer_untrusted,
                wall_time=ev.wall_time,
                usage=ev.usage,
                error=ev.error,
                finished_at=ev.at,
                due=ev.due,
            )
        elif getattr(ev, "step_id", None) is not None:
            _step_event(record(ev.step_id), ev)
    if segment:
        worked += (segment[1] - segment[0]).total_seconds()
    in_flight = [sid for sid, rec in steps.items() if rec.state is StepState.RUNNING]
    return RunView(
        steps=steps, superseded=superseded, in_flight=in_flight, sub_events=sub_events, processes=processes, worked=worked, **run
    )


def _step_event(rec: StepRecord, ev: Any) -> None:
    """Apply one step event to the step's record."""
    kind = ev.type
    if kind == "step_ready":
        rec.state = StepState.READY
    elif kind == "step_scheduled":
        rec.state, rec.due = StepState.SCHEDULED, ev.due
    elif kind == "step_started":
        rec.state, rec.attempts, rec.worker, rec.action = StepState.RUNNING, ev.attempt, ev.worker, ev.action
        rec.model = ev.model
        if rec.started_at is None:
            rec.started_at = ev.at
    elif kind == "step_succeeded":
        rec.state, rec.output, rec.error, rec.finished_at = StepState.SUCCEEDED, ev.output, None, ev.at
        rec.wall_time += ev.wall_time
        rec.usage = rec.usage + ev.usage
        if ev.model is not None:
            rec.model_attempts.append(ModelAttempt(attempt=ev.attempt, model=ev.model, usage=ev.usage))
    elif kind == "step_failed":
        rec.error, rec.worker = ev.error, ev.worker
        rec.wall_time += ev.wall_time
        rec.usage = rec.usage + ev.usage
        rec.reason = f"failure action: {ev.then}" if ev.then != "escalate" else "its cascade moved on to its next model"
        if ev.model is not None:
            rec.model_attempts.append(ModelAttempt(attempt=ev.attempt, model=ev.model, usage=ev.usage, error=ev.error, then=ev.then))
        if ev.then in ("retry", "fallback", "escalate"):
            rec.state = StepState.READY  # between attempts: nothing is running
        else:
            rec.state, rec.finished_at = StepState.FAILED, ev.at
    elif kind == "step_judged":
        rec.verdicts.append(
            {
                "attempt": ev.attempt,
                "critic": ev.critic,
                "approved": ev.approved,
                "judged": ev.judged,
                "reasons": ev.reasons,
                "tools_used": ev.tools_used,
            }
        )
    elif kind == "tool_call_decided":
        rec.calls.append(ev.call)
    elif kind == "step_rerouted":
        rec.worker = ev.to_worker
    elif kind == "step_routed":
        rec.model = ev.start
    elif kind == "step_escalated":
        rec.model = ev.to_model
    elif kind in ("step_skipped", "step_cancelled"):
        rec.state = StepState.SKIPPED if kind == "step_skipped" else StepState.CANCELLED
        rec.reason, rec.finished_at = ev.reason, ev.at
