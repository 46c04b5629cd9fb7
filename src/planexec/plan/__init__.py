"""The plan: its typed model, the pure scheduler, validation, diffs, and text formats.

Imports only `errors` and `records` from planexec: a plan can be built,
checked, diffed and scheduled with no model, worker or engine in sight.
Public here, for a face that shows or edits plans: the compact text form
(`print_compact`, `read_compact`, `with_lines`), the references a step's
parameters make (`find_references`, `resolve_references`), how a
criterion reads (`criterion_label`), diffs (`diff_plans`, `PlanDiff`) and
the terminal's views (`plan_table`, `plan_graph`, `grants_text`,
`when_text`) and scheduled steps' windows (`parse_window`, `Window`,
`WindowError`).
"""

from planexec.plan.compact import print_compact, read_compact, with_lines
from planexec.plan.diff import PlanDiff, diff_plans
from planexec.plan.model import criterion_label
from planexec.plan.references import find_references, resolve_references
from planexec.plan.view import grants_text, plan_graph, plan_table, when_text
from planexec.plan.windows import Window, WindowError, parse_window

__all__ = [
    "PlanDiff",
    "Window",
    "WindowError",
    "criterion_label",
    "diff_plans",
    "find_references",
    "grants_text",
    "parse_window",
    "plan_graph",
    "plan_table",
    "print_compact",
    "read_compact",
    "resolve_references",
    "when_text",
    "with_lines",
]
