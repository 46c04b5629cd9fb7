"""Recovering a stopped run: ``planexec resume RUN_ID`` and ``planexec resolve RUN_ID STEP``.

Owns continuing a run that stopped (a crash, kill -9, Ctrl-C, a decision)
with the engine (`Engine.resume`) on the tools modules it was started with
(`stored_tools`, read from its `RunStarted.setup`; an explicit ``--tools``
wins) and where it ran (a Ray cluster it recorded, unless ``--runner`` or
planexec.toml say otherwise), and recording a person's decision about a step held after a crash
(`resume.resolve_step`). A store, run or step that is not there, and a run
that cannot be resumed, and a run whose stored records changed after they
were written (`TamperedError`: the message names what changed and says to
run ``planexec audit verify``), are usage errors (exit 2) that change
nothing. With
telemetry on, the resumed run's span is current in all its tasks and links
to the span of the run it continues (`planexec.telemetry`).
Imports `cli._common`, `cli.approvals`, `cli.progress` and the engine's
resume API.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from planexec import RunResult
from planexec.cli import _common as common
from planexec.cli.approvals import resume_approvers
from planexec.cli.progress import EventLog, LiveProgress, print_summary
from planexec.errors import ConfigError, LeaseHeldError, StoreError
from planexec.events import RunStarted
from planexec.fleet import saved_plan_engine
from planexec.runs import run_to_end
from planexec.store import DECISIONS, ResumeError, RunStore, require_intact, resolve_step
from planexec.telemetry import start_run

__all__ = ["add_recovery_commands", "cmd_resolve", "cmd_resume", "stored_tools"]


def add_recovery_commands(sub: Any) -> None:
    """Register ``resume`` and ``resolve``."""
    tools_help = "a tools module for the run (default: those it was started with); repeatable"
    p = sub.add_parser("resume", help="continue a stored run that stopped (a crash, kill -9, Ctrl-C, a decision)")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--tools", action="append", default=[], metavar="MODULE", help=tools_help)
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.add_argument("--yes", "-y", action="store_true", help="approve every step that requires approval")
    p.add_argument("--json", action="store_true", help="no live display; print the run result as JSON")
    p.add_argument("--workspace", metavar="DIR", help="folder the file and code tools work in (default ./workspace)")
    common.add_runner_options(p)  # default: planexec.toml, else where the run was started
    p.set_defaults(command=cmd_resume)

    p = sub.add_parser("resolve", help="decide about a step that was running when its run stopped: retry, skip or mark done")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("step_id", metavar="STEP")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--retry", action="store_true", help="run the step again")
    what.add_argument("--skip", action="store_true", help="skip it (its dependents are skipped unless they accept failed inputs)")
    what.add_argument("--mark-done", metavar="VALUE", help="it did finish: VALUE (JSON, else text) is its output")
    p.add_argument("--by", metavar="NAME", help="who decides (default: your user name)")
    p.add_argument("--store", metavar="STORE", help=common.STORE_HELP)
    p.set_defaults(command=cmd_resolve)


def stored_tools(store: RunStore, run_id: str) -> list[str]:
    """The tools modules a run was set up with, as its `RunStarted` recorded them (none for runs recorded before that)."""
    return [str(t) for t in _stored_setup(store, run_id).get("tools", [])]


def _stored_setup(store: RunStore, run_id: str) -> dict[str, Any]:
    """The run's `RunStarted.setup` (empty for a run recorded before there was one)."""
    for event in store.events(run_id, limit=1):
        if isinstance(event, RunStarted):
            return dict(event.setup)
    return {}


def cmd_resume(args: argparse.Namespace) -> int:
    """``planexec resume RUN_ID``: continue the run; finished steps never run again."""
    config = common.config()
    store = common.open_run_store(args.store, config, create=False)
    try:
        require_intact(store, args.run_id)  # TamperedError before its setup (the tools modules it names) is read
        versions = store.plan_versions(args.run_id)
    except StoreError as exc:
        raise common.UsageError(str(exc)) from None
    if not versions:
        raise common.UsageError(f"run {args.run_id!r} has no stored plan to resume")
    plan = versions[-1].plan
    tools = args.tools or stored_tools(store, args.run_id)  # an explicit --tools wins
    registry = common.plan_registry(plan, tools, config, workspace=args.workspace)
    out = common.console()
    display: LiveProgress | EventLog | None = None if args.json else (LiveProgress(plan, out) if out.is_terminal else EventLog(plan, out))
    where = common.runner_settings(args, config, _stored_setup(store, args.run_id))
    try:
        runner = common.step_runner(where, registry)
    except common.UsageError as exc:  # the cluster it ran on is gone, or out of reach from here
        raise common.UsageError(f"{exc} (--runner local resumes the run in this process)") from None
    # a Ray cluster's runner: the run goes on there (flags, then planexec.toml, then where it was started)
    approvers = resume_approvers(
        store, args.run_id, registry=registry, config=config, yes=args.yes, display=display, store_option=args.store
    )
    settings = common.with_model_router(common.engine_config(args, config), config, store)
    engine = saved_plan_engine(registry, engine=settings, store=store, runner=runner, **approvers)

    async def go() -> RunResult:
        run = start_run(lambda: engine.resume(args.run_id))  # traced: linked to the trace of the run it continues
        return await common.watch(run, display)

    try:
        result = run_to_end(go())
    except LeaseHeldError as exc:
        raise common.RunHeldError(str(exc)) from None
    except (ResumeError, StoreError, ConfigError) as exc:
        raise common.UsageError(str(exc)) from None
    if args.json:
        common.emit(json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False))
    else:
        print_summary(out, result)
        hint = common.resume_hint(result, recorded=True)
        if hint:
            common.say(hint)
    return common.exit_code(result)


def cmd_resolve(args: argparse.Namespace) -> int:
    """``planexec resolve RUN_ID STEP --retry|--skip|--mark-done VALUE``: record a person's decision."""
    config = common.config()
    store = common.open_run_store(args.store, config, create=False)
    if args.retry:
        decision, value = "retry", None
    elif args.skip:
        decision, value = "skip", None
    else:
        decision = "mark_done"
        try:
            value = json.loads(args.mark_done)
        except json.JSONDecodeError:
            value = args.mark_done
    assert decision in DECISIONS
    by = args.by or common.user()
    try:
        resolve_step(store, args.run_id, args.step_id, decision, value, by=by)
    except LeaseHeldError as exc:
        raise common.RunHeldError(str(exc)) from None
    except (ResumeError, StoreError) as exc:
        raise common.UsageError(str(exc)) from None
    shown = {"retry": "will run again", "skip": "will be skipped", "mark_done": f"is done with output {json.dumps(value)}"}[decision]
    common.say(f"step {args.step_id!r} of run {args.run_id} {shown} (decided by {by}); continue with: planexec resume {args.run_id}")
    return common.EXIT_OK
