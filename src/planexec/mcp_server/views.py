"""Runs and approvals read back from the run store, as the MCP server's tools answer them.

Owns what a caller sees of a stored run (`run_details`, `run_lines`), of
what waits for a person (`pending_approvals`, each described: a plan
version, a step, or one tool call, with the command a person decides it
with), the face's name for a run's state (`face_state`: a run stored by
`planned` and not started yet is ``planned``, a live run with a pending
approval ``waiting_for_approval``) and the sentence that says what happens
next (`next_step`). Step outputs longer than `OUTPUT_LIMIT` characters of
JSON are cut (``planexec show RUN --json`` has them whole). Everything is
redacted (`secrets.redact`) before it leaves. Synchronous: the caller runs
these in a thread. Imports the store and the public records.
"""

from __future__ import annotations

import json
from typing import Any

from planexec import RunStatus, StepRecord, StepState
from planexec.mcp_server.answers import PendingApproval, RunDetails, RunLine, StepLine
from planexec.runs import PlanVersion, redact
from planexec.store import Approval, RunStore, RunSummary, replay

__all__ = ["OUTPUT_LIMIT", "STATES", "face_state", "next_step", "pending_approvals", "run_details", "run_lines"]

OUTPUT_LIMIT = 20_000
# what list_runs filters on: the store's statuses, a run whose process died, and the two states of a run that waits
STATES = (*(s.value for s in RunStatus), "interrupted", "waiting_for_approval", "queued")


def face_state(summary: RunSummary, *, waiting: bool) -> str:
    """``waiting_for_approval`` (a run `waiting` for a person: stored, or live), ``queued`` (approved, not taken yet), else
    the store's state (``interrupted`` too)."""
    if summary.status is RunStatus.WAITING:
        return "waiting_for_approval" if waiting else "queued"
    if summary.status is RunStatus.RUNNING and not summary.interrupted and waiting:
        return "waiting_for_approval"
    return summary.state


def next_step(summary: RunSummary, state: str, pending: list[PendingApproval]) -> str:
    """What happens next to the run, and who does it, in one sentence for the caller."""
    run_id = summary.run_id
    asked = "; ".join(f"{p.what}: {p.decide_with}" for p in pending)
    if state == "queued":
        return "approved: the next free worker runs it (this server's own, or a planexec worker fleet)"
    if state == "waiting_for_approval" and summary.status is RunStatus.WAITING:
        return f"nothing runs yet: a person approves {asked} (or in the console, planexec serve); a worker runs it once approved"
    if state == "waiting_for_approval":
        return f"it waits for a person to decide {asked}; show_run({run_id!r}) follows it"
    if state == "interrupted":
        return f"the process that ran it died: a person continues it with: planexec resume {run_id}"
    if summary.status is RunStatus.RUNNING:
        return f"it is running; show_run({run_id!r}) follows it"
    if summary.status is RunStatus.SCHEDULED:
        return f"its next steps wait for their time ({summary.reason}); a worker resumes it when due; show_run({run_id!r}) follows it"
    if summary.status is RunStatus.NEEDS_DECISION:
        return f"it stopped for a person's decision about a step: planexec show {run_id}, planexec resolve, then planexec resume"
    return f"it ended {summary.status.value}" + (f": {summary.reason}" if summary.reason else "")


def pending_approvals(store: RunStore, run_id: str | None = None) -> list[PendingApproval]:
    """What waits for a person (of one run, or of all), oldest first, each described."""
    found = store.approvals(run_id, pending_only=True)
    runs: dict[str, tuple[list[PlanVersion], list[Any]]] = {}
    described = []
    for a in found:
        if a.run_id not in runs:
            events = store.events(a.run_id) if any(b.step_id and b.run_id == a.run_id for b in found) else []
            runs[a.run_id] = (store.plan_versions(a.run_id), events)
        described.append(_describe(a, *runs[a.run_id]))
    return redact(described)


def _describe(a: Approval, versions: list[PlanVersion], events: list[Any]) -> PendingApproval:
    """One pending approval: what it is about and how a person decides it."""
    fields: dict[str, Any] = {
        "approval_id": a.approval_id,
        "run_id": a.run_id,
        "step_id": a.step_id,
        "content_hash": a.content_hash,
        "requested_at": a.requested_at.isoformat(),
    }
    if a.step_id is None:
        version = next((v for v in versions if v.plan.content_hash == a.content_hash), None)
        what = f"plan v{version.version}" if version is not None else "a revision of the plan"
        if version is None:
            details = "a new version the run wrote, stored once approved"
        else:
            details = f"{len(version.plan.steps)} steps: {', '.join(version.plan.step_ids)}"
            details += f"\n{version.diff.render()}" if version.diff is not None else ""
        return PendingApproval(kind="plan", what=what, details=details, decide_with=f"planexec approve {a.run_id}", **fields)
    decide = f"planexec approve {a.run_id} --step {a.step_id}"
    calls = [e.call for e in events if e.type == "approval_requested" and e.content_hash == a.content_hash and e.call is not None]
    if calls:
        call = calls[-1]
        arguments = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)[:80]}" for k, v in sorted(call.arguments.items()))
        why = f" ({call.rule}: {call.reason})" if call.rule else ""
        details = f"{call.worker} calls {call.tool}({arguments}){why}"
        return PendingApproval(kind="call", what=f"a tool call in step {a.step_id}", details=details, decide_with=decide, **fields)
    steps = [s for v in versions for s in v.plan.steps if s.step_id == a.step_id]  # its latest definition last
    details = "(not in the stored plan)"
    if steps:
        details = f"{steps[-1].worker}.{steps[-1].action}" + (f": {steps[-1].instruction}" if steps[-1].instruction else "")
    return PendingApproval(kind="step", what=f"step {a.step_id}", details=details, decide_with=decide, **fields)


def run_details(store: RunStore, run_id: str) -> RunDetails:
    """The run as show_run answers it."""
    summary = store.run(run_id)
    events = store.events(run_id)
    versions = store.plan_versions(run_id)
    pending = pending_approvals(store, run_id)
    view = replay(events, versions[-1].plan if versions else None)
    steps = {s.step_id: s for v in versions for s in v.plan.steps}  # the latest definition of each step
    lines = [_step_line(rec, steps[sid].instruction if sid in steps else None) for sid, rec in view.steps.items()]
    state = face_state(summary, waiting=bool(pending))
    if summary.status is RunStatus.WAITING:  # nothing started: its steps wait, they were not cancelled
        lines = [line.model_copy(update={"state": StepState.PENDING.value, "error": None}) for line in lines]
    details = RunDetails(
        run_id=run_id,
        goal=summary.goal,
        state=state,
        reason=summary.reason,
        plan_id=summary.plan_id,
        plan_version=summary.plan_version,
        content_hash=summary.content_hash,
        started_at=summary.started_at.isoformat(),
        finished_at=summary.finished_at.isoformat() if summary.finished_at else None,
        wall_time=summary.wall_time,
        steps=lines,
        pending=pending,
        answer=_clip(view.answer) if summary.finished else None,
        usage=summary.usage.model_dump(mode="json"),
        next=next_step(summary, state, pending),
    )
    return redact(details)


def _step_line(rec: StepRecord, instruction: str | None) -> StepLine:
    return StepLine(
        step_id=rec.step_id,
        state=rec.state.value,
        worker=rec.worker,
        action=rec.action,
        instruction=instruction or None,
        attempts=rec.attempts,
        output=_clip(rec.output.value) if rec.output is not None else None,
        error=rec.error.render() if rec.error is not None else None if rec.state is StepState.SUCCEEDED else rec.reason,
    )


def _clip(value: Any) -> Any:
    """`value` as it is, or, when its JSON is longer than `OUTPUT_LIMIT`, its start as text saying it was cut."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= OUTPUT_LIMIT:
        return value
    return f"{text[:OUTPUT_LIMIT]}… (cut: {len(text)} characters of JSON in all; planexec show RUN --json has it whole)"


def run_lines(store: RunStore, *, state: str | None, limit: int) -> list[RunLine]:
    """The newest runs (only those in `state`, one of `STATES`), at most `limit`."""
    waiting = {a.run_id for a in store.approvals(pending_only=True)}
    if state == "interrupted":  # stored as running: told apart by their leases
        runs = [r for r in store.runs(limit=None, status=RunStatus.RUNNING) if r.interrupted][:limit]
    elif state in ("waiting_for_approval", "queued"):  # told apart by what waits for a person
        found = [*store.runs(limit=None, status=RunStatus.WAITING), *store.runs(limit=None, status=RunStatus.RUNNING)]
        runs = [r for r in found if face_state(r, waiting=r.run_id in waiting) == state][:limit]
    else:
        runs = store.runs(limit=limit, status=state)
    lines = [
        RunLine(
            run_id=r.run_id,
            goal=r.goal,
            state=face_state(r, waiting=r.run_id in waiting),
            started_at=r.started_at.isoformat(),
            finished_at=r.finished_at.isoformat() if r.finished_at else None,
            steps=r.step_count,
            cost=r.cost,
            waiting_for_approval=r.run_id in waiting,
        )
        for r in runs
    ]
    return redact(lines)
