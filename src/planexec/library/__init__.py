"""The plan library: plans kept as named, versioned templates, run again without a planner, and reused for goals that fit them.

Public here: saving a run's plan (`save_run_template`), filling a template
in (`instantiate`, `parse_values`, `TemplateError`), comparing versions
(`diff_templates`), where a goal's plan came from (`ReusePlanning`), and the
export file (`export_templates`, `import_templates`).
"""

from planexec.library.export import export_templates, import_templates
from planexec.library.reuse import ReusePlanning
from planexec.library.templates import TemplateError, diff_templates, instantiate, parse_values, save_run_template

__all__ = [
    "ReusePlanning",
    "TemplateError",
    "diff_templates",
    "export_templates",
    "import_templates",
    "instantiate",
    "parse_values",
    "save_run_template",
]
