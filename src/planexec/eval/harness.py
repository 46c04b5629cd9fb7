"""The evaluation harness: runs a suite's goals in each mode, with one model or with planners compared, and scores them.

Owns the modes, each on a `Team` (`team_for`: the same class and defaults
as `planexec run`): ``single``, one ReAct agent (`Team.start_single`);
``plan``, the goal path to the end (`Team.iter`); ``stream``,
`Team.start_streaming`), `EvalOptions`, the model factories
(`scripted_models`, optionally one scripted planner of
`eval.planners`; `configured_models`), `Contender` (a labelled model
under evaluation) and running (`run_goal`, `run_suite`). The records, the
summaries, the failure stages and `score` are `eval.scoring`'s (and named
here too, as before).

One model plays every role, or planners are compared: each `Contender` of
`planners` plays the `Team`'s planner model, which writes and repairs the
plan, revises it (the replanner) and decides after the steps (the joiner);
the workers' model (`models`, or each of `workers`: a matrix) plays the
single agent and every role worker. ``single`` has no planner, so it runs
once per workers' model. Each plan or stream run counts its planner's
drafts from its `PlanDrafted` events (`scoring.DraftFigures`).

Plan and stream runs get a `PlannerReplanner` (``max_replans``) and a
`ModelJoiner` on the planner's model (not on a grammar-decoding model whose
grammar the joiner's schema would break: `joiner_note` says why). Tables,
charts and files are `eval.report`'s. Each goal runs through
`engine.loop.run_to_end`, so a tool that hangs cannot hold the process.
Imports `team`, `eval.suite`, `eval.scoring`, `eval.oracle`,
`eval.planners`, `planning`, `engine`, `usage`, `models`, `errors`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from planexec.config import Config
from planexec.engine.config import EngineConfig
from planexec.engine.engine import Run
from planexec.engine.events import PlanDrafted
from planexec.engine.loop import run_to_end
from planexec.engine.results import RunResult, RunStatus
from planexec.errors import ModelError, PlanningError
from planexec.eval.oracle import LatencyModel, OracleModel
from planexec.eval.planners import PLANNER_VARIANTS, ScriptedPlanner
from planexec.eval.scoring import STAGES, DraftFigures, EvalRecord, EvalReport, ModeSummary, score
from planexec.eval.suite import GoalCase, Suite, answer_text
from planexec.models.base import Model
from planexec.models.managed import ManagedModel
from planexec.models.pricing import PriceTable
from planexec.models.profile import CAPABLE, ModelProfile
from planexec.planning.joiner import joiner_note
from planexec.planning.stream import PlanStream
from planexec.team.settings import ModelOptions, PlanningOptions, ReviewOptions, Toolbox
from planexec.team.stages import Finished, Started
from planexec.team.team import Team
from planexec.usage import Usage
from planexec.workers.registry import Registry

__all__ = [
    "MODES",
    "STAGES",
    "Contender",
    "EvalOptions",
    "EvalRecord",
    "EvalReport",
    "ModeSummary",
    "ModelFactory",
    "configured_models",
    "joiner_note",
    "parse_modes",
    "run_goal",
    "run_suite",
    "score",
    "scripted_models",
]

MODES = ("single", "plan", "stream")

ModelFactory = Callable[[GoalCase], Model]
"""Gives the model of one goal (the oracle needs the goal's solution): of every role, the planner's or the workers'."""


def parse_modes(text: str | Iterable[str]) -> list[str]:
    """``"single,plan"`` -> ``["single", "plan"]``; `ValueError` naming an unknown mode."""
    names = [m.strip() for m in (text.split(",") if isinstance(text, str) else text) if m.strip()]
    unknown = [m for m in names if m not in MODES]
    if unknown or not names:
        raise ValueError(f"unknown mode(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(MODES)}")
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class EvalOptions:
    """How each goal runs: replanning, the joiner, a per-run timeout (seconds), and any bounds that differ from the team's.

    `max_steps`, `planner_max_tokens` and `max_turns` left None are the
    `Team`'s own (`team.assembly.bounds_for`), so an evaluation measures what
    `planexec run` does.
    """

    max_steps: int | None = None
    max_repairs: int = 2
    planner_max_tokens: int | None = None
    positional: bool | None = None
    max_turns: int | None = None
    max_replans: int = 2
    replan: bool = True
    join: bool = True
    seed: int = 0
    timeout: float | None = 900.0
    step_timeout: float | None = 300.0
    plan_format: Literal["json", "compact"] | None = None  # None: the planner model's profile's (`Team`'s default)


# --- models -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    """A model under evaluation: the `label` the tables show, and its model for each goal (`models`)."""

    label: str
    models: ModelFactory


def scripted_models(
    latency: dict[str, float] | None = None, profile: ModelProfile = CAPABLE, *, planner: str | None = None
) -> ModelFactory:
    """The oracle of each goal (see `oracle`), priced like any model (``test:*`` is free), behind a `LatencyModel` when `latency` is given.

    `latency` holds `LatencyModel`'s ``overhead``, ``per_input_token`` and
    ``per_output_token``; `profile` is what the oracle says it can do (a
    hosted model's, to measure a hosted model's defaults). `planner` names
    a scripted planner (`eval.planners.PLANNER_VARIANTS`) the oracle plays
    instead; `KeyError` for a name that is none.
    """
    prices = PriceTable.default()
    variant = PLANNER_VARIANTS[planner] if planner is not None else None

    def make(case: GoalCase) -> Model:
        model: Model = (
            OracleModel(case.solution, profile=profile) if variant is None else ScriptedPlanner(case.solution, variant, profile=profile)
        )
        if latency is not None:
            model = LatencyModel(model, **latency)
        return ManagedModel(model, retries=0, timeout=None, prices=prices)

    return make


def configured_models(settings: Any) -> ModelFactory:
    """The model `settings` (`ModelSettings`) names as planner, for every goal: one instance, loaded once. It plays every
    role, or one side of a comparison (a planner's `Contender`, or the workers')."""
    model = settings.model(settings.planner.name)
    return lambda case: model


# --- running one goal ---------------------------------------------------------------------------------


def team_for(model: Model, registry: Registry, options: EvalOptions, *, planner: Model | None = None) -> Team:
    """The `Team` a goal runs on: the same class and defaults as `planexec run`, with the evaluation's overrides.

    `model` plays every role, or, with a `planner`, the workers' roles (the
    single agent, any role worker) while `planner` plans, replans and joins.
    Replanning follows `options.replan`; the model joiner `options.join`,
    unless the planner's grammar cannot decode its schema (`joiner_note`).
    Every plan is approved: an evaluation measures what runs, not who reviews.
    """
    planning_model = planner if planner is not None else model
    return Team(
        planning_model,
        seed=options.seed,
        models=ModelOptions(worker=model) if planner is not None else None,
        toolbox=Toolbox(registry=registry),
        planning=PlanningOptions(
            max_steps=options.max_steps,
            max_repairs=options.max_repairs,
            max_tokens=options.planner_max_tokens,
            agent_turns=options.max_turns,
            positional=options.positional,
            plan_format=options.plan_format,
            joiner=options.join and joiner_note(planning_model) is None,
        ),
        review=ReviewOptions(auto_approve=True),
        engine=EngineConfig.from_config(
            Config(), max_replans=options.max_replans if options.replan else 0, default_timeout=options.step_timeout
        ),
    )


def _record(suite: Suite, case: GoalCase, mode: str, repeat: int, **fields: Any) -> EvalRecord:
    return EvalRecord(suite=suite.name, goal_id=case.goal_id, mode=mode, repeat=repeat, **fields)


def _from_result(
    suite: Suite,
    case: GoalCase,
    mode: str,
    repeat: int,
    result: RunResult,
    wall: float,
    *,
    planner_failed: bool = False,
    drafts: DraftFigures | None = None,
) -> EvalRecord:
    ok, stage, reason = score(case, result, planner_failed=planner_failed)
    return _record(
        suite,
        case,
        mode,
        repeat,
        success=ok,
        stage=stage,
        status=result.status.value,
        reason=reason,
        error_rule=result.error.rule if result.error is not None else None,
        answer=answer_text(result.answer),
        usage=result.usage,
        usage_by_role=result.usage_by_role(),
        wall_time=wall,
        steps=len(result.plan.steps),
        plan_versions=len(result.versions) or 1,
        **(drafts or DraftFigures()).fields(),
    )


async def _drafts(run: Run, stream: PlanStream | None = None) -> DraftFigures:
    """A finished run's planner drafts, from its `PlanDrafted` events (a streamed plan's own draft from its `stream`)."""
    drafted = [(e.version, e.attempt, not e.problems) async for e in run.events() if isinstance(e, PlanDrafted)]
    if stream is not None and stream.draft is not None and not any(version == 1 for version, _, _ in drafted):
        drafted.append((1, stream.draft.attempt, stream.draft.valid))  # recorded as the run ended: maybe after its last event
    return DraftFigures.of(drafted)


async def _planned(suite: Suite, case: GoalCase, repeat: int, team: Team, t0: float) -> EvalRecord:
    """Mode ``plan``: the goal path every face takes (`Team.iter`), to the end."""
    run: Run | None = None
    try:
        async for stage in team.iter(case.goal, mode="plan", events=False):
            if isinstance(stage, Started):
                run = stage.run
            elif isinstance(stage, Finished):
                assert run is not None  # a run starts before it finishes
                drafts = await _drafts(run)
                return _from_result(suite, case, "plan", repeat, stage.result, time.perf_counter() - t0, drafts=drafts)
    except (PlanningError, ModelError) as exc:
        used = getattr(exc, "usage", None)
        usage = used if isinstance(used, Usage) else Usage()
        planning = isinstance(exc, PlanningError)
        kind = "no valid plan" if planning else f"the planner's model failed: {type(exc).__name__}"
        drafts = DraftFigures.refused(exc.attempts if isinstance(exc, PlanningError) else 0)
        return _record(
            suite, case, "plan", repeat, success=False, stage="planner", status="no_plan", reason=f"{kind}: {str(exc).splitlines()[0]}",
            usage=usage, usage_by_role={"planner": usage} if not usage.is_zero() else {}, wall_time=time.perf_counter() - t0,
            **drafts.fields(),
        )  # fmt: skip
    raise AssertionError("a goal's path ends with its result or raises")  # pragma: no cover


async def _run(suite: Suite, case: GoalCase, mode: str, team: Team, repeat: int, t0: float) -> EvalRecord:
    if mode == "single":
        result = await team.start_single(case.goal, requires_approval=False).result()
        return _from_result(suite, case, mode, repeat, result, time.perf_counter() - t0)
    if mode == "plan":
        return await _planned(suite, case, repeat, team, t0)
    stream = PlanStream(team.planner, case.goal)
    run = team.start_streaming(stream)
    result = await run.result()
    no_plan = stream.plan is None and result.status is RunStatus.FAILED
    drafts = await _drafts(run, stream)
    if no_plan and drafts.first_draft_valid is None:  # the planner's model failed before it wrote a draft
        drafts = DraftFigures.refused(0)
    return _from_result(suite, case, mode, repeat, result, time.perf_counter() - t0, planner_failed=no_plan, drafts=drafts)


async def run_goal(
    suite: Suite,
    case: GoalCase,
    mode: str,
    model: Model,
    registry: Registry,
    *,
    options: EvalOptions | None = None,
    repeat: int = 1,
    planner: Model | None = None,
) -> EvalRecord:
    """Run one goal in one mode and score it; never raises for what the run did (a crash is stage ``error``).

    `model` plays every role, or with a `planner` the workers' (see `team_for`).
    """
    options = options or EvalOptions()
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(options.timeout):
            return await _run(suite, case, mode, team_for(model, registry, options, planner=planner), repeat, t0)
    except TimeoutError:
        reason = f"timed out after {options.timeout:g}s"
        return _record(
            suite, case, mode, repeat, success=False, stage="error", status="timeout", reason=reason, wall_time=time.perf_counter() - t0
        )
    except Exception as exc:  # the harness reports a crash as a record; it does not stop the evaluation
        reason = f"{type(exc).__name__}: {exc}"
        return _record(
            suite, case, mode, repeat, success=False, stage="error", status="crashed", reason=reason, wall_time=time.perf_counter() - t0
        )


# --- running a suite ----------------------------------------------------------------------------------


def run_suite(
    suite: Suite,
    modes: Iterable[str],
    models: ModelFactory,
    *,
    repeat: int = 1,
    options: EvalOptions | None = None,
    goals: Iterable[str] | None = None,
    model_name: str = "",
    scripted: bool = False,
    latency: str | None = None,
    on_record: Callable[[EvalRecord], None] | None = None,
    planners: Sequence[Contender] = (),
    workers: Sequence[Contender] = (),
) -> EvalReport:
    """Run every goal (or those in `goals`) in every mode, `repeat` times, one after another, each in a fresh event loop.

    `models(case)` gives the model of a goal, which plays every role. With
    `planners`, each one's model plans (and replans and joins) in the plan
    and stream modes, and `models` plays the workers' roles; or each of
    `workers` does, crossed with every planner. ``single`` has no planner:
    it runs once per workers' model. `on_record` hears each record as it is
    made (for progress). `model_name`, `scripted` and `latency` describe the
    set-up in the report.
    """
    modes = parse_modes(list(modes))
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    for role, entrants in (("planner", planners), ("workers' model", workers)):
        labels = [c.label for c in entrants]
        if len(set(labels)) != len(labels):
            raise ValueError(f"each {role} needs a label of its own; got {', '.join(labels)}")
    chosen = list(goals) if goals is not None else None
    cases = [suite.goal(g) for g in chosen] if chosen is not None else list(suite.goals)
    registry = suite.registry()
    sample = models(cases[0]) if cases else None
    crew = list(workers) or [Contender(model_name or (sample.name if sample is not None else ""), models)]
    started, t0 = datetime.now(UTC), time.perf_counter()
    records: list[EvalRecord] = []
    for n in range(1, repeat + 1):
        for case in cases:
            planning = {p.label: p.models(case) for p in planners}
            for hands in crew:
                model = hands.models(case)
                for mode in modes:
                    lineup: list[tuple[str | None, Model | None]] = [(None, None)] if mode == "single" else [(hands.label, None)]
                    if planners and mode != "single":
                        lineup = list(planning.items())
                    for label, planner in lineup:
                        record = run_to_end(run_goal(suite, case, mode, model, registry, options=options, repeat=n, planner=planner))
                        record = dataclasses.replace(record, planner=label, workers=hands.label)
                        records.append(record)
                        if on_record is not None:
                            on_record(record)
    return EvalReport(
        suite=suite.name,
        description=suite.description,
        suite_path=str(suite.path),
        model=", ".join(c.label for c in crew),
        scripted=scripted,
        latency=latency,
        modes=modes,
        repeat=repeat,
        started_at=started,
        wall_time=time.perf_counter() - t0,
        records=records,
        summaries=[ModeSummary.of(m, [r for r in records if r.mode == m]) for m in modes],
        notes=_joiner_notes(cases, modes, options or EvalOptions(), sample, planners),
        planners=[p.label for p in planners],
        worker_models=[c.label for c in crew] if planners else [],
        by_planner=_by_planner(records, modes, [p.label for p in planners], [c.label for c in crew]) if planners else [],
    )


def _by_planner(records: list[EvalRecord], modes: list[str], planners: list[str], crew: list[str]) -> list[ModeSummary]:
    """Per workers' model: one summary for ``single``, then one per planner and planning mode."""
    cells: list[tuple[str | None, str]] = [(None, "single")] if "single" in modes else []
    cells += [(planner, mode) for planner in planners for mode in modes if mode != "single"]
    out = []
    for workers in crew:
        for planner, mode in cells:
            chosen = [r for r in records if (r.mode, r.planner, r.workers) == (mode, planner, workers)]
            out.append(ModeSummary.of(mode, chosen, planner=planner, workers=workers))
    return out


def _joiner_notes(
    cases: list[GoalCase], modes: list[str], options: EvalOptions, sample: Model | None, planners: Sequence[Contender]
) -> list[str]:
    """Why a planner's runs go without a model joiner (`joiner_note`), when one does."""
    if not cases or not set(modes) & {"plan", "stream"} or not options.join:
        return []
    if not planners:
        note = joiner_note(sample) if sample is not None else None
        return [note] if note else []
    notes = ((p.label, joiner_note(p.models(cases[0]))) for p in planners)
    return [f"planner {label}: {note}" for label, note in notes if note]
