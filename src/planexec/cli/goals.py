"""The goal commands of the CLI: ``planexec plan GOAL`` and ``planexec run GOAL``, thin over `Team`.

Owns turning options into a `Team` (`team_from_args`: the built-in roles
and toolkit, the models, planexec.toml) and showing each of its stages to a
person: which models and why, the mode (``--mode auto``: the planner plans,
or the router's call decides first with ``routing = "router"``; a one-step
plan for a role runs as a single agent), the plan as a table and a
DAG, the terminal review and approvals, live progress, and the closing
report (the deliverable, the time from the command's start, usage and cost
per role). Imports `team`, `cli._common`, `cli.approvals`, `cli.progress`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from planexec import ModelOptions, Plan, Planning, PlanningOptions, Registry, ReviewOptions, RunResult, Team, Toolbox, Usage
from planexec.cli import _common as common
from planexec.cli.approvals import call_approver, run_approvers, step_approver
from planexec.cli.progress import EventLog, LiveProgress, print_summary, usage_table
from planexec.config import Config
from planexec.errors import ConfigError, ModelError, PlanningError, RegistryError
from planexec.library import ReusePlanning
from planexec.plan import plan_graph, plan_table
from planexec.runs import run_to_end, single_plan
from planexec.stages import ROUTINGS
from planexec.store import RunStore

__all__ = ["MODES", "add_goal_options", "add_mode_option", "cmd_plan", "cmd_run_goal", "team_from_args"]

MODES = ("auto", "single", "plan")


def add_goal_options(p: argparse.ArgumentParser) -> None:
    """The options that choose models and shape planning."""
    p.add_argument("--model", metavar="PROVIDER:MODEL", help="the planner's model (default: configured, else local:smollm2)")
    p.add_argument("--worker-model", metavar="PROVIDER:MODEL", help="the role workers' model (default: the planner's)")
    p.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible server for openai: models (vLLM, Ollama, llama.cpp)")
    p.add_argument("--max-steps", type=int, default=None, metavar="N", help="the longest plan allowed (default 8; 5 on local models)")
    p.add_argument("--max-repairs", type=int, default=2, metavar="N", help="drafts sent back to the planner to fix (default 2)")
    p.add_argument("--seed", type=int, default=0, help="seed for the models that honour one (default 0)")
    p.add_argument("--workspace", metavar="DIR", help="folder the file and code tools work in (default ./workspace)")
    p.add_argument("--show-graph", action="store_true", help="also draw the plan's DAG")


def add_mode_option(p: argparse.ArgumentParser) -> None:
    """``--mode auto|single|plan``: how ``run GOAL`` works the goal (default auto: see `Team.route_goal`)."""
    p.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help="single: one agent with every tool; plan: a team following a plan; "
        "auto (default): see --routing, and a one-step plan runs as a single agent",
    )
    p.add_argument(
        "--routing",
        choices=ROUTINGS,
        default=None,
        help="who decides in auto mode: planner (default: the goal is planned, no router call) "
        "or router (one short call first; a goal it gives one agent is not planned)",
    )
    p.add_argument(
        "--max-replans",
        type=int,
        default=None,
        metavar="N",
        help="new versions of the plan the run may ask the planner for when a step fails (default 2; 0: none)",
    )
    p.add_argument(
        "--joiner",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after the steps, the planner's model decides: finish with the answer, or replan",
    )
    p.add_argument(
        "--no-reuse",
        action="store_true",
        help="plan from scratch even when the goal fits a saved template of the store (see 'planexec plans')",
    )


def team_from_args(args: argparse.Namespace, config: Config, *, store: RunStore | None = None, policies: Any = ()) -> Team:
    """The `Team` a goal command works with: the built-in roles and toolkit, the options given, planexec.toml, the defaults."""
    if os.getcwd() not in sys.path:  # `--tools mytools` finds ./mytools.py, as `python -m` would
        sys.path.insert(0, os.getcwd())
    limit = getattr(args, "max_replans", None)
    if limit is not None and limit < 0:
        raise common.UsageError("--max-replans must be 0 or more")
    try:
        return Team(
            args.model,
            config=config,
            store=store,
            seed=args.seed,
            models=ModelOptions(worker=args.worker_model, base_url=args.base_url),
            toolbox=Toolbox(modules=args.tools, roles=True, workspace=args.workspace or config.workspace or "workspace"),
            planning=PlanningOptions(
                max_steps=args.max_steps,
                max_repairs=args.max_repairs,
                joiner=getattr(args, "joiner", None),
                reuse=False if getattr(args, "no_reuse", False) else None,
                routing=getattr(args, "routing", None),
            ),
            review=ReviewOptions(policies=policies),
            engine=common.engine_config(args, config, max_replans=limit),
            runner=common.runner_settings(args, config),
        )
    except (ConfigError, RegistryError, ValueError) as exc:
        raise common.UsageError(str(exc)) from None


def _announce(team: Team) -> None:
    err = common.console(stderr=True)
    for line in team.models.notes:
        err.print(line, markup=False, highlight=False, soft_wrap=True)


def _plan_or_exit(team: Team, goal: str) -> Planning | None:
    """The planning, or None after printing why there is no plan."""
    err = common.console(stderr=True)
    err.print(f"planning with {team.planner_model.name} …", markup=False, highlight=False)
    try:
        planning = run_to_end(team.plan(goal))
    except PlanningError as exc:
        err.print(f"planexec: no valid plan: {exc}", markup=False, highlight=False, soft_wrap=True)
        return None
    except ModelError as exc:
        err.print(f"planexec: the planner's model failed: {type(exc).__name__}: {exc}", markup=False, highlight=False, soft_wrap=True)
        return None
    if isinstance(planning, ReusePlanning):  # the plan library was asked first: say what it did
        err.print(planning.reuse.describe(), markup=False, highlight=False, soft_wrap=True)
    return planning


def _show_plan(planning: Planning, *, graph: bool) -> None:
    out = common.console()
    out.print(plan_table(planning.plan))
    if graph:
        out.print(plan_graph(planning.plan))
    u = planning.usage
    tries = f", after {planning.repairs} repair(s)" if planning.repairs else ""
    how = f"planned in {len(planning.drafts)} draft(s){tries}"
    if isinstance(planning, ReusePlanning) and planning.reuse.reused:
        how = planning.reuse.describe()
    out.print(f"{how}: {u.input_tokens} tokens in, {u.output_tokens} out, {u.describe_cost()}", markup=False, highlight=False)


def cmd_plan(args: argparse.Namespace) -> int:
    """``planexec plan GOAL``: plan only; print the plan (or write it with -o)."""
    team = team_from_args(args, common.config())
    _announce(team)
    planning = _plan_or_exit(team, args.goal)
    if planning is None:
        return common.EXIT_FAILED
    if args.output:
        Path(args.output).write_text(planning.plan.to_json() + "\n", encoding="utf-8")
        common.console(stderr=True).print(f"wrote {args.output}", markup=False, highlight=False)
    if args.json:
        common.emit(planning.plan.to_json())
    else:
        _show_plan(planning, graph=args.show_graph)
    return common.EXIT_OK


def _requested_mode(args: argparse.Namespace) -> tuple[str, str]:
    """The mode asked for and why (``auto`` is decided later: `Team.route_goal`)."""
    mode = args.mode or "auto"
    if args.stream:
        if mode == "single":
            raise common.UsageError("--stream streams a plan into the team, so it cannot run with --mode single")
        return "stream", "--stream"
    return mode, f"--mode {mode}"


def _display(args: argparse.Namespace, plan: Plan | None) -> LiveProgress | EventLog | None:
    out = common.console()
    if args.json:
        return None
    if plan is not None and out.is_terminal:
        return LiveProgress(plan, out)
    return EventLog(plan, out)  # type: ignore[arg-type]  # a streamed plan is shown step by step as it arrives


def cmd_run_goal(args: argparse.Namespace) -> int:
    """``planexec run GOAL``: the `Team`'s stages, each shown: route, plan (or stream), review, run, report."""
    t0 = time.perf_counter()  # the run's time counts routing and planning too
    mode, why = _requested_mode(args)
    config = common.config()
    policies = common.policies(args, config)
    if args.stream and len(policies):
        raise common.UsageError("--stream starts steps before the plan is complete, so the policies cannot review it: run without --stream")
    if args.stream and not args.yes:
        raise common.UsageError("--stream starts steps before the plan is complete, so it cannot be reviewed first: add --yes")
    store = common.run_store(args, config)
    team = team_from_args(args, config, store=store, policies=list(policies))
    common.connect_runner(team)  # a Ray cluster that cannot be reached stops the command before any planning
    _announce(team)
    overhead: dict[str, Usage] = {}
    routed = mode == "auto"
    if routed:
        decision = run_to_end(team.route_goal(args.goal))
        if decision.by == "router":
            overhead["router"] = decision.usage
        routed = decision.by != "template"  # a saved plan runs as saved, even with one step
        mode, why = decision.mode, f"{decision.by}: {decision.reason}"
    common.say(f"mode: {'plan' if mode == 'stream' else mode} ({why})", stderr=True)
    if mode == "single":
        return _run_single(args, team, overhead, t0)
    if mode == "stream":
        display = _display(args, None)
        approver = step_approver(store, yes=True, interactive=False, display=display, store_option=args.store)
        calls = call_approver(store, yes=args.yes, interactive=sys.stdin.isatty(), display=display, store_option=args.store)
        run = run_to_end(_stream(team, args.goal, display, run_id=args.run_id, approver=approver, call_approver=calls))
        return _report(args, run, t0)
    planning = _plan_or_exit(team, args.goal)
    if planning is None:
        return common.EXIT_FAILED
    if routed and len(planning.plan.steps) == 1:  # nothing to coordinate
        step = planning.plan.steps[0]
        role_tools = team.single_agent_tools(step)
        if role_tools is None:
            common.say(f"mode: plan (its one step calls {step.action} directly: no agent needed)", stderr=True)
        else:
            names = ", ".join(role_tools.tools) or "none"
            common.say(
                f"mode: single (the plan has one step, so one agent works the goal directly, with the tools of {step.worker}: {names})",
                stderr=True,
            )
            return _run_single(args, team, overhead, t0, registry=role_tools, planning=planning)
    if not args.json:
        _show_plan(planning, graph=args.show_graph)
    shown = not args.json
    outcome = common.review(
        planning.plan,
        team.registry,
        policies,
        config,
        yes=args.yes,
        json_output=args.json,
        plan_shown=shown,
        graph_shown=shown and args.show_graph,
        can_wait=store is not None,
    )
    if outcome is None:
        return common.EXIT_FAILED
    if outcome.edited:  # the person's edit runs, not the planner's draft
        planning = dataclasses.replace(planning, plan=outcome.plan)
    display = _display(args, planning.plan)
    approvers = run_approvers(
        store, outcome, registry=team.registry, config=config, policies=policies, yes=args.yes, display=display, store_option=args.store
    )
    result = run_to_end(_execute(team, planning, display, overhead, run_id=args.run_id, **approvers))
    return _report(args, result, t0)


def _run_single(
    args: argparse.Namespace,
    team: Team,
    overhead: dict[str, Usage],
    t0: float,
    *,
    registry: Registry | None = None,
    planning: Planning | None = None,
) -> int:
    """One agent with the tools of `registry` (default: the team's) works the goal; --yes lets it use tools that need approval."""
    display = _display(args, single_plan(args.goal))  # the plan `start_single` runs
    store = team.store if isinstance(team.store, RunStore) else None  # the CLI's stores are
    approver = step_approver(store, yes=args.yes, interactive=False, display=display, store_option=args.store)
    calls = call_approver(store, yes=args.yes, interactive=sys.stdin.isatty(), display=display, store_option=args.store)

    async def work() -> RunResult:
        run = team.start_single(
            args.goal,
            registry=registry,
            planning=planning,
            overhead=overhead,
            run_id=args.run_id,
            requires_approval=args.yes,
            approver=approver,
            call_approver=calls,
        )
        return await common.watch(run, display)

    return _report(args, run_to_end(work()), t0)


async def _execute(
    team: Team,
    planning: Planning,
    display: LiveProgress | EventLog | None,
    overhead: dict[str, Usage],
    *,
    run_id: str | None,
    **approvers: Any,
) -> RunResult:
    run = team.start(
        planning.plan, planning=planning, overhead=overhead, run_id=run_id, validate=False, **approvers
    )  # the planner validated it
    return await common.watch(run, display)


async def _stream(
    team: Team, goal: str, display: EventLog | LiveProgress | None, *, run_id: str | None, approver: Any, call_approver: Any
) -> RunResult:
    run = team.start_streaming(
        goal, run_id=run_id, approver=approver, call_approver=call_approver
    )  # no plan approver: a streamed plan runs before it is complete
    return await common.watch(run, display)


def _report(args: argparse.Namespace, result: RunResult, t0: float) -> int:
    """Print the result (its time from the command's start: routing and planning count) and return the exit code."""
    result = result.model_copy(update={"wall_time": time.perf_counter() - t0})
    code = common.exit_code(result)
    if args.json:
        common.emit(json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False))
        return code
    out = common.console()
    print_summary(out, result)
    out.print(usage_table(result))
    hint = common.resume_hint(result, recorded=not getattr(args, "no_store", False))
    if hint:
        out.print(hint, markup=False, highlight=False, soft_wrap=True)
    if result.answer is not None:
        answer = result.answer if isinstance(result.answer, str) else json.dumps(result.answer, indent=2, ensure_ascii=False)
        out.rule("deliverable")
        out.print(answer, markup=False, highlight=False, soft_wrap=True)
    return code
