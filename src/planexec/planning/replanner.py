"""Replanning: a revised plan that keeps what is done and replaces what is not.

Owns `PlannerReplanner` (the planner's model writes the revision, with the
planner's repair loop). What a replanner is told and answers
(`ReplanContext`, `Revision`, the `Replanner` protocol, `FunctionReplanner`,
`revised_plan`) belongs to the engine (`engine.replan`) and is re-exported
here. A planner that writes the compact form (`plan.compact`) is asked in
that form too: the plan so far printed one line per step with its state,
results as ``$N``, new lines numbered after the old ones. Imports
`engine.replan`, `plan`, `planning.planner`, `planning.draft_schema`,
`planning.compact_form`, `usage`, `errors`, `workers.tool_calls` and `models.base`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from planexec.engine.replan import FunctionReplanner, ReplanContext, Replanner, Revision, revised_plan
from planexec.errors import PlanParseError, Problem
from planexec.models.base import Message
from planexec.plan.compact import print_compact, read_compact, with_lines
from planexec.plan.model import Plan, Step
from planexec.plan.validation import validate_plan
from planexec.planning.compact_form import compact_plan, reviewers_fields
from planexec.planning.draft_schema import draft_grammar, draft_schema, draft_to_plan_data, free_tasks
from planexec.planning.planner import Planner
from planexec.workers.tool_calls import prompt_file

__all__ = ["FunctionReplanner", "PlannerReplanner", "ReplanContext", "Replanner", "Revision", "revised_plan"]


_RESULT = re.compile(r"^- ([A-Za-z0-9_][A-Za-z0-9_\-]*): ", re.MULTILINE)


def _steps_of(data: Any, plan: Plan, free: set[tuple[str, str]]) -> list[Step]:
    return Plan.from_data(draft_to_plan_data(data, plan.goal, plan_id=plan.plan_id, free=free)).steps


def _compact_request(context: ReplanContext, first: int) -> str:
    """The replan request in the compact form: the plan so far with each step's state, the results as ``$N``, the failure."""
    try:
        lines = print_compact(context.plan).splitlines()[: len(context.plan.steps)]
        plan = "\n".join(f"{line}  [{_state(context, s)}]" for line, s in zip(lines, context.plan.steps))
    except ValueError:  # ids no label can name: the engine's own lines
        plan = context.plan_text()
    done = _RESULT.sub(lambda m: f"- {_label(m[1])}: ", context.outputs_text())
    return prompt_file(
        "planner",
        "compact_replan.md",
        goal=context.goal,
        version=str(context.plan.version),
        plan=plan,
        done=done,
        failure=context.request.reason,
        first=str(first),
    )


def _state(context: ReplanContext, step: Step) -> str:
    if step.step_id in context.done:
        return "done"
    return "FAILED: " + context.failures[step.step_id] if step.step_id in context.failures else "not run"


def _label(step_id: str) -> str:
    number = re.fullmatch(r"s(\d+)", step_id)
    return f"${number[1]}" if number else f"${{{step_id}}}"


def _compact_steps(text: str, context: ReplanContext, free: set[tuple[str, str]], registry: Any) -> list[Step]:
    """The new steps of a revision written in the compact form; `PlanParseError` whose problems name their lines."""
    draft = read_compact(text, registry=registry, known=list(context.done))
    try:
        return compact_plan(draft, context.goal, context.plan.plan_id, free).steps
    except PlanParseError as exc:
        raise PlanParseError(with_lines(exc.problems, draft.lines), plan_id=context.plan.plan_id) from None


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
        if self.planner.compact:
            return [system, Message(role="user", content=_compact_request(context, first))]
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
        schema = (
            None
            if self.planner.compact
            else draft_schema(
                self.planner.registry,
                max_steps=self.planner.max_steps,
                positional=self.planner.positional,
                workers=self.planner.workers,
                done=done,
                first=first,
                grants=self.planner.write_grants,
                # the planner's system prompt, which a revision shares, may ask for `answer_step`: the schema takes it, and
                # it is not read (a revision's answer is its last new step, see `engine.replan`)
                answer=self.planner.name_answer,
            )
        )
        found: dict[str, list[Step]] = {}
        free = free_tasks(self.planner.registry)

        def check(text: str) -> tuple[Plan | None, list[Problem]]:
            try:
                if self.planner.compact:
                    steps = _compact_steps(text, context, free, self.planner.registry)
                else:
                    steps = _steps_of(json.loads(text), context.plan, free)
                plan = revised_plan(context.plan, steps, done)
            except json.JSONDecodeError as exc:
                return None, [Problem("malformed_json", f"the plan is not JSON: {exc.msg} at column {exc.colno}")]
            except PlanParseError as exc:
                return None, exc.problems
            problems = [*reviewers_fields(steps), *validate_plan(plan, self.planner.registry)]
            if problems:
                return None, problems
            found["steps"] = steps
            return plan, []

        # a compact revision on a grammar-decoding model: new steps numbered from `first`, referring to finished ones too
        grammar = (
            draft_grammar(self.planner.registry, max_steps=self.planner.max_steps, workers=self.planner.workers, done=done, first=first)
            if self.planner.compact and self.planner.profile.grammar
            else None
        )
        planning = await self.planner.attempts(self.messages(context, first), check, goal=context.goal, schema=schema, grammar=grammar)
        return Revision(steps=found["steps"], usage=planning.usage, drafts=planning.drafts)
