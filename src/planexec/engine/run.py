"""One execution of a plan: the `Run` handle and the life of a run.

Owns `Run`: a step starts the moment its last dependency ends (the pure
`plan.scheduler.Scheduler` says which), within the global and per-worker
limits; a step with a cascade of models moves to its next model after a
failure a stronger model may not make (`engine.cascade`), and then failure
actions retry with exponential backoff and jitter, skip,
fall back to another worker, abort or request a replan; `cancel()` stops
the run and every step still ends in a recorded state. Every transition
becomes an event, kept and delivered by the run's `History`.

The run's state is one `RunState` (in `state`). Two collaborators work on
it and act on the run only through `RunControl`: `Attempts` (one attempt at
one step: inputs, deadline, worker, checks) and `Revisions` (replanning,
joining, plan approval, rollback). The run sees its engine only as a
`Host` (in `config`): settings, resolved collaborators and step rules.
Where a step runs is the `Runner`'s business.
Imports `engine.approval`, `engine.attempt`, `engine.cascade`, `engine.config`,
`engine.events`, `engine.history`, `engine.results`, `engine.resume`,
`engine.revisions`, `engine.state`, `engine.synthesis`, `plan`, `usage`
and `workers.io`; never `engine.engine`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from functools import partial
from typing import Any

from planexec.engine.approval import ask_approval, step_hash
from planexec.engine.attempt import CURRENT_STEP, Attempts
from planexec.engine.cascade import ByDifficulty, Cascades, FirstOf
from planexec.engine.config import Host, Subscriber
from planexec.engine.events import (
    ApprovalDecided,
    ApprovalRequested,
    PlanDrafted,
    RunFinished,
    RunResumed,
    RunStarted,
    StepCancelled,
    StepFailed,
    StepReady,
    StepRerouted,
    StepRetried,
    StepSkipped,
    StepSucceeded,
    SubRunEvent,
    utcnow,
)
from planexec.engine.history import History
from planexec.engine.results import (
    CONTRACT_STOPS,
    ErrorInfo,
    PlanVersion,
    ReplanRequest,
    RunResult,
    RunStatus,
    StepRecord,
    StepState,
    refused_by_rule,
)
from planexec.engine.resume import Resumption
from planexec.engine.revisions import Revisions
from planexec.engine.state import ZERO, RunControl, RunState, final_action, run_error, update_record
from planexec.engine.synthesis import answer_inputs, assemble, default_answer
from planexec.engine.timetable import Timetable
from planexec.plan.model import Plan, Step
from planexec.usage import Usage
from planexec.workers.io import Output, Provenance, WorkResult, derive_untrusted
from planexec.workers.isolated import ISOLATION, Isolation

__all__ = ["Run", "Subscriber"]

log = logging.getLogger("planexec.engine")

_DEFAULT_ROUTER = FirstOf([ByDifficulty()])  # a step declared hard starts on its cascade's strongest model, any other on its first


class Run:
    """One execution of a plan: its records, its events, and control over it.

    `host` is the engine that started it. `drafts` (the planner's, as
    `PlanDrafted` fields) are recorded after `RunStarted`; `setup` is
    recorded in it; a `resumption` continues a stopped run instead.
    """

    def __init__(
        self,
        host: Host,
        plan: Plan,
        run_id: str,
        *,
        streaming: bool = False,
        resumption: Resumption | None = None,
        setup: Mapping[str, Any] | None = None,
        drafts: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.engine = host
        self.run_id = run_id
        self.state = state = RunState(run_id, plan, streaming=streaming)
        self.setup: dict[str, Any] = dict(setup or {})  # recorded in RunStarted, for whoever resumes the run
        self._history = History(run_id, host.subscribers)
        self.history: list[Any] = self._history.events  # every event so far, the first first
        self._emit: Callable[..., None] = self._history.emit  # bound once: the hot path emits about five events a step
        self._drafts = [dict(d) for d in drafts]
        # the collaborators reach the run through a weak proxy: the run owns them, and a strong reference back
        # would make a cycle that keeps every record and output alive until the cyclic GC runs (+25 MiB after
        # 10,000 steps in benchmarks/engine_overhead.py); nothing calls them once the run is gone
        me: RunControl = self  # checked here: the run is what its collaborators expect
        control: RunControl = weakref.proxy(me)
        self._attempts = Attempts(state, control, host)
        self._revisions = Revisions(state, control, host)
        self._timetable = Timetable(state, control, host)
        config = host.config
        router = config.model_router if config.model_router is not None else _DEFAULT_ROUTER
        self._cascades = Cascades(state, control, cascades=config.cascades, router=router, workers=host.registry.workers)
        self._synth_task: asyncio.Task[Any] | None = None
        self._task: asyncio.Task[RunResult] | None = None
        self._started_at = utcnow()
        self._t0 = time.perf_counter()
        # a run started inside another run's step (a sub-team) is one level below it
        parent = CURRENT_STEP.get()
        self.depth = parent[0].depth + 1 if parent is not None else 0
        self.parent: tuple[str, str] | None = (parent[0].run_id, parent[1]) if parent is not None else None
        self._spent = ZERO  # what the run has used so far, kept only under a budget
        self._approval: dict[tuple[str, str], bool] = {}  # (worker, action) -> its tool asks for a person's approval
        self._resumption = resumption
        if resumption is not None:
            self._resume_from(resumption)

    def _resume_from(self, r: Resumption) -> None:
        """Start from a stopped run's state: ended steps settled, cut-off ones re-run or held."""
        self.state.resume_from(r)
        self._history.seq_base = r.next_seq
        if r.started_at is not None:
            self._started_at = r.started_at
        self._revisions.resume_from(r.versions, r.replan)

    def launch(self, *, name: str) -> None:
        """Start the run's task in the running event loop (the engine calls this once)."""
        config = self.engine.config
        # the run's bounds reach its isolated tools' child processes: every step task copies this context
        context = contextvars.copy_context()
        context.run(ISOLATION.set, Isolation(max_output_bytes=config.max_output_bytes or None, cancel_grace=config.cancel_grace))
        self._task = asyncio.get_running_loop().create_task(self._main(), name=name, context=context)

    # --- the public handle -------------------------------------------------

    @property
    def plan(self) -> Plan:
        """The version of the plan in force."""
        return self.state.plan

    @property
    def records(self) -> dict[str, StepRecord]:
        """Each step's record so far, by step id."""
        return self.state.records

    @property
    def status(self) -> RunStatus:
        """RUNNING until the run ends, then how it ended."""
        state = self.state
        return state.status if state.result is None else state.result.status

    def subscribe(self, callback: Subscriber) -> None:
        """Call `callback(event)` for every later event (exceptions in it are logged, not raised)."""
        self._history.subscribe(callback)

    def events(self) -> AsyncIterator[Any]:
        """Every event of the run from the first, then live ones, ending with `RunFinished`."""
        return self._history.follow()

    def cancel(self, reason: str = "cancelled from outside") -> None:
        """Stop the run: running steps are cancelled, waiting ones never start; all are recorded."""
        self._end(RunStatus.CANCELLED, reason)

    def cancel_between_steps(self, reason: str = "cancelled from outside") -> None:
        """Stop the run at its next step boundary: no step starts from now on, and the run is cancelled
        (as `cancel`) as soon as none of its steps runs; at once when none does. A worker that hands a run
        back uses this, so nothing is cut off mid-step."""
        state = self.state
        if state.status is not RunStatus.RUNNING or state.draining is not None:
            return
        state.draining = reason
        self._cancel_if_quiet()

    def _hand_back(self) -> None:
        """A run stopping between steps that owes a new version (a replan, a joiner's decision): cancelled now,
        with the reason it stops for, though its steps have ended; whoever resumes it serves what is owed."""
        self._end(RunStatus.CANCELLED, self.state.draining or "cancelled", owed=True)

    def _cancel_if_quiet(self) -> None:
        """Cancel a draining run when none of its steps runs (in the next turn: the caller may be a step's task)."""
        reason = self.state.draining
        if reason is not None and not any(r.state is StepState.RUNNING for r in self.state.records.values()):
            asyncio.get_running_loop().call_soon(self.cancel, reason)

    async def result(self) -> RunResult:
        """Wait for the run to end and return its result."""
        assert self._task is not None, "the run was not launched"
        return await asyncio.shield(self._task)

    def plan_versions(self) -> list[PlanVersion]:
        """Every version of the plan so far, the first first."""
        return self._revisions.plan_versions()

    def record_draft(self, **fields: Any) -> None:
        """Record one of the planner's drafts (a `PlanDrafted` event); its usage counts toward the run's."""
        self.state.planning = self.state.planning + fields["usage"]
        self._emit(PlanDrafted, **fields)
        self._charge(fields["usage"])

    def add_overhead(self, role: str, usage: Usage) -> None:
        """Count work done around the run (a router's or a joiner's model calls) under `role`."""
        overhead = self.state.overhead
        overhead[role] = overhead.get(role, ZERO) + usage
        self._charge(usage)

    def relay(self, step_id: str, depth: int, event: Any) -> None:
        """Put an event of a sub-run (a sub-team working on `step_id`) into this run's stream."""
        self._emit(SubRunEvent, step_id=step_id, depth=depth, event=event.to_dict())

    # --- the run -----------------------------------------------------------

    async def _main(self) -> RunResult:
        state, plan, r = self.state, self.state.plan, self._resumption
        if r is not None:
            self._emit(RunResumed, plan_version=plan.version, kept=r.kept, rerun=r.rerun, held=r.held)
        else:
            self._emit(
                RunStarted,
                plan_id=plan.plan_id,
                plan_version=plan.version,
                content_hash=plan.content_hash,
                goal=plan.goal,
                step_ids=plan.step_ids,
                setup=self.setup,
            )
        for draft in self._drafts:
            self.record_draft(**draft)
        try:
            if state.pending is not None:  # a resumed run owes a replan: serve it before anything else
                state.done.set()
            elif state.open or await self._revisions.approve_version(plan, None):
                self._launch_ready()
            await state.done.wait()
            while await self._revisions.between_versions():  # a new version of the plan goes on in this run
                await state.done.wait()
            await self._finish()
        except asyncio.CancelledError:
            # the task running us was cancelled (Ctrl-C in asyncio.run): record, then re-raise
            self._end(RunStatus.CANCELLED, "the run's task was cancelled")
            await self._finish(interrupted=True)
            raise
        assert state.result is not None  # `_finish` always sets it
        return state.result

    async def _finish(self, *, interrupted: bool = False) -> None:
        """Let step tasks finish cancelling (bounded), mark the rest, synthesize, emit RunFinished."""
        state = self.state
        if state.result is not None:
            return
        await self._let_stop()
        self._attempts.close()  # a long-lived loop keeps no timer of this run's for its default timeout
        status = state.status
        usage = sum(state.overhead.values(), state.planning + self._revisions.superseded_usage)
        failed = False
        for r in state.records.values():  # one pass: did every step succeed, and what the steps used
            if r.state is not StepState.SUCCEEDED:
                failed = True
            if r.usage is not ZERO:  # a tool step's usage is the shared zero (`Usage.__add__` keeps it)
                usage = usage + r.usage
        if status is RunStatus.RUNNING:
            status = RunStatus.PARTIAL if failed else RunStatus.SUCCEEDED
        stopped = status in (RunStatus.ABORTED, RunStatus.INCOMPLETE)
        rollback = await self._revisions.rollback() if stopped and not interrupted else None
        answer = None
        extra = ZERO
        untrusted: list[str] = []
        if status in (RunStatus.SUCCEEDED, RunStatus.PARTIAL) and not interrupted:
            answer, extra, status, untrusted = await self._synthesize(status)
            usage = usage + extra
        state.status = status
        wall = time.perf_counter() - self._t0
        self._emit(
            RunFinished,
            status=status,
            reason=state.reason,
            answer=answer,
            answer_untrusted=untrusted,
            wall_time=wall,
            usage=usage,
            replan=state.replan,
            error=state.error,
            due=state.due,
        )
        versions = self.plan_versions()
        state.result = RunResult(
            run_id=self.run_id,
            plan=state.plan,
            status=status,
            reason=state.reason,
            steps=state.records,
            answer=answer,
            answer_untrusted=untrusted,
            started_at=self._started_at,
            finished_at=utcnow(),
            wall_time=wall,
            usage=usage,
            planning_usage=state.planning,
            synthesis_usage=extra,
            overhead=dict(state.overhead),
            replan=state.replan,
            due=state.due,
            error=state.error,
            versions=versions,
            rollback=rollback,
            refused_calls=refused_by_rule([*state.records.values(), *(rec for v in versions for rec in v.superseded.values())]),
        )

    async def _let_stop(self) -> None:
        """Wait (bounded by the cancel grace) for step tasks still stopping; record every step that never ended as cancelled."""
        state = self.state
        pending = [t for sid, t in state.tasks.items() if not t.done() and sid not in state.abandoned]
        if pending:
            # a tool that swallows its cancellation is abandoned after the grace period, never waited on for ever
            grace = self.engine.config.cancel_grace
            _, stuck = await asyncio.wait(pending, timeout=grace)
            if stuck:
                log.warning("run %s: %d step(s) did not stop within %.1fs of cancellation", self.run_id, len(stuck), grace)
        for sid in state.sched.unsettled() if state.status is not RunStatus.NEEDS_DECISION else ():
            if not state.records[sid].state.terminal and not self._parked(sid):
                # a step started as it was launched whose task never ran was not running: its tool was never called;
                # a step held for a person's decision stays cut off (the next resume holds it again)
                was_running = (state.records[sid].state is StepState.RUNNING and sid not in state.starting) or sid in state.held_steps
                self._record_cancelled(sid, was_running=was_running)

    async def _synthesize(self, status: RunStatus) -> tuple[Any, Usage, RunStatus, list[str]]:
        """The answer, its usage, the run's status after assembling it (bounded by the default timeout), and the
        untrusted origins the answer derives from: those of the outputs it was made of (the answer step's or the
        sinks'; every output for a joiner or a synthesizer, which read them all), as `Source` keys."""
        state = self.state
        joined = self._revisions.joined
        if joined is not None:  # the joiner finished the run with its answer
            return joined.answer, ZERO, status, derive_untrusted((), state.outputs.values())[0]
        config = self.engine.config
        synth = config.synthesizer
        if synth is None:
            answer = default_answer(state.plan, state.outputs)
            return answer, ZERO, status, derive_untrusted((), answer_inputs(state.plan, state.outputs))[0] if answer is not None else []
        task = self._synth_task = asyncio.get_running_loop().create_task(synth.synthesize(state.plan, dict(state.outputs)))
        try:
            outcome = await assemble(task, config.default_timeout)
        finally:
            self._synth_task = None
        if outcome.cancelled:  # cancel() while the answer was being assembled
            return None, ZERO, RunStatus.CANCELLED, []
        if outcome.problem is not None:  # the steps' work stands; say why there is no answer
            state.reason = outcome.problem
            return None, ZERO, RunStatus.PARTIAL, []
        return outcome.answer, outcome.usage, status, derive_untrusted(outcome.sources, state.outputs.values())[0]

    def _end(
        self, status: RunStatus, reason: str, replan: ReplanRequest | None = None, *, from_step: bool = False, owed: bool = False
    ) -> None:
        """Stop the run with `status`. `from_step`: a step's own failure action ends it (its task goes on to return);
        `owed`: a cancel stands even when every step has ended (the run owes a replan or a joiner's decision)."""
        state = self.state
        if state.result is not None:
            return
        if self._synth_task is not None:  # the steps are done; a cancel stops the synthesizer
            if status is RunStatus.CANCELLED:
                state.reason = reason
                self._synth_task.cancel()
            return
        if state.status is not RunStatus.RUNNING:
            return
        if status is RunStatus.CANCELLED and not owed and not state.sched.is_active() and not state.open:
            return  # every step has ended: nothing is left to cancel, the outcome stands
        state.status, state.reason, state.replan = status, reason, replan
        state.open = False
        me = asyncio.current_task() if from_step else None
        for task in state.tasks.values():
            if task is not me and not task.done():
                task.cancel()
        state.done.set()

    def _stop(self, rule: str, message: str, replan: ReplanRequest | None = None) -> None:
        """End the run as ``failed`` with a typed error."""
        self.state.error = run_error(rule, message)
        self._end(RunStatus.FAILED, message, replan)

    def _launch_ready(self) -> None:
        state = self.state
        if state.status is not RunStatus.RUNNING:
            return
        if state.draining is not None:  # stopping between steps: none starts, the run ends once the running ones have
            self._cancel_if_quiet()
            if not state.sched.is_active() and not state.open:
                state.done.set()  # every step ended: the run ends as it would have (nothing is left to cancel)
            return
        if state.pending is not None:
            return
        sched = state.sched
        launched = False
        if sched.has_ready():  # (most steps that end make none ready: no batch to build then)
            batch = sched.ready()
            launched = bool(batch.run)
            for sid, because in batch.skipped:
                rec = state.records[sid]
                outcome = sched.outcome(because)
                rec.state, rec.finished_at = StepState.SKIPPED, utcnow()
                rec.reason = f"input step {because!r} {outcome.value if outcome is not None else 'ended'}"
                self._emit(StepSkipped, step_id=sid, because=because, reason=rec.reason)
            loop = asyncio.get_running_loop()
            attempts = self._attempts
            cascades = self.engine.config.cascades
            for sid in batch.run:  # its StepReady only if it has to wait (`Attempts.run`, `_approved`); StepStarted says the rest
                if state.status is not RunStatus.RUNNING or state.draining is not None:
                    break  # an event of this launch stopped the run (a subscriber, a failed store): the rest never start
                rec = state.records[sid]
                step = state.steps[sid]
                worker = rec.worker or step.worker  # a resumed step goes on where it was (attempts, fallback worker, model)
                tried = rec.attempts
                model = self._cascades.model_for(step, worker) if step.models is not None or cascades else None
                # a step that needs no person and finds its slots free starts here: its StepStarted is emitted
                # before its task exists, with the others of this launch (one commit for all, when recorded)
                started = (
                    not self._needs_approval(step)
                    and not self._timetable.holds(step)
                    and attempts.start_now(step, worker, tried + 1, model)
                )
                if state.status is not RunStatus.RUNNING:
                    break  # its StepStarted stopped the run (a subscriber, a store that failed): no task, no tool
                if not started:
                    update_record(rec, state=StepState.READY)  # its task waits for a slot or a person
                state.tasks[sid] = loop.create_task(self._run_step(sid, worker, tried, started))
        if not sched.is_active() and not state.open:
            state.done.set()
        elif state.scheduled and self._timetable.park():
            pass  # every step it can go on with waits for its time: stopped as scheduled, for a worker to resume when due
        elif state.held_steps and not launched and not state.open and not (sched.running() - state.held_steps):
            held = ", ".join(sorted(state.held_steps))
            self._end(
                RunStatus.NEEDS_DECISION,
                f"step(s) {held} were running when the run stopped and are not idempotent; decide with `planexec resolve`",
            )

    def _charge(self, usage: Usage) -> bool:
        """Count usage against the engine's budget; over it, the run stops (rule ``budget``) and this returns True."""
        budget = self.engine.config.budget
        if budget is None or usage.is_zero():
            return False
        self._spent = self._spent + usage
        over = budget.exceeded(self._spent)
        if over is None or self.state.status is not RunStatus.RUNNING:
            return False
        self._stop("budget", f"the run exceeded its budget: {over}")
        return True

    async def _run_step(self, sid: str, worker: str, attempt: int, started: bool) -> None:
        """Run step `sid` on `worker` until it settles; `attempt` attempts were made before (a resumed step's);
        `started`: its next attempt was started as the step was launched (`Attempts.start_now`)."""
        state = self.state
        step = state.steps[sid]
        rec = state.records[sid]
        try:
            if not started and self._needs_approval(step) and not await self._approved(step, worker):
                return
            # attempt the step until it succeeds, its cascade's last model failed, or its failure action says what follows
            # (retry, fallback, or the end)
            config = self.engine.config
            routed = step.models is not None or bool(config.cascades)
            fa = step.failure_action
            rerouted = worker != step.worker
            timed = self._timetable.holds(step)
            on_time = partial(self._timetable.on_time, step) if timed else None
            while True:
                # each attempt (a retry, a fallback too) starts only in its time: a window may have closed meanwhile
                if not started and timed and not await self._timetable.wait(step):
                    return  # the run stopped while the step waited for its time (parked as scheduled, or cancelled)
                attempt += 1
                model = self._cascades.model_for(step, worker) if routed else None
                result, error, wall, usage = await self._attempts.run(step, worker, attempt, model=model, started=started, on_time=on_time)
                started = False  # a retry or a fallback waits for its slots again
                state.held.pop(sid, None)
                if result is None and error is None:  # its window closed while it waited for a slot: it waits again
                    attempt -= 1
                    continue
                if sid in state.abandoned:
                    return  # it was given up on and recorded while it ignored its timeout
                state.attempt_t0.pop(sid, None)
                update_record(rec, wall_time=rec.wall_time + wall, usage=rec.usage + usage)
                if self._charge(usage):
                    return  # over budget: the run is stopping and records this step
                if error is None:
                    assert result is not None
                    if model is not None:
                        self._cascades.tried(rec, attempt, model, usage, None, None)
                    self._succeed(step, worker, attempt, result, wall, usage, model)
                    return
                if model is not None and self._cascades.moved_on(step, attempt, model, error, wall, usage):
                    if state.status is not RunStatus.RUNNING:
                        await asyncio.sleep(
                            0
                        )  # its events stopped the run (a store that failed): its cancel lands here, not on the next model
                    continue  # the next model of its cascade, before any failure action (`engine.cascade`)
                tries = self._cascades.on_model(step, attempt) if model is not None else attempt  # a retry counts the last model's
                then = fa.next_action(tries, retryable=error.rule not in ("tool_input", "reference"), rerouted=rerouted)
                if then == "abort" and error.rule == "check_failed" and config.replan_failed_checks and config.replanner is not None:
                    then = "replan"  # the world differs from what the plan assumed: ask for a new plan, not the end
                if model is not None:
                    self._cascades.tried(rec, attempt, model, usage, error, then)
                self._emit(
                    StepFailed,
                    step_id=sid,
                    attempt=attempt,
                    worker=worker,
                    error=error,
                    then=then,
                    wall_time=wall,
                    usage=usage,
                    model=model,
                )
                if then == "retry":
                    delay = fa.retry_delay(attempt, self.engine.random.random())
                    self._emit(StepRetried, step_id=sid, next_attempt=attempt + 1, delay=delay)
                    await asyncio.sleep(delay)
                    continue
                if then == "fallback":
                    assert fa.worker is not None
                    self._emit(StepRerouted, step_id=sid, from_worker=worker, to_worker=fa.worker)
                    worker, rerouted = fa.worker, True
                    continue
                self._fail(step, error, then)
                return
        except asyncio.CancelledError:
            self._record_cancelled(sid, was_running=rec.state is StepState.RUNNING)
            raise
        except Exception as exc:  # an engine bug must still end the run in a recorded state
            log.exception("internal error while running step %s", sid)
            error = ErrorInfo(rule="engine", type=type(exc).__name__, message=str(exc))
            if not rec.state.terminal:
                update_record(rec, state=StepState.FAILED, error=error, finished_at=utcnow())
                if state.sched.is_handed_out(sid):
                    state.sched.failed(sid)
                worker, attempt = rec.worker or worker, rec.attempts or attempt
                self._emit(StepFailed, step_id=sid, attempt=attempt, worker=worker, error=error, then="abort", wall_time=0.0, usage=ZERO)
            self._end(RunStatus.ABORTED, f"internal error in step {sid!r}: {exc}", from_step=True)
        finally:
            if state.status is RunStatus.RUNNING:
                state.tasks.pop(sid, None)  # a finished task need not be kept (or cancelled) any more

    def _needs_approval(self, step: Step) -> bool:
        """The engine's `needs_approval`, asked once per worker and action in a run: what a tool declares does not change under it."""
        if step.requires_approval:
            return True
        key = (step.worker, step.action)
        needed = self._approval.get(key)
        if needed is None:
            needed = self._approval[key] = self.engine.needs_approval(step)
        return needed

    async def _approved(self, step: Step, worker: str) -> bool:
        """Ask the engine's approver about a step that needs a person; a refusal fails the step (False)."""
        sid = step.step_id
        digest = step_hash(step)
        self.state.waiting.add(sid)
        self._emit(StepReady, step_id=sid)  # ready, and waiting for a person
        self._emit(ApprovalRequested, step_id=sid, content_hash=digest, plan_version=self.state.plan.version)
        refusal = await ask_approval(self.engine.config.approver, step, run_id=self.run_id)
        self._emit(ApprovalDecided, step_id=sid, content_hash=digest, approved=refusal is None)
        if refusal is None:
            return True
        then = final_action(step.failure_action)  # a refusal is not the worker's fault: retry and fallback do not apply
        self._emit(StepFailed, step_id=sid, attempt=0, worker=worker, error=refusal, then=then, wall_time=0.0, usage=Usage())
        self._fail(step, refusal, then)
        return False

    def _succeed(self, step: Step, worker: str, attempt: int, result: WorkResult, wall: float, usage: Usage, model: str | None) -> None:
        state = self.state
        sid = step.step_id
        plan = state.plan
        outputs = state.outputs
        # a summary of constant size: the step's own sources, its direct inputs, the untrusted origins they name
        refs = step.references
        inputs = _inputs(step.dependencies, refs, outputs) if refs else []
        untrusted, more = derive_untrusted(result.sources, [outputs[d] for d in inputs])
        prov = Provenance(
            run_id=self.run_id,
            plan_id=plan.plan_id,
            plan_version=plan.version,
            step_id=sid,
            worker=worker,
            action=step.action,
            attempt=attempt,
            tools=result.tools,
            sources=result.sources,
            inputs=inputs,
            untrusted_from=untrusted,
            more_untrusted=more,
        )
        out = Output(value=result.output, provenance=prov)
        outputs[sid] = out
        now = utcnow()  # the record's end and the event's time are one
        update_record(state.records[sid], state=StepState.SUCCEEDED, output=out, error=None, finished_at=now, subrun=result.subrun)
        state.sched.succeeded(sid)
        self._emit(StepSucceeded, at=now, step_id=sid, attempt=attempt, wall_time=wall, usage=usage, output=out, model=model)
        self._launch_ready()

    def _fail(self, step: Step, error: ErrorInfo, then: str) -> None:
        state = self.state
        sid = step.step_id
        state.waiting.discard(sid)  # refused while it waited for a person: a revision may reuse its id
        rec = state.records[sid]
        rec.state, rec.error, rec.finished_at = StepState.FAILED, error, utcnow()
        rec.reason = f"failure action: {then}"
        state.sched.failed(sid)
        if then == "abort" and error.rule in CONTRACT_STOPS:  # refused, not broken: the work is not done, and the run says why
            self._end(RunStatus.INCOMPLETE, f"refused: step {sid!r} could not do its work ({error.render()})", from_step=True)
        elif then == "abort":
            self._end(RunStatus.ABORTED, f"step {sid!r} failed ({error.render()}); failure action abort", from_step=True)
        elif then == "replan":
            source = "check_failed" if error.rule == "check_failed" else "failure_action"
            req = ReplanRequest(step_id=sid, reason=f"step {sid!r} failed: {error.render()}", error=error, source=source)
            if not self._revisions.request(req):
                self._end(RunStatus.REPLAN_REQUESTED, req.reason, replan=req, from_step=True)
            elif state.draining is not None:
                self._cancel_if_quiet()  # the replan is for whoever resumes the run
        else:
            self._launch_ready()

    def _parked(self, sid: str) -> bool:
        """True for a step left waiting for its time in a run stopped as scheduled: it stays scheduled, not cancelled."""
        return self.state.status is RunStatus.SCHEDULED and self.state.records[sid].state is StepState.SCHEDULED

    def _record_cancelled(self, sid: str, *, was_running: bool) -> None:
        state = self.state
        rec = state.records[sid]
        if rec.state.terminal or self._parked(sid):
            return
        state.waiting.discard(sid)  # cancelled while it waited for a slot or a person
        state.behind.discard(sid)  # cancelled before its task ran
        if sid in state.starting:  # started at its launch, cancelled before its task ran: its slots go back here
            state.starting.discard(sid)
            slots = state.held.pop(sid, None)
            if slots is not None:
                slots.release()
        rec.state, rec.finished_at = StepState.CANCELLED, utcnow()
        rec.reason = state.reason or "cancelled"
        t0 = state.attempt_t0.pop(sid, None)
        if t0 is not None:  # stopped mid-attempt: its time counts
            rec.wall_time += time.perf_counter() - t0
        if state.sched.is_handed_out(sid):
            state.sched.cancelled(sid)
        self._emit(StepCancelled, step_id=sid, was_running=was_running, reason=rec.reason)


def _inputs(dependencies: list[str], references: frozenset[str], outputs: dict[str, Output]) -> list[str]:
    """The dependencies a step took outputs from, in the plan's order: the plan's own list when that is all of them
    (read-only, like every list a record holds: one list a step fewer)."""
    inputs = [d for d in dependencies if d in references and d in outputs]
    return dependencies if len(inputs) == len(dependencies) else inputs
