"""Evaluation: suites of goals, the harness that runs them in each mode, and its reports.

Public here, what ``planexec eval`` (or a face of your own) runs a suite
with: `load_suite` (`SuiteError`), `run_suite` with `EvalOptions` (`MODES`,
`parse_modes`, `configured_models`, `scripted_models`) giving
`EvalRecord`s, `LatencyModel` (the oracle's timing), and the reports
(`summary_table`, `goals_table`, `ratio_notes`, `write_report`).
"""

from planexec.eval.harness import MODES, EvalOptions, EvalRecord, configured_models, parse_modes, run_suite, scripted_models
from planexec.eval.oracle import LatencyModel
from planexec.eval.report import goals_table, ratio_notes, summary_table, write_report
from planexec.eval.suite import SuiteError, load_suite

__all__ = [
    "MODES",
    "EvalOptions",
    "EvalRecord",
    "LatencyModel",
    "SuiteError",
    "configured_models",
    "goals_table",
    "load_suite",
    "parse_modes",
    "ratio_notes",
    "run_suite",
    "scripted_models",
    "summary_table",
    "write_report",
]
