"""The commands over a written plan: ``planexec validate``, ``planexec run --plan|--template`` and ``planexec schema``.

Owns checking a plan file (or a saved template, see `plans.template_plan`)
against the registry it runs on (`_common.plan_registry`: the tools modules,
or goal mode's team when the plan names roles or toolkit tools), running it
after the policies' and a person's review with a live display (or JSON),
with a replanner on goal mode's planner model when a step's failure action
asks for a new version (``--max-replans``, ``--model``, ``--base-url``),
and the JSON Schema of a plan. ``planexec run GOAL`` is handed to `goals`.
A run records its tools modules in `RunStarted.setup`, so
``planexec resume RUN_ID`` loads them again without flags (see `recovery`).
Imports `cli._common`, `cli.approvals`, `cli.goals`, `cli.plans`,
`cli.progress` and the public API; never `cli.main`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from planexec import Engine, Plan, Registry, RunResult, validate_plan
from planexec.cli import _common as common
from planexec.cli.approvals import run_approvers
from planexec.cli.goals import cmd_run_goal, team_from_args
from planexec.cli.plans import check_template_args, template_plan
from planexec.cli.progress import EventLog, LiveProgress, print_summary
from planexec.config import Config
from planexec.fleet import run_setup, saved_plan_engine
from planexec.runs import run_to_end

__all__ = ["cmd_run", "cmd_schema", "cmd_validate"]


def cmd_validate(args: argparse.Namespace) -> int:
    """``planexec validate``: print every problem (exit 1) or an ok line (exit 0)."""
    checked = _checked_plan(args)
    if checked is None:
        return common.EXIT_FAILED
    plan = checked[0]
    ok = f"ok: plan {plan.plan_id!r} · {len(plan.steps)} steps · {plan.content_hash}"
    if args.json:
        print("[]")
    common.say(ok, stderr=args.json)
    return common.EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """``planexec run``: a goal (see `goals`), or a plan file or template: validate, review, run with a display (or JSON), summarise."""
    if args.template is not None or args.template_params:  # a saved plan (plans.py): runs like a plan file
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
    display: LiveProgress | EventLog | None = None if args.json else (LiveProgress(plan, out) if out.is_terminal else EventLog(plan, out))
    approvers = run_approvers(
        store, outcome, registry=registry, config=config, policies=policies, yes=args.yes, display=display, store_option=args.store
    )
    where = common.runner_settings(args, config)
    setup = run_setup([*config.tools, *args.tools], where)  # what `planexec resume RUN_ID` loads again, and where it ran
    limit = getattr(args, "max_replans", None)
    if limit is not None and limit < 0:
        raise common.UsageError("--max-replans must be 0 or more")
    settings = common.with_model_router(common.engine_config(args, config, max_replans=limit), config, store)
    if settings.max_replans and any(s.failure_action.kind == "replan" for s in plan.steps):
        # the plan asks for a new version when a step fails: the goal mode's planner model writes it, over this plan's tools
        approvers["replanner"] = team_from_args(args, config).replanner_for(registry)
    engine = saved_plan_engine(registry, engine=settings, store=store, runner=common.step_runner(where, registry), **approvers)
    result = run_to_end(_execute(engine, plan, display, run_id=args.run_id, setup=setup))
    if args.json:
        common.emit(json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False))
    else:
        print_summary(out, result)
        hint = common.resume_hint(result, recorded=store is not None)
        if hint:
            common.say(hint)
    return common.exit_code(result)


def cmd_schema(args: argparse.Namespace) -> int:
    """``planexec schema``: the JSON Schema of a plan."""
    indent = args.indent if args.indent > 0 else None
    common.emit(json.dumps(Plan.model_json_schema(), indent=indent, ensure_ascii=False))
    return common.EXIT_OK


async def _execute(
    engine: Engine, plan: Plan, display: LiveProgress | EventLog | None, *, run_id: str | None, setup: dict[str, Any]
) -> RunResult:
    """Start the run, feed the display, turn Ctrl-C into a recorded cancellation."""
    run = engine.start(plan, validate=False, run_id=run_id, setup=setup)  # the command validated it and printed any problems
    return await common.watch(run, display)


def _checked_plan(args: argparse.Namespace) -> tuple[Plan, Registry, Config] | None:
    """The plan, the registry it runs on, the config; None after printing the plan's problems."""
    config = common.config()
    if getattr(args, "template", None) is not None:  # planexec run --template NAME (plans.py)
        plan = template_plan(args)
    else:
        plan = common.load_plan(Path(args.plan), as_json=args.json)
    if plan is None:
        return None
    models = {name: getattr(args, name, None) for name in ("model", "worker_model", "base_url")}  # `run` has them, `validate` not
    registry = common.plan_registry(
        plan, args.tools, config, workspace=getattr(args, "workspace", None), seed=getattr(args, "seed", 0), **models
    )
    problems = validate_plan(plan, registry)
    if problems:
        common.print_problems(problems, plan.plan_id, as_json=args.json)
        return None
    return plan, registry, config
