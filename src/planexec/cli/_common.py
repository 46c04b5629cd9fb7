"""What the ``planexec`` commands share: exit codes, consoles, configuration, stores, reviews and watching a run.

A private module: the command modules (`main`, `plan_files`, `goals`,
`recovery`, `history`, `approvals`, `plans`, `eval`) import it, and it
imports none of them (only `progress`, the displays), so the command line
has no import cycle. Owns the exit codes and
`UsageError` (one message, exit 2), the consoles, reading planexec.toml,
plan files and tools modules, the policies and the terminal review,
choosing and opening the run store, the registry a plan file runs on
(`plan_registry`), where steps run (``--runner``, ``--ray-address``,
`runner_settings`, `step_runner`), the step approver at a terminal, and `watch` (a run fed
to a display, Ctrl-C turned into a recorded cancel). Reading planexec.toml
switches traces on when its ``[planexec.telemetry]`` (or ``OTEL_*``) asks
(`planexec.telemetry`), and every run a command watches is traced.

Every command prints through it: `console` (rich, for tables, displays and
lines), `say` (a plain line) and `emit` (text as is: JSON, event lines).
All three hide secrets (`secrets.redact`): a console writes to its stream
through `RedactedStream`, so what a display, a table or a summary shows
(a tool's output, an error message) never carries a key out.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import io
import json
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TextIO, cast

from rich.console import Console
from rich.prompt import Confirm

from planexec import (
    EngineConfig,
    ModelOptions,
    Plan,
    Registry,
    ReviewOptions,
    RunResult,
    RunStatus,
    Step,
    StepState,
    Team,
    Toolbox,
    check_run_id,
    validate_plan,
)
from planexec.cli.progress import EventLog, LiveProgress
from planexec.cli.review_terminal import ReviewTerminal, run_review
from planexec.config import Config, RunnerConfig, load_config
from planexec.errors import ConfigError, PlanParseError, PlanValidationError, PolicyError, Problem, RegistryError, StoreError
from planexec.fleet import recorded_runner
from planexec.models import PriceTable
from planexec.policies import (
    Approver,
    CallRequest,
    PolicyContext,
    PolicySet,
    ReviewOutcome,
    approve_calls,
    load_policies,
    load_router,
    person,
)
from planexec.runs import in_thread, redact
from planexec.scale import RayRunner, Runner, runner_for
from planexec.store import RunStore, open_store, store_target
from planexec.telemetry import configure as configure_telemetry
from planexec.telemetry import trace_run

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_STORE_FAILED = 3  # the run store failed while the run was being recorded (the run stopped; resume it)
EXIT_RUN_EXISTS = 4  # the run is taken: --run-id names a run the store already has, or another live process runs it
EXIT_BY_STATUS = {RunStatus.SUCCEEDED: EXIT_OK, RunStatus.CANCELLED: EXIT_INTERRUPTED}
STORE_FAILED = "the run store failed"  # how the recorder words the cancellation it makes (engine/recording.py)


def exit_code(result: RunResult) -> int:
    """The exit code of a run: 0 succeeded, 130 cancelled (Ctrl-C), 3 stopped because the store failed, 1 anything else."""
    if result.status is RunStatus.CANCELLED and (result.reason or "").startswith(STORE_FAILED):
        return EXIT_STORE_FAILED
    return EXIT_BY_STATUS.get(result.status, EXIT_FAILED)


CTRL_C_REASON = "interrupted (Ctrl-C)"


class UsageError(Exception):
    """A problem with what the user asked for (a file, a module, a setting): one message, exit 2 (or its `code`)."""

    code = 2


class RunExistsError(UsageError):
    """``--run-id`` names a run the store already has: nothing runs, exit 4."""

    code = EXIT_RUN_EXISTS


class RunHeldError(UsageError):
    """Another live process runs the run (it holds the run's lease): nothing runs or is written, exit 4."""

    code = EXIT_RUN_EXISTS


async def watch(run: Any, display: LiveProgress | EventLog | None) -> RunResult:
    """Feed the display from a started run and turn Ctrl-C into a recorded cancellation."""
    trace_run(run)  # with telemetry on: a run started without its span yet (a plan file's) is traced too
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
        result: RunResult
        if display is None:
            result = await run.result()
        else:
            with display:
                result = await run.result()
        return result
    finally:
        try:
            loop.remove_signal_handler(signal.SIGINT)
        except (NotImplementedError, RuntimeError):
            pass


def approver(*, yes: bool, interactive: bool, display: LiveProgress | EventLog | None) -> Approver:
    """What decides a step with ``requires_approval``: --yes, a prompt on a terminal, else a denial."""
    if yes:
        return lambda step: True
    if not interactive:
        return lambda step: False
    return _prompter(confirm, display)


def _prompter(confirm_at: Callable[[Console, Any], bool], display: LiveProgress | EventLog | None) -> Callable[[Any], Any]:
    """An async approver asking at the terminal with `confirm_at`, one question at a time, the live display paused."""
    lock = asyncio.Lock()
    err = console(stderr=True)

    async def ask(subject: Any) -> bool:
        async with lock:
            if display is None:
                return bool(await in_thread(confirm_at, err, subject))
            with display.paused():
                return bool(await in_thread(confirm_at, err, subject))

    return ask


def confirm(out: Console, step: Step) -> bool:
    """Ask at the terminal whether a step may run (end of input: no)."""
    what = f"{step.step_id!r} ({step.worker}: {step.action})"
    if step.instruction:
        out.print(f"  {step.instruction}", markup=False, highlight=False)
    try:
        return Confirm.ask(f"Approve step {what}?", console=out, default=False)
    except EOFError:
        return False


def call_asker(*, yes: bool, interactive: bool, display: LiveProgress | EventLog | None) -> Callable[[CallRequest], Any] | None:
    """What decides a tool call a worker asks to make: --yes (plain calls only), a prompt on a terminal, else None (a denial)."""
    if yes:
        return approve_calls
    if not interactive:
        return None
    return person(_prompter(confirm_call, display))


def confirm_call(out: Console, request: CallRequest) -> bool:
    """Ask at the terminal whether one tool call may run, showing its arguments, why it asks and where its data came from."""
    what = "would be refused" if request.kind == "escalation" else "changes things"
    out.print(f"Step {request.step_id!r} ({request.worker}) asks to call {request.tool}: it {what}.", markup=False, highlight=False)
    for name, value in request.arguments.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        out.print(f"  {name} = {text[:400]}", markup=False, highlight=False)
    if request.rule:
        out.print(f"  rule {request.rule}: {request.reason}", markup=False, highlight=False)
    for source in request.chain:
        out.print(f"  data from: {source}", markup=False, highlight=False)
    try:
        return Confirm.ask(f"Allow this call to {request.tool}?", console=out, default=False)
    except EOFError:
        return False


def policies(args: argparse.Namespace, config: Config) -> PolicySet:
    """The policies of planexec.toml and ``--policies``; UsageError naming the file that does not load."""
    try:
        return load_policies([*config.policies, *args.policies])
    except PolicyError as exc:
        raise UsageError(str(exc)) from None


def review(
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
    terminal = ReviewTerminal(console(stderr=json_output), interactive=sys.stdin.isatty())
    context = PolicyContext(registry=registry, prices=PriceTable.default(config.prices))
    outcome = run_review(
        plan, policies, context, terminal=terminal, yes=yes, person_required=person_required, plan_shown=plan_shown, graph_shown=graph_shown
    )
    if not outcome.approved and outcome.by == "nobody" and can_wait:
        say("the plan needs a person's approval: the run waits for `planexec approve RUN_ID` from another process", stderr=True)
        return outcome
    if not outcome.approved:
        say(f"planexec: the plan was not run: {outcome.reason}", stderr=True)
        return None
    if len(policies) or outcome.by != "policy":
        say(f"plan approved by {outcome.by}: {outcome.reason}", stderr=True)
    return outcome


def config() -> Config:
    """planexec.toml in the current folder (an empty configuration without one); traces on when it or OTEL_* asks."""
    try:
        loaded = load_config(Path("."))
        configure_telemetry(loaded.telemetry)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    return loaded


def load_plan(path: Path, *, as_json: bool) -> Plan | None:
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
        print_problems(exc.problems, exc.plan_id, as_json=as_json)
        return None


def registry(modules: list[str]) -> Registry:
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


class RedactedStream(io.TextIOBase):
    """A text stream that hides secrets in everything written to it, then writes to `stream` (a terminal stays one)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        """Write `text` with its secrets redacted; returns the length of `text` (what the caller gave)."""
        self.stream.write(redact(text))
        return len(text)

    def flush(self) -> None:
        """Flush the stream underneath."""
        self.stream.flush()

    def isatty(self) -> bool:
        """Whether the stream underneath is a terminal."""
        return self.stream.isatty()

    def fileno(self) -> int:
        """The file descriptor of the stream underneath."""
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # TextIOBase declares it an attribute
        """The encoding of the stream underneath."""
        return getattr(self.stream, "encoding", None) or "utf-8"


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr) that hides secrets in all it prints."""
    stream = sys.stderr if stderr else sys.stdout
    # not a terminal (a log, CI): wide enough that tables and lines do not wrap, unless COLUMNS says otherwise
    width = None if stream.isatty() or os.environ.get("COLUMNS") else 120
    return Console(stderr=stderr, width=width, file=cast(IO[str], RedactedStream(stream)))


def say(text: str, *, stderr: bool = False) -> None:
    """Print plain text to stdout (or stderr): no markup, no highlighting, long lines not broken; secrets hidden."""
    console(stderr=stderr).print(text, markup=False, highlight=False, soft_wrap=True)


def emit(text: str, *, stderr: bool = False) -> None:
    """Print text exactly as it is (JSON, an event line), secrets hidden, to stdout (or stderr)."""
    print(redact(text), file=sys.stderr if stderr else sys.stdout)


def print_problems(problems: list[Problem], plan_id: str | None, *, as_json: bool) -> None:
    if as_json:
        emit(json.dumps([p.to_dict() for p in problems], indent=2, ensure_ascii=False))
    else:
        say(PlanValidationError(problems, plan_id=plan_id).render())


def positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be greater than 0: {text!r}")
        return value

    return parse


STORE_HELP = "the run store: a file, sqlite:///path or postgresql://... (default: $PLANEXEC_STORE, planexec.toml, .planexec/runs.db)"


def run_id_arg(text: str) -> str:
    """``--run-id``'s type: the id as given, or argparse's usage error (exit 2) naming the rule it breaks."""
    try:
        return check_run_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_store_options(p: argparse.ArgumentParser) -> None:
    """``--store``, ``--no-store`` and ``--run-id`` for ``planexec run``."""
    p.add_argument("--store", metavar="STORE", help=STORE_HELP)
    p.add_argument("--no-store", action="store_true", help="do not record the run (it cannot be resumed or shown later)")
    p.add_argument("--run-id", metavar="ID", type=run_id_arg, help="the run's id (default: run-<date>-<time>-<random>)")


def engine_config(args: argparse.Namespace, config: Config, **given: Any) -> EngineConfig:
    """The engine's settings a command runs with: ``--max-concurrency`` and ``--timeout`` (where the command has them) and
    `given` (None: not given), over planexec.toml's (`team.settings.engine_config`), over the engine's defaults."""
    return EngineConfig.from_config(
        config,
        max_concurrency=getattr(args, "max_concurrency", None) or None,
        default_timeout=getattr(args, "timeout", None) or None,
        **given,
    )


def with_model_router(settings: EngineConfig, config: Config, store: Any) -> EngineConfig:
    """`settings` with planexec.toml's ``model_router`` (the model a step with a cascade starts on), loaded with `store`
    for ``learned``; a name that gives no router is a `UsageError` naming it."""
    if config.model_router is None or settings.model_router is not None:
        return settings
    try:
        return settings.replace(model_router=load_router(config.model_router, store=store))
    except ConfigError as exc:
        raise UsageError(f"model_router in planexec.toml: {exc}") from None


def add_runner_options(p: argparse.ArgumentParser) -> None:
    """``--runner`` and ``--ray-address``: where the steps run (planexec.toml's ``[planexec.runner]`` otherwise)."""
    p.add_argument(
        "--runner",
        choices=("local", "ray"),
        help="where steps run: local (this process, the default) or ray (function-tool steps on a Ray cluster; pip install 'planexec[ray]')",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="the Ray cluster: its head's host:port or ray://host:port (implies --runner ray; default: RAY_ADDRESS)",
    )


def runner_settings(args: argparse.Namespace, config: Config, setup: Mapping[str, Any] | None = None) -> RunnerConfig:
    """Where the steps run: ``--runner``/``--ray-address``, over planexec.toml's ``[planexec.runner]``, over where the run
    whose `setup` is given was started (a resumed run goes on there unless told otherwise)."""
    settings = recorded_runner(config.runner, setup)
    kind, address = getattr(args, "runner", None), getattr(args, "ray_address", None)
    if kind == "local" and address:
        raise UsageError("--ray-address is for --runner ray")
    update: dict[str, Any] = {}
    if kind or address:
        update["kind"] = kind or "ray"
    if address:
        update["address"] = address
    return settings.model_copy(update=update) if update else settings


def step_runner(settings: RunnerConfig, registry: Registry) -> Runner | None:
    """The runner `settings` ask for, connected now (None: the engine's local one); a `UsageError` when Ray is missing or unreachable."""
    try:
        return runner_for(settings, registry, connect=True)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def connect_runner(team: Team) -> None:
    """Connect the team's runner now, so a cluster that cannot be reached is a `UsageError` before any planning."""
    try:
        runner = team.runner_for(team.registry)
        if isinstance(runner, RayRunner):
            runner.connect()
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


_OPENED: list[RunStore] = []  # the stores this command opened: `close_stores` closes them when it ends


_UNWRITABLE = ("readonly database", "read-only file system", "permission denied", "operation not permitted", "unable to open database")


def unwritable_hint(exc: StoreError) -> str:
    """What to check when the store cannot be written (empty for another store error)."""
    text = str(exc).lower()
    if not any(sign in text for sign in _UNWRITABLE):
        return ""
    return (
        "\nthe store cannot be written: check that its file and folder are writable, that its file system is not mounted "
        "read-only, and that neither is immutable (lsattr; chattr -i), or name another with --store"
    )


def store_error(exc: StoreError) -> UsageError:
    """A store error of a command that writes, as its `UsageError`: exit 3 and what to check when the store cannot be written."""
    hint = unwritable_hint(exc)
    error = UsageError(f"{exc}{hint}")
    if hint:
        error.code = EXIT_STORE_FAILED
    return error


def open_run_store(spec: str | None, config: Any, *, create: bool) -> RunStore:
    """The store a command uses (closed when the command ends); a `UsageError` naming it when it cannot be opened
    (exit 3 when it cannot be written: a read-only or immutable file, folder or file system)."""
    target = store_target(spec, config.store)
    try:
        store = open_store(target, create=create)
    except StoreError as exc:
        raise (store_error(exc) if create else UsageError(str(exc))) from None
    _OPENED.append(store)
    return store


def close_stores() -> None:
    """Close every store the command opened: its leases released, SQLite's WAL copied back and cut to nothing."""
    while _OPENED:
        try:
            _OPENED.pop().close()
        except StoreError as exc:  # the command's outcome stands; say why the store could not be closed cleanly
            say(f"planexec: warning: {exc}", stderr=True)


def run_store(args: argparse.Namespace, config: Any) -> RunStore | None:
    """The store ``planexec run`` records into (None with ``--no-store``); `RunExistsError` when ``--run-id`` is taken."""
    if getattr(args, "no_store", False):
        return None
    store = open_run_store(getattr(args, "store", None), config, create=True)
    run_id = getattr(args, "run_id", None)
    if run_id:
        try:
            store.run(run_id)
        except StoreError:  # not there: the id is free
            return store
        store.close()
        raise RunExistsError(
            f"run {run_id!r} is already in {store.location}: choose another --run-id, or continue it with: planexec resume {run_id}"
        )
    return store


def resume_hint(result: RunResult, *, recorded: bool) -> str | None:
    """What to do next about a run that stopped short and was recorded, or None."""
    if not recorded:
        return None
    if result.status is RunStatus.NEEDS_DECISION:
        return decision_hint(result.run_id, [sid for sid, rec in result.steps.items() if rec.state is StepState.NEEDS_DECISION])
    if result.status is RunStatus.CANCELLED:
        return f"continue with: planexec resume {result.run_id}"
    return None


def decision_hint(run_id: str, held: list[str]) -> str:
    """The commands that let a run waiting for a decision go on: resolve its first held step (if any is left), then resume."""
    if not held:
        return f"continue with: planexec resume {run_id}"
    return f"decide with: planexec resolve {run_id} {held[0]} --retry|--skip|--mark-done VALUE; then: planexec resume {run_id}"


def user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in this environment
        return "person"


TEAM_RULES = frozenset({"unknown_worker", "unknown_action", "action_not_offered"})


def plan_registry(
    plan: Plan,
    tools: list[str],
    config: Config,
    *,
    workspace: str | None = None,
    model: str | None = None,
    worker_model: str | None = None,
    base_url: str | None = None,
    seed: int | None = 0,
) -> Registry:
    """The registry a plan file runs on: its tools modules, or goal mode's team when it names roles or toolkit tools.

    A plan the planner wrote (``planexec plan GOAL -o plan.json``) names the
    built-in roles and the workspace tools; it validates and runs with the
    same team `planexec run GOAL` uses. A plan that needs neither gets the
    plain registry, and no workspace folder is made for it. The roles take
    the models given (``--model``, ``--worker-model``, ``--base-url``) as in
    goal mode, else planexec.toml's and the defaults.
    """
    bare = registry([*config.tools, *tools])
    if not any(p.rule in TEAM_RULES for p in validate_plan(plan, bare)):
        return bare
    try:
        extra = [t for t in tools if t not in config.tools]  # the team loads planexec.toml's tools itself
        team = Team(
            model,
            seed=seed,
            config=config,
            models=ModelOptions(worker=worker_model, base_url=base_url),
            toolbox=Toolbox(modules=extra, roles=True, workspace=workspace or config.workspace or "workspace"),
        )
    except (ConfigError, RegistryError) as exc:
        raise UsageError(str(exc)) from None
    return team.registry


def face_team(config: Config, store: RunStore | str, *, tools: Sequence[str] = (), policies: Sequence[str] = (), yes: bool = False) -> Team:
    """The team a face plans, reviews and submits with (``planexec serve``, ``planexec mcp``, ``planexec submit --goal``):
    planexec.toml's models and tools, `tools`, the built-in roles, the workspace toolkit, and the project's policies with
    `policies` (files); `yes` approves what a person would be asked. `UsageError` when it cannot be made."""
    try:
        loaded = load_policies([*config.policies, *policies])
        return Team(
            config=config,
            store=store,
            mode="plan",
            toolbox=Toolbox(modules=list(tools), roles=True, workspace=config.workspace or "workspace"),
            review=ReviewOptions(policies=tuple(loaded), auto_approve=yes),
        )
    except (ConfigError, PolicyError, RegistryError, StoreError, ValueError) as exc:
        raise UsageError(str(exc)) from None
