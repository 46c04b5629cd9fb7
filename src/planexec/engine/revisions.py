"""Plan revisions: what a run does between plan versions, after a failure, once its steps end, or after an abort.

Owns `Revisions`, the collaborator of a `Run` that replans, joins, approves
plan versions and rolls back, on the run's `RunState` and through its
`RunControl`. A replan is asked for by a step's ``replan`` failure action,
by a success check that failed (when the engine has a replanner), or by the
joiner. The steps still running are let finish, then the engine's
`Replanner` writes the steps still to do; the next version keeps every
finished step settled (never run again), and the run goes on in the same
event stream. It is bounded: at most `max_replans` replans, and a revision
whose remaining steps hash like ones already tried stops the run (rule
``replan_loop``) instead of looping. Every version, its reason, its diff
and the records it superseded are kept. Once all steps end, the `Joiner`
(if any) finishes with an answer or asks for a replan. Whatever goes wrong
ends the run with status ``failed`` and a typed `ErrorInfo`. After an
abort that followed side effects, the plan's rollback runs as a sub-run
the engine (the `Host`) starts.
A person may answer a waiting version with an edit (`approval.PlanEdit`):
it is checked against the registry, recorded as the next version (a
`PlanRevised`; nothing of the waiting one ran) and approved like any.
Imports `engine.approval`, `engine.config`, `engine.events`, `engine.join`, `engine.replan`,
`engine.results`, `engine.state`, `plan`, `usage` and `errors`; never the
run or the engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from planexec.engine.approval import PlanEdit
from planexec.engine.config import Host
from planexec.engine.events import (
    ApprovalDecided,
    ApprovalRequested,
    JoinerDecided,
    PlanRevised,
    ReplanStarted,
    RollbackFinished,
    RollbackStarted,
)
from planexec.engine.join import JoinContext, JoinDecision, Joiner, JoinerError
from planexec.engine.replan import ReplanContext, Revision, mark_untrusted, revised_plan
from planexec.engine.results import PlanVersion, ReplanRequest, RunResult, RunStatus, StepState
from planexec.engine.state import RunControl, RunState
from planexec.errors import PlanningError, PlanParseError, PlanValidationError
from planexec.plan.diff import PlanDiff, diff_plans, remaining_hash
from planexec.plan.model import Plan
from planexec.plan.schedule import earlier_times
from planexec.plan.validation import check_plan
from planexec.usage import Usage
from planexec.workers.grants import side_effects, widening

__all__ = ["Revisions"]

REPLAN_TASK = "<replanner>"  # keys of the revisions' tasks among a run's tasks (no step id looks like them)
JOIN_TASK = "<joiner>"


class Revisions:
    """Replanning, joining, plan approval and rollback for one run; see the module docstring."""

    def __init__(self, state: RunState, run: RunControl, host: Host) -> None:
        self._state = state
        self._run = run
        self._host = host
        self._config = host.config
        self._replans = 0
        self._tried: set[str] = set()  # remaining-steps hashes already tried
        self._read_untrusted = False  # the last replanner was shown untrusted output (its revision's side effects need a person)
        self._versions: list[PlanVersion] = []
        self.superseded_usage = Usage()  # what the steps of versions replaced had used
        self.joined: JoinDecision | None = None  # the joiner finished the run with this answer

    def resume_from(self, versions: list[PlanVersion], replan: ReplanRequest | None) -> None:
        """Go on from a stopped run's versions; a replan it asked for and never got is asked for again."""
        if replan is not None:
            self._state.pending = replan if self._config.replanner is not None else None
        if len(versions) > 1:
            self._versions = list(versions)
            self._replans = len(versions) - 1

    # --- asking --------------------------------------------------------------

    def request(self, request: ReplanRequest) -> bool:
        """Queue a replan when the engine can serve one; False when it cannot (the run then ends asking)."""
        if self._config.replanner is None:
            return False
        state = self._state
        if state.pending is None:
            state.pending = request
        state.done.set()
        return True

    # --- between versions -----------------------------------------------------

    async def between_versions(self) -> bool:
        """After the steps stopped: replan or join. True when the run goes on with a new version."""
        state = self._state
        if state.status is not RunStatus.RUNNING:
            return False
        request = state.pending
        if request is None:
            joiner = self._config.joiner
            if joiner is None or state.open or not self._join_needed(joiner):
                return False
            if state.draining is not None:  # stopping between steps: the joiner's decision is for whoever resumes the run
                self._run._hand_back()
                return False
            request = await self._join(joiner)
            if request is None:
                return False
            if self._config.replanner is None:
                self._run._end(RunStatus.REPLAN_REQUESTED, request.reason, request)
                return False
        if state.draining is not None:  # stopping between steps: no new version starts here
            self._run._hand_back()
            return False
        await self._settle()
        if state.status is not RunStatus.RUNNING:
            return False
        return await self._revise(request)

    def _join_needed(self, joiner: Joiner) -> bool:
        """Whether asking the joiner can change the outcome: a step did not succeed, the plan was revised, or it leaves its answer to assemble.

        A joiner that says ``always`` (a `FunctionJoiner`: it costs no model
        call) is asked every time. Otherwise, when every step succeeded and
        the plan names its answer (`answer_step`: the planner said that
        step's output answers the goal as it is), that output is the answer
        and the call is saved.
        """
        if getattr(joiner, "always", True):
            return True
        state = self._state
        if any(r.state is not StepState.SUCCEEDED for r in state.records.values()):
            return True
        if state.plan.revises is not None:  # a revision's results answer a replan decision: the joiner judges them
            return True
        answer = state.plan.answer_step
        return answer is None or answer not in state.outputs

    async def _settle(self) -> None:
        """Wait for the steps still running (and a plan still streaming) to end."""
        state = self._state
        running = [t for k, t in state.tasks.items() if not t.done() and k not in state.abandoned]
        if running:
            await asyncio.wait(running)

    async def _bounded(self, key: str, coro: Any, *, timeout: float | bool | None = True) -> tuple[Any, BaseException | None, bool]:
        """Run the replanner's or joiner's call as a task `cancel()` can stop: (result, error, cancelled).

        Bounded by the engine's default timeout, unless `timeout` says otherwise (None: a person, no deadline).
        """
        limit = self._config.default_timeout if timeout is True else timeout
        tasks = self._state.tasks
        task = tasks[key] = asyncio.get_running_loop().create_task(coro)
        try:
            done, _ = await asyncio.wait({task}, timeout=limit)
        finally:
            tasks.pop(key, None)
        if not done:
            task.cancel()
            return None, TimeoutError(f"no answer within {limit:g}s"), False
        if task.cancelled():
            return None, None, True
        return (None, task.exception(), False) if task.exception() is not None else (task.result(), None, False)

    async def _join(self, joiner: Joiner) -> ReplanRequest | None:
        """Ask the joiner; a replan request, or None (finished, or the run stopped)."""
        state, run = self._state, self._run
        outputs = {sid: r.output.value for sid, r in state.records.items() if r.output is not None}
        failures = {sid: state.failure_text(sid) for sid, r in state.records.items() if r.state is not StepState.SUCCEEDED}
        context = JoinContext(goal=state.plan.goal, plan=state.plan, outputs=outputs, failures=failures)
        decision, error, cancelled = await self._bounded(JOIN_TASK, joiner.join(context))
        if cancelled:
            return None
        if error is not None:
            if isinstance(error, JoinerError):
                run.add_overhead("joiner", error.usage)
                run._stop("joiner", f"joiner: {error}")
            else:
                run._stop("joiner", f"the joiner failed: {type(error).__name__}: {error}")
            return None
        if not isinstance(decision, JoinDecision):
            run._stop("joiner", f"the joiner returned {type(decision).__name__}, not a JoinDecision")
            return None
        run.add_overhead("joiner", decision.usage)
        run._emit(JoinerDecided, action=decision.action, reason=decision.reason, usage=decision.usage)
        if decision.action == "finish":
            self.joined = decision
            return None
        return ReplanRequest(reason=f"the joiner asked for a new plan: {decision.reason}", source="joiner")

    async def _revise(self, request: ReplanRequest) -> bool:
        """Ask the replanner for the rest of the plan and go on with it; False when the run stops instead."""
        state, run, replanner = self._state, self._run, self._config.replanner
        limit = self._config.max_replans
        if replanner is None:  # asked for only when there is one (see `request`); a resumed run checks it too
            return False
        if self._replans >= limit:
            run._stop("replan_limit", f"a replan was needed but all {limit} allowed were used; {request.reason}", request)
            return False
        plan = state.plan
        done = {sid: r.output.value for sid, r in state.records.items() if r.state is StepState.SUCCEEDED and r.output is not None}
        failures = {
            sid: state.failure_text(sid)
            for sid, r in state.records.items()
            if r.state in (StepState.FAILED, StepState.SKIPPED, StepState.CANCELLED)
        }
        self._tried.add(remaining_hash([s for s in plan.steps if s.step_id not in done], done))
        if not self._versions:
            self._versions.append(PlanVersion(version=plan.version, plan=plan))
        untrusted = {
            sid: [s.label() for s in r.output.provenance.untrusted_origins()]
            for sid, r in state.records.items()
            if sid in done and r.output is not None and r.output.untrusted
        }
        context = ReplanContext(
            goal=plan.goal, plan=plan, done=done, failures=failures, request=request, attempt=self._replans + 1, untrusted=untrusted
        )
        run._emit(ReplanStarted, version=plan.version, reason=request.reason, source=request.source, step_id=request.step_id)
        revision, error, cancelled = await self._bounded(REPLAN_TASK, replanner.replan(context))
        self._replans += 1
        if cancelled:
            return False
        if isinstance(error, PlanningError):
            if isinstance(error.usage, Usage):  # `errors` knows no `Usage` type: it says `object`
                state.planning = state.planning + error.usage
            run._stop("replan_invalid", f"the replanner wrote no valid revision of v{plan.version}: {error}", request)
            return False
        if error is not None:
            run._stop("replanner", f"the replanner failed: {type(error).__name__}: {error}", request)
            return False
        if not isinstance(revision, Revision):
            run._stop("replanner", f"the replanner returned {type(revision).__name__}, not a Revision", request)
            return False
        self._read_untrusted = bool(untrusted)  # what it read decides whether its side effects need a person
        if self._config.enforce_contract:  # a step whose words copy untrusted values the replanner saw runs quarantined
            revision = dataclasses.replace(revision, steps=mark_untrusted(list(revision.steps), context))
        return await self._go_on(plan, revision, done, request)

    async def _go_on(self, plan: Plan, revision: Revision, done: dict[str, Any], request: ReplanRequest) -> bool:
        """Check the revision, have it approved, and make it the run's plan; False when the run stops instead."""
        state, run = self._state, self._run
        version = plan.version + 1
        for d in revision.drafts:
            run.record_draft(**d.event_fields(), version=version)
        if not revision.drafts:
            state.planning = state.planning + revision.usage
        try:
            new = revised_plan(plan, revision.steps, list(done))
            check_plan(new, self._host.registry)
        except (PlanParseError, PlanValidationError) as exc:
            run._stop("replan_invalid", f"the revision of v{plan.version} cannot run: {exc}", request)
            return False
        fingerprint = remaining_hash(revision.steps, done)
        if fingerprint in self._tried:
            run._stop(
                "replan_loop", f"revision v{version} repeats steps already tried ({fingerprint[:19]}); stopped instead of looping", request
            )
            return False
        self._tried.add(fingerprint)
        diff = diff_plans(plan, new)
        if not await self.approve_version(new, diff):
            return False
        self._adopt(new, set(done))
        self._versions.append(
            PlanVersion(version=version, plan=new, reason=request.reason, diff=diff, remaining_hash=fingerprint, usage=revision.usage)
        )
        state.pending = None
        run._emit(
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
        state.done.clear()
        run._launch_ready()
        return True

    async def approve_version(self, plan: Plan, diff: PlanDiff | None) -> bool:
        """With a plan approver, run only a version whose exact content was approved; False (the run stopped) if refused.

        Replans are untrusted (the replanner read the run's outputs): a
        revision that grants more than the version it revises (a new tool, a
        wider path, a new recipient) runs only when a person approves it;
        without a plan approver that is a person, the run stops with rule
        ``replan_widens``; so does one that would start a step sooner than the
        time (`not_before`) the revised version gave the same work. So does a revision that adds side effects when its
        replanner was shown untrusted output (rule ``replan_effects``). A
        revision that only narrows goes on.
        """
        approver = self._config.plan_approver
        if diff is not None and self._config.enforce_contract:
            changed = [*diff.added, *diff.changed]
            # sooner than a person's time is wider too: a replanner may not drop or advance a step's not_before
            wider = widening(self._state.plan, plan, self._host.registry, changed) + earlier_times(self._state.plan, plan, changed)
            if wider and not getattr(approver, "person", False):
                self._run._stop(
                    "replan_widens",
                    f"revision v{plan.version} grants more than v{self._state.plan.version} did, and no person is here to approve it: "
                    + "; ".join(wider),
                )
                return False
            acting = side_effects(plan, self._host.registry, [*diff.added, *diff.changed]) if self._read_untrusted else []
            if acting and not getattr(approver, "person", False):
                self._run._stop(
                    "replan_effects",
                    f"revision v{plan.version} adds steps that change things, and no person is here to approve it (--yes and "
                    "policies never approve a revision's side effects: its replanner read the run's outputs): " + "; ".join(acting),
                )
                return False
        if approver is None:
            return True
        run = self._run
        run._emit(ApprovalRequested, step_id=None, content_hash=plan.content_hash, plan_version=plan.version)
        key = f"<approval v{plan.version}>"
        approved, error, cancelled = await self._bounded(key, approver.approve_plan(self._state.run_id, plan, diff), timeout=None)
        if cancelled:
            return False
        run._emit(ApprovalDecided, step_id=None, content_hash=plan.content_hash, approved=approved is True and error is None)
        if error is not None:
            run._stop("plan_rejected", f"the plan approver failed on v{plan.version}: {type(error).__name__}: {error}")
            return False
        if isinstance(approved, PlanEdit):  # a person answered with an edit: it becomes the next version, approved like any
            return await self._take_edit(plan, approved)
        if approved is not True:
            what = "revision" if diff is not None else "plan"
            run._stop("plan_rejected", f"the {what} v{plan.version} ({plan.content_hash[:19]}) was not approved; nothing of it ran")
            return False
        return True

    async def _take_edit(self, plan: Plan, edit: PlanEdit) -> bool:
        """Check a person's edit of the waiting `plan` here, record it as the next version, then have it approved; False when it cannot run."""
        new, run = edit.plan, self._run
        who = f" by {edit.by}" if edit.by else ""
        if new.version != plan.version + 1 or new.revises != plan.version:
            run._stop(
                "plan_rejected",
                f"the edit{who} is v{new.version} revising v{new.revises}, not the next version of v{plan.version}; nothing ran",
            )
            return False
        try:
            check_plan(new, self._host.registry)
        except PlanValidationError as exc:
            run._stop("plan_rejected", f"the edit v{new.version}{who} cannot run here: {exc}; nothing ran")
            return False
        diff = diff_plans(plan, new)
        if not self._versions:
            self._versions.append(PlanVersion(version=plan.version, plan=plan))
        self._adopt(new, set())  # nothing of the waiting version ran
        self._versions.append(PlanVersion(version=new.version, plan=new, reason=edit.reason, diff=diff))
        run._emit(PlanRevised, version=new.version, revises=plan.version, content_hash=new.content_hash, reason=edit.reason,
                  diff=diff, step_ids=new.step_ids, usage=Usage(), plan=new)  # fmt: skip
        return await self.approve_version(new, diff)

    # --- after an abort -------------------------------------------------------

    async def rollback(self) -> RunResult | None:
        """After an abort that followed side effects, run the plan's rollback steps as a sub-run; its result, or None."""
        state, run = self._state, self._run
        current = state.plan
        if current.rollback_plan is None or state.status not in (RunStatus.ABORTED, RunStatus.INCOMPLETE):
            return None
        effects = [
            sid
            for sid, r in state.records.items()
            if r.state is StepState.SUCCEEDED and not self._host.is_idempotent(state.steps[sid].on_worker(r.worker))
        ]
        if not effects:
            return None
        plan = self._rollback_plan(current, effects)
        if plan is None:
            return None
        run._emit(RollbackStarted, after=effects, step_ids=plan.step_ids)
        try:
            child = self._host.start_rollback(plan, run_id=f"{state.run_id}/rollback")
        except PlanValidationError as exc:
            run._emit(RollbackFinished, status=RunStatus.FAILED, reason=f"the rollback plan is invalid: {exc}")
            return None
        depth = run.depth + 1
        child.subscribe(lambda ev: run.relay("rollback", depth, ev))
        result = await child.result()
        run._emit(RollbackFinished, status=result.status, reason=result.reason)
        return result

    def _rollback_plan(self, current: Plan, effects: list[str]) -> Plan | None:
        """The rollback as a plan of its own (inline, or a saved plan of the store's library); None when there is nothing to run."""
        rollback = current.rollback_plan
        if isinstance(rollback, str):  # the name of a saved plan in the store's library
            store = self._config.store
            try:
                saved = store.template(rollback).plan if store is not None else None
                found = Plan.from_data(saved) if saved is not None else None
            except Exception as exc:  # a missing template is recorded, not raised
                found, why = None, f"{type(exc).__name__}: {exc}"
            else:
                why = "the run has no store to find it in"
            if found is None:
                self._run._emit(RollbackStarted, after=effects, step_ids=[])
                self._run._emit(RollbackFinished, status=RunStatus.FAILED, reason=f"rollback plan {rollback!r} not found: {why}")
                return None
            steps, goal = found.steps, found.goal
        elif rollback is not None:
            steps, goal = rollback.steps, rollback.goal
        else:
            return None
        if not steps:
            return None
        return Plan(plan_id=f"{current.plan_id}-rollback", goal=goal or f"undo: {current.goal}", steps=steps)

    def _adopt(self, new: Plan, kept: set[str]) -> None:
        """Make `new` the run's plan: kept steps stay settled with their records and outputs; the rest start fresh."""
        state = self._state
        dropped = {sid: r for sid, r in state.records.items() if sid not in kept}
        self._versions[-1].superseded = dropped
        self.superseded_usage = sum((r.usage for r in dropped.values()), self.superseded_usage)
        previous = state.records
        state.load_plan(new, kept=kept)
        for sid in kept:
            state.records[sid] = previous[sid]

    def plan_versions(self) -> list[PlanVersion]:
        """Every version of the plan so far, the first first."""
        state = self._state
        return list(self._versions) or [PlanVersion(version=state.plan.version, plan=state.plan)]
