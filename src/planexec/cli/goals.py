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
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

from planexec import ModelOptions, Plan, Planning, PlanningOptions, ReviewOptions, RunResult, RunStatus, Team, Toolbox
from planexec.cli import _common as common
from planexec.cli.approvals import call_approver, run_approvers, step_approver
from planexec.cli.progress import EventLog, LiveProgress, print_summary, usage_table
from planexec.cli.review_terminal import ReviewTerminal, decide_here, verdicts_table
from planexec.config import Config
from planexec.errors import ConfigError, ModelError, PlanningError, PlanRejectedError, RegistryError
from planexec.library import ReusePlanning
from planexec.plan import plan_graph, plan_table
from planexec.policies import Review, ReviewOutcome
from planexec.runs import run_to_end
from planexec.stages import ROUTINGS, Finished, HandedOff, Planned, Reviewed, Route, Routed, Stage, Started
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


def team_from_args(
    args: argparse.Namespace,
    config: Config,
    *,
    store: RunStore | None = None,
    policies: Any = (),
    reviewer: Callable[[Plan, Any], ReviewOutcome] | None = None,
    yes: bool = False,
) -> Team:
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
            review=ReviewOptions(policies=policies, reviewer=reviewer, auto_approve=yes),
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
    """``planexec run GOAL``: `Team.iter`'s stages, each shown: route, plan (or stream), review, run, report."""
    t0 = time.perf_counter()  # the run's time counts routing and planning too
    mode, why = _requested_mode(args)
    config = common.config()
    policies = common.policies(args, config)
    if args.stream and len(policies):
        raise common.UsageError("--stream starts steps before the plan is complete, so the policies cannot review it: run without --stream")
    if args.stream and not args.yes:
        raise common.UsageError("--stream starts steps before the plan is complete, so it cannot be reviewed first: add --yes")
    store = common.run_store(args, config)
    goal = _GoalFace(args, config, store, policies)
    team = goal.team = team_from_args(args, config, store=store, policies=list(policies), reviewer=goal.review, yes=args.yes)
    common.connect_runner(team)  # a Ray cluster that cannot be reached stops the command before any planning
    _announce(team)
    if mode != "auto":
        common.say(f"mode: {'plan' if mode == 'stream' else mode} ({why})", stderr=True)
        if mode == "plan":
            goal.planning_with()
    try:
        stages = team.iter(args.goal, mode=mode, run_id=args.run_id, events=False, run_options=goal.options)  # type: ignore[arg-type]
        result = run_to_end(goal.follow(stages))
    except PlanningError as exc:
        common.say(f"planexec: no valid plan: {exc}", stderr=True)
        return common.EXIT_FAILED
    except ModelError as exc:
        common.say(f"planexec: the planner's model failed: {type(exc).__name__}: {exc}", stderr=True)
        return common.EXIT_FAILED
    except PlanRejectedError as exc:
        common.say(f"planexec: the plan was not run: {exc.reason}", stderr=True)
        return common.EXIT_FAILED
    return _report(args, result, t0)


class _GoalFace:
    """What ``planexec run GOAL`` shows and decides at each of the team's stages (see `cmd_run_goal`)."""

    def __init__(self, args: argparse.Namespace, config: Config, store: RunStore | None, policies: Any) -> None:
        self.args, self.config, self.store, self.policies = args, config, store, policies
        self.team: Team | None = None
        self.display: LiveProgress | EventLog | None = None
        self.terminal = ReviewTerminal(common.console(stderr=args.json), interactive=sys.stdin.isatty())
        self.planning: Planning | None = None
        self.route: Route | None = None

    def planning_with(self) -> None:
        assert self.team is not None
        common.say(f"planning with {self.team.planner_model.name} …", stderr=True)

    def review(self, plan: Plan, result: Any) -> ReviewOutcome:
        """The person at the terminal, ``--yes``, or nobody: then a recorded run waits for ``planexec approve``."""
        assert self.team is not None
        shown = not self.args.json
        outcome = decide_here(
            plan, result, self.policies, self.team.policy_context(), terminal=self.terminal, yes=self.args.yes,
            plan_shown=shown and plan == (self.planning.plan if self.planning else None), graph_shown=shown and self.args.show_graph,
        )  # fmt: skip
        if not outcome.approved and outcome.by == "nobody" and self.store is not None:
            common.say("the plan needs a person's approval: the run waits for `planexec approve RUN_ID` from another process", stderr=True)
            return dataclasses.replace(outcome, decision="wait")
        return outcome

    def options(self, plan: Plan | None, outcome: ReviewOutcome | None) -> dict[str, Any]:
        """The run's approvers and display: a single agent's or a streamed plan's (no review), else the reviewed plan's."""
        args, store = self.args, self.store
        self.display = _display(args, plan)
        if outcome is None:
            yes = True if args.mode == "stream" or args.stream else args.yes
            return {
                "approver": step_approver(store, yes=yes, interactive=False, display=self.display, store_option=args.store),
                "call_approver": call_approver(
                    store, yes=args.yes, interactive=sys.stdin.isatty(), display=self.display, store_option=args.store
                ),
            }
        assert self.team is not None
        return run_approvers(
            store, outcome, registry=self.team.registry, config=self.config, policies=self.policies, yes=args.yes,
            display=self.display, store_option=args.store,
        )  # fmt: skip

    async def follow(self, stages: AsyncGenerator[Stage, None]) -> RunResult:
        """Show each stage as it comes; the run's result."""
        assert self.team is not None
        async for stage in stages:
            if isinstance(stage, Routed):
                route = self.route = stage.route
                common.say(f"mode: {route.mode} ({route.by}: {route.reason})", stderr=True)
                if route.mode == "plan":
                    self.planning_with()
            elif isinstance(stage, Planned):
                self.planning = stage.planning
                self._planned(stage.planning)
            elif isinstance(stage, Reviewed):
                outcome = stage.outcome
                if outcome.approved and (len(self.policies) or outcome.by != "policy"):
                    common.say(f"plan approved by {outcome.by}: {outcome.reason}", stderr=True)
                elif outcome.by == "policy" and not outcome.approved and len(self.policies):
                    review = Review(decision="reject", plan_hash=outcome.plan.content_hash, plan_version=outcome.plan.version,
                                    verdicts=outcome.verdicts)  # fmt: skip
                    self.terminal.console.print(verdicts_table(review))
            elif isinstance(stage, Started):
                if stage.mode == "single" and self.planning is not None:
                    step = self.planning.plan.steps[0]
                    names = ", ".join(self.team.single_agent_tools(step).tools) or "none"  # type: ignore[union-attr]
                    common.say(
                        f"mode: single (the plan has one step, so one agent works the goal directly, with the tools of {step.worker}: {names})",
                        stderr=True,
                    )
                watched = await common.watch(stage.run, self.display)
                if watched.status is not RunStatus.INCOMPLETE or stage.mode != "single":
                    await stages.aclose()  # nothing follows the run but its end
                    return watched
            elif isinstance(stage, HandedOff):  # the contract stopped the agent: a plan finishes the goal
                self.route, self.planning = None, None
                common.say(
                    f"the single agent stopped ({stage.result.reason}); a plan finishes the goal, each value read from "
                    "untrusted text carried as a typed slot and each change under its grant",
                    stderr=True,
                )
            elif isinstance(stage, Finished):
                return stage.result
        raise AssertionError("a goal's path starts a run or raises")  # pragma: no cover

    def _planned(self, planning: Planning) -> None:
        """Say where the plan came from; show it unless one agent will work it (a one-step plan in auto mode)."""
        assert self.team is not None
        if isinstance(planning, ReusePlanning):  # the plan library was asked first: say what it did
            common.say(planning.reuse.describe(), stderr=True)
        plan = planning.plan
        if self.route is not None and self.route.by != "template" and len(plan.steps) == 1:
            step = plan.steps[0]
            if self.team.single_agent_tools(step) is not None:
                return  # one agent works it: `Started` says so
            common.say(f"mode: plan (its one step calls {step.action} directly: no agent needed)", stderr=True)
        if not self.args.json:
            _show_plan(planning, graph=self.args.show_graph)


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
