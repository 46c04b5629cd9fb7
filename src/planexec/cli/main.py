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
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.prompt import Confirm

from planexec import (
    Engine,
    Plan,
    PlanParseError,
    PlanValidationError,
    Problem,
    Registry,
    RegistryError,
    RunResult,
    RunStatus,
    Step,
    __version__,
    validate_plan,
)
from planexec.cli.progress import EventLog, LiveProgress, print_summary
from planexec.config import Config, load_config
from planexec.engine.engine import Approver
from planexec.errors import ConfigError, PolicyError
from planexec.governance.policies import PolicyContext
from planexec.governance.policy_sets import PolicySet, load_policies
from planexec.governance.review import ReviewOutcome, ReviewTerminal, run_review
from planexec.models.pricing import PriceTable
from planexec.workers.tools import in_thread

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_EXIT_BY_STATUS = {RunStatus.SUCCEEDED: EXIT_OK, RunStatus.CANCELLED: EXIT_INTERRUPTED}
CTRL_C_REASON = "interrupted (Ctrl-C)"


class UsageError(Exception):
    """A problem with what the user asked for (a file, a module, a setting): one message, exit 2."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.command(args))
    except UsageError as exc:
        _console(stderr=True).print(f"planexec: error: {exc}", markup=False, highlight=False, soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C outside a run (while loading tools, at a prompt)
        print("planexec: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


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

    from planexec.cli.goals import add_goal_options, add_mode_option, cmd_plan

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
    p.add_argument("--max-concurrency", type=_positive(int), metavar="N", help="steps running at once")
    p.add_argument("--timeout", type=_positive(float), metavar="SECONDS", help="timeout of steps that set none")
    p.add_argument("--yes", "-y", action="store_true", help="approve the plan and every step that requires approval")
    p.add_argument("--stream", action="store_true", help="start steps while the planner is still writing (needs --yes)")
    p.add_argument(
        "--policies", action="append", default=[], metavar="FILE",
        help="policies that review the plan first: a YAML rule file or a Python module; repeatable; added to 'policies' in planexec.toml",
    )  # fmt: skip
    from planexec.cli.plans import add_library_commands, add_template_options

    add_template_options(p)
    add_mode_option(p)
    add_goal_options(p)
    from planexec.cli.resume import add_control_commands, add_store_options

    add_store_options(p)
    p.set_defaults(command=cmd_run)

    from planexec.cli.eval import add_eval_options

    p = sub.add_parser("eval", help="run evaluation suites in each mode; print a table, write a PNG chart and a JSON report")
    add_eval_options(p)
    p.set_defaults(command=cmd_eval)
    add_library_commands(sub)

    from planexec.cli.history import add_history_commands

    add_history_commands(sub)
    add_control_commands(sub)
    from planexec.cli.approvals import add_approval_commands

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
        return EXIT_FAILED
    plan = checked[0]
    ok = f"ok: plan {plan.plan_id!r} · {len(plan.steps)} steps · {plan.content_hash}"
    if args.json:
        print("[]")
    _console(stderr=args.json).print(ok, markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """``planexec run``: a goal (see `goals`), or a plan file: validate, run with a live display (or JSON), summarise."""
    if args.template is not None or args.template_params:  # a saved plan (library_cli): runs like a plan file
        from planexec.cli.plans import check_template_args

        check_template_args(args)
    elif (args.goal is None) == (args.plan is None):
        raise UsageError("give a GOAL to plan, --plan PLAN.json to run a plan file, or --template NAME (one of them)")
    if args.plan is not None and args.mode is not None:
        raise UsageError("--mode chooses how a GOAL is worked; a plan file runs as written")
    if args.goal is not None:
        from planexec.cli.goals import cmd_run_goal

        return cmd_run_goal(args)
    checked = _checked_plan(args)
    if checked is None:
        return EXIT_FAILED
    plan, registry, config = checked
    policies = _policies(args, config)
    from planexec.cli.resume import run_store

    store = run_store(args, config)
    outcome = _review(
        plan, registry, policies, config, yes=args.yes, json_output=args.json, person_required=False, can_wait=store is not None
    )
    if outcome is None:
        return EXIT_FAILED
    plan = outcome.plan
    out = _console()
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
    from planexec.cli.approvals import run_approvers
    from planexec.cli.resume import resume_hint

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
        hint = resume_hint(result, recorded=store is not None)
        if hint:
            out.print(hint, markup=False, highlight=False, soft_wrap=True)
    return _EXIT_BY_STATUS.get(result.status, EXIT_FAILED)


def cmd_eval(args: argparse.Namespace) -> int:
    """``planexec eval``: run suites in each mode and report (see `eval_command`)."""
    from planexec.cli.eval import run_eval

    return run_eval(args)


def cmd_schema(args: argparse.Namespace) -> int:
    """``planexec schema``: the JSON Schema of a plan."""
    indent = args.indent if args.indent > 0 else None
    print(json.dumps(Plan.model_json_schema(), indent=indent, ensure_ascii=False))
    return EXIT_OK


# --- running ------------------------------------------------------------------


async def _execute(
    engine: Engine, plan: Plan, display: LiveProgress | EventLog | None, *, planning: Any = None, run_id: str | None = None
) -> RunResult:
    """Start the run, feed the display, turn Ctrl-C into a recorded cancellation."""
    run = engine.start(plan, validate=False, planning=planning, run_id=run_id)  # the command validated it and printed any problems
    return await _watch(run, display)


async def _watch(run: Any, display: LiveProgress | EventLog | None) -> RunResult:
    """Feed the display from a started run and turn Ctrl-C into a recorded cancellation."""
    if display is not None:
        run.subscribe(display)
    loop = asyncio.get_running_loop()
    interrupts = 0

    def interrupted() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:  # the user insists: no summary, no waiting for steps to wind down
            sys.stdout.flush()
            sys.stderr.write("\nplanexec: interrupted again; exiting at once\n")
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        note = "interrupted: cancelling the run (Ctrl-C again to exit at once)"
        if display is not None:
            display.note(note)
        else:
            print(note, file=sys.stderr, flush=True)
        run.cancel(CTRL_C_REASON)

    try:
        loop.add_signal_handler(signal.SIGINT, interrupted)
    except (NotImplementedError, RuntimeError):  # no signal handlers in this loop (Windows, not main thread)
        pass
    try:
        if display is None:
            return await run.result()
        with display:
            return await run.result()
    finally:
        try:
            loop.remove_signal_handler(signal.SIGINT)
        except (NotImplementedError, RuntimeError):
            pass


def _approver(*, yes: bool, interactive: bool, display: LiveProgress | EventLog | None) -> Approver:
    """What decides a step with ``requires_approval``: --yes, a prompt on a terminal, else a denial."""
    if yes:
        return lambda step: True
    if not interactive:
        return lambda step: False
    lock = asyncio.Lock()
    console = _console(stderr=True)

    async def ask(step: Step) -> bool:
        async with lock:  # one question at a time
            if display is None:
                return await in_thread(_confirm, console, step)
            with display.paused():
                return await in_thread(_confirm, console, step)

    return ask


def _confirm(console: Console, step: Step) -> bool:
    what = f"{step.step_id!r} ({step.worker}: {step.action})"
    if step.instruction:
        console.print(f"  {step.instruction}", markup=False, highlight=False)
    try:
        return Confirm.ask(f"Approve step {what}?", console=console, default=False)
    except EOFError:
        return False


def _policies(args: argparse.Namespace, config: Config) -> PolicySet:
    """The policies of planexec.toml and ``--policies``; UsageError naming the file that does not load."""
    try:
        return load_policies([*config.policies, *args.policies])
    except PolicyError as exc:
        raise UsageError(str(exc)) from None


def _review(
    plan: Plan,
    registry: Registry,
    policies: PolicySet,
    config: Config,
    *,
    yes: bool,
    json_output: bool,
    person_required: bool = True,
    plan_shown: bool = False,
    graph_shown: bool = False,
    can_wait: bool = False,
) -> ReviewOutcome | None:
    """The policies' and a person's (or --yes's) review of a plan; None, after saying why, when it may not run.

    A plan file (`person_required` False) asks a person only when a policy
    escalates. When a person is needed and none can be asked here, a run
    that is recorded (`can_wait`) starts anyway and waits for
    ``planexec approve RUN_ID`` from another process (the outcome is then
    not approved, decided by ``nobody``); otherwise nothing runs.
    """
    terminal = ReviewTerminal(_console(stderr=json_output), interactive=sys.stdin.isatty())
    context = PolicyContext(registry=registry, prices=PriceTable.default(config.prices))
    outcome = run_review(
        plan, policies, context, terminal=terminal, yes=yes, person_required=person_required, plan_shown=plan_shown, graph_shown=graph_shown
    )
    err = _console(stderr=True)
    if not outcome.approved and outcome.by == "nobody" and can_wait:
        err.print(
            "the plan needs a person's approval: the run waits for `planexec approve RUN_ID` from another process",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return outcome
    if not outcome.approved:
        err.print(f"planexec: the plan was not run: {outcome.reason}", markup=False, highlight=False, soft_wrap=True)
        return None
    if len(policies) or outcome.by != "policy":
        err.print(f"plan approved by {outcome.by}: {outcome.reason}", markup=False, highlight=False, soft_wrap=True)
    return outcome


# --- inputs -------------------------------------------------------------------


def _checked_plan(args: argparse.Namespace) -> tuple[Plan, Registry, Config] | None:
    """The plan, a registry with every tools module, the config; None after printing the plan's problems."""
    config = _config()
    if getattr(args, "template", None) is not None:  # planexec run --template NAME (library_cli)
        from planexec.cli.plans import template_plan

        plan = template_plan(args)
    else:
        plan = _load_plan(Path(args.plan), as_json=args.json)
    if plan is None:
        return None
    registry = _registry([*config.tools, *args.tools])
    problems = validate_plan(plan, registry)
    if problems:
        _print_problems(problems, plan.plan_id, as_json=args.json)
        return None
    return plan, registry, config


def _config() -> Config:
    try:
        return load_config(Path("."))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _load_plan(path: Path, *, as_json: bool) -> Plan | None:
    """The plan in `path`; None after printing its shape problems; UsageError when unreadable."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"plan file {str(path)!r} does not exist") from None
    except OSError as exc:
        raise UsageError(f"cannot read plan file {str(path)!r}: {exc.strerror or exc}") from None
    try:
        return Plan.from_json(text)
    except PlanParseError as exc:
        if any(p.rule == "malformed_json" for p in exc.problems):
            detail = "; ".join(p.message for p in exc.problems)
            raise UsageError(f"plan file {str(path)!r} is not valid JSON: {detail}") from None
        _print_problems(exc.problems, exc.plan_id, as_json=as_json)
        return None


def _registry(modules: list[str]) -> Registry:
    """Built-ins and installed plugins, then each tools module; UsageError naming one that fails."""
    if os.getcwd() not in sys.path:  # `--tools mytools` finds ./mytools.py, as `python -m` would
        sys.path.insert(0, os.getcwd())
    try:
        registry = Registry.default()
    except Exception as exc:  # a broken installed plugin
        raise UsageError(f"cannot load installed planexec plugins: {type(exc).__name__}: {exc}") from None
    for module in dict.fromkeys(modules):
        try:
            registry.load_module(module)
        except RegistryError as exc:
            raise UsageError(str(exc)) from None
        except Exception as exc:  # an error inside the module itself: say which module
            raise UsageError(f"tools module {module!r} failed to load: {type(exc).__name__}: {exc}") from None
    return registry


# --- output -------------------------------------------------------------------


def _console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    # not a terminal (a log, CI): wide enough that tables and lines do not wrap, unless COLUMNS says otherwise
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 120
    return Console(stderr=stderr, width=width)


def _print_problems(problems: list[Problem], plan_id: str | None, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps([p.to_dict() for p in problems], indent=2, ensure_ascii=False))
    else:
        _console().print(PlanValidationError(problems, plan_id=plan_id).render(), markup=False, highlight=False, soft_wrap=True)


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0: {text!r}")
        return value

    return parse
