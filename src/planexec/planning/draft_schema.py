"""The schema a planner model writes its plan in, restricted to what is registered.

Owns `draft_schema` (the JSON Schema for a model's plan draft),
`draft_to_plan_data` (a draft -> the data of a `Plan`) and `plan_to_draft`
(a plan -> the draft a planner would write for it, e.g. a training target). The draft is the
plan's narrow core: ``{"steps": [{"id", "worker", "action", "instruction",
"parameters", "depends_on", "failure_action"?, "not_before"?}]}`` (the
open shape also offers a role's ``capabilities`` and ``output_schema``). Each step is one of a
fixed set of branches, one per (worker, action) pair in the registry, so
``worker`` and ``action`` are constants and ``parameters`` follow that
action's own input schema: a model cannot name a tool that does not exist.

Two shapes, the same data:

* positional (for grammar-constrained decoding, e.g. ``local:``): step *k* is
  ``"s<k>"``, its ``depends_on`` is an enum of the ids before it, a parameter
  may also be a whole reference ``"${s<j>}"`` to an earlier step, and
  strings are bounded. Every draft the grammar allows is a DAG.
* open (for hosted models, which follow a schema but do not enforce every
  keyword): ids follow a pattern, ``depends_on`` are strings; validation and
  repair catch what the schema cannot.

`draft_grammar` is the same catalog as a GBNF grammar of the compact plan
language (`plan.compact`, `plan.grammar`), for a planner that writes that
form under a grammar.

Imports `plan` and `registry` only.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from planexec.plan.capabilities import Grant
from planexec.plan.grammar import compact_grammar
from planexec.plan.model import STEP_ID_PATTERN, Plan
from planexec.plan.references import find_references
from planexec.workers.registry import Registry

__all__ = [
    "draft_grammar",
    "draft_schema",
    "draft_to_plan_data",
    "feed_dependencies",
    "free_tasks",
    "granting_workers",
    "plan_id_for",
    "plan_to_draft",
    "planning_actions",
]

# bounds a grammar enforces on small models, which otherwise write until max_tokens
INSTRUCTION_MAX = 200
PARAMETER_STRING_MAX = 400
PARAMETER_ITEMS_MAX = 20
# a task with free-form parameters (a role's "write", "research") takes one text input; fixed
# names, because a grammar cannot bound the length of free property names and small models
# then write a key that never ends
FREE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "maxLength": 300}},
    "additionalProperties": False,
}
FAILURE_ACTIONS = ["abort", "retry", "skip", "replan"]


def _hoist(schema: dict[str, Any], prefix: str, defs: dict[str, Any]) -> dict[str, Any]:
    """A copy of `schema` whose ``$defs`` moved into `defs` under prefixed names (refs rewritten)."""
    schema = copy.deepcopy(schema)
    local = schema.pop("$defs", {})
    renames = {name: f"{prefix}__{name}" for name in local}

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in renames:
                node = {**node, "$ref": f"#/$defs/{renames[ref[8:]]}"}
            return {k: rewrite(v) for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for name, body in local.items():
        defs[renames[name]] = _concrete(rewrite(body))
    schema = _concrete(rewrite(schema))
    for key in ("title", "description"):
        schema.pop(key, None)
    return schema


_ANY_SCALAR: dict[str, Any] = {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}
_TYPED = ("type", "anyOf", "oneOf", "allOf", "enum", "const", "$ref", "properties", "items", "prefixItems")


def _concrete(schema: Any) -> Any:
    """A schema where "anything" (``{}``, an untyped ``Any``) is a scalar: grammar converters need a type."""
    if not isinstance(schema, dict):
        return schema
    if not any(k in schema for k in _TYPED):
        return {**{k: v for k, v in schema.items() if k in ("title", "description")}, **_ANY_SCALAR}
    out = dict(schema)
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _concrete(out[key])
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [_concrete(v) for v in out[key]]
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _concrete(v) for k, v in out["properties"].items()}
    out.pop("default", None)  # a default is the tool's business, not a draft's
    if out.get("type") == "string" and not any(k in out for k in ("maxLength", "enum", "const", "pattern", "format")):
        out["maxLength"] = PARAMETER_STRING_MAX  # unbounded, a small model's string may never end
    if out.get("type") == "array" and "items" in out and "maxItems" not in out:
        out["maxItems"] = PARAMETER_ITEMS_MAX  # nor its list
    return out


def _accept_references(parameters: dict[str, Any], earlier: list[str]) -> dict[str, Any]:
    """Let each top-level parameter (and each item of a list parameter) be a whole reference to an earlier output."""
    if not earlier or parameters.get("type") != "object":
        return parameters
    refs = {"enum": [f"${{{sid}}}" for sid in earlier]}
    props = {}
    for name, prop in parameters.get("properties", {}).items():
        if prop.get("type") == "array" and isinstance(prop.get("items"), dict):
            prop = {**prop, "items": {"anyOf": [prop["items"], refs]}}
        props[name] = {"anyOf": [prop, refs]}
    return {**parameters, "properties": props}


def planning_actions(worker: Any) -> list[str]:
    """The actions a planner may give this worker: a role's tasks (its tools are its own business), else every action."""
    tasks = getattr(worker, "tasks", None)
    return sorted(tasks) if tasks else sorted(worker.actions)


def _branches(registry: Registry, defs: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(worker, action, parameters schema) for every action a planner may use."""
    out = []
    for name in sorted(registry.workers):
        worker = registry.workers[name]
        for action in planning_actions(worker):
            model = worker.input_model(action)
            params = _hoist(model.model_json_schema(), f"{name}__{action}", defs) if model else FREE_PARAMETERS
            out.append((name, action, params))
    return out


def _step(
    worker: str,
    action: str,
    params: dict[str, Any],
    step_id: dict[str, Any],
    deps: dict[str, Any],
    *,
    contract: bool = False,
    timed: bool = False,
) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "id": step_id,
        "worker": {"const": worker},
        "action": {"const": action},
        "instruction": {"type": "string", "maxLength": INSTRUCTION_MAX},
        "parameters": params,
        "depends_on": deps,
        "failure_action": {"enum": FAILURE_ACTIONS},
    }
    if contract:  # hosted planners may grant tools and declare a typed answer; a grammar for a small model stays lean
        properties["capabilities"] = {"type": "array", "items": {"$ref": f"#/$defs/grant__{worker}"}}
        properties["output_schema"] = {"type": "object"}
    if timed:  # a time the goal or the plan so far gives the step (a replanner keeps it: sooner needs a person), with its zone
        properties["not_before"] = {"type": "string", "format": "date-time", "maxLength": 40}
    return {
        "type": "object",
        "properties": properties,
        "required": ["id", "worker", "action", "instruction", "parameters", "depends_on"],
        "additionalProperties": False,
    }


def draft_schema(
    registry: Registry,
    *,
    max_steps: int = 8,
    positional: bool = False,
    workers: list[str] | None = None,
    done: list[str] | None = None,
    first: int = 1,
    grants: bool = True,
    answer: bool = True,
) -> dict[str, Any]:
    """The JSON Schema of a plan draft over the registry's workers (or only `workers`).

    For a revision, `done` names the finished steps new ones may depend on and
    refer to, and `first` numbers the first new positional step (``s<first>``).
    With `grants` (open shape only) role steps may carry ``capabilities`` and
    an ``output_schema``. With `answer` the draft may name its
    ``answer_step`` (any step id; an earlier or new one when positional).
    """
    done = list(done or [])
    if max_steps < 1:
        raise ValueError("max_steps must be at least 1")
    defs: dict[str, Any] = {}
    branches = [b for b in _branches(registry, defs) if workers is None or b[0] in workers]
    if not branches:
        raise ValueError("the registry offers no worker actions to plan with")
    if not positional:
        step_id = {"type": "string", "pattern": STEP_ID_PATTERN, "maxLength": 64}
        deps = {"type": "array", "items": {"type": "string"}, "maxItems": max_steps}
        granting = granting_workers(registry) if grants else set()
        item = {"anyOf": [_step(w, a, p, step_id, deps, contract=w in granting, timed=True) for w, a, p in branches]}
        if any(w in granting for w, _, _ in branches):
            base = _hoist(Grant.model_json_schema(), "grant", defs)
            for w in sorted({w for w, _, _ in branches if w in granting}):
                defs[f"grant__{w}"] = _worker_grant(base, getattr(registry.workers[w], "tools", {}))
        steps: dict[str, Any] = {"type": "array", "items": item, "minItems": 1, "maxItems": max_steps}
    else:
        for k in range(1, max_steps + 1):
            earlier = done + [f"s{j}" for j in range(first, first + k - 1)]
            deps = (
                {"type": "array", "items": {"enum": earlier}, "maxItems": len(earlier)}
                if earlier
                else {"type": "array", "items": {"type": "string"}, "maxItems": 0}
            )
            defs[f"step_{k}"] = {
                "anyOf": [_step(w, a, _accept_references(p, earlier), {"const": f"s{first + k - 1}"}, deps) for w, a, p in branches]
            }
        # a plan of n steps is the tuple (s1 .. sn): one alternative per length
        steps = {
            "anyOf": [
                {"type": "array", "prefixItems": [{"$ref": f"#/$defs/step_{k}"} for k in range(1, n + 1)], "items": False}
                for n in range(1, max_steps + 1)
            ]
        }
    # the step whose result answers the goal: named, the run's answer is its output and no joiner call assembles it
    properties: dict[str, Any] = {"steps": steps}
    if answer:
        properties["answer_step"] = {"enum": done + [f"s{j}" for j in range(first, first + max_steps)]} if positional else step_id
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": ["steps"],
        "additionalProperties": False,
    }
    if defs:
        schema["$defs"] = defs
    return schema


def draft_grammar(
    registry: Registry, *, max_steps: int = 8, workers: list[str] | None = None, done: list[str] | None = None, first: int = 1
) -> str:
    """The GBNF grammar of a compact plan over the registry's workers (or only `workers`); `done` and `first` as in `draft_schema`.

    The same branches as the draft schema: a role's task is written in
    words (``writer.write: "..."``), every other action with its own typed
    parameters; strings are bounded as in the schema.
    """
    defs: dict[str, Any] = {}
    free = free_tasks(registry)
    branches = [(w, a, None if (w, a) in free else p) for w, a, p in _branches(registry, defs) if workers is None or w in workers]
    if not branches:
        raise ValueError("the registry offers no worker actions to plan with")
    return compact_grammar(
        branches, defs=defs, max_steps=max_steps, first=first, done=done or [], string_max=PARAMETER_STRING_MAX, note_max=INSTRUCTION_MAX
    )


def _worker_grant(base: dict[str, Any], tools: Mapping[str, Any]) -> dict[str, Any]:
    """A grant of one of `tools` (the worker's), one branch per tool; a pre-approved side effect only with every
    argument that chooses where it lands bounded, so a planner cannot write the approval that would lift quarantine."""
    props = base["properties"]
    branches = []
    for name in sorted(tools):
        plain = {**base, "properties": {**props, "tool": {"const": name}}}
        gaps = tools[name].approval_gaps(())
        if not gaps:
            branches.append(plain)
            continue
        branches.append({**plain, "properties": {**plain["properties"], "approved": {"const": False}}})
        bounded = {**props["arguments"], "required": gaps}
        required = sorted({*base.get("required", []), "approved", "arguments"})
        branches.append(
            {**plain, "properties": {**plain["properties"], "approved": {"const": True}, "arguments": bounded}, "required": required}
        )
    return {"anyOf": branches}


def granting_workers(registry: Registry) -> set[str]:
    """Workers whose steps may carry capabilities: those with tools of their own to grant (roles)."""
    return {name for name, w in registry.workers.items() if getattr(w, "tasks", None) and getattr(w, "tools", None)}


_SLUG = re.compile(r"[^a-z0-9]+")


def plan_id_for(goal: str) -> str:
    """A readable, stable plan id: a slug of the goal and a short hash."""
    slug = _SLUG.sub("-", goal.lower()).strip("-")[:40].rstrip("-") or "plan"
    return f"{slug}-{hashlib.sha256(goal.encode()).hexdigest()[:6]}"


def free_tasks(registry: Registry) -> set[tuple[str, str]]:
    """The (worker, action) pairs a planner writes with free-form parameters (a role's tasks)."""
    return {(name, action) for name, w in registry.workers.items() for action in planning_actions(w) if w.input_model(action) is None}


def draft_to_plan_data(draft: Any, goal: str, *, plan_id: str | None = None, free: set[tuple[str, str]] | None = None) -> dict[str, Any]:
    """The data of a `Plan` from a draft; shape errors are left to `Plan.from_data` to report.

    In a plan, `depends_on` is ordering only: a worker sees what its step
    references. A draft's free-form task (a pair in `free`) that depends on
    steps it does not reference means "work from their results" (small
    models write it so), so those references are added to its ``input``:
    the data flow becomes explicit, and the reviewer sees it.
    """
    steps = draft.get("steps") if isinstance(draft, dict) else draft
    data: dict[str, Any] = {"plan_id": plan_id or plan_id_for(goal), "goal": goal, "steps": steps}
    if isinstance(draft, dict):
        for key in ("answer_step", "risk_level"):
            if key in draft:
                data[key] = draft[key]
    copied: dict[str, Any] = json.loads(json.dumps(data))  # a private copy: the caller's draft is not shared with the plan
    if free and isinstance(copied["steps"], list):
        for step in copied["steps"]:
            feed_dependencies(step, free)
    return copied


# the keys of a step a draft may write besides its required core, in the order a planner writes them
_DRAFT_EXTRAS = ("failure_action", "not_before", "capabilities", "output_schema")


def plan_to_draft(plan: Plan) -> dict[str, Any]:
    """The draft a planner writes for `plan` (the shape `draft_to_plan_data` reads): each step's id, worker, action,
    instruction, parameters and depends_on, and of the rest only what a draft can say and the step sets (a failure action
    other than the default, a time, grants, a typed answer); the plan's ``answer_step`` when it names one. What only a
    reviewer sets (criteria, retries, timeouts, approvals) is left out: a planner is not asked to write it."""
    data = plan.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    steps = []
    for step in data["steps"]:
        out = {"id": step["id"], "worker": step.get("worker", "tool"), "action": step["action"],
               "instruction": step.get("instruction", ""), "parameters": step.get("parameters", {}),
               "depends_on": step.get("depends_on", [])}  # fmt: skip
        out.update({key: step[key] for key in _DRAFT_EXTRAS if key in step})
        action = out.get("failure_action")
        if isinstance(action, dict) and set(action) == {"kind"} and action["kind"] in FAILURE_ACTIONS:
            out["failure_action"] = action["kind"]  # as a draft writes it (a richer one is the reviewer's, kept whole)
        steps.append(out)
    draft: dict[str, Any] = {"steps": steps}
    if plan.answer_step:
        draft["answer_step"] = plan.answer_step
    return draft


def feed_dependencies(step: Any, free: set[tuple[str, str]]) -> None:
    """Add to a free-form task's ``input`` a reference to each step it depends on but does not reference (see `draft_to_plan_data`)."""
    if not isinstance(step, dict) or (step.get("worker", "tool"), step.get("action")) not in free:
        return
    deps = step.get("depends_on")
    params = step.setdefault("parameters", {})
    if not isinstance(deps, list) or not isinstance(params, dict):
        return
    referenced = {ref for ref, _ in find_references([params, step.get("instruction", "")])}
    missing = [d for d in deps if isinstance(d, str) and d not in referenced]
    text = params.get("input", "")
    if missing and isinstance(text, str):
        params["input"] = "\n\n".join([text, *(f"${{{d}}}" for d in missing)]) if text else "\n\n".join(f"${{{d}}}" for d in missing)
