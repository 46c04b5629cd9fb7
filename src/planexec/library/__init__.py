"""The plan library: plans kept as named, versioned templates, run again without a planner, and reused for goals that fit them.

Public here: saving a run's plan (`save_run_template`), filling a template
in (`instantiate`, `parse_values`, `TemplateError`), comparing versions
(`diff_templates`), where a goal's plan came from (`ReusePlanning`), and the
export file (`export_templates`, `import_templates`); and training data from
the store's runs (`export_training`, `training_set`, `TrainingFilter`).
"""

from planexec.library.export import export_templates, import_templates
from planexec.library.reuse import ReusePlanning
from planexec.library.templates import TemplateError, diff_templates, instantiate, parse_values, save_run_template
from planexec.library.training import (
    LEFT_OUT,
    PAIR_KINDS,
    TRAINING_FILES,
    TrainingFilter,
    TrainingSet,
    export_training,
    training_set,
)

__all__ = [
    "LEFT_OUT",
    "PAIR_KINDS",
    "TRAINING_FILES",
    "ReusePlanning",
    "TemplateError",
    "TrainingFilter",
    "TrainingSet",
    "diff_templates",
    "export_templates",
    "export_training",
    "import_templates",
    "instantiate",
    "parse_values",
    "save_run_template",
    "training_set",
]
