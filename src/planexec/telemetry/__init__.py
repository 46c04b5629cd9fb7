"""OpenTelemetry traces of runs and model calls: off unless configured, and nothing sent anywhere by default.

Switched on by ``[planexec.telemetry]`` in ``planexec.toml`` or the standard
``OTEL_*`` variables (`configure`, which every `Team` and command calls), or
in code (`enable`). Then each run is a trace: the run, each version of its
plan, each step and attempt, each model call and each tool call, with the
GenAI semantic conventions' attributes and planexec's run and step ids
(`telemetry.names`). Spans go to the tracer provider the application set
up, else to ours with the console tree or the OTLP/HTTP exporter. Prompts
and outputs stay out of spans unless ``capture_content`` is on. While off,
no OpenTelemetry module is imported and the engine does no work for it.
See docs/telemetry.md.
"""

from planexec.telemetry.scopes import goal_scope, run_scope, start_run, trace_run
from planexec.telemetry.settings import TelemetrySettings, resolve_settings
from planexec.telemetry.setup import Telemetry, active, configure, disable, enable, traced
from planexec.telemetry.tree import TreeExporter, render_tree

__all__ = [
    "Telemetry",
    "TelemetrySettings",
    "TreeExporter",
    "active",
    "configure",
    "disable",
    "enable",
    "goal_scope",
    "render_tree",
    "resolve_settings",
    "run_scope",
    "start_run",
    "trace_run",
    "traced",
]
