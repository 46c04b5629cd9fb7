"""Evaluation: suites of goals, the harness that runs them in each mode, and its reports.

Public here, what ``planexec eval`` (or a face of your own) runs a suite
with: `load_suite` (`SuiteError`), `run_suite` with `EvalOptions` (`MODES`,
`parse_modes`, `configured_models`, `scripted_models`) giving
`EvalRecord`s, `LatencyModel` (the oracle's timing), `TierModel` (a
scripted model of one size, for model cascades), and the reports
(`summary_table`, `goals_table`, `ratio_notes`, `write_report`). Planners
compared: `parse_planners` reads ``--planner`` values into `PlannerSpec`s,
`PLANNER_VARIANTS` are the scripted planners, and `run_suite` takes each
planner and workers' model as a `Contender`. The
prompt-injection suite: `INJECTION_SCENARIOS`, `run_injection_suite` giving
an `InjectionReport`, `InjectionMode` (``single`` or ``team``).
"""

from planexec.eval.harness import MODES, Contender, EvalOptions, EvalRecord, configured_models, parse_modes, run_suite, scripted_models
from planexec.eval.injection import run_suite as run_injection_suite
from planexec.eval.injection_report import InjectionReport
from planexec.eval.injection_report import RunMode as InjectionMode
from planexec.eval.injection_scenarios import SCENARIOS as INJECTION_SCENARIOS
from planexec.eval.oracle import LatencyModel, TierModel
from planexec.eval.planners import PLANNER_VARIANTS, PlannerSpec, parse_planners
from planexec.eval.report import goals_table, ratio_notes, summary_table, write_report
from planexec.eval.suite import SuiteError, load_suite

__all__ = [
    "INJECTION_SCENARIOS",
    "MODES",
    "PLANNER_VARIANTS",
    "Contender",
    "EvalOptions",
    "EvalRecord",
    "InjectionMode",
    "InjectionReport",
    "LatencyModel",
    "PlannerSpec",
    "SuiteError",
    "TierModel",
    "configured_models",
    "goals_table",
    "load_suite",
    "parse_modes",
    "parse_planners",
    "ratio_notes",
    "run_injection_suite",
    "run_suite",
    "scripted_models",
    "summary_table",
    "write_report",
]
