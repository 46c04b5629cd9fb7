"""Replanning: a revised plan that keeps what is done and replaces what is not.

Owns `ReplanContext` (what the replanner is told: the goal, the current plan,
the finished steps with size-bounded outputs, the failure), `Revision` (the
steps still to do, and what writing them cost), the `Replanner` protocol,
`PlannerReplanner` (the planner's model writes the revision, with the
planner's repair loop) and `FunctionReplanner` (your function writes it),
and `revised_plan`, which composes the next version: the finished steps,
unchanged, then the new ones. Finished steps are never given back to run:
the engine (`monitor`) starts the new version with them settled.
Imports `plan`, `plan_schema`, `planner`, `validation`, `records`,
`results`, `usage`, `errors`, `toolcalls` and `models.base`; never the engine.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from planexec.errors import PlanParseError, Problem
from planexec.models.base import Message
from planexec.plan.model import Plan, Step
from planexec.planning.draft_schema import draft_schema, draft_to_plan_data
from planexec.planning.planner import PlanDraft, Planner
from planexec.records import Record
from planexec.engine.results import ReplanRequest
from planexec.workers.tool_calls import prompt_file
from planexec.usage import Usage
from planexec.plan.validation import validate_plan

__all__ = ["FunctionReplanner", "PlannerReplanner", "ReplanContext", "Replanner", "Revision", "revised_plan"]

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

    def outputs_text(self, *, per_step: int = OUTPUT_CHARS, total: int = CONTEXT_CHARS) -> str:
        """The finished steps' outputs as bounded text: each cut at `per_step` characters, all at `total`."""
        lines: list[str] = []
        used = 0
        items = list(self.done.items())
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
            state = "done" if s.step_id in self.done else ("FAILED: " + self.failures[s.step_id] if s.step_id in self.failures else "not run")
            params = json.dumps(s.parameters, ensure_ascii=False, default=str)
            deps = f" after {', '.join(s.dependencies)}" if s.dependencies else ""
            lines.append(f"- {s.step_id} [{s.worker}.{s.action}] {s.instruction} {params}{deps} -- {state}")
        return "\n".join(lines)


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
    return plan.model_copy(
        update={"steps": kept + list(steps), "version": plan.version + 1, "revises": plan.version, "answer_step": steps[-1].step_id}
    )


def _steps_of(data: Any, plan: Plan) -> list[Step]:
    return Plan.from_data(draft_to_plan_data(data, plan.goal, plan_id=plan.plan_id)).steps


class PlannerReplanner:
    """The planner's model writes the revision, from the planner's prompt, catalog and repair loop.

    It is told the goal, the plan with each step's state, the finished
    outputs (bounded: `OUTPUT_CHARS` per step, `CONTEXT_CHARS` in all) and
    the failure, and writes only the steps still to do. For grammar-decoding
    models the schema numbers new steps after the old ones and lets them
    depend on finished steps only (plus earlier new ones).
    """

    def __init__(self, planner: Planner) -> None:
        self.planner = planner

    def __repr__(self) -> str:
        return f"PlannerReplanner({self.planner.model.name!r})"

    def messages(self, context: ReplanContext, first: int) -> list[Message]:
        """The system prompt (catalog and rules) and the replan request."""
        system = self.planner.messages(context.goal)[0]
        ids = f"s{first}, s{first + 1}, ..." if self.planner.positional else "new ids not used by the finished steps"
        failure = context.request.reason
        user = prompt_file(
            "planner",
            "replan.md",
            goal=context.goal,
            version=str(context.plan.version),
            plan=context.plan_text(),
            done=context.outputs_text(),
            failure=failure,
            ids=ids,
        )
        return [system, Message(role="user", content=user)]

    async def replan(self, context: ReplanContext) -> Revision:
        """Ask the model for the remaining steps; repair like the planner; `PlanningError` when it cannot."""
        done = list(context.done)
        numbers = [int(s.step_id[1:]) for s in context.plan.steps if s.step_id[:1] == "s" and s.step_id[1:].isdigit()]
        first = max(numbers, default=0) + 1
        schema = draft_schema(
            self.planner.registry,
            max_steps=self.planner.max_steps,
            positional=self.planner.positional,
            workers=self.planner.workers,
            done=done,
            first=first,
        )
        found: dict[str, list[Step]] = {}

        def check(text: str) -> tuple[Plan | None, list[Problem]]:
            try:
                steps = _steps_of(json.loads(text), context.plan)
                plan = revised_plan(context.plan, steps, done)
            except json.JSONDecodeError as exc:
                return None, [Problem("malformed_json", f"the plan is not JSON: {exc.msg} at column {exc.colno}")]
            except PlanParseError as exc:
                return None, exc.problems
            problems = validate_plan(plan, self.planner.registry)
            if problems:
                return None, problems
            found["steps"] = steps
            return plan, []

        planning = await self.planner.attempts(self.messages(context, first), check, goal=context.goal, schema=schema)
        return Revision(steps=found["steps"], usage=planning.usage, drafts=planning.drafts)


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
