"""Plan validation that names every problem before anything runs.

Owns the rules a plan must keep: unique step ids, known dependencies, no
cycles (the cycle is reported), references only to upstream steps, known
workers and actions, parameters that fit the tool's input schema (missing,
extra, wrong type; values that are references are checked when they
resolve), usable failure actions and success criteria, the models a step names
(known providers, on a worker whose model works the step), and maintenance
windows only for tools a worker offers, never apart for one step's tools
(`plan.schedule`). All problems are collected and raised together as one
`PlanValidationError`.
Checks against workers through the `Catalog` protocol (what a
`workers.Registry` offers: workers with their actions and input models,
and predicates), so this module imports only `plan` and `errors`.
"""

from __future__ import annotations

import graphlib
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import jsonschema
from pydantic import ValidationError

from planexec.errors import PlanValidationError, Problem
from planexec.plan.model import (
    CriticCriterion,
    JsonSchemaCriterion,
    Plan,
    PredicateCriterion,
    RegexCriterion,
    Step,
)
from planexec.plan.references import find_references, is_whole_reference
from planexec.plan.schedule import never_together
from planexec.plan.scheduler import find_cycle, upstream

__all__ = ["Catalog", "ModelCatalog", "check_plan", "input_problems", "validate_plan"]


class CatalogWorker(Protocol):
    """What validation reads of a worker: the actions it performs and the input model of each."""

    @property
    def actions(self) -> Collection[str]: ...

    def input_model(self, action: str) -> Any: ...


class CatalogPredicate(Protocol):
    """What validation reads of a predicate: the model its arguments must fit."""

    @property
    def args_model(self) -> Any: ...


class Catalog(Protocol):
    """The workers and predicates a plan may name; `workers.Registry` is one."""

    @property
    def workers(self) -> Mapping[str, CatalogWorker]: ...

    @property
    def predicates(self) -> Mapping[str, CatalogPredicate]: ...


@runtime_checkable
class ModelCatalog(Protocol):
    """A catalog that also says which models a step may name (`Step.models`); `workers.Registry` is one."""

    def model_problem(self, name: str) -> str | None: ...


def input_problems(exc: ValidationError, *, step_id: str | None = None, prefix: str = "parameters") -> list[Problem]:
    """Pydantic errors on a tool's arguments as Problems (missing, extra, wrong type)."""
    rules = {"missing": "missing_parameter", "extra_forbidden": "unknown_parameter"}
    out = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"])
        rule = rules.get(err["type"], "wrong_type")
        msg = err["msg"] if rule != "wrong_type" else f"{err['msg']} (got {err.get('input')!r:.60})"
        out.append(Problem(rule, msg, step_id=step_id, field=f"{prefix}.{field}" if field else prefix))
    return out


def check_plan(plan: Plan, registry: Catalog | None = None) -> Plan:
    """Return the plan when it keeps every rule; raise `PlanValidationError` listing all problems."""
    problems = validate_plan(plan, registry)
    if problems:
        raise PlanValidationError(problems, plan_id=plan.plan_id)
    return plan


def validate_plan(plan: Plan, registry: Catalog | None = None) -> list[Problem]:
    """Every problem with the plan; checks against the registry when one is given."""
    problems = _graph_problems(plan.steps)
    ids = set(plan.step_ids)
    if plan.answer_step is not None and plan.answer_step not in ids:
        problems.append(Problem("unknown_step", f"answer_step names no step of the plan: {plan.answer_step!r}", field="answer_step"))
    for step in plan.steps:
        problems += _criteria_problems(step, registry)
        problems += _schema_problems(step)
        if registry is not None:
            problems += _registry_problems(step, registry)
            problems += capability_problems(step, registry)
    if registry is not None and plan.windows:
        known = {action for worker in registry.workers.values() for action in worker.actions}
        for tool in plan.windows:
            if tool not in known:
                problems.append(Problem("unknown_tool", f"a window for {tool!r}, which no worker offers", field=f"windows.{tool}"))
    windows = plan.windows or {}
    for step in plan.steps if windows else ():  # a step whose tools' windows never meet would wait for ever
        apart = never_together(step, plan.parsed_windows)
        if apart:
            names = " and ".join(f"{t} ({' or '.join(windows[t])})" for t in apart)
            problems.append(Problem("window_never_open", f"it names {names}: their windows never open at once", step_id=step.step_id))
    if plan.rollback_plan is not None and not isinstance(plan.rollback_plan, str):
        rollback = plan.rollback_plan.steps
        for p in _graph_problems(rollback) + [
            q for s in rollback for q in _criteria_problems(s, registry) + (_registry_problems(s, registry) if registry else [])
        ]:
            problems.append(Problem(p.rule, p.message, step_id=p.step_id, field=f"rollback_plan.{p.field}" if p.field else "rollback_plan"))
    return problems


def _graph_problems(steps: list[Step]) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[str] = set()
    for step in steps:
        if step.step_id in seen:
            problems.append(
                Problem("duplicate_step_id", f"step id {step.step_id!r} is used more than once", step_id=step.step_id, field="id")
            )
        seen.add(step.step_id)

    declared: dict[str, list[str]] = {}
    for step in steps:
        deps = declared.setdefault(step.step_id, [])
        for dep in step.depends_on:
            if dep == step.step_id:
                problems.append(Problem("self_dependency", "a step cannot depend on itself", step_id=step.step_id, field="depends_on"))
            elif dep not in seen:
                problems.append(
                    Problem(
                        "unknown_dependency",
                        f"depends on {dep!r}, which is not a step of the plan",
                        step_id=step.step_id,
                        field="depends_on",
                    )
                )
            else:
                deps.append(dep)

    cycles, acyclic = _cycles(declared)
    for cycle in cycles:
        problems.append(
            Problem("cycle", "dependency cycle (-> means depends on): " + " -> ".join(cycle), step_id=cycle[0], field="depends_on")
        )

    if not any(step.references for step in steps):
        return problems
    # A step that comes earlier in one topological order cannot depend on a later one, so only
    # references forward in that order need a search of what lies upstream.
    order = {sid: i for i, sid in enumerate(graphlib.TopologicalSorter(acyclic).static_order())}
    implied = {sid: list(deps) for sid, deps in acyclic.items()}
    for step in steps:
        fields = [(f"parameters.{name}", value) for name, value in step.parameters.items()]
        sid = step.step_id
        for where, value in [*fields, ("instruction", step.instruction)]:
            for ref, path in find_references(value):
                text = "${" + ref + ("." + path if path else "") + "}"
                if ref == sid:
                    problems.append(Problem("self_reference", f"{text} refers to the step's own output", step_id=sid, field=where))
                elif ref not in seen:
                    problems.append(Problem("unknown_reference", f"{text} refers to no step of the plan", step_id=sid, field=where))
                elif ref in acyclic[sid] or order[ref] < order[sid] or sid not in upstream(acyclic, ref):
                    implied[sid].append(ref)
                else:
                    problems.append(
                        Problem(
                            "reference_not_upstream",
                            f"{text} refers to a step that runs after this one ({ref!r} depends on {sid!r})",
                            step_id=sid,
                            field=where,
                        )
                    )
    if not cycles:  # references that are fine one by one may still close a loop together
        for cycle in _cycles(implied)[0]:
            problems.append(
                Problem(
                    "cycle",
                    "cycle through references (-> means uses the output of): " + " -> ".join(cycle),
                    step_id=cycle[0],
                    field="parameters",
                )
            )
    return problems


def _cycles(graph: dict[str, list[str]]) -> tuple[list[list[str]], dict[str, list[str]]]:
    """Each cycle as a path of "depends on" arrows (one is found, one of its edges cut, and the
    search repeats), and the graph left acyclic by those cuts."""
    graph = {k: list(v) for k, v in graph.items()}
    found = []
    for _ in range(sum(len(deps) for deps in graph.values()) + 1):  # each round cuts one edge
        cycle = find_cycle(graph)
        if cycle is None:
            break
        # graphlib lists each node before the node that depends on it; reversed, it reads as "depends on"
        found.append(list(reversed(cycle)))
        graph[cycle[1]] = [d for d in graph[cycle[1]] if d != cycle[0]]
    return found, graph


def _criteria_problems(step: Step, registry: Catalog | None) -> list[Problem]:
    problems = []
    for i, crit in enumerate(step.success_criteria):
        where = f"success_criteria.{i}"
        if isinstance(crit, RegexCriterion):
            try:
                re.compile(crit.pattern)
            except re.error as exc:
                problems.append(Problem("invalid_regex", f"{crit.pattern!r}: {exc}", step_id=step.step_id, field=where))
        elif isinstance(crit, JsonSchemaCriterion):
            try:
                jsonschema.validators.validator_for(crit.json_schema).check_schema(crit.json_schema)
            except jsonschema.SchemaError as exc:
                problems.append(Problem("invalid_json_schema", exc.message, step_id=step.step_id, field=where))
        elif isinstance(crit, CriticCriterion) and registry is not None:
            critic = registry.workers.get(crit.worker)
            if critic is None or "review" not in critic.actions:
                known = ", ".join(sorted(n for n, w in registry.workers.items() if "review" in w.actions)) or "none"
                what = "is not registered" if critic is None else "has no 'review' action"
                problems.append(
                    Problem("unknown_critic", f"critic {crit.worker!r} {what} (critics: {known})", step_id=step.step_id, field=where)
                )
        elif isinstance(crit, PredicateCriterion) and registry is not None:
            pred = registry.predicates.get(crit.name)
            if pred is None:
                known = ", ".join(sorted(registry.predicates)) or "none"
                problems.append(
                    Problem(
                        "unknown_predicate", f"no predicate {crit.name!r} is registered (known: {known})", step_id=step.step_id, field=where
                    )
                )
            else:
                try:
                    pred.args_model.model_validate(crit.args)
                except ValidationError as exc:
                    problems += input_problems(exc, step_id=step.step_id, prefix=f"{where}.args")
    return problems


def _schema_problems(step: Step) -> list[Problem]:
    if step.output_schema is None:
        return []
    try:
        jsonschema.validators.validator_for(step.output_schema).check_schema(step.output_schema)
    except jsonschema.SchemaError as exc:
        return [Problem("invalid_json_schema", exc.message, step_id=step.step_id, field="output_schema")]
    return []


def capability_problems(step: Step, registry: Catalog) -> list[Problem]:
    """Grants that name a tool the step's worker does not have or an argument the tool does not take, and pre-approvals of a
    side effect that leave an argument choosing where it lands unbounded (``unbounded_approval``)."""
    worker = registry.workers.get(step.worker)
    if worker is None or not step.capabilities:
        return []
    tools: Mapping[str, Any] = getattr(worker, "tools", None) or {}
    problems = []
    seen: set[str] = set()
    for i, grant in enumerate(step.capabilities):
        where = f"capabilities.{i}"
        if grant.tool in seen:
            problems.append(
                Problem("duplicate_grant", f"{grant.tool!r} is granted twice; merge the grants", step_id=step.step_id, field=where)
            )
        seen.add(grant.tool)
        found = tools.get(grant.tool)
        if found is None:
            has = ", ".join(sorted(tools)) or "none"
            problems.append(
                Problem(
                    "unknown_tool",
                    f"worker {step.worker!r} has no tool {grant.tool!r} to grant (it has: {has})",
                    step_id=step.step_id,
                    field=f"{where}.tool",
                )
            )
            continue
        gaps = found.approval_gaps(grant.arguments) if grant.approved and hasattr(found, "approval_gaps") else []
        if gaps:
            problems.append(
                Problem(
                    "unbounded_approval",
                    f"{grant.tool!r} is pre-approved but its argument(s) {', '.join(map(repr, gaps))} are unbounded, so "
                    "untrusted data could choose where the effect lands: bound every one (free text such as a message's "
                    "body aside) or drop 'approved'",
                    step_id=step.step_id,
                    field=f"{where}.approved",
                )
            )
        fields = getattr(found.input_model, "model_fields", None) or {}
        for name in grant.arguments:
            if name not in fields:
                problems.append(
                    Problem(
                        "unknown_parameter",
                        f"tool {grant.tool!r} takes no argument {name!r} (it takes: {', '.join(fields) or 'none'})",
                        step_id=step.step_id,
                        field=f"{where}.arguments.{name}",
                    )
                )
    return problems


def _registry_problems(step: Step, registry: Catalog) -> list[Problem]:
    problems = []
    worker = registry.workers.get(step.worker)
    if worker is None:
        problems.append(
            Problem(
                "unknown_worker",
                f"no worker {step.worker!r} (known: {', '.join(sorted(registry.workers))})",
                step_id=step.step_id,
                field="worker",
            )
        )
    elif step.action not in worker.actions:
        able = sorted(n for n, w in registry.workers.items() if step.action in w.actions)
        if able:
            hint = f"workers that can: {', '.join(able)}"
        else:
            hint = f"{step.worker!r} can: {', '.join(sorted(worker.actions)) or 'nothing'}"
        rule = "unknown_action" if not able else "action_not_offered"
        problems.append(
            Problem(rule, f"worker {step.worker!r} cannot perform {step.action!r}; {hint}", step_id=step.step_id, field="action")
        )
    else:
        model = worker.input_model(step.action)
        if model is not None:
            problems += parameter_problems(step, model)

    if step.models is not None:
        problems += _model_problems(step, worker, registry)
    fa = step.failure_action
    if fa.kind == "fallback" or (fa.kind == "retry" and fa.then == "fallback"):
        if fa.worker is None:
            problems.append(
                Problem(
                    "missing_fallback_worker", "a fallback needs failure_action.worker", step_id=step.step_id, field="failure_action.worker"
                )
            )
        elif fa.worker not in registry.workers:
            problems.append(
                Problem(
                    "unknown_worker",
                    f"fallback worker {fa.worker!r} is not registered",
                    step_id=step.step_id,
                    field="failure_action.worker",
                )
            )
        elif fa.worker == step.worker:
            problems.append(
                Problem(
                    "fallback_to_same_worker",
                    f"the fallback is the step's own worker {fa.worker!r}",
                    step_id=step.step_id,
                    field="failure_action.worker",
                )
            )
        elif step.action not in registry.workers[fa.worker].actions:
            problems.append(
                Problem(
                    "action_not_offered",
                    f"fallback worker {fa.worker!r} cannot perform {step.action!r}",
                    step_id=step.step_id,
                    field="failure_action.worker",
                )
            )
        else:
            model = registry.workers[fa.worker].input_model(step.action)
            primary = worker.input_model(step.action) if worker is not None and step.action in worker.actions else None
            if model is not None and model is not primary:  # the fallback reads the same parameters its own way
                for p in parameter_problems(step, model):
                    problems.append(Problem(p.rule, f"on fallback worker {fa.worker!r}: {p.message}", step_id=p.step_id, field=p.field))
    elif fa.worker is not None and fa.worker not in registry.workers:
        problems.append(
            Problem(
                "unknown_worker", f"failure_action names unknown worker {fa.worker!r}", step_id=step.step_id, field="failure_action.worker"
            )
        )
    return problems


def _model_problems(step: Step, worker: CatalogWorker | None, registry: Catalog) -> list[Problem]:
    """A step's `models`: each one a model the catalog knows or can resolve, on a worker whose model works the action."""
    problems = []
    uses_model = getattr(worker, "uses_model", None)
    if worker is not None and step.action in worker.actions and (uses_model is None or not uses_model(step.action)):
        how = "calls its tool directly" if uses_model is not None else "works with no model"
        problems.append(
            Problem(
                "models_without_model",
                f"worker {step.worker!r} {how} for {step.action!r}, so no model can be chosen for it; leave models out",
                step_id=step.step_id,
                field="models",
            )
        )
    if isinstance(registry, ModelCatalog):
        for i, name in enumerate(step.models or ()):
            problem = registry.model_problem(name)
            if problem is not None:
                problems.append(Problem("unknown_model", problem, step_id=step.step_id, field=f"models.{i}"))
    return problems


def parameter_problems(step: Step, model: Any) -> list[Problem]:
    """Parameters checked against a tool's input model; values holding references are left to run time."""
    try:
        model.model_validate(step.parameters)
    except ValidationError as exc:
        problems = input_problems(exc, step_id=step.step_id)
        keep = []
        for err, problem in zip(exc.errors(), problems):
            if err["type"] != "extra_forbidden" and _holds_reference(step.parameters, err["loc"]):
                continue
            keep.append(problem)
        return keep
    return []


def _holds_reference(params: dict[str, Any], loc: Iterable[Any]) -> bool:
    """True when the value at `loc` (or a container on the way) is a whole reference: its type is known only at run time."""
    value: Any = params
    for part in loc:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return False
        if is_whole_reference(value):
            return True
    return False
