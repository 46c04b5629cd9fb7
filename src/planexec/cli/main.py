"""The ``planexec`` command: plan a goal, validate a plan, run either, print the plan schema.

Owns argument parsing, exit codes, where output goes, Ctrl-C handling and
approval prompts. Thin over the public API (`Plan`, `Registry`, `Engine`,
`validate_plan`); displays come from `progress`, settings from `config`.
Must not import engine, registry or scheduler internals.

Exit codes: 0 success (or a valid plan); 1 problems with the plan, or a run
that ended partial, aborted or asking for a replan; 2 usage and input errors
(missing or malformed files, tool modules that do not load, bad
configuration); 130 a run cancelled with Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from planexec import (
    Engine,
    Plan,
    Registry,
    RunResult,
    __version__,
    validate_plan,
)
from planexec.cli import _common as common
from planexec.cli.approvals import add_approval_commands, run_approvers
from planexec.cli.eval import add_eval_options, run_eval
from planexec.cli.goals import add_goal_options, add_mode_option, cmd_plan, cmd_run_goal
from planexec.cli.history import add_history_commands
from planexec.cli.plans import add_library_commands, add_template_options, check_template_args, template_plan
from planexec.cli.progress import EventLog, LiveProgress, print_summary
from planexec.cli.resume import add_control_commands
from planexec.config import Config

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.command(args))
    except common.UsageError as exc:
        common.console(stderr=True).print(f"planexec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return common.EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C outside a run (while loading tools, at a prompt)
        print("planexec: interrupted", file=sys.stderr)
        return common.EXIT_INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with its three subcommands."""
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
    p.set_defaults(command=cmd_run)

    p = sub.add_parser("eval", help="run evaluation suites in each mode; print a table, write a PNG chart and a JSON report")
    add_eval_options(p)
    p.set_defaults(command=cmd_eval)
    add_library_commands(sub)

    add_history_commands(sub)
    add_control_commands(sub)
    add_approval_commands(sub)

    p = sub.add_parser("schema", help="print the JSON Schema of a plan")
    p.add_argument("--indent", type=int, default=2, metavar="N", help="indentation (default 2)")
    p.set_defaults(command=cmd_schema)
    return parser


# --- commands -----------------------------------------------------------------


def cmd_validate(args: argparse.Namespace) -> int:
    """``planexec validate``: print every problem (exit 1) or an ok line (exit 0)."""
    checked = _checked_plan(args)
    if checked is None:
        return common.EXIT_FAILED
    plan = checked[0]
    ok = f"ok: plan {plan.plan_id!r} · {len(plan.steps)} steps · {plan.content_hash}"
    if args.json:
        print("[]")
    common.console(stderr=args.json).print(ok, markup=False, highlight=False, soft_wrap=True)
    return common.EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """``planexec run``: a goal (see `goals`), or a plan file: validate, run with a live display (or JSON), summarise."""
    if args.template is not None or args.template_params:  # a saved plan (library_cli): runs like a plan file
        check_template_args(args)
    elif (args.goal is None) == (args.plan is None):
        raise common.UsageError("give a GOAL to plan, --plan PLAN.json to run a plan file, or --template NAME (one of them)")
    if args.plan is not None and args.mode is not None:
        raise common.UsageError("--mode chooses how a GOAL is worked; a plan file runs as written")
    if args.goal is not None:
        return cmd_run_goal(args)
    checked = _checked_plan(args)
    if checked is None:
        return common.EXIT_FAILED
    plan, registry, config = checked
    policies = common.policies(args, config)
    store = common.run_store(args, config)
    outcome = common.review(
        plan, registry, policies, config, yes=args.yes, json_output=args.json, person_required=False, can_wait=store is not None
    )
    if outcome is None:
        return common.EXIT_FAILED
    plan = outcome.plan
    out = common.console()
    options: dict[str, Any] = {}
    max_concurrency = args.max_concurrency or config.max_concurrency
    if max_concurrency:
        options["max_concurrency"] = max_concurrency
    timeout = args.timeout or config.default_timeout
    if timeout:
        options["default_timeout"] = timeout

    if args.json:
        display: LiveProgress | EventLog | None = None
    elif out.is_terminal:
        display = LiveProgress(plan, out)
    else:
        display = EventLog(plan, out)

    options["store"] = store
    options.update(
        run_approvers(
            store, outcome, registry=registry, config=config, policies=policies, yes=args.yes, display=display, store_option=args.store
        )
    )
    engine = Engine(registry, **options)
    result = asyncio.run(_execute(engine, plan, display, run_id=args.run_id))
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False))
    else:
        print_summary(out, result)
        hint = common.resume_hint(result, recorded=store is not None)
        if hint:
            out.print(hint, markup=False, highlight=False, soft_wrap=True)
    return common.EXIT_BY_STATUS.get(result.status, common.EXIT_FAILED)


def cmd_eval(args: argparse.Namespace) -> int:
    """``planexec eval``: run suites in each mode and report (see `eval_command`)."""
    return run_eval(args)


def cmd_schema(args: argparse.Namespace) -> int:
    """``planexec schema``: the JSON Schema of a plan."""
    indent = args.indent if args.indent > 0 else None
    print(json.dumps(Plan.model_json_schema(), indent=indent, ensure_ascii=False))
    return common.EXIT_OK


# --- running ------------------------------------------------------------------


async def _execute(
    engine: Engine, plan: Plan, display: LiveProgress | EventLog | None, *, planning: Any = None, run_id: str | None = None
) -> RunResult:
    """Start the run, feed the display, turn Ctrl-C into a recorded cancellation."""
    run = engine.start(plan, validate=False, planning=planning, run_id=run_id)  # the command validated it and printed any problems
    return await common.watch(run, display)


# --- inputs -------------------------------------------------------------------


def _checked_plan(args: argparse.Namespace) -> tuple[Plan, Registry, Config] | None:
    """The plan, a registry with every tools module, the config; None after printing the plan's problems."""
    config = common.config()
    if getattr(args, "template", None) is not None:  # planexec run --template NAME (library_cli)
        plan = template_plan(args)
    else:
        plan = common.load_plan(Path(args.plan), as_json=args.json)
    if plan is None:
        return None
    registry = common.plan_registry(plan, args.tools, config, workspace=getattr(args, "workspace", None))
    problems = validate_plan(plan, registry)
    if problems:
        common.print_problems(problems, plan.plan_id, as_json=args.json)
        return None
    return plan, registry, config


# --- output -------------------------------------------------------------------
