"""Learning templates from runs: the plan of a run that succeeded, saved with the goal's values as its parameters.

Owns `goal_values` (which values of a plan are the goal's) and
`learn_template` (the template itself). A value is a whole top-level step
parameter, a text of two characters or more or a number, that the goal
holds as whole words (case and all); it is named after its parameter
(``city``, then ``city_2`` for a second one). `make_template` replaces it
everywhere in the plan's text; a number, which `make_template` replaces only
where it is a whole parameter, is also replaced in the goal, so the goal
says where every value goes. A template is saved only when it gives back the
run's plan with the same values and when `reuse.match_rules` reads those
values back from the run's goal: a learned template is one the rules can
reuse. Its name is ``learned-`` and the first words of its goal and a short
hash of it, so goals of one shape share a name (a different plan for them is
its next version).

Imports `library.templates`, `library.reuse`, `plan`, `store.base`,
`workers.registry` and `errors`; never the engine or the team.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any

from planexec.errors import PlanError
from planexec.library.reuse import match_rules
from planexec.library.templates import SavedTemplate, TemplateError, instantiate, make_template
from planexec.plan.model import Plan
from planexec.store.base import RunStore, Template
from planexec.workers.registry import Registry

__all__ = ["goal_values", "learn_template"]

_SLUG = re.compile(r"[^a-z0-9]+")


def _whole_words(text: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w.])" + re.escape(text) + r"(?![\w.]*\w)")


def goal_values(plan: Plan) -> dict[str, Any]:
    """The values of `plan`'s steps that its goal holds as whole words, named after their parameters (see the module docstring)."""
    values: dict[str, Any] = {}
    for step in plan.steps:
        for key, value in step.parameters.items():
            if isinstance(value, bool) or not isinstance(value, str | int | float) or value in values.values():
                continue
            text = value if isinstance(value, str) else json.dumps(value)
            if (isinstance(value, str) and len(value.strip()) < 2) or not _whole_words(text).search(plan.goal):
                continue
            name, n = key, 2
            while name in values:
                name, n = f"{key}_{n}", n + 1
            values[name] = value
    return values


def learn_template(store: RunStore, run_id: str, *, registry: Registry, name: str | None = None) -> SavedTemplate | None:
    """Save the last plan version of run `run_id`, which must have succeeded, as a template of its goal's values.

    Returns the saved template, or None when the template would not be
    reusable by the rules or when the latest version of its name already
    holds the same plan. Raises `TemplateError` (rule ``no_plan``) for a run
    without a plan or that did not succeed; `RunNotFoundError` for an unknown
    run. `registry` types the values (as `match_rules` reads them).
    """
    found = store.run(run_id).status
    status = str(getattr(found, "value", found))
    versions = store.plan_versions(run_id)
    if status != "succeeded" or not versions:
        why = "has no stored plan" if not versions else f"did not succeed ({status})"
        raise TemplateError(f"run {run_id!r} {why}: only a run that succeeded is learned from", rule="no_plan", template=run_id)
    chosen = versions[-1]
    plan = chosen.plan
    values = goal_values(plan)
    try:
        data, occurrences = make_template(plan, values)
    except TemplateError:
        return None  # e.g. two parameters with one value: nothing the rules could read back
    for param, value in values.items():
        if not isinstance(value, str):
            data["goal"] = _whole_words(json.dumps(value)).sub("{{" + param + "}}", data["goal"])
    params = list(dict.fromkeys([*occurrences, *values]))
    draft = Template(name=name or _name(data["goal"]), version=0, plan=data, params=params, created_at=datetime.now(UTC))
    try:
        same = instantiate(draft, values).content_hash == plan.content_hash
    except PlanError:
        same = False
    fits = match_rules(plan.goal, [draft], registry)
    if not same or not fits or fits[0][1] != values:
        return None
    earlier = store.templates(draft.name)  # by version: the last is the latest
    if earlier and earlier[-1].plan == data and earlier[-1].params == params:
        return None
    template = store.save_template(draft.name, data, params=params, description=f"learned from run {run_id}", source_run_id=run_id)
    return SavedTemplate(template=template, run_id=run_id, plan_version=chosen.version, occurrences=occurrences)


def _name(goal: str) -> str:
    """``learned-`` + the first words of a template's goal + a short hash of the whole goal."""
    words = _SLUG.sub("-", re.sub(r"\{\{[^}]*\}\}", " ", goal).lower()).strip("-")
    return f"learned-{words[:48].rstrip('-')}-{hashlib.sha256(goal.encode()).hexdigest()[:8]}"
