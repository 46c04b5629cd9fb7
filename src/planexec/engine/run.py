"""One execution of a plan: the `Run` handle and everything that happens inside it.

Owns the asynchronous life of a run: a step starts the moment its last
dependency ends (the pure `dag.Scheduler` says which), within the global
and per-worker limits; each attempt has a deadline; failure actions retry
with exponential backoff and jitter, skip, fall back to another worker,
abort or request a replan; `cancel()` stops the run and every step still
ends in a recorded state. Every transition becomes an event, delivered to
subscribers and to async iterators. Where a step runs is the `Runner`'s
business; the `Engine` (in `engine`) holds the configuration.
Imports `plan`, `dag`, `calls`, `results`, `events`, `synthesis`, `usage`, `errors`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from planexec.engine.approval import ask_approval, step_hash
from planexec.engine.attempt import CURRENT_STEP, Attempts, _update
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
from planexec.engine.limits import Limits, Slots
from planexec.engine.monitor import Monitor
from planexec.engine.results import (
    ErrorInfo,
    ReplanRequest,
    RunResult,
    RunStatus,
    StepRecord,
    StepState,
)
from planexec.engine.synthesis import assemble, default_answer
from planexec.plan.model import Plan, Step
from planexec.plan.scheduler import Scheduler
from planexec.usage import Usage
from planexec.workers.io import Output, Provenance, WorkResult

if TYPE_CHECKING:
    from planexec.engine.engine import Engine
    from planexec.engine.resume import Resumption

__all__ = ["Run"]

log = logging.getLogger("planexec.engine")

Subscriber = Callable[[Any], None]
_ZERO = Usage()  # records are immutable: one shared zero


class Run(Monitor, Attempts):
    """One execution of a plan: its records, its events, and control over it (replanning: see `monitor`)."""

    def __init__(self, engine: Engine, plan: Plan, run_id: str, *, streaming: bool = False, resumption: Resumption | None = None) -> None:
        self.engine = engine
        self._open = streaming  # steps are still arriving (see `plan_stream.StreamingRun`)
        self._planning = _ZERO  # what the planner's drafts cost (see `record_draft`)
        self._drafts: list[dict[str, Any]] = []
        self._overhead: dict[str, Usage] = {}  # work around the run by role (router, joiner)
        self.run_id = run_id
        self.setup: dict[str, Any] = {}  # recorded in RunStarted (see `Engine.start`)
        self.history: list[Any] = []
        self._subscribers = list(engine.subscribers)
        self._queues: list[asyncio.Queue[Any]] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._outputs: dict[str, Output] = {}
        self._attempt_t0: dict[str, float] = {}  # start of the attempt in progress, per step
        self._abandoned: set[str] = set()  # steps whose tool ignored its timeout's cancellation
        self._held: dict[str, Slots] = {}  # the slots each running attempt holds
        self._limits = Limits(engine.max_concurrency, engine.limit_for)
        self._done = asyncio.Event()
        self._status = RunStatus.RUNNING
        self._reason: str | None = None
        self._replan: ReplanRequest | None = None
        self._result: RunResult | None = None
        self._synth_task: asyncio.Task[Any] | None = None
        self._task: asyncio.Task[RunResult] | None = None
        self._started_at = utcnow()
        self._t0 = time.perf_counter()
        self._init_monitor()
        self._load_plan(plan)
        # a run started inside another run's step (a sub-team) is one level below it
        parent = CURRENT_STEP.get()
        self.depth = parent[0].depth + 1 if parent is not None else 0
        self.parent: tuple[str, str] | None = (parent[0].run_id, parent[1]) if parent is not None else None
        self._spent = _ZERO  # what the run has used so far, kept only under a budget
        self._seq_base = 0  # a resumed run's events follow those stored before
        self._resumption = resumption
        self._held_steps: set[str] = set()  # cut off by a crash, waiting for a person (see `resume`)
        if resumption is not None:
            self._resume_from(resumption)

    def _resume_from(self, r: Resumption) -> None:
        """Start from a stopped run's state: ended steps settled, cut-off ones re-run or held."""
        self.records = r.records
        self._outputs = {sid: rec.output for sid, rec in r.records.items() if rec.output is not None and sid in r.settled}
        self._held_steps = set(r.held)
        self._sched = Scheduler(self._deps, [s.step_id for s in self.plan.steps if s.accepts_failed_inputs], settled=r.settled, held=r.held)
        self._seq_base = r.next_seq
        self._planning = r.planning
        self._overhead = dict(r.overhead)
        if r.started_at is not None:
            self._started_at = r.started_at
        if r.replan is not None:  # it stopped between a failure and its revision: ask again
            self._pending = r.replan if self.engine.replanner is not None else None
        if len(r.versions) > 1:
            self._versions = list(r.versions)
            self._replans = len(r.versions) - 1

    def _load_plan(self, plan: Plan, *, kept: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        """Make `plan` the one to run; `kept` steps (a revision's finished ones) start settled as succeeded."""
        self.plan = plan
        self.records = {s.step_id: StepRecord(step_id=s.step_id, worker=s.worker, action=s.action, usage=_ZERO) for s in plan.steps}
        self._steps = {s.step_id: s for s in plan.steps}
        self._outputs = {sid: out for sid, out in self._outputs.items() if sid in kept}
        self._deps = {s.step_id: s.dependencies for s in plan.steps}
        self._verbatim = {s.step_id for s in plan.steps if not s.references and "$${" not in repr((s.parameters, s.instruction))}
        self._sched = Scheduler(self._deps, [s.step_id for s in plan.steps if s.accepts_failed_inputs], succeeded=kept)

    # --- the public handle -------------------------------------------------

    @property
    def status(self) -> RunStatus:
        """RUNNING until the run ends, then how it ended."""
        return self._status if self._result is None else self._result.status

    def subscribe(self, callback: Subscriber) -> None:
        """Call `callback(event)` for every later event (exceptions in it are logged, not raised)."""
        self._subscribers.append(callback)

    async def events(self) -> AsyncIterator[Any]:
        """Every event of the run from the first, then live ones, ending with `RunFinished`."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        for ev in self.history:
            queue.put_nowait(ev)
        self._queues.append(queue)
        try:
            while True:
                ev = await queue.get()
                yield ev
                if isinstance(ev, RunFinished):
                    return
        finally:
            self._queues.remove(queue)

    def cancel(self, reason: str = "cancelled from outside") -> None:
        """Stop the run: running steps are cancelled, waiting ones never start; all are recorded."""
        self._end(RunStatus.CANCELLED, reason)

    async def result(self) -> RunResult:
        """Wait for the run to end and return its result."""
        assert self._task is not None
        return await asyncio.shield(self._task)

    # --- events ------------------------------------------------------------

    def _emit(self, cls: type, **fields: Any) -> None:
        ev = cls(run_id=self.run_id, seq=self._seq_base + len(self.history), at=utcnow(), **fields)
        self.history.append(ev)
        for q in self._queues:
            q.put_nowait(ev)
        for cb in self._subscribers:
            try:
                cb(ev)
            except Exception:  # a broken subscriber must not break the run
                log.exception("event subscriber %r failed on %s", cb, ev.type)

    # --- the run -----------------------------------------------------------

    async def _main(self) -> RunResult:
        r = self._resumption
        if r is not None:
            self._emit(RunResumed, plan_version=self.plan.version, kept=r.kept, rerun=r.rerun, held=r.held)
        else:
            self._emit(
                RunStarted,
                plan_id=self.plan.plan_id,
                plan_version=self.plan.version,
                content_hash=self.plan.content_hash,
                goal=self.plan.goal,
                step_ids=self.plan.step_ids,
                setup=self.setup,
            )
        for draft in self._drafts:
            self.record_draft(**draft)
        try:
            if self._pending is not None:  # a resumed run owes a replan: serve it before anything else
                self._done.set()
            elif self._open or await self._approve_version(self.plan, None):
                self._launch_ready()
            await self._done.wait()
            while await self._between_versions():  # a new version of the plan goes on in this run
                await self._done.wait()
            await self._finish()
        except asyncio.CancelledError:
            # the task running us was cancelled (Ctrl-C in asyncio.run): record, then re-raise
            self._end(RunStatus.CANCELLED, "the run's task was cancelled")
            await self._finish(interrupted=True)
            raise
        return self._result  # type: ignore[return-value]

    async def _finish(self, *, interrupted: bool = False) -> None:
        """Let step tasks finish cancelling (bounded), mark the rest, synthesize, emit RunFinished."""
        if self._result is not None:
            return
        pending = [t for sid, t in self._tasks.items() if not t.done() and sid not in self._abandoned]
        if pending:
            # a tool that swallows its cancellation is abandoned after the grace period, never waited on for ever
            _, stuck = await asyncio.wait(pending, timeout=self.engine.cancel_grace)
            if stuck:
                log.warning(
                    "run %s: %d step(s) did not stop within %.1fs of cancellation", self.run_id, len(stuck), self.engine.cancel_grace
                )
        for sid in self._sched.unsettled() if self._status is not RunStatus.NEEDS_DECISION else ():
            if not self.records[sid].state.terminal:
                self._record_cancelled(sid, was_running=self.records[sid].state is StepState.RUNNING)
        status = self._status
        if status is RunStatus.RUNNING:
            failed = any(r.state is not StepState.SUCCEEDED for r in self.records.values())
            status = RunStatus.PARTIAL if failed else RunStatus.SUCCEEDED
        rollback = await self._rollback() if status is RunStatus.ABORTED and not interrupted else None
        answer = None
        usage = sum((r.usage for r in self.records.values()), sum(self._overhead.values(), self._planning + self._superseded_usage))
        extra = _ZERO
        if status in (RunStatus.SUCCEEDED, RunStatus.PARTIAL) and not interrupted:
            answer, extra, status = await self._synthesize(status)
            usage = usage + extra
        self._status = status
        wall = time.perf_counter() - self._t0
        self._emit(
            RunFinished,
            status=status,
            reason=self._reason,
            answer=answer,
            wall_time=wall,
            usage=usage,
            replan=self._replan,
            error=self._error,
        )
        self._result = RunResult(
            run_id=self.run_id,
            plan=self.plan,
            status=status,
            reason=self._reason,
            steps=self.records,
            answer=answer,
            started_at=self._started_at,
            finished_at=utcnow(),
            wall_time=wall,
            usage=usage,
            planning_usage=self._planning,
            synthesis_usage=extra,
            overhead=dict(self._overhead),
            replan=self._replan,
            error=self._error,
            versions=self.plan_versions(),
            rollback=rollback,
        )

    async def _synthesize(self, status: RunStatus) -> tuple[Any, Usage, RunStatus]:
        """The answer, its usage, and the run's status after assembling it (bounded by the default timeout)."""
        if self._joined is not None:  # the joiner finished the run with its answer
            return self._joined.answer, _ZERO, status
        synth = self.engine.synthesizer
        if synth is None:
            return default_answer(self.plan, self._outputs), _ZERO, status
        task = self._synth_task = asyncio.get_running_loop().create_task(synth.synthesize(self.plan, dict(self._outputs)))
        try:
            outcome = await assemble(task, self.engine.default_timeout)
        finally:
            self._synth_task = None
        if outcome.cancelled:  # cancel() while the answer was being assembled
            return None, _ZERO, RunStatus.CANCELLED
        if outcome.problem is not None:  # the steps' work stands; say why there is no answer
            self._reason = outcome.problem
            return None, _ZERO, RunStatus.PARTIAL
        return outcome.answer, outcome.usage, status

    def _end(self, status: RunStatus, reason: str, replan: ReplanRequest | None = None, *, from_step: bool = False) -> None:
        """Stop the run with `status`. `from_step`: a step's own failure action ends it (its task goes on to return)."""
        if self._result is not None:
            return
        if self._synth_task is not None:  # the steps are done; a cancel stops the synthesizer
            if status is RunStatus.CANCELLED:
                self._reason = reason
                self._synth_task.cancel()
            return
        if self._status is not RunStatus.RUNNING:
            return
        if status is RunStatus.CANCELLED and not self._sched.is_active() and not self._open:
            return  # every step has ended: nothing is left to cancel, the outcome stands
        self._status, self._reason, self._replan = status, reason, replan
        self._open = False
        me = asyncio.current_task() if from_step else None
        for task in self._tasks.values():
            if task is not me and not task.done():
                task.cancel()
        self._done.set()

    def _launch_ready(self) -> None:
        if self._status is not RunStatus.RUNNING or self._pending is not None:
            return
        batch = self._sched.ready()
        for sid, because in batch.skipped:
            rec = self.records[sid]
            rec.state, rec.finished_at = StepState.SKIPPED, utcnow()
            rec.reason = f"input step {because!r} {self._sched.outcome(because).value}"  # type: ignore[union-attr]
            self._emit(StepSkipped, step_id=sid, because=because, reason=rec.reason)
        for sid in batch.run:
            _update(self.records[sid], state=StepState.READY)
            self._emit(StepReady, step_id=sid)
            self._tasks[sid] = asyncio.get_running_loop().create_task(self._run_step(sid))
        if not self._sched.is_active() and not self._open:
            self._done.set()
        elif self._held_steps and not batch.run and not self._open and not (self._sched.running() - self._held_steps):
            held = ", ".join(sorted(self._held_steps))
            self._end(
                RunStatus.NEEDS_DECISION,
                f"step(s) {held} were running when the run stopped and are not idempotent; decide with `planexec resolve`",
            )

    def record_draft(self, **fields: Any) -> None:
        """Record one of the planner's drafts (a `PlanDrafted` event); its usage counts toward the run's."""
        self._planning = self._planning + fields["usage"]
        self._emit(PlanDrafted, **fields)
        self._charge(fields["usage"])

    def add_overhead(self, role: str, usage: Usage) -> None:
        """Count work done around the run (a router's or a joiner's model calls) under `role`."""
        self._overhead[role] = self._overhead.get(role, _ZERO) + usage
        self._charge(usage)

    def relay(self, step_id: str, depth: int, event: Any) -> None:
        """Put an event of a sub-run (a sub-team working on `step_id`) into this run's stream."""
        self._emit(SubRunEvent, step_id=step_id, depth=depth, event=event.to_dict())

    def _charge(self, usage: Usage) -> bool:
        """Count usage against the engine's budget; over it, the run stops (rule ``budget``) and this returns True."""
        budget = self.engine.budget
        if budget is None or usage.is_zero():
            return False
        self._spent = self._spent + usage
        over = budget.exceeded(self._spent)
        if over is None or self._status is not RunStatus.RUNNING:
            return False
        self._stop("budget", f"the run exceeded its budget: {over}")
        return True

    async def _run_step(self, sid: str) -> None:
        step = self._steps[sid]
        rec = self.records[sid]
        fa = step.failure_action
        worker = rec.worker or step.worker  # a resumed step goes on where it was (attempts, fallback worker)
        rerouted = worker != step.worker
        attempt = rec.attempts
        try:
            if self.engine.needs_approval(step):
                digest = step_hash(step)
                self._emit(ApprovalRequested, step_id=sid, content_hash=digest, plan_version=self.plan.version)
                refusal = await ask_approval(self.engine.approver, step, run_id=self.run_id)
                self._emit(ApprovalDecided, step_id=sid, content_hash=digest, approved=refusal is None)
                if refusal is not None:
                    # a refusal is not the worker's fault: retry and fallback do not apply, what follows them does
                    then = fa.then if fa.kind in ("retry", "fallback") else fa.kind
                    then = then if then in ("skip", "replan") else "abort"
                    self._emit(StepFailed, step_id=sid, attempt=0, worker=worker, error=refusal, then=then, wall_time=0.0, usage=Usage())
                    self._fail(step, refusal, then)
                    return
            while True:
                attempt += 1
                result, error, wall, usage = await self._attempt(step, worker, attempt)
                self._held.pop(sid, None)
                if sid in self._abandoned:
                    return  # it was given up on and recorded while it ignored its timeout
                self._attempt_t0.pop(sid, None)
                _update(rec, wall_time=rec.wall_time + wall, usage=rec.usage + usage)
                if self._charge(usage):
                    return  # over budget: the run is stopping and records this step
                if error is None:
                    assert result is not None
                    self._succeed(step, worker, attempt, result, wall, usage)
                    return
                then = fa.next_action(attempt, retryable=error.rule not in ("tool_input", "reference"), rerouted=rerouted)
                if (
                    then == "abort"
                    and error.rule == "check_failed"
                    and self.engine.replan_failed_checks
                    and self.engine.replanner is not None
                ):
                    then = "replan"  # the world differs from what the plan assumed: ask for a new plan, not the end
                self._emit(StepFailed, step_id=sid, attempt=attempt, worker=worker, error=error, then=then, wall_time=wall, usage=usage)
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
                _update(rec, state=StepState.FAILED, error=error, finished_at=utcnow())
                if self._sched.is_handed_out(sid):
                    self._sched.failed(sid)
                self._emit(StepFailed, step_id=sid, attempt=attempt, worker=worker, error=error, then="abort", wall_time=0.0, usage=_ZERO)
            self._end(RunStatus.ABORTED, f"internal error in step {sid!r}: {exc}", from_step=True)
        finally:
            if self._status is RunStatus.RUNNING:
                self._tasks.pop(sid, None)  # a finished task need not be kept (or cancelled) any more

    def _succeed(self, step: Step, worker: str, attempt: int, result: WorkResult, wall: float, usage: Usage) -> None:
        sid = step.step_id
        rec = self.records[sid]
        prov = Provenance(
            run_id=self.run_id,
            plan_id=self.plan.plan_id,
            plan_version=self.plan.version,
            step_id=sid,
            worker=worker,
            action=step.action,
            attempt=attempt,
            tools=result.tools,
        )
        out = Output(value=result.output, provenance=prov)
        self._outputs[sid] = out
        _update(rec, state=StepState.SUCCEEDED, output=out, error=None, finished_at=utcnow(), subrun=result.subrun)
        self._sched.succeeded(sid)
        self._emit(StepSucceeded, step_id=sid, attempt=attempt, wall_time=wall, usage=usage, output=out)
        self._launch_ready()

    def _fail(self, step: Step, error: ErrorInfo, then: str) -> None:
        sid = step.step_id
        rec = self.records[sid]
        rec.state, rec.error, rec.finished_at = StepState.FAILED, error, utcnow()
        rec.reason = f"failure action: {then}"
        self._sched.failed(sid)
        if then == "abort":
            self._end(RunStatus.ABORTED, f"step {sid!r} failed ({error.render()}); failure action abort", from_step=True)
        elif then == "replan":
            source = "check_failed" if error.rule == "check_failed" else "failure_action"
            req = ReplanRequest(step_id=sid, reason=f"step {sid!r} failed: {error.render()}", error=error, source=source)
            if not self._request_replan(req):
                self._end(RunStatus.REPLAN_REQUESTED, req.reason, replan=req, from_step=True)
        else:
            self._launch_ready()

    def _record_cancelled(self, sid: str, *, was_running: bool) -> None:
        rec = self.records[sid]
        if rec.state.terminal:
            return
        rec.state, rec.finished_at = StepState.CANCELLED, utcnow()
        rec.reason = self._reason or "cancelled"
        t0 = self._attempt_t0.pop(sid, None)
        if t0 is not None:  # stopped mid-attempt: its time counts
            rec.wall_time += time.perf_counter() - t0
        if self._sched.is_handed_out(sid):
            self._sched.cancelled(sid)
        self._emit(StepCancelled, step_id=sid, was_running=was_running, reason=rec.reason)
