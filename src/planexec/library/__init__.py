"""The plan library: plans kept as named, versioned templates, run again without a planner, and reused for goals that fit them.

Public here: filling a template in (`instantiate`, `parse_values`,
`TemplateError`), where a goal's plan came from (`ReusePlanning`), and the
export file (`export_templates`, `import_templates`).
"""

from planexec.library.export import export_templates, import_templates
from planexec.library.reuse import ReusePlanning
from planexec.library.templates import TemplateError, instantiate, parse_values

__all__ = ["ReusePlanning", "TemplateError", "export_templates", "import_templates", "instantiate", "parse_values"]
