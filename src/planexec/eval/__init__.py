"""Evaluation: suites of goals, the harness that runs them in each mode, and its reports."""
