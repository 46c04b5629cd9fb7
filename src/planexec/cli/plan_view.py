"""How a plan looks in a terminal: a table of its steps and a text drawing of its DAG.

Owns `plan_table` and `plan_graph` (both return rich renderables) and
`usage_table` (usage and cost per role). Imports `plan`, `results` and
`usage`; rich for the output.
"""

from __future__ import annotations

import json

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from planexec.plan.model import Plan
from planexec.engine.results import RunResult
from planexec.usage import Usage

__all__ = ["plan_graph", "plan_table", "usage_table"]


def _short(value: object, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plan_table(plan: Plan) -> Table:
    """One row per step: id, worker, action, instruction, parameters, dependencies, failure action."""
    table = Table(title=f"plan {plan.plan_id} · {len(plan.steps)} steps · {plan.content_hash[:19]}", title_justify="left")
    for name in ("step", "worker", "action", "instruction", "parameters", "after", "on failure"):
        table.add_column(name, overflow="fold")
    for s in plan.steps:
        table.add_row(
            s.step_id,
            s.worker,
            s.action + (" (approval)" if s.requires_approval else ""),
            _short(s.instruction, 80),
            _short(s.parameters) if s.parameters else "",
            ", ".join(s.dependencies),
            s.failure_action.kind,
        )
    return table


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


def usage_table(result: RunResult) -> Table:
    """Tokens, model calls and cost per role (planner, each worker, synthesizer) and in total."""
    table = Table(title="usage by role", title_justify="left", show_footer=True)
    total = result.usage
    for name, footer in (
        ("role", "total"),
        ("model calls", str(total.model_calls)),
        ("tokens in", str(total.input_tokens)),
        ("tokens out", str(total.output_tokens)),
        ("cost", total.describe_cost()),
    ):
        table.add_column(name, footer=footer, justify="left" if name == "role" else "right")
    roles: dict[str, Usage] = result.usage_by_role()
    for role, usage in roles.items():
        table.add_row(role, str(usage.model_calls), str(usage.input_tokens), str(usage.output_tokens), usage.describe_cost())
    return table
