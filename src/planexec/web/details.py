"""The details a run's page gives beyond states and timings: where each input came from, what judged each step, what each role used.

Owns `resolved_inputs` (a step's parameters with the run's recorded outputs
put in for its references, each with its provenance: the reviewed plan,
or the step whose output it is, the tools that made that output and the
sources it derives from, untrusted ones marked), `criteria_results` (each
success criterion of the step and how it fared: passed, failed at an
attempt with the check's message, or not reached), `usage_by_role` (the
run's usage per role, read from its events the way `RunResult.usage_by_role`
adds it up: the planner's drafts and revisions, each worker's steps,
superseded ones included, the joiner, and the rest of the run's total:
the router and the synthesizer), `plan_review` (the project's policies'
verdicts on a plan version, against the last version a person approved)
and `describe_usage` (one line with cached tokens and cost). Pure reads of
the store's records; the engine's `replay` rebuilt them. Imports `plan`,
`engine` records, `governance` and `usage`; never the store's writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from planexec import Plan, Step, StepRecord, StepState, Usage
from planexec.plan import criterion_label, find_references, resolve_references
from planexec.policies import Policy, PolicyContext, Review, review_plan
from planexec.store import RunView

__all__ = ["criteria_results", "describe_usage", "plan_review", "resolved_inputs", "usage_by_role"]


def describe_usage(u: Usage) -> str:
    """``1200 tokens in (800 cached), 300 out, 2 model calls, $0.0012``; ``no model calls`` for tool-only work."""
    if u.is_zero():
        return "no model calls"
    return f"{u.input_tokens} tokens in{u.describe_cache()}, {u.output_tokens} out, {u.model_calls} model calls, {u.describe_cost()}"


def resolved_inputs(step: Step, view: RunView, outputs: Mapping[str, Any] | None = None, *, shown: int = 8) -> list[dict[str, Any]]:
    """Each parameter of `step` as the worker got it (references filled in from the recorded outputs) and where it came from.

    `outputs`: the run's output values by step id (read from `view` when not given; a page of many steps reads them
    once). Each input names its nearest `shown` origins, and says when there are more upstream.
    """
    if outputs is None:
        outputs = {sid: rec.output.value for sid, rec in view.steps.items() if rec.output is not None}
    rows = []
    for name, value in step.parameters.items():
        refs = list(dict.fromkeys(find_references(value)))
        sources: list[str] = []
        untrusted = False
        for sid, path in refs:
            rec = view.steps.get(sid)
            where = f"the output of step {sid}" + (f" at {path}" if path else "")
            if rec is None or rec.output is None:
                sources.append(f"{where} (not there yet)")
                continue
            prov = rec.output.provenance
            made = f"{prov.worker}.{prov.action}" + (f" with {', '.join(prov.tools)}" if prov.tools else "")
            origins = [s.label() for s in view.origins([sid], limit=shown)]
            more = ", and more upstream" if len(origins) > shown else ""
            untrusted = untrusted or prov.untrusted
            sources.append(
                f"{where}, made by {made} (attempt {prov.attempt})"
                + (f"; derives from {', '.join(origins[:shown])}{more}" if origins else "")
            )
        if not refs:
            sources.append("the reviewed plan (written as is)")
        try:
            shown = resolve_references(value, outputs) if all(sid in outputs for sid, _ in refs) else value
        except (LookupError, TypeError):
            shown = value
        rows.append({"name": name, "value": _text(shown), "sources": sources, "untrusted": untrusted, "resolved": bool(refs)})
    return rows


def criteria_results(step: Step, rec: StepRecord, events: Iterable[Any]) -> list[str]:
    """Each success criterion of `step` and how it fared, in words (one line each; a failed check names its attempt)."""
    if not step.success_criteria:
        return []
    failed = [f"attempt {e.attempt} failed its check: {e.error.message}" for e in events
              if e.type == "step_failed" and e.step_id == step.step_id and e.error.rule == "check_failed"]  # fmt: skip
    if rec.state is StepState.SUCCEEDED:
        outcome = "passed" + (f" at attempt {rec.attempts}" if failed else "")
    elif rec.state in (StepState.PENDING, StepState.READY, StepState.RUNNING):
        outcome = "not checked yet"
    elif failed:
        outcome = "failed"
    else:
        outcome = f"not checked (the step {rec.state.value})"
    return [f"{criterion_label(c)}: {outcome}" for c in step.success_criteria] + failed


def usage_by_role(view: RunView, events: Iterable[Any], total: Usage) -> list[tuple[str, Usage]]:
    """The run's usage per role (see the module docstring), the largest cost first; roles that used nothing are left out."""
    roles: dict[str, Usage] = {}

    def add(role: str, used: Usage) -> None:
        if not used.is_zero():
            roles[role] = roles.get(role, Usage()) + used

    for e in events:
        if e.type in ("plan_drafted", "plan_revised"):
            add("planner", e.usage)
        elif e.type == "joiner_decided":
            add("joiner", e.usage)
    for rec in [*view.steps.values(), *view.superseded.values()]:
        add(rec.worker or "steps", rec.usage)
    counted = sum(roles.values(), Usage())
    rest = _minus(total, counted)
    if rest is not None:
        add("router and synthesizer", rest)
    return sorted(roles.items(), key=lambda kv: (-kv[1].cost, -kv[1].input_tokens, kv[0]))


def _minus(total: Usage, part: Usage) -> Usage | None:
    """What `total` has beyond `part` (the run's total counts work no event names: the router, the synthesizer); None when nothing."""
    fields = ("input_tokens", "output_tokens", "model_calls", "unpriced_calls", "cached_input_tokens", "cache_write_tokens")
    rest = {f: getattr(total, f) - getattr(part, f) for f in fields}
    cost = round(total.cost - part.cost, 10)
    if any(v < 0 for v in rest.values()) or cost < 0 or not (any(rest.values()) or cost):
        return None
    return Usage(**rest, cost=cost)


def plan_review(plan: Plan, policies: list[Policy], previous: Plan | None) -> Review | None:
    """The policies' verdicts on `plan` (against `previous`, the last version a person approved); None without policies."""
    if not policies:
        return None
    return review_plan(plan, policies, PolicyContext(previous=previous))


def _text(value: Any, limit: int = 2000) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
