"""What the console's pages show, read from the run store: plain data for the templates, nothing rendered here but SVG.

Owns `run_rows` (the runs page: state, goal, start, duration, steps,
cost; filtered by state and searched by goal), `run_detail` (one run
rebuilt from its events by `replay`: each step with its definition and
record, its inputs as resolved with their provenance, its criteria's
results, the policies' verdicts and approvals about it (see `details`),
the plan as a graph, the timeline, the plan's versions with the changes
of each against the one before, the approvals, usage per role, and the
policies' verdicts on a version that waits for review), `live_state` (the
small snapshot the live stream pushes) and `inbox` (pending approvals,
each said in words: a plan version, a step, or one tool call in a step).
Reads only: every write goes through `actions`. Imports the store's
protocol and records, `replay`, `plan`, `details` and `graph`; never the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from planexec import Plan, RunStatus, Step, StepRecord
from planexec.plan import when_text
from planexec.policies import Policy, Review
from planexec.runs import PlanVersion, describe_refused
from planexec.store import Approval, ApprovalState, RunStore, RunSummary, RunView, replay
from planexec.web.details import criteria_results, describe_usage, plan_review, resolved_inputs, usage_by_role
from planexec.web.graph import plan_svg, timeline_svg
from planexec.web.paths import segment

__all__ = ["ORIGINS_SHOWN", "STATES", "RunDetail", "inbox", "live_state", "run_detail", "run_rows", "step_lineage"]

# the states a person can filter the runs page by: the stored ones and `interrupted` (running, but its process died)
STATES = [s.value for s in RunStatus] + ["interrupted"]


def run_rows(store: RunStore, *, state: str | None = None, query: str = "", limit: int = 200) -> list[dict[str, Any]]:
    """The newest runs (at most `limit`) as rows of the runs page, only those in `state` and whose goal or id contains `query`."""
    if state == "interrupted":
        runs = [r for r in store.runs(limit=None, status=RunStatus.RUNNING) if r.interrupted]
    elif state:
        runs = store.runs(limit=None, status=state)
    else:
        runs = store.runs(limit=None)
    needle = query.strip().lower()
    if needle:
        runs = [r for r in runs if needle in r.goal.lower() or needle in r.run_id.lower()]
    return [_row(r) for r in runs[:limit]]


def _row(r: RunSummary) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "state": r.state,
        "goal": r.goal,
        "started": f"{r.started_at:%Y-%m-%d %H:%M:%S}",
        "duration": _duration(r),
        "steps": r.step_count,
        "cost": r.usage.describe_cost(),
        "parent": r.parent_run_id,
    }


def _duration(r: RunSummary) -> str:
    if r.wall_time is not None:
        return f"{r.wall_time:.2f}s"
    if r.interrupted:
        return "stopped short"
    return f"running for {(datetime.now(UTC) - r.started_at).total_seconds():.0f}s"


@dataclass
class RunDetail:
    """One run as its page shows it (see `run_detail`)."""

    summary: RunSummary
    view: RunView
    plan: Plan | None
    versions: list[dict[str, Any]]
    steps: list[dict[str, Any]]
    approvals: list[Approval]
    pending_plan: Approval | None
    graph: str
    timeline: str
    events: int
    answer: str | None = None
    answer_warning: str = ""  # the answer holds untrusted text: from where (`RunView.answer_warning`)
    state: dict[str, Any] = field(default_factory=dict)
    roles: list[tuple[str, str]] = field(default_factory=list)  # (role, its usage in words), the costliest first
    usage: str = ""
    refused: str = ""  # the calls the gate refused, by rule, in words ("" when none were)
    review: Review | None = None  # the policies' verdicts on the version that waits for review
    pending_version: int | None = None  # the version that waits, when it is stored (an edit may answer it)


def run_detail(store: RunStore, run_id: str, *, policies: list[Policy] | None = None) -> RunDetail:
    """The run `run_id` rebuilt from the store; `RunNotFoundError` (a `StoreError`) for an unknown id.

    `policies` (the project's) review a plan version that waits for approval.
    """
    summary = store.run(run_id)
    events = store.events(run_id)
    stored = store.plan_versions(run_id)
    approvals = store.approvals(run_id)
    plan = stored[-1].plan if stored else None
    view = replay(events, plan)
    states = {sid: rec.state.value for sid, rec in view.steps.items()}
    definitions = {s.step_id: s for v in stored for s in v.plan.steps}  # the latest definition of each step
    pending = [a for a in approvals if a.step_id is None and a.state is ApprovalState.PENDING]
    waiting = next((v for a in reversed(pending) for v in stored if v.plan.content_hash == a.content_hash), None)
    review = _review(waiting, stored, approvals, policies or [])
    # read once for the page, not once a step: each step's panel takes its own share (a page of n steps is linear in n)
    values = {sid: rec.output.value for sid, rec in view.steps.items() if rec.output is not None}
    events_of: dict[str, list[Any]] = {}
    for ev in events:
        sid = getattr(ev, "step_id", None)
        if sid is not None:
            events_of.setdefault(sid, []).append(ev)
    approvals_of: dict[str | None, list[Approval]] = {}
    for a in approvals:
        approvals_of.setdefault(a.step_id, []).append(a)
    steps = [
        _step(sid, rec, definitions.get(sid), view, events_of.get(sid, []), approvals_of.get(sid, []), review, plan, values)
        for sid, rec in view.steps.items()
    ]
    return RunDetail(
        summary=summary,
        view=view,
        plan=plan,
        versions=_versions(stored),
        steps=steps,
        approvals=approvals,
        pending_plan=pending[-1] if pending else None,
        graph=plan_svg(plan, states, notes=_due_notes(view)) if plan is not None else "",
        timeline=timeline_svg(view.steps, view.started_at, now=datetime.now(UTC)),
        events=len(events),
        answer=_text(view.answer) if summary.finished and view.answer is not None else None,
        answer_warning=view.answer_warning() if summary.finished and view.answer is not None else "",
        state=_state(summary, view),
        roles=[(role, describe_usage(u)) for role, u in usage_by_role(view, events, summary.usage)],
        usage=describe_usage(summary.usage),
        refused=describe_refused(view.refused_calls()),
        review=review,
        pending_version=waiting.version if waiting is not None else None,
    )


def _due_notes(view: RunView) -> dict[str, str]:
    """A scheduled step's time, short, for its node in the graph (UTC: the page's readers may be anywhere)."""
    return {sid: f"{rec.due.astimezone(UTC):%a %H:%M} UTC" for sid, rec in view.steps.items() if rec.state.value == "scheduled" and rec.due}


def _review(waiting: PlanVersion | None, stored: list[PlanVersion], approvals: list[Approval], policies: list[Policy]) -> Review | None:
    """The policies' verdicts on the waiting version, against the last version a person approved before it."""
    if waiting is None:
        return None
    approved = {a.content_hash for a in approvals if a.step_id is None and a.state is ApprovalState.APPROVED}
    before = [v.plan for v in stored if v.version < waiting.version and v.plan.content_hash in approved]
    return plan_review(waiting.plan, policies, before[-1] if before else None)


def live_state(store: RunStore, run_id: str) -> dict[str, Any]:
    """What the live stream pushes after new events: the run's state and each step's, and the seq of the last event."""
    summary = store.run(run_id)
    stored = store.plan_versions(run_id)
    view = replay(store.events(run_id), stored[-1].plan if stored else None)
    return _state(summary, view)


def _state(summary: RunSummary, view: RunView) -> dict[str, Any]:
    return {
        "run": summary.state,
        "finished": summary.finished,
        "reason": summary.reason,
        "version": summary.plan_version,
        "steps": {sid: rec.state.value for sid, rec in view.steps.items()},
        "seq": view.last_seq,
    }


def _step(
    sid: str,
    rec: StepRecord,
    step: Step | None,
    view: RunView,
    events: list[Any],
    approvals: list[Approval],
    review: Review | None,
    plan: Plan | None = None,
    values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One step's panel: its definition (instruction, inputs as resolved, dependencies), its record (output and where it came
    from, error, timings, calls), and what judged it (criteria, critics, policies, people). `events` and `approvals` are the
    step's own; `values` the run's outputs by step id.

    Work a step does not grow with the run: an output names its nearest origins (`ORIGINS_SHOWN`) and its untrusted ones
    from its provenance's summary, with a link to its whole lineage when there are more (`step_lineage`). A step
    without an output (a refusal, a failure) shows every untrusted origin of its inputs: few steps fail.
    """
    prov = rec.output.provenance if rec.output is not None else None
    produced, more_origins = _produced(rec, view)
    t0 = view.started_at
    view_plan = plan

    def offset(at: datetime | None) -> str | None:
        return f"+{(at - t0).total_seconds():.3f}s" if at is not None and t0 is not None else None

    return {
        "step_id": sid,
        "state": rec.state.value,
        "worker": rec.worker or (step.worker if step else ""),
        "action": rec.action or (step.action if step else ""),
        "instruction": step.instruction if step else None,
        "inputs": resolved_inputs(step, view, values) if step is not None else [],
        "after": list(step.dependencies) if step is not None else [],
        "requires_approval": bool(step.requires_approval) if step is not None else False,
        "when": when_text(view_plan, step) if step is not None and view_plan is not None else "",
        "due": f"{rec.due.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if rec.state.value == "scheduled" and rec.due else None,
        "attempts": rec.attempts,
        "models": [  # each attempt on a model its cascade or a router chose: which, what it cost, how it ended
            f"attempt {a.attempt} on {a.model}: {describe_usage(a.usage)}: "
            + ("succeeded" if a.error is None else f"{a.error.rule} → {a.then}")
            for a in rec.model_attempts
        ],
        "started": offset(rec.started_at),
        "finished": offset(rec.finished_at),
        "wall": f"{rec.wall_time:.3f}s",
        "usage": describe_usage(rec.usage),
        "output": _text(rec.output.value) if rec.output is not None else None,
        "produced": produced,
        "untrusted": prov.untrusted_labels() if prov is not None else [],
        "more_untrusted": prov is not None and prov.more_untrusted,
        "lineage": _lineage_link(view.run_id, sid) if prov is not None and (prov.more_untrusted or more_origins) else None,
        # no output (a refused call, a failure): what its inputs brought in, the whole chain
        "inputs_untrusted": (
            [s.label() for s in view.origins(sorted(step.references), untrusted_only=True)]
            if rec.output is None and step is not None and step.references
            else []
        ),
        "criteria": criteria_results(step, rec, events) if step is not None else [],
        "policies": [v.render() for v in review.verdicts if sid in v.steps] if review is not None else [],
        "approvals": [_approval_line(a) for a in approvals],
        "error": f"{rec.error.rule}: {rec.error.type}: {rec.error.message}" if rec.error is not None else None,
        "reason": rec.reason,
        "verdicts": [
            f"attempt {v.get('attempt')} · {v.get('critic')}: {'approved' if v.get('approved') else 'rejected'}: "
            + "; ".join(map(str, v.get("reasons", [])))
            for v in rec.verdicts
        ],
        "calls": [
            f"{c.worker} → {c.tool}({_text(c.arguments)}): "
            + ("ran" if c.ran else "allowed, not run" if c.allowed else f"refused ({c.rule}: {c.reason})")
            + (f", error: {c.error}" if c.error else "")
            for c in rec.calls
        ],
    }


# the origins a step's panel names; more are one link away (`step_lineage`)
ORIGINS_SHOWN = 8


def _produced(rec: StepRecord, view: RunView) -> tuple[str | None, bool]:
    """Where the step's output came from: its worker and action, the tools that ran, the attempt, its inputs, its nearest
    origins (`ORIGINS_SHOWN`; "and more upstream" when there are more); and whether there are more."""
    if rec.output is None:
        return None, False
    prov = rec.output.provenance
    tools = f" with {', '.join(prov.tools)}" if prov.tools else ""
    inputs = f"; takes the output of {', '.join(prov.inputs)}" if prov.inputs else ""
    origins = view.origins([prov.step_id], limit=ORIGINS_SHOWN)
    more = len(origins) > ORIGINS_SHOWN
    named = ", ".join(s.label() for s in origins[:ORIGINS_SHOWN])
    sources = f"; derives from {named}{', and more upstream' if more else ''}" if origins else "; derives from the reviewed plan alone"
    return f"{prov.worker}.{prov.action}{tools}, attempt {prov.attempt}, plan v{prov.plan_version}{inputs}{sources}", more


def _lineage_link(run_id: str, sid: str) -> str:
    return f"/runs/{segment(run_id)}/steps/{segment(sid)}/lineage"


def step_lineage(store: RunStore, run_id: str, step_id: str) -> dict[str, Any] | None:
    """Every origin of one step's output, upstream included (or, for a step without one, of its inputs), and the untrusted
    ones among them: the whole chain a step's panel links to. None for a step the run does not have;
    `RunNotFoundError` for an unknown run. Work in proportion to the step's ancestry, done when asked."""
    stored = store.plan_versions(run_id)
    view = replay(store.events(run_id), stored[-1].plan if stored else None)
    rec = view.steps.get(step_id) or view.superseded.get(step_id)
    if rec is None:
        return None
    step = next((s for v in reversed(stored) for s in v.plan.steps if s.step_id == step_id), None)
    if rec.output is not None:
        of, whose = [step_id], f"the output of step {step_id}"
    else:
        of, whose = sorted(step.references) if step is not None else [], f"the inputs of step {step_id}"
    return {
        "run_id": run_id,
        "step_id": step_id,
        "whose": whose,
        "origins": [s.label() for s in view.origins(of)],
        "untrusted": [s.label() for s in view.origins(of, untrusted_only=True)],
    }


def _approval_line(a: Approval) -> str:
    """``#3 approved by alice: looks right`` (or ``pending``)."""
    who = f" by {a.by}" if a.by else ""
    return f"#{a.approval_id} {a.state.value}{who}" + (f": {a.reason}" if a.reason else "")


def _versions(stored: list[PlanVersion]) -> list[dict[str, Any]]:
    """Each plan version, with a side-by-side comparison of its steps against the version before."""
    out = []
    previous: Plan | None = None
    for v in stored:
        rows = []
        if previous is not None and v.diff is not None:
            old = {s.step_id: s for s in previous.steps}
            new = {s.step_id: s for s in v.plan.steps}
            for sid in list(dict.fromkeys([*old, *new])):
                kind = (
                    "added"
                    if sid in v.diff.added
                    else "removed"
                    if sid in v.diff.removed
                    else "changed"
                    if sid in v.diff.changed
                    else "kept"
                )
                rows.append(
                    {
                        "step_id": sid,
                        "kind": kind,
                        "fields": v.diff.changed.get(sid, []),
                        "old": _step_json(old[sid]) if sid in old else "",
                        "new": _step_json(new[sid]) if sid in new else "",
                    }
                )
        out.append(
            {
                "version": v.version,
                "reason": v.reason,
                "steps": len(v.plan.steps),
                "hash": v.plan.content_hash,
                "diff": v.diff.render() if v.diff is not None else None,
                "rows": rows,
            }
        )
        previous = v.plan
    return out


def _step_json(step: Step) -> str:
    return json.dumps(step.model_dump(mode="json", by_alias=True, exclude_defaults=True), indent=2, ensure_ascii=False)


def inbox(store: RunStore) -> list[dict[str, Any]]:
    """Every pending approval, oldest first, with what it is about in words."""
    found = store.approvals(pending_only=True)
    return [{"approval": a, **describe(store, a)} for a in found]


def describe(store: RunStore, approval: Approval) -> dict[str, Any]:
    """What an approval is about: ``kind`` (plan, step or call), ``what`` and ``details`` in words, and the run's goal."""
    goal = store.run(approval.run_id).goal
    asked = [e for e in store.events(approval.run_id) if e.type == "approval_requested" and e.content_hash == approval.content_hash]
    versions = store.plan_versions(approval.run_id)
    if approval.step_id is None:
        stored = [v for v in versions if v.plan.content_hash == approval.content_hash]
        version = stored[-1].version if stored else (asked[-1].plan_version if asked else None)
        if stored:
            details = f"{len(stored[-1].plan.steps)} steps: {', '.join(stored[-1].plan.step_ids)}"
        else:
            details = "a revision of the plan, stored once approved"
        return {"kind": "plan", "what": f"plan v{version}" if version else "the plan", "details": details, "goal": goal,
                "editable": bool(stored)}  # fmt: skip
    call = next((e.call for e in asked if e.call is not None), None)
    if call is not None:
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)[:80]}" for k, v in sorted(call.arguments.items()))
        why = f" ({call.rule}: {call.reason})" if call.rule else ""
        return {"kind": "call", "what": f"a tool call in step {call.step_id}", "details": f"{call.worker} calls {call.tool}({args}){why}",
                "goal": goal, "editable": False}  # fmt: skip
    steps = [s for v in versions for s in v.plan.steps if s.step_id == approval.step_id]
    step = steps[-1] if steps else None
    details = f"{step.worker}.{step.action}" + (f": {step.instruction}" if step.instruction else "") if step else "(not in the stored plan)"
    return {"kind": "step", "what": f"step {approval.step_id}", "details": details, "goal": goal, "editable": False}


def _text(value: Any, limit: int = 4000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
