"""What each step of a plan may call, read against the registry, and what a revision newly grants.

Owns `effective_grants` (a role step's capabilities, or all its worker's
tools when it has none), `implied_grant` (what a step that names a tool
itself grants: that tool, with its sensitive literal arguments fixed) and
`widening` (the grants a new plan version holds that the version it revises
did not: a new tool, a wider path, a new recipient) and `side_effects` (the
steps of a revision that may change things or send data out). The engine
asks for a person before running a widening revision or one that acts;
policies narrow grants.
Imports `plan` and `workers.registry`.
"""

from __future__ import annotations

from collections.abc import Mapping

from planexec.plan.capabilities import Constraint, Grant, grant_label, widened_grants
from planexec.plan.model import Plan, Step
from planexec.plan.references import find_references
from planexec.workers.registry import Registry

__all__ = ["effective_grants", "implied_grant", "plan_grants", "side_effects", "widening"]


def effective_grants(step: Step, registry: Registry | None) -> list[Grant] | None:
    """What a role step may call: its capabilities, or every tool of its worker when it has none (None: not a role step)."""
    worker = registry.workers.get(step.worker) if registry is not None else None
    tools = getattr(worker, "tools", None)
    tasks = getattr(worker, "tasks", None)
    if not isinstance(tools, Mapping) or not tasks or step.action not in tasks:
        return step.capabilities
    return list(step.capabilities) if step.capabilities is not None else [Grant(tool=name) for name in tools]


def implied_grant(step: Step, registry: Registry | None) -> Grant | None:
    """What a step that calls its tool directly grants: the tool, each sensitive argument bound to its literal value."""
    tool = registry.tools.get(step.action) if registry is not None else None
    if tool is None:
        return None
    bounds = {}
    for name in sorted(tool.sensitive & step.parameters.keys()):
        value = step.parameters[name]
        if not find_references(value):  # a referenced value is judged when it arrives (the gate)
            bounds[name] = Constraint(values=[value])
    return Grant(tool=tool.name, arguments=bounds, approved=True)


def plan_grants(plan: Plan, registry: Registry | None, steps: list[str] | None = None) -> dict[str, list[Grant]]:
    """Every grant of the plan's steps (or of `steps`), by step id."""
    out: dict[str, list[Grant]] = {}
    for step in plan.steps:
        if steps is not None and step.step_id not in steps:
            continue
        grants = effective_grants(step, registry)
        if grants is None:
            implied = implied_grant(step, registry)
            grants = [implied] if implied is not None else []
        out[step.step_id] = grants
    return out


def widening(old: Plan, new: Plan, registry: Registry | None, steps: list[str]) -> list[str]:
    """What the `steps` of `new` (the added or changed ones) grant that no step of `old` did, one line per grant.

    A read-only tool with no sensitive argument (a calculator, a lookup)
    changes nothing and sends nothing anywhere, so granting it is no
    widening; any other new tool, or a wider bound, is.
    """
    before = [g for grants in plan_grants(old, registry).values() for g in grants]
    tools = registry.tools if registry is not None else {}
    out = []
    for sid, grants in plan_grants(new, registry, steps).items():
        for g in widened_grants(grants, before):
            found = tools.get(g.tool)
            if found is not None and found.read_only and not found.sensitive:
                continue
            out.append(f"step {sid!r}: {grant_label(g)}")
    return out


def side_effects(plan: Plan, registry: Registry | None, steps: list[str]) -> list[str]:
    """The `steps` of `plan` that may change things or send data out, one line each: a step that calls such a tool
    itself, or a role step granted one (a tool not declared read-only, or one that reaches the network)."""
    tools = registry.tools if registry is not None else {}
    out = []
    for sid, grants in plan_grants(plan, registry, steps).items():
        acting = sorted({g.tool for g in grants if (t := tools.get(g.tool)) is None or not t.read_only or t.network})
        if acting:
            out.append(f"step {sid!r} may call {', '.join(acting)}")
    return out
