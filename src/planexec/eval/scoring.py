"""What an evaluation measured: one record per goal run, summaries, the whole report, and where a failure came from.

Owns `EvalRecord` (one goal x mode x repeat, with the planner that planned
it and the workers' model), `ModeSummary` (one mode's figures, over one
planner and workers' model when planners are compared), `EvalReport` (the
set-up, every record, the summaries per mode and per planner), the failure
stages (`STAGES`) and `score`, which reads a finished run by them:

* ``planner``: no valid plan (a `PlanningError`, a streamed plan that cannot
  run, the planner's model failing, a replan that stayed invalid);
* ``worker``: a step failed (a tool raised, the agent gave no answer);
* ``joiner``: the joiner failed, or replanning was exhausted (``replan_limit``,
  ``replan_loop``);
* ``answer``: the run ended, but the checker rejected the answer;
* ``error``: the run did not end on its own (a timeout, a cancel, a crash).

The planner's drafts are counted per run from its `PlanDrafted` events
(`DraftFigures`): the first draft valid or not, and the repairs (drafts
beyond the first of each plan version). Runs nothing. Imports
`eval.suite`, `engine.results`, `records` and `usage`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from planexec.engine.results import RunResult, RunStatus, StepState
from planexec.eval.suite import GoalCase
from planexec.records import Record
from planexec.usage import Usage

__all__ = ["STAGES", "DraftFigures", "EvalRecord", "EvalReport", "ModeSummary", "score"]

STAGES = ("planner", "worker", "joiner", "answer", "error")
_JOINER_RULES = {"joiner", "replan_limit", "replan_loop"}
_PLANNER_RULES = {"replan_invalid", "replanner"}


@dataclass(frozen=True, slots=True)
class DraftFigures:
    """A run's planner drafts: how many, whether the first was accepted as written, and the repairs.

    A draft with problems went back to the planner for repair, unless it was
    the last one allowed; so the repairs of one plan version are its drafts
    beyond the first, and a run's are the sum over the versions it drafted
    (the first plan, then each replan).
    """

    drafts: int = 0
    first_draft_valid: bool | None = None  # None: the planner wrote nothing this run (a single agent, a crash first)
    repairs: int = 0

    @classmethod
    def of(cls, drafted: Sequence[tuple[int, int, bool]]) -> DraftFigures:
        """The figures of a run's drafts, each ``(version, attempt, accepted)`` as its `PlanDrafted` event says (any order)."""
        if not drafted:
            return cls()
        first = min(drafted)
        return cls(drafts=len(drafted), first_draft_valid=first[2], repairs=len(drafted) - len({d[0] for d in drafted}))

    @classmethod
    def refused(cls, attempts: int) -> DraftFigures:
        """No valid plan after `attempts` drafts (a `PlanningError`'s), or none at all (0: the planner's model failed)."""
        return cls(drafts=attempts, first_draft_valid=False, repairs=max(attempts - 1, 0))

    def fields(self) -> dict[str, Any]:
        """As `EvalRecord` fields."""
        return {"drafts": self.drafts, "first_draft_valid": self.first_draft_valid, "repairs": self.repairs}


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRecord(Record):
    """One goal run in one mode: did it succeed, where it failed (`stage`), what it cost, how long it took.

    `planner` is the label of the planner that planned it (None for a single
    agent's run: no plan, no planner); `workers` the label of the workers'
    model (the single agent's). `drafts`, `first_draft_valid` and `repairs`
    are the planner's (`DraftFigures`).
    """

    suite: str
    goal_id: str
    mode: str
    repeat: int = 1
    planner: str | None = None
    workers: str = ""
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
    drafts: int = 0
    first_draft_valid: bool | None = None
    repairs: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeSummary(Record):
    """One mode over every goal and repeat (of one planner and workers' model, when planners are compared): success rate,
    the planner's first drafts and repairs, totals and means, failures by stage.

    `first_draft_rate` is the share of the runs whose planner wrote a draft
    (`planned_runs`) in which the first was accepted without repair; None
    when no run drafted (mode ``single``). `cost_usd` is None when no call
    had a price (never a 0 that was not measured); `cost` says it in words.
    """

    mode: str
    planner: str | None = None
    workers: str | None = None
    runs: int
    successes: int
    success_rate: float
    model_calls: int
    input_tokens: int
    output_tokens: int
    cost: str
    cost_usd: float | None
    cost_known: bool
    wall_time: float
    mean_wall_time: float
    mean_model_calls: float
    mean_tokens: float
    failures: dict[str, int]
    planned_runs: int = 0
    first_draft_valid: int = 0
    first_draft_rate: float | None = None
    drafts: int = 0
    repairs: int = 0
    mean_repairs: float | None = None

    def describe_failures(self) -> str:
        """``planner 2, answer 1`` (the stages in `STAGES` order), or ``none``."""
        return ", ".join(f"{stage} {self.failures[stage]}" for stage in STAGES if self.failures.get(stage)) or "none"

    @classmethod
    def of(cls, mode: str, records: Iterable[EvalRecord], *, planner: str | None = None, workers: str | None = None) -> ModeSummary:
        """The summary of `records` (all of one mode; of one planner and workers' model when those are given)."""
        records = list(records)
        usage = sum((r.usage for r in records), Usage())
        n = len(records)
        ok = sum(r.success for r in records)
        failures = {s: sum(1 for r in records if r.stage == s) for s in STAGES}
        wall = sum(r.wall_time for r in records)
        drafted = [r for r in records if r.first_draft_valid is not None]
        valid = sum(1 for r in drafted if r.first_draft_valid)
        repairs = sum(r.repairs for r in drafted)
        priced = usage.cost_known or usage.unpriced_calls < usage.model_calls or bool(usage.cost)
        return cls(
            mode=mode,
            planner=planner,
            workers=workers,
            runs=n,
            successes=ok,
            success_rate=ok / n if n else 0.0,
            model_calls=usage.model_calls,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost=usage.describe_cost(),
            cost_usd=usage.cost if priced else None,
            cost_known=usage.cost_known,
            wall_time=wall,
            mean_wall_time=wall / n if n else 0.0,
            mean_model_calls=usage.model_calls / n if n else 0.0,
            mean_tokens=usage.total_tokens / n if n else 0.0,
            failures=failures,
            planned_runs=len(drafted),
            first_draft_valid=valid,
            first_draft_rate=valid / len(drafted) if drafted else None,
            drafts=sum(r.drafts for r in drafted),
            repairs=repairs,
            mean_repairs=repairs / len(drafted) if drafted else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalReport(Record):
    """A whole evaluation: the suite, the set-up, every record, a summary per mode and, with planners compared, per planner.

    `planners` are the labels of the planners compared and `worker_models`
    the workers' models they were crossed with (both empty when one model
    played every role); `by_planner` then holds one `ModeSummary` per
    planner x workers' model x planning mode, and one per workers' model
    for ``single`` (which has no planner). `summaries` stay one per mode,
    over every record of it.
    """

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
    planners: list[str] = field(default_factory=list)
    worker_models: list[str] = field(default_factory=list)
    by_planner: list[ModeSummary] = field(default_factory=list)

    def summary(self, mode: str) -> ModeSummary:
        """The summary of one mode."""
        return next(s for s in self.summaries if s.mode == mode)

    def planner_summary(self, planner: str | None, mode: str, workers: str | None = None) -> ModeSummary:
        """The summary of one planner in one mode (`planner` None: ``single``), with the first workers' model unless told."""
        workers = workers if workers is not None else (self.worker_models[0] if self.worker_models else None)
        return next(s for s in self.by_planner if (s.planner, s.mode, s.workers) == (planner, mode, workers))


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
