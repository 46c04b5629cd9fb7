"""How a plan looks in a terminal: a table of its steps and a text drawing of its DAG.

Owns `plan_table` and `plan_graph` (both return rich renderables) and
`when_text` (when a step may start: its time, its tools' windows), read
by the terminal review and by the CLI. Imports `plan`; rich for the output.
"""

from __future__ import annotations

import json

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from planexec.plan.capabilities import grant_label
from planexec.plan.model import Plan, Step
from planexec.plan.schedule import windowed_tools

__all__ = ["grants_text", "plan_graph", "plan_table", "when_text"]


def _short(value: object, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plan_table(plan: Plan) -> Table:
    """One row per step: id, worker, action, instruction, parameters, what it may call, dependencies, failure action."""
    table = Table(title=f"plan {plan.plan_id} · {len(plan.steps)} steps · {plan.content_hash[:19]}", title_justify="left")
    timed = any(when_text(plan, s) for s in plan.steps)  # a "when" column only for a plan with scheduled steps
    for name in ("step", "worker", "action", "instruction", "parameters", "may call", "after", *(["when"] if timed else []), "on failure"):
        table.add_column(name, overflow="fold")
    for s in plan.steps:
        table.add_row(
            s.step_id,
            s.worker,
            s.action + (" (approval)" if s.requires_approval else ""),
            _short(s.instruction, 80),
            _short(s.parameters) if s.parameters else "",
            grants_text(s),
            ", ".join(s.dependencies),
            *([when_text(plan, s)] if timed else []),
            s.failure_action.kind,
        )
    return table


def when_text(plan: Plan, step: Step) -> str:
    """When a step may start, as a reviewer reads it: its time and its tools' windows; empty: as soon as it is ready."""
    parts = [f"not before {step.not_before.isoformat()}"] if step.not_before is not None else []
    windows = plan.windows or {}
    parts += [f"{tool} in {' or '.join(windows[tool])}" for tool in windowed_tools(step, windows)]
    return "; ".join(parts)


def grants_text(step: Step) -> str:
    """What a step's worker may call, as a reviewer reads it (for a step that names its tool: its grant's bounds, if any)."""
    if step.worker == "tool":  # the step names its tool; a grant on it bounds the call's arguments, and a reviewer sees it
        return "; ".join(grant_label(g) for g in step.capabilities) if step.capabilities else ""
    if step.capabilities is None:
        return "its tools (changes asked per call)"
    return "; ".join(grant_label(g) for g in step.capabilities) or "no tools"


def plan_graph(plan: Plan) -> Tree:
    """The DAG as a tree: each step under the last of its dependencies, the others named beside it.

    Steps without dependencies hang from the root, so what runs at once is
    visible as siblings.
    """
    root = Tree(Text(f"goal: {plan.goal}", style="bold"))
    nodes: dict[str, Tree] = {}
    for s in plan.steps:  # plan order is a topological order for a validated plan
        deps = s.dependencies
        label = Text(f"{s.step_id} ", style="bold")
        label.append(f"{s.worker}.{s.action}")
        if len(deps) > 1:
            label.append(f"  (also after {', '.join(deps[:-1])})", style="dim")
        parent = nodes.get(deps[-1], root) if deps else root
        nodes[s.step_id] = parent.add(label)
    return root
