"""The compact plan form in the planner's conversation: examples, and reading a draft.

Owns what the planner does differently when the model writes the compact
form (`plan.compact`) instead of the JSON draft: few-shot examples printed
in that form (`compact_example`), a draft read into a validated plan with
every problem naming its line (`check_compact`, `compact_plan`), and how a
scripted model recognises a compact planning request (`is_compact_request`).
The replanner's side is in `replanner`; the prompts are
``prompts/planner/compact*.md``. Imports `plan`, `planning.draft_schema`,
`workers.tool_calls` (the prompt loader) and `models.base`; never the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from planexec.errors import PlanParseError, Problem
from planexec.models.base import ModelRequest
from planexec.plan.compact import CompactDraft, print_compact, read_compact, with_lines
from planexec.plan.model import Plan, Step
from planexec.plan.validation import Catalog, validate_plan
from planexec.planning.draft_schema import draft_to_plan_data, feed_dependencies
from planexec.workers.tool_calls import prompt_file

__all__ = ["check_compact", "compact_example", "compact_plan", "is_compact_request", "reviewers_fields"]


def compact_example(draft: dict[str, Any], goal: str) -> str:
    """A shipped JSON example plan in the compact form: its last step marked ``answer``, tool steps without a note.

    A tool step's instruction is for a reviewer; leaving it out of the
    examples teaches the model the shortest lines. A role's task keeps it: it is the task.
    """
    data = draft_to_plan_data(draft, goal)
    for step in data["steps"]:
        if step.get("worker", "tool") == "tool":
            step["instruction"] = ""
    data["answer_step"] = data["steps"][-1]["id"]
    return print_compact(Plan.from_data(data)).rstrip("\n")


def compact_plan(draft: CompactDraft, goal: str, plan_id: str, free: set[tuple[str, str]]) -> Plan:
    """The plan of a read draft, a free-form task fed the results it depends on (as a JSON draft's is)."""
    data = draft.plan_data(goal, plan_id)
    for step in data["steps"]:
        feed_dependencies(step, free)
    return Plan.from_data(data)


def check_compact(
    text: str, *, goal: str, plan_id: str, registry: Catalog, free: set[tuple[str, str]]
) -> tuple[Plan | None, list[Problem]]:
    """Read a compact draft: the plan when it parses and validates, else its problems, each naming its line."""
    try:
        draft = read_compact(text, registry=registry)
    except PlanParseError as exc:
        return None, exc.problems
    try:
        plan = compact_plan(draft, goal, plan_id, free)
    except PlanParseError as exc:
        return None, with_lines(exc.problems, draft.lines)
    problems = [*reviewers_fields(plan.steps), *validate_plan(plan, registry)]
    return (None, with_lines(problems, draft.lines)) if problems else (plan, [])


def reviewers_fields(steps: Sequence[Step]) -> list[Problem]:
    """A planner's draft (or revision, in either form) names no models and judges no difficulty: which models a step may
    use is a decision about cost and trust for whoever sets up the team or reviews the plan. The JSON draft schema offers
    neither, but a model that does not decode under it may still write them: each is a problem the planner repairs."""
    return [
        Problem(
            "not_for_the_planner",
            f"{name} is set by whoever reviews the plan, not by its planner: leave it out",
            step_id=s.step_id,
            field=name,
        )
        for s in steps
        for name in ("models", "difficulty")
        if getattr(s, name) is not None
    ]


def is_compact_request(request: ModelRequest) -> bool:
    """Whether a request asks for a plan (or a revision) in the compact form: it opens with the compact planner prompt."""
    first = prompt_file("planner", "compact.md").splitlines()[0]
    messages = request.messages
    return request.output_schema is None and bool(messages) and messages[0].role == "system" and messages[0].content.startswith(first)
