"""Recording a live run into a run store, event by event, as it happens.

Owns `Recorder`, `record_run(run, store)` and `DurableRunner`. The recorder
subscribes to a `Run` and appends its events to the store, batched: one
transaction per turn of the event loop. The events a resume depends on are
durable before the engine goes on past them: `RunStarted`, a step's failure
(an approval refused among them), `PlanRevised`, `PlanCompleted` and
`RunFinished` flush at once, inside the subscriber call. So does
`StepStarted` (the engine calls the step's worker right after emitting it,
so a crash in the worker finds the step recorded as started), unless the
engine's runner is a `DurableRunner`: that runner hands a call on only once
the step's `StepStarted` is stored, so the steps that start in the same turn
share one commit (group commit) instead of one each. The engine emits the
starts of one launch together, before any of their tasks runs, and the
batch's commit is scheduled before those tasks: by the time a step's task
reaches the runner its start is stored, and it goes on without waiting.

A step whose tool (or worker) is declared idempotent needs none of that:
resume runs it again whether or not its start was stored. Its events
(its failure aside) wait up to `GROUP_WINDOW` seconds to share a commit
with those that follow, so a chain of such steps commits a few times in
that window instead of once a step; any other event, or a step waiting for
its start to be stored, flushes them with it, in order (a later event is
never stored before an earlier one). A crash loses at most that window of
idempotent work, which a resume runs again.

The first version of the plan is saved before `RunStarted` (a streamed
plan when it is complete). If the store fails, the run is cancelled rather
than going on unrecorded; the events not written stay queued and the next
flush tries them again (appending is idempotent). `RunLog` is what the
engine asks of a store (`store.RunStore` is one, by its shape): the engine
never imports the store's package. A store that keeps an audit log
(`Audited`) vouches for a run's records before a resume or a decision uses
them (`require_intact`). Imports `workers.io`, `engine.runner`,
`engine.results`, `plan` and `errors`; never the engine's internals.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol, runtime_checkable

from planexec.engine.results import PlanVersion
from planexec.engine.runner import Runner
from planexec.errors import StoreError
from planexec.plan.model import Plan
from planexec.workers.io import StepCall, WorkResult

__all__ = ["Audited", "DurableRunner", "Holds", "Recorder", "RunLog", "hold_run", "let_go", "record_run", "require_intact"]

log = logging.getLogger("planexec.store")


class RunLog(Protocol):
    """What the engine reads and writes in a run store: events, plan versions, saved plans, a run's summary."""

    def append(self, events: Iterable[Any], *, parent: tuple[str, str] | None = None) -> int:
        """Store events, idempotent on (run_id, seq); returns how many were new."""
        ...

    def events(self, run_id: str, after_seq: int = -1, limit: int | None = None) -> list[Any]:
        """The run's events after `after_seq`, in order."""
        ...

    def save_plan(self, run_id: str, plan: Plan, *, reason: str = "the first plan") -> None:
        """Store a version of the run's plan."""
        ...

    def plan_versions(self, run_id: str) -> list[PlanVersion]:
        """Every stored version of the run's plan, the first first."""
        ...

    def template(self, name: str, version: int | None = None) -> Any:
        """A saved plan of the library (it has a `.plan`); the rollback plan may name one."""
        ...

    def run(self, run_id: str) -> Any:
        """One run's summary (it has a `.status`)."""
        ...


@runtime_checkable
class Holds(Protocol):
    """A store that leases runs (`store.RunStore`'s SQL backends): one process runs a run at a time."""

    def hold(self, run_id: str, *, on_lost: Callable[[Exception], None] | None = None) -> Any:
        """Take the run's lease and keep it alive; `LeaseHeldError` when another live process holds it."""
        ...

    def let_go(self, run_id: str) -> None:
        """Release the run's lease."""
        ...


@runtime_checkable
class Audited(Protocol):
    """A store that keeps an audit log (`store.RunStore`'s SQL backends): it vouches for a run's records before they are used."""

    def require_intact(self, run_id: str) -> Any:
        """`TamperedError` naming what changed when any of the run's records does not match the audit log."""
        ...


def require_intact(store: object, run_id: str) -> None:
    """Refuse (`TamperedError`) a run whose stored records changed after they were written, when the store keeps an audit log."""
    if isinstance(store, Audited):
        store.require_intact(run_id)


def hold_run(store: object, run_id: str, *, on_lost: Callable[[Exception], None] | None = None) -> None:
    """Take run `run_id` in `store` for this process, when the store leases runs (a test double may not)."""
    if isinstance(store, Holds):
        store.hold(run_id, on_lost=on_lost)


def let_go(store: object, run_id: str) -> None:
    """Release run `run_id` in `store`, when the store leases runs."""
    if isinstance(store, Holds):
        store.let_go(run_id)


# flushed inside the subscriber call, before the engine goes on
DURABLE_AT_ONCE = frozenset({"run_started", "step_started", "step_failed", "plan_revised", "plan_completed", "run_finished"})
# how long an idempotent step's events may wait for others to share their commit (seconds); a crash loses at most this
# much idempotent work, which resume runs again, and a reader of the store sees them this much later
GROUP_WINDOW = 0.02  # 20 ms: a fourth of the commits of 5 ms on a chain, 5-10% less time; nothing a person sees


class Recorder:
    """Appends a run's events to a store: batched per event-loop turn, at once for the ones resume needs.

    Use `record_run`. `gated`: a `DurableRunner` waits on `durable()` before
    each step, so `StepStarted` need not flush at once. `error` holds the
    store's failure, if one happened; `flush()` writes what is queued now.
    """

    def __init__(self, run: Any, store: RunLog, *, gated: bool = False) -> None:
        self.run = run
        self.store = store
        self.gated = gated
        self.error: StoreError | None = None
        self.flushes = 0
        self.runner: DurableRunner | None = None  # the runner that waits on this recorder, set by `record_run`
        self._queue: list[Any] = []
        self._pending: asyncio.Handle | None = None  # the flush scheduled: the next turn's, or a group window's (`_later`)
        self._later = False  # `_pending` is a group window's timer
        self._redo: dict[tuple[str, str], bool] = {}  # by worker and action: running it again does no harm (see `_lazy`)
        self._on: dict[str, str] = {}  # steps whose attempts run on another worker than their plan's (a fallback's)
        self._steps: dict[str, Any] | None = None  # the plan's steps by id, for `_lazy`
        self._waiters: list[asyncio.Future[None]] = []  # steps waiting for the next commit (see `durable`)
        self._unstored: set[str] = set()  # steps whose StepStarted is queued, not yet stored (see `start_stored`)
        parent = getattr(run, "parent", None)
        self._parent: tuple[str, str] | None = (parent[0], parent[1]) if parent else None
        self._plan_saved = False
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    def __call__(self, event: Any) -> None:
        """Take one event (the run calls this as a subscriber)."""
        self._queue.append(event)
        kind = event.type
        if kind in ("step_started", "step_rerouted") and getattr(event, "run_id", None) == self.run.run_id:
            # the worker its attempts run on (a fallback's, or a resumed step's, may not be its plan's): its events wait
            # only if that worker's work is idempotent too
            self._runs_on(event.step_id, event.worker if kind == "step_started" else event.to_worker)
        if kind != "step_failed" and self._lazy(event):
            self._schedule(later=True)
        elif kind == "step_started" and self.gated:
            self._unstored.add(event.step_id)
            self._schedule()
        elif kind not in DURABLE_AT_ONCE:
            self._schedule()
        else:
            if kind == "plan_revised":
                self._redo, self._steps, self._on = {}, None, {}  # a step of the new version may do something else under its id
            if kind == "plan_completed":
                self._save_plan()  # the streamed plan is whole now: store it with its completion
            ours = kind == "run_finished" and getattr(event, "run_id", None) == self.run.run_id
            if ours and self.runner is not None:
                self.runner.recorders.pop(self.run.run_id, None)  # no step of the run is left to gate, whatever the flush does
            self.flush()
            if ours and not self._queue:
                let_go(self.store, self.run.run_id)  # stored to the end: the run is free for whoever resumes it

    def _step(self, sid: str) -> Any:
        """The current plan's step `sid`, or None."""
        steps = self._steps
        if steps is None or sid not in steps:  # built once a version (a streamed plan grows: again on a new id)
            steps = self._steps = {s.step_id: s for s in self.run.plan.steps}
        return steps.get(sid)

    def _runs_on(self, sid: str, worker: str) -> None:
        """Step `sid`'s attempts run on `worker`: kept only when that is not its plan's worker (a fallback's)."""
        step = self._step(sid)
        if step is not None and worker != step.worker:
            self._on[sid] = worker
        else:
            self._on.pop(sid, None)

    def _lazy(self, event: Any) -> bool:
        """True for an event of a step that resume may run again (idempotent): it may wait for a group window.

        Judged by the worker the step's attempts run on and its action, each pair asked of the engine once
        (what a tool declares does not change under a run): a few entries, whatever the plan's size."""
        sid = getattr(event, "step_id", None)
        if sid is None or getattr(event, "run_id", None) != self.run.run_id:
            return False
        step = self._step(sid)
        if step is None:
            return False
        key = (self._on.get(sid) or step.worker, step.action)
        redo = self._redo.get(key)
        if redo is None:
            is_idempotent = getattr(getattr(self.run, "engine", None), "is_idempotent", None)
            redo = self._redo[key] = is_idempotent is not None and bool(is_idempotent(step.on_worker(key[0])))
        return redo

    def _schedule(self, *, later: bool = False) -> None:
        """Flush on the next turn of the event loop; `later`: within `GROUP_WINDOW` (a flush due sooner takes it along)."""
        pending = self._pending
        if pending is not None:
            if later or not self._later:
                return
            pending.cancel()  # a window was open: this event is due sooner, and the window's events go with it
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: nothing to batch with
            self.flush()
            return
        self._later = later
        self._pending = loop.call_later(GROUP_WINDOW, self._flush_soon) if later else loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._pending = None
        self.flush()

    def flush(self) -> None:
        """Append every queued event in one transaction (durable when this returns, unless `error` is set)."""
        if self._pending is not None:  # flushed now: what was scheduled has nothing left to do
            self._pending.cancel()
            self._pending = None
        waiters, self._waiters = self._waiters, []
        error = None
        if self._queue:
            batch, self._queue = self._queue, []
            try:
                self.store.append(batch, parent=self._parent)
                self.flushes += 1
                self._unstored.clear()  # every start taken so far is in the batch
            except StoreError as exc:
                self._queue = batch + self._queue  # tried again by the next flush; appending is idempotent
                self._failed(exc)
                error = exc
        for waiter in waiters:
            if not waiter.done():  # a step cancelled while it waited has its future cancelled
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)

    def start_stored(self, step_id: str) -> bool:
        """True when the step's latest `StepStarted` is stored (or was never taken)."""
        return step_id not in self._unstored

    async def durable(self) -> None:
        """Wait until every event taken so far is stored (the next batch's commit); `StoreError` if it failed."""
        if not self._queue:
            return
        waiter = asyncio.get_running_loop().create_future()  # one per step: cancelling a step cancels only its own
        self._waiters.append(waiter)
        self._schedule()
        await waiter

    def _save_plan(self) -> None:
        if self._plan_saved:
            return
        try:
            self.store.save_plan(self.run.run_id, self.run.plan)
            self._plan_saved = True
        except StoreError as exc:
            self._failed(exc)

    def lost(self, exc: Exception) -> None:
        """The run's lease was taken by another process (the store's heartbeat thread calls this): stop the run."""
        error = exc if isinstance(exc, StoreError) else StoreError(str(exc))
        if self._loop is None:
            return  # no loop to stop: the store refuses the run's writes anyway
        try:
            self._loop.call_soon_threadsafe(self._failed, error)
        except RuntimeError:  # the loop closed: the run is over
            pass

    def _failed(self, exc: StoreError) -> None:
        first = self.error is None
        self.error = exc
        if first:
            log.error("run %s: the run store failed, cancelling the run: %s", self.run.run_id, exc)
            self.run.cancel(f"the run store failed: {exc}")


class DurableRunner:
    """A `Runner` that hands a step to `inner` only once the step's `StepStarted` is stored.

    ``Engine(registry, runner=DurableRunner(LocalRunner(registry)))``, then
    `record_run` for each run: the steps that start in the same turn of the
    event loop then share one commit, and none runs before its start is durable.
    """

    def __init__(self, inner: Runner) -> None:
        self.inner = inner
        self.recorders: dict[str, Recorder] = {}

    def run(self, call: StepCall) -> Coroutine[Any, Any, WorkResult]:
        """Perform `call` on `inner` once the step's start is stored: at once when it is (the usual case,
        committed with its launch's), else after the recorder's next commit."""
        recorder = self.recorders.get(call.run_id)
        if recorder is None or recorder.start_stored(call.step_id):
            return self.inner.run(call)
        return self._after_commit(recorder, call)

    async def _after_commit(self, recorder: Recorder, call: StepCall) -> WorkResult:
        await recorder.durable()
        return await self.inner.run(call)


def record_run(run: Any, store: RunLog) -> Recorder:
    """Record `run` into `store` from now on, with the events it already has; returns the `Recorder`.

    Call it right after `Engine.start` (before the run's task first runs),
    so the plan is saved before `RunStarted`. A streamed run's plan is
    saved when it is complete. With a `DurableRunner` as the engine's
    runner, steps wait for their start to be stored (group commit).
    """
    runner = getattr(getattr(run, "engine", None), "runner", None)
    durable = runner if isinstance(runner, DurableRunner) else None
    recorder = Recorder(run, store, gated=durable is not None)
    hold_run(store, run.run_id, on_lost=recorder.lost)  # `LeaseHeldError` before anything is written
    if run.plan.steps:  # a streamed run starts with an empty plan
        recorder._save_plan()
    recorder._queue.extend(run.history)
    recorder.flush()
    run.subscribe(recorder)
    if durable is not None:
        durable.recorders[run.run_id] = recorder  # until the run's RunFinished (the recorder lets go of it)
        recorder.runner = durable
    return recorder
