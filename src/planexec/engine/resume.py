"""Resuming a stopped run: what its stored events say is done, what was cut off, and what a person decided.

Owns `Resumption` (the state a resumed `Run` starts from), `ResumeError`,
and `plan_resumption`, which reads a run's events (rebuilt by
`store.replay`) and sorts its steps: those that ended (succeeded, failed
for good, skipped) stay as they are and never run again; those that had
not started run as usual; a step whose attempt was cut off (the process
died, or the run was cancelled while it ran) runs again only when it is
idempotent, or when a person said ``retry``; otherwise it is held, and the
run ends ``needs_decision`` once nothing else can go on. A person's
decision (`StepResolved`: retry, skip, or mark done with a value) counts
only when it came after the step's last start. Pure: no I/O.
Imports `engine.events`, `engine.replay`, `engine.results`, `plan`, `usage`, `workers.io` and `errors`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from planexec.engine.events import StepResolved, utcnow
from planexec.engine.recording import RunLog, hold_run, let_go, require_intact
from planexec.engine.replay import replay
from planexec.engine.results import PlanVersion, ReplanRequest, RunStatus, StepRecord, StepState
from planexec.errors import PlanexecError
from planexec.plan.model import Plan, Step
from planexec.plan.scheduler import Outcome
from planexec.usage import Usage
from planexec.workers.io import Output, Provenance

__all__ = ["RESUMABLE", "ResumeError", "Resumption", "plan_resumption"]

# how a run may have stopped and still be resumed (RUNNING: it never said, the process died; WAITING: it never started;
# SCHEDULED: its next steps wait for their time)
RESUMABLE = frozenset({RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.NEEDS_DECISION, RunStatus.WAITING, RunStatus.SCHEDULED})


class ResumeError(PlanexecError):
    """A run cannot be resumed (it finished, or it is not in the store); `run_id` names it."""

    def __init__(self, message: str, *, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(message)


@dataclass
class Resumption:
    """Where a resumed run starts: the plan, each step's record and outcome so far, and what to do about cut-off steps."""

    run_id: str
    plan: Plan
    records: dict[str, StepRecord]
    settled: dict[str, Outcome]
    rerun: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    next_seq: int = 0
    started_at: datetime | None = None
    planning: Usage = field(default_factory=Usage)
    overhead: dict[str, Usage] = field(default_factory=dict)
    versions: list[PlanVersion] = field(default_factory=list)
    replan: ReplanRequest | None = None  # a replan asked for and not yet written when the run stopped

    @property
    def kept(self) -> list[str]:
        """Steps that had ended and are kept as they are."""
        return list(self.settled)


def plan_resumption(
    run_id: str,
    events: list[Any],
    versions: list[PlanVersion],
    is_idempotent: Callable[[Step], bool],
) -> Resumption:
    """Sort a stopped run's steps from its events and plan versions; `ResumeError` when it cannot go on."""
    if not events or not versions:
        raise ResumeError(f"run {run_id!r} has no stored events or plan to resume from", run_id=run_id)
    plan = versions[-1].plan
    view = replay(events, plan)
    if view.status not in RESUMABLE:
        raise ResumeError(f"run {run_id!r} already ended {view.status.value}; there is nothing to resume", run_id=run_id)
    last_start: dict[str, int] = {}
    cancelled_running: set[str] = set()
    decisions: dict[str, Any] = {}
    planning = Usage()
    overhead: dict[str, Usage] = {}
    wanted: ReplanRequest | None = None  # the last replan asked for that no revision answered
    for ev in events:
        kind = ev.type
        if kind == "step_started":
            last_start[ev.step_id] = ev.seq
            cancelled_running.discard(ev.step_id)
        elif kind == "step_cancelled" and ev.was_running:
            cancelled_running.add(ev.step_id)
        elif kind == "step_resolved":
            decisions[ev.step_id] = ev
        elif kind == "plan_drafted":
            planning = planning + ev.usage
        elif kind == "joiner_decided":
            overhead["joiner"] = overhead.get("joiner", Usage()) + ev.usage
            if ev.action == "replan":
                wanted = ReplanRequest(reason=f"the joiner asked for a new plan: {ev.reason}", source="joiner")
        elif kind == "step_failed" and ev.then == "replan":
            source = "check_failed" if ev.error.rule == "check_failed" else "failure_action"
            wanted = ReplanRequest(
                step_id=ev.step_id, reason=f"step {ev.step_id!r} failed: {ev.error.render()}", error=ev.error, source=source
            )
        elif kind == "plan_revised":
            wanted = None
    resumption = Resumption(
        run_id=run_id,
        plan=plan,
        records={},
        settled={},
        next_seq=view.last_seq + 1,
        started_at=view.started_at,
        planning=planning,
        overhead=overhead,
        versions=versions,
        replan=wanted,
    )
    for step in plan.steps:
        sid = step.step_id
        rec = view.steps.get(sid) or StepRecord(step_id=sid, worker=step.worker, action=step.action)
        resumption.records[sid] = rec
        state = rec.state
        if state is StepState.SUCCEEDED:
            resumption.settled[sid] = Outcome.SUCCEEDED
        elif state is StepState.FAILED:
            resumption.settled[sid] = Outcome.FAILED
        elif state is StepState.SKIPPED:
            resumption.settled[sid] = Outcome.SKIPPED
        elif state in (StepState.RUNNING, StepState.NEEDS_DECISION) or sid in cancelled_running:
            decision = decisions.get(sid)
            if decision is not None and decision.seq > last_start.get(sid, -1):
                _apply(resumption, step, rec, decision)
            elif is_idempotent(step.on_worker(rec.worker)):
                # judged by the worker it was running on: a fallback that took the step over may have side effects
                rec.state = StepState.PENDING
                resumption.rerun.append(sid)
            else:
                rec.state = StepState.NEEDS_DECISION
                rec.reason = "it was running when the run stopped and is not idempotent: retry, skip or mark it done"
                resumption.held.append(sid)
        else:  # pending, ready, scheduled, between attempts, or cancelled before it started: it simply runs (a scheduled one waits again)
            rec.state = StepState.PENDING
            rec.reason = None
    return resumption


def _apply(resumption: Resumption, step: Step, rec: StepRecord, decision: Any) -> None:
    """A person's decision about a cut-off step."""
    sid = step.step_id
    if decision.decision == "retry":
        rec.state, rec.reason = StepState.PENDING, f"retried by {decision.by}"
        resumption.rerun.append(sid)
    elif decision.decision == "skip":
        rec.state, rec.reason, rec.finished_at = StepState.SKIPPED, f"skipped by {decision.by}", decision.at
        resumption.settled[sid] = Outcome.SKIPPED
    else:
        prov = Provenance(
            run_id=resumption.run_id,
            plan_id=resumption.plan.plan_id,
            plan_version=resumption.plan.version,
            step_id=sid,
            worker=decision.by,
            action=step.action,
            attempt=rec.attempts,
        )
        rec.state, rec.output, rec.error = StepState.SUCCEEDED, Output(value=decision.value, provenance=prov), None
        rec.reason, rec.finished_at = f"marked done by {decision.by}", decision.at
        resumption.settled[sid] = Outcome.SUCCEEDED


DECISIONS = ("retry", "skip", "mark_done")


def resolve_step(store: RunLog, run_id: str, step_id: str, decision: str, value: Any = None, *, by: str = "person") -> Any:
    """Record a person's decision about a held step (`StepResolved`), for the next `Engine.resume` to apply.

    Refused with `ResumeError` (nothing stored) when the run finished or the
    step was not cut off mid-attempt, and with `LeaseHeldError` when another
    live process is running the run, and with `TamperedError` when its
    stored records changed after they were written. Returns the event.
    """
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, not {decision!r}")
    require_intact(store, run_id)  # `TamperedError`: a decision about changed records would vouch for them
    summary = store.run(run_id)
    if summary.status not in (RunStatus.NEEDS_DECISION, RunStatus.CANCELLED, RunStatus.RUNNING):
        raise ResumeError(f"run {run_id!r} ended {summary.status.value}; there is nothing to decide", run_id=run_id)
    hold_run(store, run_id)  # `LeaseHeldError` while a process runs it; and no resume starts while the decision is written
    try:
        return _resolve(store, run_id, step_id, decision, value, by)
    finally:
        let_go(store, run_id)


def _resolve(store: RunLog, run_id: str, step_id: str, decision: str, value: Any, by: str) -> Any:
    events = store.events(run_id)
    view = replay(events)
    rec = view.steps.get(step_id)
    cut_off = {ev.step_id for ev in events if ev.type == "step_cancelled" and ev.was_running}
    if rec is None:
        raise ResumeError(f"run {run_id!r} has no step {step_id!r}", run_id=run_id)
    if rec.state not in (StepState.RUNNING, StepState.NEEDS_DECISION) and step_id not in cut_off:
        raise ResumeError(f"step {step_id!r} of run {run_id!r} is {rec.state.value}, not waiting for a decision", run_id=run_id)
    event = StepResolved(run_id=run_id, seq=view.last_seq + 1, at=utcnow(), step_id=step_id, decision=decision, value=value, by=by)  # type: ignore[arg-type]  # a str checked against DECISIONS above
    store.append([event])
    return event
