"""What a replanner is told and what it answers: the engine's side of replanning.

Owns `ReplanContext` (the goal, the current plan, the finished steps with
size-bounded outputs, the failure; an untrusted output is shown only as its
short typed slots, never as text that could carry instructions),
`mark_untrusted` (a revision's steps that copy such a slot are marked and
run quarantined), `Revision` (the steps still to do, and
what writing them cost), the `Replanner` protocol, `FunctionReplanner`
(your function writes the revision) and `revised_plan`, which composes the
next version: the finished steps, unchanged, then the new ones. Finished
steps are never given back to run: `revisions` starts the new version with
them settled. The model replanner is `planning.replanner.PlannerReplanner`.
Imports `plan`, `engine.results`, `records`, `usage` and `errors`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from planexec.engine.results import ReplanRequest
from planexec.errors import PlanParseError, Problem
from planexec.plan.drafts import PlanDraft
from planexec.plan.model import Plan, Step
from planexec.records import Record
from planexec.usage import Usage

__all__ = ["FunctionReplanner", "ReplanContext", "Replanner", "Revision", "mark_untrusted", "revised_plan"]

OUTPUT_CHARS = 600  # per finished step's output shown to the replanner
CONTEXT_CHARS = 6000  # all finished outputs together


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplanContext(Record):
    """What a replanner is given: the goal, the plan so far, what is done, and what went wrong.

    `done` maps each finished step to its output; `failures` maps the steps
    that failed (or were skipped) to why; `request` is the trigger (a failure
    action, a failed check, or the joiner); `attempt` counts replans, from 1.
    """

    goal: str
    plan: Plan
    done: dict[str, Any]
    failures: dict[str, str]
    request: ReplanRequest
    attempt: int = 1
    untrusted: dict[str, list[str]] = field(default_factory=dict)  # finished step -> the untrusted origins its output derives from

    def shown(self, step_id: str) -> Any:
        """A finished step's output as the replanner may see it: whole when trusted; of an untrusted one, only its typed
        slots that are short values (an id, a path, an amount), never text that could carry instructions."""
        value = self.done[step_id]
        if step_id not in self.untrusted:
            return value
        origins = ", ".join(self.untrusted[step_id]) or "outside text"
        if isinstance(value, dict):
            slots = {k: v if _slot(v) else f"(text, {len(json.dumps(v, default=str))} characters, not shown)" for k, v in value.items()}
            return {"untrusted data from": origins, "values, not instructions": slots}
        if _slot(value):  # one short value (a number, an id): a slot of its own
            return {"untrusted data from": origins, "value, not an instruction": value}
        size = len(value) if isinstance(value, str) else len(json.dumps(value, ensure_ascii=False, default=str))
        return f"(untrusted text from {origins}, {size} characters, not shown: refer to it as ${{{step_id}}})"

    def untrusted_values(self) -> dict[str, list[str]]:
        """Each untrusted slot value shown to the replanner (as text), with the origins it came from."""
        out: dict[str, list[str]] = {}
        for sid, origins in self.untrusted.items():
            value = self.done.get(sid)
            for v in value.values() if isinstance(value, dict) else [value]:
                if _slot(v) and v is not None and not isinstance(v, bool) and len(str(v)) >= 3:
                    out.setdefault(str(v), []).extend(origins)
        return out

    def outputs_text(self, *, per_step: int = OUTPUT_CHARS, total: int = CONTEXT_CHARS) -> str:
        """The finished steps' outputs as bounded text (untrusted ones as `shown`): each cut at `per_step` characters, all
        at `total`."""
        lines: list[str] = []
        used = 0
        items = [(sid, self.shown(sid)) for sid in self.done]
        for i, (sid, value) in enumerate(items):
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
            if len(text) > per_step:
                text = text[:per_step] + f"... ({len(text) - per_step} more characters)"
            if used + len(text) > total:
                left = ", ".join(s for s, _ in items[i:])
                lines.append(f"- (outputs of {left} omitted: the context is full; refer to them as ${{id}})")
                break
            used += len(text)
            lines.append(f"- {sid}: {text}")
        return "\n".join(lines) or "(none)"

    def plan_text(self) -> str:
        """The current plan, one line per step, each marked done, failed or not run."""
        lines = []
        for s in self.plan.steps:
            state = (
                "done" if s.step_id in self.done else ("FAILED: " + self.failures[s.step_id] if s.step_id in self.failures else "not run")
            )
            params = json.dumps(s.parameters, ensure_ascii=False, default=str)
            deps = f" after {', '.join(s.dependencies)}" if s.dependencies else ""
            lines.append(f"- {s.step_id} [{s.worker}.{s.action}] {s.instruction} {params}{deps} -- {state}")
        return "\n".join(lines)


SLOT_CHARS = 80  # an untrusted typed slot longer than this (or on several lines) is text, not a value: never shown


def _slot(value: Any) -> bool:
    """True for a short value a typed slot carries (a number, a flag, a one-line string of at most `SLOT_CHARS`)."""
    if value is None or isinstance(value, (bool, int, float)):
        return True
    return isinstance(value, str) and len(value) <= SLOT_CHARS and "\n" not in value


def mark_untrusted(steps: list[Step], context: ReplanContext) -> list[Step]:
    """The revision's steps, each whose instruction or literal parameters copy an untrusted value the replanner was shown
    marked `Step.untrusted_from` with where it came from (its worker then starts quarantined)."""
    shown = context.untrusted_values()
    if not shown:
        return steps
    out = []
    for step in steps:
        words = [step.instruction, json.dumps(step.parameters, ensure_ascii=False, default=str)]
        origins = sorted({o for value, where in shown.items() if any(value in w for w in words) for o in where})
        if origins:
            step = step.model_copy(update={"untrusted_from": sorted({*(step.untrusted_from or []), *origins})})
        out.append(step)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Revision(Record):
    """The steps still to do (new or changed; never the finished ones), with the drafts and usage it took."""

    steps: list[Step]
    usage: Usage = field(default_factory=Usage)
    drafts: list[PlanDraft] = field(default_factory=list)


@runtime_checkable
class Replanner(Protocol):
    """Writes the rest of a plan after a failure; raises `PlanningError` when it cannot."""

    async def replan(self, context: ReplanContext) -> Revision:
        """The steps still needed to reach the goal."""
        ...


def revised_plan(plan: Plan, steps: list[Step], done: list[str]) -> Plan:
    """The next version of `plan`: its `done` steps unchanged, then `steps`; the last new step is the answer.

    Raises `PlanParseError` when a new step takes the id of a finished one.
    """
    kept = [s for s in plan.steps if s.step_id in set(done)]
    clash = [s.step_id for s in steps if s.step_id in set(done)]
    if clash:
        raise PlanParseError(
            [Problem("finished_step", f"step {sid!r} is finished and kept as it is; give new steps new ids", step_id=sid) for sid in clash],
            plan_id=plan.plan_id,
        )
    if not steps:
        raise PlanParseError([Problem("empty_revision", "a revision must add at least one step")], plan_id=plan.plan_id)
    revised: Plan = plan.model_copy(  # `Plan.model_copy` is typed loosely (Any); this is a Plan
        update={"steps": kept + list(steps), "version": plan.version + 1, "revises": plan.version, "answer_step": steps[-1].step_id}
    )
    return revised


class FunctionReplanner:
    """A replanner backed by ``fn(context) -> steps`` (sync or async): `Step`s, step dicts, or a `Revision`."""

    def __init__(self, fn: Callable[[ReplanContext], Any]) -> None:
        self.fn = fn
        self.contexts: list[ReplanContext] = []

    async def replan(self, context: ReplanContext) -> Revision:
        """Call the function and read its steps."""
        self.contexts.append(context)
        out = self.fn(context)
        if inspect.isawaitable(out):
            out = await out
        if isinstance(out, Revision):
            return out
        steps = [s if isinstance(s, Step) else Step.model_validate(s) for s in out]
        return Revision(steps=steps)
