"""Commands that act on stored runs: ``planexec resume`` and ``planexec resolve``, and the store options of ``run``.

Owns choosing and opening the run store a command writes to (``--store``,
``$PLANEXEC_STORE``, ``store`` in planexec.toml, else ``.planexec/runs.db``;
``--no-store`` runs unrecorded), continuing a stopped run with the engine
(`Engine.resume`), and recording a person's decision about a step held
after a crash (`resume.resolve_step`). A store, run or step that is not
there, and a run that cannot be resumed, are usage errors (exit 2) that
change nothing. Thin: it calls the public API and `cli`'s plumbing.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
from typing import Any

from planexec.cli import main as cli
from planexec.cli.progress import EventLog, LiveProgress, print_summary
from planexec.engine.engine import Engine
from planexec.engine.results import RunResult, RunStatus
from planexec.engine.resume import DECISIONS, ResumeError, resolve_step
from planexec.errors import ConfigError, RegistryError, StoreError
from planexec.plan.model import Plan
from planexec.store import RunStore, open_store, store_target
from planexec.workers.registry import Registry

__all__ = ["add_control_commands", "add_store_options", "resume_hint", "run_store"]

STORE_HELP = "the run store: a file, sqlite:///path or postgresql://... (default: $PLANEXEC_STORE, planexec.toml, .planexec/runs.db)"


def add_store_options(p: argparse.ArgumentParser) -> None:
    """``--store``, ``--no-store`` and ``--run-id`` for ``planexec run``."""
    p.add_argument("--store", metavar="STORE", help=STORE_HELP)
    p.add_argument("--no-store", action="store_true", help="do not record the run (it cannot be resumed or shown later)")
    p.add_argument("--run-id", metavar="ID", help="the run's id (default: run-<date>-<time>-<random>)")


def open_run_store(spec: str | None, config: Any, *, create: bool) -> RunStore:
    """The store a command uses; a `cli.UsageError` naming it when it cannot be opened."""
    target = store_target(spec, config.store)
    try:
        return open_store(target, create=create)
    except StoreError as exc:
        raise cli.UsageError(str(exc)) from None


def run_store(args: argparse.Namespace, config: Any) -> RunStore | None:
    """The store ``planexec run`` records into (None with ``--no-store``)."""
    if getattr(args, "no_store", False):
        return None
    return open_run_store(getattr(args, "store", None), config, create=True)


def resume_hint(result: RunResult, *, recorded: bool) -> str | None:
    """What to do next about a run that stopped short and was recorded, or None."""
    if not recorded:
        return None
    if result.status is RunStatus.NEEDS_DECISION:
        held = [sid for sid, rec in result.steps.items() if rec.state.value == "needs_decision"]
        return f"decide with: planexec resolve {result.run_id} {held[0] if held else 'STEP'} --retry|--skip|--mark-done VALUE; then: planexec resume {result.run_id}"
    if result.status is RunStatus.CANCELLED:
        return f"continue with: planexec resume {result.run_id}"
    return None


def add_control_commands(sub: Any) -> None:
    """Register ``resume`` and ``resolve``."""
    tools_help = "a tools module the run used (a dotted name or a .py file); repeatable"
    p = sub.add_parser("resume", help="continue a stored run that stopped (a crash, kill -9, Ctrl-C, a decision)")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--tools", action="append", default=[], metavar="MODULE", help=tools_help)
    p.add_argument("--store", metavar="STORE", help=STORE_HELP)
    p.add_argument("--yes", "-y", action="store_true", help="approve every step that requires approval")
    p.add_argument("--json", action="store_true", help="no live display; print the run result as JSON")
    p.add_argument("--workspace", metavar="DIR", help="folder the file and code tools work in (default ./workspace)")
    p.set_defaults(command=cmd_resume)

    p = sub.add_parser("resolve", help="decide about a step that was running when its run stopped: retry, skip or mark done")
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("step_id", metavar="STEP")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--retry", action="store_true", help="run the step again")
    what.add_argument("--skip", action="store_true", help="skip it (its dependents are skipped unless they accept failed inputs)")
    what.add_argument("--mark-done", metavar="VALUE", help="it did finish: VALUE (JSON, else text) is its output")
    p.add_argument("--by", metavar="NAME", help="who decides (default: your user name)")
    p.add_argument("--store", metavar="STORE", help=STORE_HELP)
    p.set_defaults(command=cmd_resolve)


def _registry_for(plan: Plan, args: argparse.Namespace, config: Any) -> Registry:
    """The tools the stored plan names: the tool modules, and the built-in team when it uses roles."""
    registry = cli._registry([*config.tools, *args.tools])
    if {s.worker for s in plan.steps} <= set(registry.workers):
        return registry
    from planexec.cli.goals import _settings, _team

    settings, _ = _settings(argparse.Namespace(model=None, worker_model=None, base_url=None, seed=0))
    try:
        return _team(argparse.Namespace(workspace=args.workspace, tools=args.tools), settings, config)
    except RegistryError as exc:
        raise cli.UsageError(str(exc)) from None


def cmd_resume(args: argparse.Namespace) -> int:
    """``planexec resume RUN_ID``: continue the run; finished steps never run again."""
    config = cli._config()
    store = open_run_store(args.store, config, create=False)
    try:
        versions = store.plan_versions(args.run_id)
    except StoreError as exc:
        raise cli.UsageError(str(exc)) from None
    if not versions:
        raise cli.UsageError(f"run {args.run_id!r} has no stored plan to resume")
    plan = versions[-1].plan
    registry = _registry_for(plan, args, config)
    out = cli._console()
    display: LiveProgress | EventLog | None = None if args.json else (LiveProgress(plan, out) if out.is_terminal else EventLog(plan, out))
    options: dict[str, Any] = {"store": store}
    if config.max_concurrency:
        options["max_concurrency"] = config.max_concurrency
    if config.default_timeout:
        options["default_timeout"] = config.default_timeout
    from planexec.cli.approvals import resume_approvers

    options.update(
        resume_approvers(store, args.run_id, registry=registry, config=config, yes=args.yes, display=display, store_option=args.store)
    )
    engine = Engine(registry, **options)

    async def go() -> RunResult:
        run = engine.resume(args.run_id)
        return await cli._watch(run, display)

    try:
        result = asyncio.run(go())
    except (ResumeError, StoreError, ConfigError) as exc:
        raise cli.UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False))
    else:
        print_summary(out, result)
        hint = resume_hint(result, recorded=True)
        if hint:
            out.print(hint, markup=False, highlight=False, soft_wrap=True)
    return cli._EXIT_BY_STATUS.get(result.status, cli.EXIT_FAILED)


def cmd_resolve(args: argparse.Namespace) -> int:
    """``planexec resolve RUN_ID STEP --retry|--skip|--mark-done VALUE``: record a person's decision."""
    config = cli._config()
    store = open_run_store(args.store, config, create=False)
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
    by = args.by or _user()
    try:
        resolve_step(store, args.run_id, args.step_id, decision, value, by=by)
    except (ResumeError, StoreError) as exc:
        raise cli.UsageError(str(exc)) from None
    shown = {"retry": "will run again", "skip": "will be skipped", "mark_done": f"is done with output {json.dumps(value)}"}[decision]
    cli._console().print(
        f"step {args.step_id!r} of run {args.run_id} {shown} (decided by {by}); continue with: planexec resume {args.run_id}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return cli.EXIT_OK


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in this environment
        return "person"
