"""The fleet's commands: ``planexec submit`` queues an approved plan, ``planexec worker`` runs queued runs, ``planexec queue`` lists them.

Owns the faces of `fleet.worker`: ``submit`` reads a plan file (or a saved
template), checks it against its tools, has the policies and a person
review it (``--yes``, the terminal, or later ``planexec approve RUN_ID``)
and queues it with `submit_plan`; ``worker`` opens the store (a SQLite
file must exist; a database server's store is made on first use, so the
workers may start first), builds a `QueueWorker` whose runs get the
registry a plan file gets (`_common.plan_registry`) and planexec.toml's
limits, and serves until SIGTERM or Ctrl-C (runs released at their next
step boundary; the second signal: at once), ``--idle-exit`` or
``--once``, or until the store has failed for a minute (exit 3);
``queue`` prints the queue. Bad input (an unknown store, ``--concurrency
0``) is a `common.UsageError` (exit 2). Imports `cli._common`,
`cli.plans`, the store's location and queue, and `fleet.worker`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from planexec import Plan, Submission, new_run_id, validate_plan
from planexec.cli import _common as common
from planexec.cli.plans import add_template_options, template_plan
from planexec.errors import PlanexecError, StoreError
from planexec.fleet import PARK_AFTER, FleetStore, QueueWorker, WorkerReport, queue_store, submit_plan
from planexec.runs import QueueState, run_to_end
from planexec.stages import Planned, Queued
from planexec.store import sqlite_path, store_target

__all__ = ["add_fleet_commands", "cmd_queue", "cmd_submit", "cmd_worker"]


def add_fleet_commands(sub: Any) -> None:
    """Register ``submit``, ``worker`` and ``queue``."""
    tools_help = "a tools module the run needs (recorded with it: workers load it); repeatable; added to 'tools' in planexec.toml"
    p = sub.add_parser(
        "submit", help="queue a plan file, a template or a goal for planexec worker, approved now (--yes, the terminal) or later"
    )
    p.add_argument("plan", nargs="?", metavar="PLAN.json", help="the plan file (or give --template, or --goal)")
    p.add_argument(
        "--goal", metavar="GOAL", help="plan this goal with the project's team (Team.submit), have the policies review it, queue it"
    )
    p.add_argument("--mode", choices=("plan", "auto", "single"), default="plan", help="with --goal: how it is worked (default plan)")
    p.add_argument("--tools", action="append", default=[], metavar="MODULE", help=tools_help)
    p.add_argument("--yes", "-y", action="store_true", help="approve the plan and every step that requires approval, in your name")
    p.add_argument(
        "--policies", action="append", default=[], metavar="FILE",
        help="policies that review the plan first: a YAML rule file or a Python module; repeatable; added to 'policies' in planexec.toml",
    )  # fmt: skip
    p.add_argument("--run-id", metavar="ID", type=common.run_id_arg, help="the run's id (default: run-<date>-<time>-<random>)")
    p.add_argument("--json", action="store_true", help="print the queued run as JSON (with --goal: each stage, one JSON object a line)")
    add_template_options(p)
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.set_defaults(command=cmd_submit)

    p = sub.add_parser("worker", help="take queued runs (and runs whose worker died) from the store and run them, until stopped")
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.add_argument("--concurrency", type=common.positive(int), default=1, metavar="N", help="runs at once (default 1)")
    p.add_argument("--once", action="store_true", help="take the runs waiting now (at most --concurrency), run them, exit")
    p.add_argument("--idle-exit", type=_seconds, metavar="SECONDS", help="exit once nothing was run or waiting for SECONDS")
    p.add_argument("--grace", type=_seconds, default=20.0, metavar="SECONDS",
                   help="on SIGTERM or Ctrl-C, how long a run may finish its running steps before it is released anyway (default 20)")  # fmt: skip
    p.add_argument(
        "--poll", type=common.positive(float), default=0.5, metavar="SECONDS", help="how often an idle worker looks (default 0.5)"
    )
    p.add_argument("--workspace", metavar="DIR", help="folder the file and code tools work in (default ./workspace)")
    p.add_argument(
        "--park-after", type=_seconds, default=PARK_AFTER, metavar="SECONDS",
        help="a run whose next steps all wait for their time (not_before, a window) longer than this goes back to the queue "
        f"until due, and no worker holds it meanwhile (default {PARK_AFTER:g}; shorter waits are slept here)",
    )  # fmt: skip
    common.add_runner_options(p)  # default: planexec.toml, else where each run was started
    p.add_argument("--json", action="store_true", help="print what the worker did as JSON when it stops")
    p.set_defaults(command=cmd_worker)

    p = sub.add_parser("queue", help="the runs queued for planexec worker: waiting and taken (with --all, done and refused too)")
    p.add_argument("--all", action="store_true", help="done and refused runs too")
    p.add_argument("--limit", type=common.positive(int), default=100, metavar="N", help="at most N runs, oldest first (default 100)")
    p.add_argument("--json", action="store_true", help="print them as a JSON list")
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.set_defaults(command=cmd_queue)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is negative: give 0 or more seconds")
    return value


def cmd_submit(args: argparse.Namespace) -> int:
    """``planexec submit PLAN.json``: check, review and queue the plan; nothing runs here."""
    if args.goal is not None:
        return _submit_goal(args)
    plan = _submitted_plan(args)
    if plan is None:
        return common.EXIT_FAILED
    config = common.config()
    registry = common.plan_registry(plan, args.tools, config)
    problems = validate_plan(plan, registry)
    if problems:
        common.print_problems(problems, plan.plan_id, as_json=args.json)
        return common.EXIT_FAILED
    policies = common.policies(args, config)
    store = _queue_store(common.run_store(args, config))  # an existing --run-id: exit 4
    outcome = common.review(plan, registry, policies, config, yes=args.yes, json_output=args.json, person_required=True, can_wait=True)
    if outcome is None:
        return common.EXIT_FAILED
    user = common.user()
    approved_by = None
    if outcome.approved:
        approved_by = user if outcome.by == "person" else f"{user} ({outcome.by})"
    try:
        queued = submit_plan(
            store, outcome.plan, run_id=args.run_id, setup={"tools": list(dict.fromkeys([*config.tools, *args.tools]))},
            approved_by=approved_by, approve_steps=args.yes, submitted_by=user,
        )  # fmt: skip
    except StoreError as exc:
        raise common.store_error(exc) from None
    if args.json:
        common.emit(queued.to_json(indent=2))
    elif approved_by:
        common.say(f"queued run {queued.run_id} (plan approved by {approved_by}): a planexec worker on {store.location} runs it")
    else:
        common.say(f"queued run {queued.run_id}: no worker takes it before its plan is approved: planexec approve {queued.run_id}")
    return common.EXIT_OK


def _submit_goal(args: argparse.Namespace) -> int:
    """``planexec submit --goal GOAL``: the goal path of every face (`Team.iter` with a `Submission`); nothing runs here.

    Each stage is said as it comes (``--json``: its JSON form, a line each).
    Every plan waits for a person's approval in the store unless ``--yes``
    approves it (and the steps that require approval) in your name.
    """
    if args.plan is not None or args.template is not None:
        raise common.UsageError("give a goal (--goal), a plan file or --template NAME: one of them")
    if not args.goal.strip():
        raise common.UsageError("--goal is empty: say what you want done")
    config = common.config()
    store = _queue_store(common.run_store(args, config))  # an existing --run-id: exit 4
    team = common.face_team(config, store, tools=args.tools, policies=args.policies, yes=args.yes)
    submission = Submission(by=common.user(), person=not args.yes, approve_steps=args.yes)
    stages = team.iter(args.goal, mode=args.mode, run_id=args.run_id or new_run_id(), submit=submission)

    async def follow() -> Queued | None:
        queued = None
        async for stage in stages:
            if args.json:
                common.emit(json.dumps(stage.to_dict(), ensure_ascii=False, default=str))
            elif isinstance(stage, Planned):
                plan = stage.planning.plan
                common.say(f"planned {len(plan.steps)} steps ({plan.content_hash[:19]}): {', '.join(plan.step_ids)}")
            queued = stage if isinstance(stage, Queued) else queued
        return queued

    try:
        queued = run_to_end(follow())
    except (PlanexecError, ValueError) as exc:
        common.say(f"nothing was queued: {type(exc).__name__}: {exc}", stderr=True)
        return common.EXIT_FAILED
    assert queued is not None  # a submission ends queued or raises
    if not args.json:
        common.say(f"run {queued.run_id} is {queued.state}: {queued.reason}")
    return common.EXIT_FAILED if queued.state == "refused" else common.EXIT_OK


def _submitted_plan(args: argparse.Namespace) -> Plan | None:
    if args.template is not None or args.template_params:
        if args.template is None:
            raise common.UsageError("-p gives a template's parameters: use it with --template NAME")
        if args.plan is not None:
            raise common.UsageError("give PLAN.json or --template NAME, not both")
        return template_plan(args)
    if args.plan is None:
        raise common.UsageError("give the plan to queue: PLAN.json, or --template NAME")
    return common.load_plan(Path(args.plan), as_json=args.json)


def _queue_store(store: object) -> FleetStore:
    try:
        return queue_store(store)  # the stores planexec opens keep one; a plugin's may not
    except StoreError as exc:
        raise common.UsageError(str(exc)) from None


def cmd_worker(args: argparse.Namespace) -> int:
    """``planexec worker``: take queued runs and run them until stopped; exit 0 (130 after Ctrl-C, 3 when the store failed)."""
    config = common.config()
    try:  # a database server's store is made on first use, so workers may start before anything is submitted;
        on_server = sqlite_path(store_target(args.store, config.store)) is None  # a file must exist: a typo waits for nothing
    except StoreError as exc:
        raise common.UsageError(str(exc)) from None
    store = _queue_store(common.open_run_store(args.store, config, create=on_server))

    def registry_for(plan: Plan, setup: Any) -> Any:
        return common.plan_registry(plan, [str(t) for t in setup.get("tools", [])], config, workspace=args.workspace)

    worker = QueueWorker(
        store, concurrency=args.concurrency, registry_for=registry_for, poll=args.poll,
        engine=common.with_model_router(common.engine_config(args, config), config, store),
        idle_exit=args.idle_exit, once=args.once, grace=args.grace, on_note=lambda line: common.say(f"planexec worker: {line}", stderr=True),
        runner=common.runner_settings(args, config), park_after=args.park_after,
    )  # fmt: skip
    common.say(f"planexec worker: {worker.name} takes runs from {store.location}, {args.concurrency} at a time", stderr=True)
    report: WorkerReport = run_to_end(worker.serve(handle_signals=True))
    if args.json:
        common.emit(report.to_json(indent=2))
    else:
        outcomes: dict[str, int] = {}
        for done in report.runs:
            outcomes[done.outcome] = outcomes.get(done.outcome, 0) + 1
        counted = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items())) or "none"
        common.say(f"planexec worker: stopped ({report.stopped}); runs: {counted}", stderr=True)
    if report.store_failed is not None:
        return common.EXIT_STORE_FAILED
    return common.EXIT_INTERRUPTED if report.stopped == "SIGINT" else common.EXIT_OK


def cmd_queue(args: argparse.Namespace) -> int:
    """``planexec queue``: the queued runs, oldest first."""
    store = _queue_store(common.open_run_store(args.store, common.config(), create=False))
    states = list(QueueState) if args.all else [QueueState.QUEUED, QueueState.TAKEN]
    try:
        rows = store.queued_runs(states, limit=args.limit)
    except StoreError as exc:
        raise common.UsageError(str(exc)) from None
    if args.json:
        common.emit(json.dumps([r.to_dict() for r in rows], indent=2, ensure_ascii=False))
        return common.EXIT_OK
    out = common.console()
    if not rows:
        out.print(f"no {'' if args.all else 'waiting or taken '}runs in the queue of {store.location}", markup=False, highlight=False)
        return common.EXIT_OK
    table = Table(title=f"the run queue of {store.location}", title_justify="left")
    for name in ("run", "state", "plan approval", "submitted (UTC)", "by", "worker", "claims", "reason"):
        table.add_column(name, overflow="fold")
    for r in rows:
        worker = r.taken_by or ""
        if r.state is QueueState.TAKEN and r.lease is not None and not r.lease.live:
            worker += " (gone: taken over next)"
        elif r.state is QueueState.TAKEN and r.lease is None:
            worker += " (let go)"
        table.add_row(
            r.run_id,
            r.state.value,
            r.approval,
            f"{r.submitted_at:%Y-%m-%d %H:%M:%S}",
            r.submitted_by,
            worker,
            str(r.claims),
            (f"due {r.due:%Y-%m-%d %H:%M:%S} UTC; " if r.due is not None else "") + (r.reason or ""),
        )
    out.print(table)
    return common.EXIT_OK
