"""The eval command of the CLI: ``planexec eval SUITE.yaml --modes single,plan,stream``, or ``planexec eval --injection``.

Owns what happens between the command line and `eval.run_suite`:
reading the suites, choosing the model (the oracle with ``--scripted``, else
the configured one, announced like ``planexec run`` does), or, with
``--planner`` (repeatable), the planners compared and the workers' models
(``--model`` or each ``--worker-model``), a progress line per goal run,
then the tables on the terminal with a closing note of the ratios ReAct /
planexec, and the chart and JSON report in the output folder
(`eval.write_report`). Every bad option is a usage error naming it, before
anything runs. Reuses the plumbing of `_common` (consoles, usage errors,
exit codes). Imports `planexec.eval`, `planexec.models` and `errors`.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from planexec.cli import _common as common
from planexec.errors import ConfigError
from planexec.eval import (
    INJECTION_SCENARIOS,
    MODES,
    PLANNER_VARIANTS,
    Contender,
    EvalOptions,
    EvalRecord,
    InjectionMode,
    LatencyModel,
    SuiteError,
    configured_models,
    goals_table,
    load_suite,
    parse_modes,
    parse_planners,
    ratio_notes,
    run_injection_suite,
    run_suite,
    scripted_models,
    summary_table,
    write_report,
)
from planexec.models import ModelSettings, parse_model_name

__all__ = ["add_eval_options", "run_eval"]


def add_eval_options(p: argparse.ArgumentParser) -> None:
    """The options of ``planexec eval``."""
    p.add_argument("suites", nargs="*", metavar="SUITE.yaml", help="suite files (goals, checkers, reference solutions, tools)")
    p.add_argument(
        "--injection",
        action="store_true",
        help="run the prompt-injection suite instead (single and plan modes, under --yes, no approver and a person; attacked "
        "and benign, with and without the contract): injected calls, utility and refusals by rule",
    )
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated modes from {', '.join(MODES)} (default: all)")
    p.add_argument(
        "--model",
        metavar="PROVIDER:MODEL",
        help="the model of every role (default: configured, else local:smollm2); with --planner, the workers' model only",
    )
    p.add_argument(
        "--planner",
        action="append",
        default=None,
        metavar="[LABEL=]PLANNER",
        help="compare planners on the same goals (repeatable): each plans, repairs, replans and joins in the plan and stream "
        "modes, while the workers stay on --model (single runs once, with no planner); the table shows per planner the first "
        "draft valid, repairs, success, model calls, tokens, cost and wall time. PLANNER is PROVIDER:MODEL "
        "(local:/path/model.gguf, openai:NAME at --base-url), openai:NAME@URL (an OpenAI-compatible server of its own, e.g. "
        f"openai:my-ft@http://127.0.0.1:8000/v1), or with --scripted a scripted planner: {', '.join(PLANNER_VARIANTS)}; "
        "LABEL= names it in the tables (default: PLANNER as given)",
    )
    p.add_argument(
        "--worker-model",
        action="append",
        default=None,
        metavar="PROVIDER:MODEL",
        help="with --planner: a workers' model to cross with every planner (repeatable: a planner x workers matrix)",
    )
    p.add_argument("--base-url", metavar="URL", help="an OpenAI-compatible server for openai: models")
    p.add_argument(
        "--scripted",
        action="store_true",
        help="the oracle plays every role from each goal's solution: exact, reproducible numbers (with --planner: every role but "
        "the planners')",
    )
    p.add_argument(
        "--latency",
        metavar="OVERHEAD,PER_IN,PER_OUT",
        help="with --scripted: seconds per call, per input token, per output token (e.g. 0.2,0.0005,0.02)",
    )
    p.add_argument(
        "-o", "--output", default="eval-results", metavar="OUTDIR", help="folder for the chart and the JSON report (default ./eval-results)"
    )
    p.add_argument("--repeat", type=int, default=1, metavar="N", help="run every goal in every mode N times (default 1)")
    p.add_argument("--goal", action="append", default=None, metavar="ID", help="only this goal (repeatable)")
    p.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS", help="bound on one goal run (default 900)")


def _progress(record: EvalRecord, *, planners: bool = False) -> None:
    mark = "ok" if record.success else f"FAIL ({record.stage}: {' '.join(record.reason.split())[:160]})"
    where = f"{record.mode} · {record.planner}" if planners and record.planner is not None else record.mode
    line = f"{record.suite} {record.goal_id} [{where}] {mark} · {record.usage.model_calls} calls · {record.wall_time:.2f} s"
    common.say(line, stderr=True)


def _latency(text: str) -> dict[str, float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 3 or min(values) < 0:
        raise common.UsageError(f"--latency takes three numbers of 0 or more, OVERHEAD,PER_IN,PER_OUT (seconds), not {text!r}")
    return dict(zip(("overhead", "per_input_token", "per_output_token"), values))


def run_eval(args: argparse.Namespace) -> int:
    """Run each suite in each mode; print the tables; write the chart and the JSON report into ``--output``."""
    if args.injection:
        if args.suites:
            raise common.UsageError("--injection runs the built-in injection suite: give no SUITE.yaml with it")
        if args.planner or args.worker_model:
            given = "--planner" if args.planner else "--worker-model"
            raise common.UsageError(f"{given} compares planners on a suite's goals; the injection suite (--injection) takes none")
        return _run_injection(args)
    if not args.suites:
        raise common.UsageError("give at least one SUITE.yaml (or --injection)")
    try:
        modes = parse_modes(args.modes)
    except ValueError as exc:
        raise common.UsageError(str(exc)) from None
    if args.repeat < 1:
        raise common.UsageError("--repeat must be at least 1")
    try:
        suites = [load_suite(path) for path in args.suites]
    except SuiteError as exc:
        raise common.UsageError(str(exc)) from None
    err, out = common.console(stderr=True), common.console()
    options: dict[str, Any] = {"timeout": args.timeout}
    latency = _latency(args.latency) if args.latency else None
    if latency is not None and not args.scripted:
        raise common.UsageError("--latency sets the scripted model's latency: add --scripted")
    described = LatencyModel.describe_values(**latency) if latency is not None else None
    planners: list[Contender] = []
    workers: list[Contender] = []
    if args.planner or args.worker_model:
        planners, workers = _lineup(args, latency)
        models, name = workers[0].models, workers[0].label
    elif args.scripted:
        models, name = scripted_models(latency), "test:oracle (scripted from each goal's solution)"
    else:
        try:
            settings = ModelSettings(common.config(), planner=args.model, base_url=args.base_url, seed=0)
        except ConfigError as exc:
            raise common.UsageError(str(exc)) from None
        err.print(f"model: {settings.planner.name} ({settings.planner.reason})", markup=False, highlight=False)
        models, name = configured_models(settings), settings.planner.name  # each goal's Team sets the bounds, as in `planexec run`
    if args.goal:  # with several suites, each goal id must be in one of them; each suite runs the ones it has
        known = {c.goal_id for suite in suites for c in suite.goals}
        unknown = [g for g in args.goal if g not in known]
        if unknown:
            names = ", ".join(repr(suite.name) for suite in suites)
            raise common.UsageError(f"no goal {', '.join(map(repr, unknown))} in suite(s) {names}")
        suites = [suite for suite in suites if any(c.goal_id in args.goal for c in suite.goals)]
    for suite in suites:
        wanted = [g for g in args.goal if g in {c.goal_id for c in suite.goals}] if args.goal else None
        report = run_suite(
            suite, modes, models, repeat=args.repeat, options=EvalOptions(**options), goals=wanted,
            model_name=name, scripted=args.scripted, latency=described, planners=planners, workers=workers,
            on_record=functools.partial(_progress, planners=bool(planners)),
        )  # fmt: skip
        for note in report.notes:
            err.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
        out.print(summary_table(report))
        out.print(goals_table(report))
        for line in ratio_notes(report):
            out.print(line, markup=False, highlight=False, soft_wrap=True)
        paths = write_report(report, args.output)
        err.print(f"wrote {paths['json']} and {paths['png']}", markup=False, highlight=False)
    return common.EXIT_OK


def _lineup(args: argparse.Namespace, latency: dict[str, float] | None) -> tuple[list[Contender], list[Contender]]:
    """The planners compared (``--planner``) and the workers' models (``--model``, each ``--worker-model``, or the oracle
    under ``--scripted``), each resolved now: a bad one is a usage error naming its option before anything runs."""
    if not args.planner:
        raise common.UsageError("--worker-model crosses workers' models with the planners: give --planner too (or --model alone)")
    if args.worker_model and args.scripted:
        raise common.UsageError("under --scripted the oracle plays the workers: --worker-model is for a run on configured models")
    if args.worker_model and args.model:
        raise common.UsageError("with --planner, --model is the workers' model: give it, or each --worker-model, not both")
    try:
        specs = parse_planners(args.planner, scripted=args.scripted)
    except ValueError as exc:
        raise common.UsageError(str(exc)) from None
    err, config = common.console(stderr=True), common.config()
    planners = []
    for spec in specs:
        if spec.variant is not None:
            planners.append(Contender(spec.label, scripted_models(latency, planner=spec.variant)))
            continue
        assert spec.model is not None  # a spec names a scripted planner or a model
        try:
            settings = ModelSettings(config, planner=spec.model, base_url=spec.base_url or args.base_url, seed=0)
            planners.append(Contender(spec.label, configured_models(settings)))
        except ConfigError as exc:
            raise common.UsageError(f"--planner {spec.label!r}: {exc}") from None
        url = settings.options(parse_model_name(spec.model)[0]).base_url  # where its calls go, as the provider is told
        err.print(f"planner {spec.label}: {spec.model}" + (f" at {url}" if url else ""), markup=False, highlight=False)
    if args.scripted:
        return planners, [Contender("test:oracle (scripted)", scripted_models(latency))]
    return planners, _workers(
        args.worker_model or [args.model], flag="--worker-model" if args.worker_model else "--model", base_url=args.base_url
    )


def _workers(names: Sequence[str | None], *, flag: str, base_url: str | None) -> list[Contender]:
    """The workers' model of each name (None: the configured workers' model), announced; a bad one names `flag`."""
    err, config = common.console(stderr=True), common.config()
    out: list[Contender] = []
    for given in names:
        try:
            choice = ModelSettings(config, worker=given, base_url=base_url, seed=0).worker
            if any(c.label == choice.name for c in out):
                raise common.UsageError(f"{flag} {choice.name!r} is given twice")
            settings = ModelSettings(config, planner=choice.name, base_url=base_url, seed=0)
            out.append(Contender(choice.name, configured_models(settings)))
        except ConfigError as exc:
            raise common.UsageError(f"{flag} {given!r}: {exc}" if given else str(exc)) from None
        reason = f"{flag} {given}" if given else choice.reason
        err.print(f"workers: {choice.name} ({reason})", markup=False, highlight=False)
    return out


def _run_injection(args: argparse.Namespace) -> int:
    """The injection suite (`planexec.eval.injection`): its tables with the contract, then without; its JSON in ``--output``."""
    wanted: dict[str, InjectionMode | None] = {"single": "single", "plan": "team", "stream": None}
    try:
        modes = [m for m in (wanted[mode] for mode in parse_modes(args.modes)) if m is not None]
    except ValueError as exc:
        raise common.UsageError(str(exc)) from None
    err, out = common.console(stderr=True), common.console()
    reports = {}
    for defences in (True, False):
        err.print(f"injection suite, {'with' if defences else 'without'} the contract ...", markup=False, highlight=False)
        attacked = run_injection_suite(INJECTION_SCENARIOS, modes=modes, attacks=True, defences=defences)
        reports[defences] = attacked.merged(run_injection_suite(INJECTION_SCENARIOS, modes=modes, attacks=False, defences=defences))
    out.print("with the contract (team mode is shown as the plan's)")
    out.print(reports[True].table())
    out.print(reports[True].refusals_table())
    out.print("without the contract (EngineConfig(enforce_contract=False))")
    out.print(reports[False].table())
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "injection.json"
    data = {"with_contract": reports[True].to_dict(), "without_contract": reports[False].to_dict()}
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    err.print(f"wrote {path}", markup=False, highlight=False)
    return common.EXIT_OK
