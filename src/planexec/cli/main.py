"""The ``planexec`` command: builds the parser from each command module and dispatches.

Owns the list of commands and the options of ``validate``, ``plan``, ``run``,
``eval`` and ``schema`` (the other command groups register their own), and
turning a command's `UsageError` or a stray Ctrl-C into its exit code. The
commands themselves live in `plan_files` (validate, run a plan file or
template, schema), `goals` (plan and run a goal), `eval`, `plans` (the plan
library), `history` (runs, show, logs), `recovery` (resume, resolve),
`approvals`, `audit` (audit verify), `store_check` (store check) and
`worker` (submit, worker, queue), `export` (export training); what they share is the private
`_common`. Imports those modules; none of them imports this one.

Exit codes: 0 success (or a valid plan); 1 problems with the plan, or a run
that ended partial, aborted or asking for a replan (or, for ``audit
verify`` and ``store check``, records that do not match their audit
chain); 2 usage and input errors (missing or malformed files, tool modules
that do not load, bad configuration, a store that is damaged or cannot be
opened); 3 a run stopped because its store failed, or a command that writes found
a store it cannot write (read-only, immutable); 4 a --run-id the store
already has; 130 a run cancelled with Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from planexec import __version__
from planexec.cli import _common as common
from planexec.cli.a2a import add_a2a_command
from planexec.cli.approvals import add_approval_commands
from planexec.cli.audit import add_audit_commands
from planexec.cli.eval import add_eval_options, run_eval
from planexec.cli.export import add_export_commands
from planexec.cli.goals import add_goal_options, add_mode_option, cmd_plan
from planexec.cli.history import add_history_commands
from planexec.cli.mcp import add_mcp_command
from planexec.cli.plan_files import cmd_run, cmd_schema, cmd_validate
from planexec.cli.plans import add_library_commands, add_template_options
from planexec.cli.recovery import add_recovery_commands
from planexec.cli.serve import add_serve_command
from planexec.cli.store_check import add_store_commands
from planexec.cli.worker import add_fleet_commands
from planexec.errors import StoreError

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.command(args))
    except common.UsageError as exc:
        common.say(f"planexec: error: {exc}", stderr=True)
        return exc.code
    except StoreError as exc:  # the store failed outside a run's recording: it cannot be written (read-only, immutable)
        common.say(f"planexec: error: {exc}{common.unwritable_hint(exc)}", stderr=True)
        return common.EXIT_STORE_FAILED
    except KeyboardInterrupt:  # Ctrl-C outside a run (while loading tools, at a prompt)
        print("planexec: interrupted", file=sys.stderr)
        return common.EXIT_INTERRUPTED
    finally:
        common.close_stores()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every command."""
    parser = argparse.ArgumentParser(prog="planexec", description="Validate and run planexec plans.")
    parser.add_argument("--version", action="version", version=f"planexec {__version__}")
    sub = parser.add_subparsers(dest="name", required=True, metavar="COMMAND")
    tools_help = (
        "a module with tools: a dotted module name (importable from the current folder) or a .py file; "
        "repeatable; added to 'tools' in planexec.toml"
    )

    p = sub.add_parser("validate", help="check a plan against the registered tools and workers")
    p.add_argument("plan", metavar="PLAN.json", help="the plan file")
    p.add_argument("--tools", action="append", default=[], metavar="MODULE", help=tools_help)
    p.add_argument("--json", action="store_true", help="print the problems as a JSON list")
    p.set_defaults(command=cmd_validate)

    p = sub.add_parser("plan", help="plan a goal with the configured planner model; print or save the plan")
    p.add_argument("goal", metavar="GOAL", help="what you want done, in words")
    p.add_argument("-o", "--output", metavar="PLAN.json", help="write the plan to this file")
    p.add_argument("--tools", action="append", default=[], metavar="MODULE", help=tools_help)
    p.add_argument("--json", action="store_true", help="print the plan as JSON instead of a table")
    add_goal_options(p)
    p.set_defaults(command=cmd_plan)

    p = sub.add_parser("run", help="plan a goal (or read a plan file), approve it, run it with a live progress display")
    p.add_argument("goal", nargs="?", metavar="GOAL", help="what you want done, in words (or give --plan)")
    p.add_argument("--plan", metavar="PLAN.json", help="run this plan file instead of planning a goal")
    p.add_argument("--tools", action="append", default=[], metavar="MODULE", help=tools_help)
    p.add_argument("--json", action="store_true", help="no live display; print the run result as JSON")
    p.add_argument("--max-concurrency", type=common.positive(int), metavar="N", help="steps running at once")
    p.add_argument("--timeout", type=common.positive(float), metavar="SECONDS", help="timeout of steps that set none")
    p.add_argument("--yes", "-y", action="store_true", help="approve the plan and every step that requires approval")
    p.add_argument("--stream", action="store_true", help="start steps while the planner is still writing (needs --yes)")
    p.add_argument(
        "--policies", action="append", default=[], metavar="FILE",
        help="policies that review the plan first: a YAML rule file or a Python module; repeatable; added to 'policies' in planexec.toml",
    )  # fmt: skip
    add_template_options(p)
    add_mode_option(p)
    add_goal_options(p)
    common.add_store_options(p)
    common.add_runner_options(p)
    p.set_defaults(command=cmd_run)

    p = sub.add_parser("eval", help="run evaluation suites in each mode; print a table, write a PNG chart and a JSON report")
    add_eval_options(p)
    p.set_defaults(command=run_eval)
    add_library_commands(sub)
    add_export_commands(sub)

    add_history_commands(sub)
    add_recovery_commands(sub)
    add_approval_commands(sub)
    add_audit_commands(sub)
    add_store_commands(sub)
    add_serve_command(sub)
    add_mcp_command(sub)
    add_a2a_command(sub)
    add_fleet_commands(sub)

    p = sub.add_parser("schema", help="print the JSON Schema of a plan")
    p.add_argument("--indent", type=int, default=2, metavar="N", help="indentation (default 2)")
    p.set_defaults(command=cmd_schema)
    return parser
