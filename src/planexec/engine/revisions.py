"""The monitor: what a run does between plan versions, after a failure or once its steps end.

Owns `Monitor`, the part of a `Run` (in `execution`) that replans and
joins. A replan is asked for by a step's ``replan`` failure action, by a
success check that failed (when the engine has a replanner), or by the
joiner. The steps still running are let finish, then the engine's
`Replanner` writes the steps still to do; the next version keeps every
finished step settled (never run again), and the run goes on in the same
event stream. It is bounded: at most `Engine.max_replans` replans, and a
revision whose remaining steps hash like ones already tried stops the run
(rule ``replan_loop``) instead of looping. Every version, its reason, its
diff and the records it superseded are kept. Once all steps end, the
`Joiner` (if any) finishes with an answer or asks for a replan. Whatever
goes wrong ends the run with status ``failed`` and a typed `ErrorInfo`.
Imports `replanning`, `joiner`, `plan_diff`, `results`, `events`,
`validation`, `errors` and `usage`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from planexec.engine.events import (
    ApprovalDecided,
    ApprovalRequested,
    JoinerDecided,
    PlanRevised,
    ReplanStarted,
    RollbackFinished,
    RollbackStarted,
)
from planexec.engine.join import JoinContext, JoinDecision, JoinerError
from planexec.engine.replan import ReplanContext, Revision, revised_plan
from planexec.engine.results import ErrorInfo, PlanVersion, ReplanRequest, RunStatus, StepState
from planexec.errors import PlanningError, PlanParseError, PlanValidationError
from planexec.plan.diff import PlanDiff, diff_plans, remaining_hash
from planexec.plan.model import Plan
from planexec.plan.validation import check_plan
from planexec.usage import Usage

if TYPE_CHECKING:
    from planexec.engine.engine import Engine

__all__ = ["Monitor"]

REPLAN_TASK = "<replanner>"  # keys of the monitor's tasks among a run's tasks (no step id looks like them)
JOIN_TASK = "<joiner>"


class Monitor:
    """Replanning and joining for a `Run`; see the module docstring."""

    engine: Engine
    plan: Plan
    records: dict[str, Any]
    _tasks: dict[str, asyncio.Task[Any]]
    _status: RunStatus

    def _init_monitor(self) -> None:
        self._pending: ReplanRequest | None = None  # a replan asked for, served once running steps end
        self._replans = 0
        self._tried: set[str] = set()  # remaining-steps hashes already tried
        self._versions: list[PlanVersion] = []
        self._superseded_usage = Usage()
        self._joined: JoinDecision | None = None
        self._error: ErrorInfo | None = None

    # --- asking --------------------------------------------------------------

    def _request_replan(self, request: ReplanRequest) -> bool:
        """Queue a replan when the engine can serve one; False when it cannot (the run then ends asking)."""
        if self.engine.replanner is None:
            return False
        if self._pending is None:
            self._pending = request
        self._done.set()  # type: ignore[attr-defined]
        return True

    def _stop(self, rule: str, message: str, replan: ReplanRequest | None = None) -> None:
        """End the run as ``failed`` with a typed error."""
        self._error = ErrorInfo(rule=rule, type=_ERROR_TYPES.get(rule, "RunError"), message=message)
        self._end(RunStatus.FAILED, message, replan)  # type: ignore[attr-defined]

    # --- between versions -----------------------------------------------------

    async def _between_versions(self) -> bool:
        """After the steps stopped: replan or join. True when the run goes on with a new version."""
        if self._status is not RunStatus.RUNNING:
            return False
        request = self._pending
        if request is None:
            if self.engine.joiner is None or self._open:  # type: ignore[attr-defined]
                return False
            request = await self._join()
            if request is None:
                return False
            if self.engine.replanner is None:
                self._end(RunStatus.REPLAN_REQUESTED, request.reason, request)  # type: ignore[attr-defined]
                return False
        await self._settle()
        if self._status is not RunStatus.RUNNING:
            return False
        return await self._revise(request)

    async def _settle(self) -> None:
        """Wait for the steps still running (and a plan still streaming) to end."""
        running = [t for k, t in self._tasks.items() if not t.done() and k not in self._abandoned]  # type: ignore[attr-defined]
        if running:
            await asyncio.wait(running)

    async def _bounded(self, key: str, coro: Any, *, timeout: float | bool | None = True) -> tuple[Any, BaseException | None, bool]:
        """Run the replanner's or joiner's call as a task `cancel()` can stop: (result, error, cancelled).

        Bounded by the engine's default timeout, unless `timeout` says otherwise (None: a person, no deadline).
        """
        limit = self.engine.default_timeout if timeout is True else timeout
        task = self._tasks[key] = asyncio.get_running_loop().create_task(coro)
        try:
            done, _ = await asyncio.wait({task}, timeout=limit)
        finally:
            self._tasks.pop(key, None)
        if not done:
            task.cancel()
            return None, TimeoutError(f"no answer within {limit:g}s"), False
        if task.cancelled():
            return None, None, True
        return (None, task.exception(), False) if task.exception() is not None else (task.result(), None, False)

    async def _join(self) -> ReplanRequest | None:
        """Ask the joiner; a replan request, or None (finished, or the run stopped)."""
        outputs = {sid: r.output.value for sid, r in self.records.items() if r.output is not None}
        failures = {sid: self._failure_text(sid) for sid, r in self.records.items() if r.state is not StepState.SUCCEEDED}  # type: ignore[attr-defined]
        context = JoinContext(goal=self.plan.goal, plan=self.plan, outputs=outputs, failures=failures)
        decision, error, cancelled = await self._bounded(JOIN_TASK, self.engine.joiner.join(context))  # type: ignore[union-attr]
        if cancelled:
            return None
        if error is not None:
            if isinstance(error, JoinerError):
                self.add_overhead("joiner", error.usage)  # type: ignore[attr-defined]
                self._stop("joiner", f"joiner: {error}")
            else:
                self._stop("joiner", f"the joiner failed: {type(error).__name__}: {error}")
            return None
        if not isinstance(decision, JoinDecision):
            self._stop("joiner", f"the joiner returned {type(decision).__name__}, not a JoinDecision")
            return None
        self.add_overhead("joiner", decision.usage)  # type: ignore[attr-defined]
        self._emit(JoinerDecided, action=decision.action, reason=decision.reason, usage=decision.usage)  # type: ignore[attr-defined]
        if decision.action == "finish":
            self._joined = decision
            return None
        return ReplanRequest(reason=f"the joiner asked for a new plan: {decision.reason}", source="joiner")

    async def _revise(self, request: ReplanRequest) -> bool:
        """Ask the replanner for the rest of the plan and go on with it; False when the run stops instead."""
        limit = self.engine.max_replans
        if self._replans >= limit:
            self._stop("replan_limit", f"a replan was needed but all {limit} allowed were used; {request.reason}", request)
            return False
        plan = self.plan
        done = {sid: r.output.value for sid, r in self.records.items() if r.state is StepState.SUCCEEDED and r.output is not None}
        failures = {
            sid: self._failure_text(sid)
            for sid, r in self.records.items()
            if r.state in (StepState.FAILED, StepState.SKIPPED, StepState.CANCELLED)
        }  # type: ignore[attr-defined]
        self._tried.add(remaining_hash([s for s in plan.steps if s.step_id not in done], done))
        if not self._versions:
            self._versions.append(PlanVersion(version=plan.version, plan=plan))
        context = ReplanContext(goal=plan.goal, plan=plan, done=done, failures=failures, request=request, attempt=self._replans + 1)
        self._emit(ReplanStarted, version=plan.version, reason=request.reason, source=request.source, step_id=request.step_id)  # type: ignore[attr-defined]
        revision, error, cancelled = await self._bounded(REPLAN_TASK, self.engine.replanner.replan(context))  # type: ignore[union-attr]
        self._replans += 1
        if cancelled:
            return False
        if isinstance(error, PlanningError):
            self._planning = self._planning + error.usage  # type: ignore[has-type]
            self._stop("replan_invalid", f"the replanner wrote no valid revision of v{plan.version}: {error}", request)
            return False
        if error is not None:
            self._stop("replanner", f"the replanner failed: {type(error).__name__}: {error}", request)
            return False
        if not isinstance(revision, Revision):
            self._stop("replanner", f"the replanner returned {type(revision).__name__}, not a Revision", request)
            return False
        version = plan.version + 1
        for d in revision.drafts:
            self.record_draft(attempt=d.attempt, model=d.model, problems=d.problems, usage=d.usage, wall_time=d.wall_time, version=version)  # type: ignore[attr-defined]
        if not revision.drafts:
            self._planning = self._planning + revision.usage  # type: ignore[has-type]
        try:
            new = revised_plan(plan, revision.steps, list(done))
            check_plan(new, self.engine.registry)
        except (PlanParseError, PlanValidationError) as exc:
            self._stop("replan_invalid", f"the revision of v{plan.version} cannot run: {exc}", request)
            return False
        fingerprint = remaining_hash(revision.steps, done)
        if fingerprint in self._tried:
            self._stop(
                "replan_loop", f"revision v{version} repeats steps already tried ({fingerprint[:19]}); stopped instead of looping", request
            )
            return False
        self._tried.add(fingerprint)
        diff = diff_plans(plan, new)
        if not await self._approve_version(new, diff):
            return False
        self._adopt(new, set(done))
        self._versions.append(
            PlanVersion(version=version, plan=new, reason=request.reason, diff=diff, remaining_hash=fingerprint, usage=revision.usage)
        )
        self._pending = None
        self._emit(  # type: ignore[attr-defined]
            PlanRevised,
            version=version,
            revises=plan.version,
            content_hash=new.content_hash,
            reason=request.reason,
            diff=diff,
            step_ids=new.step_ids,
            usage=revision.usage,
            plan=new,
        )
        self._done.clear()  # type: ignore[attr-defined]
        self._launch_ready()  # type: ignore[attr-defined]
        return True

    async def _approve_version(self, plan: Plan, diff: PlanDiff | None) -> bool:
        """With a plan approver, run only a version whose exact content was approved; False (the run stopped) if refused."""
        approver = self.engine.plan_approver
        if approver is None:
            return True
        self._emit(ApprovalRequested, step_id=None, content_hash=plan.content_hash, plan_version=plan.version)  # type: ignore[attr-defined]
        key = f"<approval v{plan.version}>"
        approved, error, cancelled = await self._bounded(key, approver.approve_plan(self.run_id, plan, diff), timeout=None)  # type: ignore[attr-defined]
        if cancelled:
            return False
        self._emit(ApprovalDecided, step_id=None, content_hash=plan.content_hash, approved=approved is True and error is None)  # type: ignore[attr-defined]
        if error is not None:
            self._stop("plan_rejected", f"the plan approver failed on v{plan.version}: {type(error).__name__}: {error}")
            return False
        if approved is not True:
            what = "revision" if diff is not None else "plan"
            self._stop("plan_rejected", f"the {what} v{plan.version} ({plan.content_hash[:19]}) was not approved; nothing of it ran")
            return False
        return True

    async def _rollback(self) -> Any:
        """After an abort that followed side effects, run the plan's rollback steps as a sub-run; its result, or None."""
        rollback = self.plan.rollback_plan
        if rollback is None or self._status is not RunStatus.ABORTED:
            return None
        steps = {s.step_id: s for s in self.plan.steps}
        effects = [sid for sid, r in self.records.items() if r.state is StepState.SUCCEEDED and not self.engine.is_idempotent(steps[sid])]
        if not effects:
            return None
        if isinstance(rollback, str):  # the name of a saved plan in the store's library
            try:
                saved = self.engine.store.template(rollback).plan if self.engine.store is not None else None
                rb_plan = Plan.from_data(saved) if saved is not None else None
            except Exception as exc:  # a missing template is recorded, not raised
                rb_plan, why = None, f"{type(exc).__name__}: {exc}"
            else:
                why = "the run has no store to find it in"
            if rb_plan is None:
                self._emit(RollbackStarted, after=effects, step_ids=[])  # type: ignore[attr-defined]
                self._emit(RollbackFinished, status=RunStatus.FAILED, reason=f"rollback plan {rollback!r} not found: {why}")  # type: ignore[attr-defined]
                return None
            rb_steps, goal = rb_plan.steps, rb_plan.goal
        else:
            rb_steps, goal = rollback.steps, rollback.goal
        if not rb_steps:
            return None
        from planexec.engine.engine import Engine

        plan = Plan(plan_id=f"{self.plan.plan_id}-rollback", goal=goal or f"undo: {self.plan.goal}", steps=rb_steps)
        engine = Engine(
            self.engine.registry, runner=self.engine.runner, default_timeout=self.engine.default_timeout,
            approver=self.engine.approver, cancel_grace=self.engine.cancel_grace,
        )  # fmt: skip
        self._emit(RollbackStarted, after=effects, step_ids=plan.step_ids)  # type: ignore[attr-defined]
        try:
            child = engine.start(plan, run_id=f"{self.run_id}/rollback")
        except PlanValidationError as exc:
            self._emit(RollbackFinished, status=RunStatus.FAILED, reason=f"the rollback plan is invalid: {exc}")  # type: ignore[attr-defined]
            return None
        child.subscribe(lambda ev: self.relay("rollback", self.depth + 1, ev))  # type: ignore[attr-defined]
        result = await child.result()
        self._emit(RollbackFinished, status=result.status, reason=result.reason)  # type: ignore[attr-defined]
        return result

    def _adopt(self, new: Plan, kept: set[str]) -> None:
        """Make `new` the run's plan: kept steps stay settled with their records and outputs; the rest start fresh."""
        dropped = {sid: r for sid, r in self.records.items() if sid not in kept}
        self._versions[-1].superseded = dropped
        self._superseded_usage = sum((r.usage for r in dropped.values()), self._superseded_usage)
        previous = self.records
        self._load_plan(new, kept=kept)  # type: ignore[attr-defined]
        for sid in kept:
            self.records[sid] = previous[sid]

    def plan_versions(self) -> list[PlanVersion]:
        """Every version of the plan so far, the first first."""
        return list(self._versions) or [PlanVersion(version=self.plan.version, plan=self.plan)]


_ERROR_TYPES = {
    "replan_limit": "ReplanLimitError",
    "replan_loop": "ReplanLoopError",
    "replan_invalid": "PlanningError",
    "replanner": "ReplannerError",
    "joiner": "JoinerError",
    "budget": "BudgetExceededError",
    "plan_rejected": "PlanRejectedError",
}
