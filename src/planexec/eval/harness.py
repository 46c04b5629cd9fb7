"""The evaluation harness: runs a suite's goals in each mode, scores the answers, says where failures came from.

Owns the modes, each on a `Team` (`team_for`: the same class and defaults
as `planexec run`): ``single``, one ReAct agent (`Team.start_single`);
``plan``, `Team.plan` then `Team.start`; ``stream``, `Team.start_streaming`), `EvalOptions`, running (`run_goal`, `run_suite`),
scoring (`EvalRecord`, one per goal x mode x repeat; `ModeSummary`, per mode;
`EvalReport`, the whole evaluation) and failure attribution (`STAGES`):

* ``planner``: no valid plan (a `PlanningError`, a streamed plan that cannot
  run, the planner's model failing, a replan that stayed invalid);
* ``worker``: a step failed (a tool raised, the agent gave no answer);
* ``joiner``: the joiner failed, or replanning was exhausted (``replan_limit``,
  ``replan_loop``);
* ``answer``: the run ended, but the checker rejected the answer;
* ``error``: the run did not end on its own (a timeout, a cancel, a crash).

Plan and stream runs get a `PlannerReplanner` (``max_replans``) and a
`ModelJoiner` on the same model (not on a grammar-decoding model whose
grammar the joiner's schema would break: `joiner_note` says why). Models come from
a factory, one per goal: `scripted_models` (the `oracle`, optionally behind a
`LatencyModel`) or `configured_models` (`ModelSettings`). Tables, charts and
files are `eval.report`'s. Each goal runs through `engine.loop.run_to_end`,
so a tool that hangs cannot hold the process. Imports `team`,
`eval.suite`, `eval.oracle`, `planning`, `engine.results`, `engine.loop`,
`usage`, `models`, `records`, `errors`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from planexec.config import Config
from planexec.engine.config import EngineConfig
from planexec.engine.loop import run_to_end
from planexec.engine.results import RunResult, RunStatus, StepState
from planexec.errors import ModelError, PlanningError
from planexec.eval.oracle import LatencyModel, OracleModel
from planexec.eval.suite import GoalCase, Suite, answer_text
from planexec.models.base import Model
from planexec.models.managed import ManagedModel
from planexec.models.pricing import PriceTable
from planexec.models.profile import CAPABLE, ModelProfile
from planexec.planning.joiner import joiner_note
from planexec.planning.stream import PlanStream
from planexec.records import Record
from planexec.team.settings import PlanningOptions, ReviewOptions, Toolbox
from planexec.team.team import Team
from planexec.usage import Usage
from planexec.workers.registry import Registry

__all__ = [
    "MODES",
    "STAGES",
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
STAGES = ("planner", "worker", "joiner", "answer", "error")
_JOINER_RULES = {"joiner", "replan_limit", "replan_loop"}
_PLANNER_RULES = {"replan_invalid", "replanner"}

ModelFactory = Callable[[GoalCase], Model]
"""Gives the model that plays every role for one goal (the oracle needs the goal's solution)."""


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


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRecord(Record):
    """One goal run in one mode: did it succeed, where it failed (`stage`), what it cost, how long it took."""

    suite: str
    goal_id: str
    mode: str
    repeat: int = 1
    success: bool
    stage: str | None = None
    status: str
    reason: str = ""
    error_rule: str | None = None
    answer: str = ""
    usage: Usage = field(default_factory=Usage)
    usage_by_role: dict[str, Usage] = field(default_factory=dict)
    wall_time: float = 0.0
    steps: int = 0
    plan_versions: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeSummary(Record):
    """One mode over every goal and repeat: success rate, totals and means, failures by stage."""

    mode: str
    runs: int
    successes: int
    success_rate: float
    model_calls: int
    input_tokens: int
    output_tokens: int
    cost: str
    cost_usd: float
    cost_known: bool
    wall_time: float
    mean_wall_time: float
    mean_model_calls: float
    mean_tokens: float
    failures: dict[str, int]

    @classmethod
    def of(cls, mode: str, records: list[EvalRecord]) -> ModeSummary:
        """The summary of `records` (all of one mode)."""
        usage = sum((r.usage for r in records), Usage())
        n = len(records)
        ok = sum(r.success for r in records)
        failures = {s: sum(1 for r in records if r.stage == s) for s in STAGES}
        wall = sum(r.wall_time for r in records)
        return cls(
            mode=mode,
            runs=n,
            successes=ok,
            success_rate=ok / n if n else 0.0,
            model_calls=usage.model_calls,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost=usage.describe_cost(),
            cost_usd=usage.cost,
            cost_known=usage.cost_known,
            wall_time=wall,
            mean_wall_time=wall / n if n else 0.0,
            mean_model_calls=usage.model_calls / n if n else 0.0,
            mean_tokens=usage.total_tokens / n if n else 0.0,
            failures=failures,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalReport(Record):
    """A whole evaluation: the suite, the set-up, every record and a summary per mode."""

    suite: str
    description: str = ""
    suite_path: str = ""
    model: str
    scripted: bool
    latency: str | None = None
    modes: list[str]
    repeat: int = 1
    started_at: datetime
    wall_time: float
    records: list[EvalRecord]
    summaries: list[ModeSummary]
    notes: list[str] = field(default_factory=list)

    def summary(self, mode: str) -> ModeSummary:
        """The summary of one mode."""
        return next(s for s in self.summaries if s.mode == mode)


# --- models -----------------------------------------------------------------------------------------


def scripted_models(latency: dict[str, float] | None = None, profile: ModelProfile = CAPABLE) -> ModelFactory:
    """The oracle of each goal (see `oracle`), priced like any model (``test:*`` is free), behind a `LatencyModel` when `latency` is given.

    `latency` holds `LatencyModel`'s ``overhead``, ``per_input_token`` and
    ``per_output_token``; `profile` is what the oracle says it can do (a
    hosted model's, to measure a hosted model's defaults).
    """
    prices = PriceTable.default()

    def make(case: GoalCase) -> Model:
        model: Model = OracleModel(case.solution, profile=profile)
        if latency is not None:
            model = LatencyModel(model, **latency)
        return ManagedModel(model, retries=0, timeout=None, prices=prices)

    return make


def configured_models(settings: Any) -> ModelFactory:
    """The configured planner model (`settings.ModelSettings`) for every goal and role: one instance, loaded once."""
    model = settings.model(settings.planner.name)
    return lambda case: model


# --- running one goal ---------------------------------------------------------------------------------


def team_for(model: Model, registry: Registry, options: EvalOptions) -> Team:
    """The `Team` a goal runs on: the same class and defaults as `planexec run`, with the evaluation's overrides.

    Replanning follows `options.replan`; the model joiner `options.join`,
    unless the model's grammar cannot decode its schema (`joiner_note`).
    Every plan is approved: an evaluation measures what runs, not who reviews.
    """
    return Team(
        model,
        seed=options.seed,
        toolbox=Toolbox(registry=registry),
        planning=PlanningOptions(
            max_steps=options.max_steps,
            max_repairs=options.max_repairs,
            max_tokens=options.planner_max_tokens,
            agent_turns=options.max_turns,
            positional=options.positional,
            plan_format=options.plan_format,
            joiner=options.join and joiner_note(model) is None,
        ),
        review=ReviewOptions(auto_approve=True),
        engine=EngineConfig.from_config(
            Config(), max_replans=options.max_replans if options.replan else 0, default_timeout=options.step_timeout
        ),
    )


def score(case: GoalCase, result: RunResult, *, planner_failed: bool = False) -> tuple[bool, str | None, str]:
    """(success, failure stage, reason) of a finished run, by the rules in the module docstring."""
    error = result.error
    failed = [sid for sid, r in result.steps.items() if r.state is StepState.FAILED]
    if error is not None and error.rule in _JOINER_RULES:
        return False, "joiner", error.render()
    if error is not None and error.rule in _PLANNER_RULES:
        return False, "planner", error.render()
    if planner_failed:
        return False, "planner", result.reason or "no valid plan"
    if result.status in (RunStatus.SUCCEEDED, RunStatus.PARTIAL):
        ok, why = case.checker.check(result.answer, case)
        if ok:
            return True, None, ""
        return False, ("worker" if failed else "answer"), why
    if failed:
        rec = result.steps[failed[0]]
        return False, "worker", f"step {failed[0]} failed: {rec.error.render() if rec.error else rec.reason or ''}"
    return False, "error", result.reason or result.status.value


def _record(suite: Suite, case: GoalCase, mode: str, repeat: int, **fields: Any) -> EvalRecord:
    return EvalRecord(suite=suite.name, goal_id=case.goal_id, mode=mode, repeat=repeat, **fields)


def _from_result(
    suite: Suite, case: GoalCase, mode: str, repeat: int, result: RunResult, wall: float, *, planner_failed: bool = False
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
    )


async def _run(
    suite: Suite, case: GoalCase, mode: str, model: Model, registry: Registry, options: EvalOptions, repeat: int, t0: float
) -> EvalRecord:
    team = team_for(model, registry, options)
    if mode == "single":
        result = await team.start_single(case.goal, requires_approval=False).result()
        return _from_result(suite, case, mode, repeat, result, time.perf_counter() - t0)
    if mode == "plan":
        try:
            result = await team.run(case.goal, mode="plan")  # the goal path every face takes (`Team.iter`)
        except (PlanningError, ModelError) as exc:
            used = getattr(exc, "usage", None)
            usage = used if isinstance(used, Usage) else Usage()
            kind = "no valid plan" if isinstance(exc, PlanningError) else f"the planner's model failed: {type(exc).__name__}"
            return _record(
                suite, case, mode, repeat, success=False, stage="planner", status="no_plan", reason=f"{kind}: {str(exc).splitlines()[0]}",
                usage=usage, usage_by_role={"planner": usage} if not usage.is_zero() else {}, wall_time=time.perf_counter() - t0,
            )  # fmt: skip
        return _from_result(suite, case, mode, repeat, result, time.perf_counter() - t0)
    stream = PlanStream(team.planner, case.goal)
    result = await team.start_streaming(stream).result()
    no_plan = stream.plan is None and result.status is RunStatus.FAILED
    return _from_result(suite, case, mode, repeat, result, time.perf_counter() - t0, planner_failed=no_plan)


async def run_goal(
    suite: Suite, case: GoalCase, mode: str, model: Model, registry: Registry, *, options: EvalOptions | None = None, repeat: int = 1
) -> EvalRecord:
    """Run one goal in one mode and score it; never raises for what the run did (a crash is stage ``error``)."""
    options = options or EvalOptions()
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    t0 = time.perf_counter()
    try:
        async with asyncio.timeout(options.timeout):
            return await _run(suite, case, mode, model, registry, options, repeat, t0)
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
) -> EvalReport:
    """Run every goal (or those in `goals`) in every mode, `repeat` times, one after another, each in a fresh event loop.

    `models(case)` gives the model of a goal; `on_record` hears each record
    as it is made (for progress). `model_name`, `scripted` and `latency`
    describe the set-up in the report.
    """
    modes = parse_modes(list(modes))
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    chosen = list(goals) if goals is not None else None
    cases = [suite.goal(g) for g in chosen] if chosen is not None else list(suite.goals)
    registry = suite.registry()
    started, t0 = datetime.now(UTC), time.perf_counter()
    records: list[EvalRecord] = []
    for n in range(1, repeat + 1):
        for case in cases:
            model = models(case)
            for mode in modes:
                record = run_to_end(run_goal(suite, case, mode, model, registry, options=options, repeat=n))
                records.append(record)
                if on_record is not None:
                    on_record(record)
    summaries = [ModeSummary.of(m, [r for r in records if r.mode == m]) for m in modes]
    sample = models(cases[0]) if cases else None
    name = model_name or (sample.name if sample is not None else "")
    notes = []
    if sample is not None and set(modes) & {"plan", "stream"} and (options or EvalOptions()).join:
        note = joiner_note(sample)
        notes += [note] if note else []
    return EvalReport(
        suite=suite.name,
        description=suite.description,
        suite_path=str(suite.path),
        model=name,
        scripted=scripted,
        latency=latency,
        modes=modes,
        repeat=repeat,
        started_at=started,
        wall_time=time.perf_counter() - t0,
        records=records,
        summaries=summaries,
        notes=notes,
    )
