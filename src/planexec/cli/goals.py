"""The goal commands of the CLI: ``planexec plan GOAL`` and ``planexec run GOAL``.

Owns what happens between a goal typed by the user and a run: choosing and
announcing the models (`ModelSettings`), building the team (`build_team`),
choosing the mode (``--mode auto`` asks the `router`; ``single`` runs one
agent, see `agent`; ``plan`` the team), planning (with repair) or streaming
the plan into the engine, showing the plan as a table and a DAG, asking for
approval, and the closing report (the deliverable, usage and cost per role,
model calls). Reuses the plumbing of `cli` (consoles, Ctrl-C handling,
approvals, exit codes). Imports the public API only.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

from planexec.cli import _common as common
from planexec.cli.approvals import run_approvers, step_approver
from planexec.cli.progress import EventLog, LiveProgress, print_summary, usage_table
from planexec.engine.engine import Engine
from planexec.engine.results import RunResult
from planexec.errors import ConfigError, ModelError, PlanningError, RegistryError
from planexec.models.settings import ModelSettings
from planexec.plan.model import Step
from planexec.plan.view import plan_graph, plan_table
from planexec.planning.joiner import ModelJoiner
from planexec.planning.planner import Planner, Planning
from planexec.planning.replanner import PlannerReplanner
from planexec.planning.router import route
from planexec.planning.stream import PlanStream
from planexec.team.agent import AGENT_WORKER, single_plan, start_single
from planexec.usage import Usage
from planexec.workers.builtin_team import build_team
from planexec.workers.registry import TOOL_WORKER, Registry
from planexec.workers.worker import RoleWorker

__all__ = ["MODES", "add_goal_options", "add_mode_option", "cmd_plan", "cmd_run_goal"]

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
    """``--mode auto|single|plan``: how ``run GOAL`` works the goal (default auto: the router decides)."""
    p.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help="single: one agent with every tool; plan: a team following a plan; "
        "auto (default): the planner's model decides, and a one-step plan runs as a single agent",
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


def _monitoring(args: argparse.Namespace, config: Any, planner: Planner) -> dict[str, Any]:
    """Engine options for monitoring a team's run: the planner replans (bounded), and the joiner if asked for."""
    limit = args.max_replans if args.max_replans is not None else (config.max_replans if config.max_replans is not None else 2)
    if limit < 0:
        raise common.UsageError("--max-replans must be 0 or more")
    options: dict[str, Any] = {"max_replans": limit}
    if limit:
        options["replanner"] = PlannerReplanner(planner)
    if args.joiner if args.joiner is not None else bool(config.joiner):
        options["joiner"] = ModelJoiner(planner.model)
    return options


def _settings(args: argparse.Namespace) -> tuple[ModelSettings, Any]:
    config = common.config()
    try:
        settings = ModelSettings(config, planner=args.model, worker=args.worker_model, base_url=args.base_url, seed=args.seed)
    except ConfigError as exc:
        raise common.UsageError(str(exc)) from None
    return settings, config


def _team(args: argparse.Namespace, settings: ModelSettings, config: Any) -> Registry:
    workspace = Path(args.workspace or config.workspace or "workspace")
    try:
        return build_team(settings, workspace=workspace, modules=[*config.tools, *args.tools])
    except RegistryError as exc:
        raise common.UsageError(str(exc)) from None


def _planner(args: argparse.Namespace, settings: ModelSettings, registry: Registry) -> Planner:
    model = settings.model(settings.planner.name)
    local = settings.planner.name.startswith("local:")
    max_steps = args.max_steps or (5 if local else 8)  # a small local model writes short plans faster and better
    max_tokens = 640 if local else 4096  # a plan of a few steps; bounds a small model that rambles under its grammar
    return Planner(model, registry, max_steps=max_steps, max_repairs=args.max_repairs, seed=args.seed, max_tokens=max_tokens)


def _announce(settings: ModelSettings) -> None:
    err = common.console(stderr=True)
    for line in settings.describe():
        err.print(line, markup=False, highlight=False, soft_wrap=True)


async def _draft(planner: Planner, goal: str) -> Planning:
    return await planner.draft(goal)


def _plan_or_exit(planner: Planner, goal: str) -> Planning | None:
    """The planning, or None after printing why there is no plan."""
    err = common.console(stderr=True)
    err.print(f"planning with {planner.model.name} …", markup=False, highlight=False)
    try:
        return asyncio.run(_draft(planner, goal))
    except PlanningError as exc:
        err.print(f"planexec: no valid plan: {exc}", markup=False, highlight=False, soft_wrap=True)
    except ModelError as exc:
        err.print(f"planexec: the planner's model failed: {type(exc).__name__}: {exc}", markup=False, highlight=False, soft_wrap=True)
    return None


def _show_plan(planning: Planning, *, graph: bool) -> None:
    out = common.console()
    out.print(plan_table(planning.plan))
    if graph:
        out.print(plan_graph(planning.plan))
    u = planning.usage
    tries = f", after {planning.repairs} repair(s)" if planning.repairs else ""
    out.print(
        f"planned in {len(planning.drafts)} draft(s){tries}: {u.input_tokens} tokens in, {u.output_tokens} out, {u.describe_cost()}",
        markup=False,
        highlight=False,
    )


def cmd_plan(args: argparse.Namespace) -> int:
    """``planexec plan GOAL``: plan only; print the plan (or write it with -o)."""
    settings, config = _settings(args)
    _announce(settings)
    registry = _team(args, settings, config)
    planning = _plan_or_exit(_planner(args, settings, registry), args.goal)
    if planning is None:
        return common.EXIT_FAILED
    if args.output:
        Path(args.output).write_text(planning.plan.to_json() + "\n", encoding="utf-8")
        common.console(stderr=True).print(f"wrote {args.output}", markup=False, highlight=False)
    if args.json:
        print(planning.plan.to_json())
    else:
        _show_plan(planning, graph=args.show_graph)
    return common.EXIT_OK


def _engine_options(args: argparse.Namespace, config: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"seed": args.seed, "store": common.run_store(args, config)}
    if args.max_concurrency or config.max_concurrency:
        options["max_concurrency"] = args.max_concurrency or config.max_concurrency
    if args.timeout or config.default_timeout:
        options["default_timeout"] = args.timeout or config.default_timeout
    return options


def _say(line: str) -> None:
    common.console(stderr=True).print(line, markup=False, highlight=False, soft_wrap=True)


def _requested_mode(args: argparse.Namespace) -> tuple[str, str]:
    """The mode asked for and why (``auto`` is decided later by the router)."""
    mode = args.mode or "auto"
    if args.stream:
        if mode == "single":
            raise common.UsageError("--stream streams a plan into the team, so it cannot run with --mode single")
        return "plan", "--stream"
    return mode, f"--mode {mode}"


def cmd_run_goal(args: argparse.Namespace) -> int:
    """``planexec run GOAL``: choose the mode; run one agent, or plan (or stream the plan), approve, execute; report."""
    mode, why = _requested_mode(args)
    settings, config = _settings(args)
    _announce(settings)
    registry = _team(args, settings, config)
    policies = common.policies(args, config)
    if args.stream and len(policies):
        raise common.UsageError("--stream starts steps before the plan is complete, so the policies cannot review it: run without --stream")
    planner = _planner(args, settings, registry)
    out = common.console()
    options = _engine_options(args, config)
    overhead: dict[str, Usage] = {}
    routed = mode == "auto"
    if routed:
        decision = asyncio.run(route(args.goal, planner.model))
        overhead["router"] = decision.usage
        mode, why = decision.mode, f"router: {decision.reason}"
    _say(f"mode: {mode} ({why})")
    if mode == "single":
        return _run_single(args, settings, registry, options, overhead)
    monitoring = _monitoring(args, config, planner)  # for the team only: a single agent has no plan to revise

    if args.stream:
        if not args.yes:
            raise common.UsageError("--stream starts steps before the plan is complete, so it cannot be reviewed first: add --yes")
        display: LiveProgress | EventLog | None = None if args.json else EventLog(None, out)  # type: ignore[arg-type]
        options["approver"] = step_approver(options["store"], yes=True, interactive=False, display=display, store_option=args.store)
        engine = Engine(registry, **options, **monitoring)  # no plan approver: a streamed plan runs before it is complete
        result = asyncio.run(_stream(engine, planner, args.goal, display, run_id=args.run_id))
    else:
        planning = _plan_or_exit(planner, args.goal)
        if planning is None:
            return common.EXIT_FAILED
        if routed and len(planning.plan.steps) == 1:  # nothing to coordinate
            step = planning.plan.steps[0]
            role_tools = _role_tools(registry, step)
            if role_tools is None:
                _say(f"mode: plan (its one step calls {step.action} directly: no agent needed)")
            else:
                names = ", ".join(role_tools.tools) or "none"
                _say(
                    f"mode: single (the plan has one step, so one agent works the goal directly, with the tools of {step.worker}: {names})"
                )
                return _run_single(args, settings, role_tools, options, overhead, planning=planning)
        if not args.json:
            _show_plan(planning, graph=args.show_graph)
        shown = not args.json
        outcome = common.review(
            planning.plan,
            registry,
            policies,
            config,
            yes=args.yes,
            json_output=args.json,
            plan_shown=shown,
            graph_shown=shown and args.show_graph,
            can_wait=options["store"] is not None,
        )
        if outcome is None:
            return common.EXIT_FAILED
        if outcome.edited:  # the person's edit runs, not the planner's draft
            planning = dataclasses.replace(planning, plan=outcome.plan)
        plan = planning.plan
        display = None if args.json else (LiveProgress(plan, out) if out.is_terminal else EventLog(plan, out))
        approvers = run_approvers(
            options["store"],
            outcome,
            registry=registry,
            config=config,
            policies=policies,
            yes=args.yes,
            display=display,
            store_option=args.store,
        )
        engine = Engine(registry, **options, **approvers, **monitoring)
        result = asyncio.run(_execute(engine, planning, display, overhead, run_id=args.run_id))
    _report(args, result)
    return common.EXIT_BY_STATUS.get(result.status, common.EXIT_FAILED)


def _role_tools(registry: Registry, step: Step) -> Registry | None:
    """The tools of the role a one-step plan gives the whole goal, for the agent; None when the step is a tool call.

    A step that calls a tool is already direct (no model in the loop), so it
    runs as planned. For a role's task the agent takes that role's tools (the
    planner chose them for the goal): the writer has none, so the agent
    answers in plain text, which a small model writes far better than
    JSON-mode replies.
    """
    worker = registry.workers.get(step.worker)
    if not isinstance(worker, RoleWorker) or step.action not in worker.tasks:
        return None
    own = Registry()
    for t in worker.tools.values():
        own.add_tool(t, worker=TOOL_WORKER)
    return own


def _run_single(
    args: argparse.Namespace,
    settings: ModelSettings,
    registry: Registry,
    options: dict[str, Any],
    overhead: dict[str, Usage],
    *,
    planning: Planning | None = None,
) -> int:
    """One agent with the tools of `registry` works the goal; --yes lets it use tools that need approval."""
    name = settings.for_role(AGENT_WORKER).name
    model = settings.model(name)
    # a local turn re-reads the whole prompt (tens of seconds on a CPU), and a small model loops on tools:
    # a few turns, the last of which must answer, fit the step's timeout
    max_turns = 4 if name.startswith("local:") else 12
    out = common.console()
    plan = single_plan(args.goal)  # what the display shows; start_single runs the same one
    display = None if args.json else (LiveProgress(plan, out) if out.is_terminal else EventLog(plan, out))
    options = {
        **options,
        "approver": step_approver(options.get("store"), yes=args.yes, interactive=False, display=display, store_option=args.store),
    }

    async def work() -> RunResult:
        run = start_single(
            args.goal,
            model=model,
            registry=registry,
            max_turns=max_turns,
            engine_options=options,
            overhead=overhead,
            planning=planning,
            requires_approval=args.yes,
        )
        return await common.watch(run, display)

    result = asyncio.run(work())
    _report(args, result)
    return common.EXIT_BY_STATUS.get(result.status, common.EXIT_FAILED)


async def _execute(
    engine: Engine, planning: Planning, display: LiveProgress | EventLog | None, overhead: dict[str, Usage], *, run_id: str | None = None
) -> RunResult:
    run = engine.start(planning.plan, validate=False, planning=planning, overhead=overhead, run_id=run_id)  # the planner validated it
    return await common.watch(run, display)


async def _stream(engine: Engine, planner: Planner, goal: str, display: EventLog | None, *, run_id: str | None = None) -> RunResult:
    run = engine.start_streaming(PlanStream(planner, goal), run_id=run_id)
    return await common.watch(run, display)


def _report(args: argparse.Namespace, result: RunResult) -> None:
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False))
        return
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
