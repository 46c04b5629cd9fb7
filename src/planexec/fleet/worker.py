"""Several engines, one store: `submit_plan` queues a plan as a run, `QueueWorker` takes queued runs and runs them.

Owns `submit_plan` (what ``planexec submit`` calls), `QueueWorker` (the
loop of ``planexec worker``), `WorkerRun` and `WorkerReport` (what a
worker did, as records), `tools_registry` (a run's default registry: the
built-ins and its tools modules) and `RELEASED` (the reason a worker
gives the runs it hands back).

**Approval.** A worker never runs a plan nobody approved: `submit_plan`
stores the plan version's approval request with the run, decided at once
by `approved_by` (``--yes``, a policy, the person at the terminal) or left
pending for a person (``planexec approve RUN_ID``); the store's claim
takes only a run whose version is approved and refuses one that was
denied (see `store.queue`). The worker's engine asks again (a
`PlanApprover` on the store: the stored decision stands; a revision waits
for a person). Steps and tool calls that require approval are approved in
the submitter's name when it said so (`approve_steps`, ``--yes``), else
they wait for ``planexec approve RUN_ID --step ID`` while the run goes on.

**The loop.** While it has a free slot (`concurrency` runs at once, in one
event loop, on one store connection) the worker claims the next run
(`store.claim_run`: queued and approved, or left behind by a worker that
is gone; the run's lease taken in the same transaction), polling every
`poll` seconds (jittered) when none waits. A fresh run starts with its
stored plan and setup; one another worker left behind is resumed
(`Engine.resume`, as ``planexec resume``: ended steps stay, cut-off
idempotent steps run again, other cut-off steps are held and the run ends
``needs_decision``). Each run gets an `Engine` on the store with the run's
registry (`registry_for(plan, setup)`, default `tools_registry`) and the
engine options given. Once it ends the queue row is settled: ``done``, or
``queued`` again when it was cancelled (released, or its store failed):
the next claim resumes it; or ``queued`` with a due time when it stopped
as ``scheduled`` (its next steps wait for their time: no claim takes it
before then, and no worker holds it meanwhile). A run that cannot be set up here (a tools
module missing, a plan that no longer validates) is ``refused`` with the
reason, never run; so is a run whose stored records changed after they
were written (`TamperedError`, checked before its plan is read).

**Stopping.** `stop()` (SIGTERM or Ctrl-C with `serve(handle_signals=True)`)
stops taking runs and releases the runs in hand: each is cancelled at its
next step boundary (when none of its steps is running, so nothing is cut
off), at the latest `grace` seconds later (a step still running then is
cut off as by a crash), and handed back: another worker resumes it at
once. `stop(now=True)` (the second signal) cancels them at once. A worker
that dies (SIGKILL, a lost machine) leaves its runs taken, with leases that
expire `PLANEXEC_LEASE_TTL` seconds after their last heartbeat (at once
for a worker of the same machine, which sees the process gone); another
worker then takes them over.

Imports `engine`, `store`, `workers`, `plan`, `telemetry` and `errors`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from planexec.config import RunnerConfig
from planexec.engine.approval import PlanApprover, StoreApprover
from planexec.engine.calls import approve_calls
from planexec.engine.config import EngineConfig
from planexec.engine.engine import Run, run_id_for
from planexec.engine.recording import Holds
from planexec.engine.results import RunStatus
from planexec.engine.resume import ResumeError
from planexec.engine.runner import Runner
from planexec.errors import StoreError, TamperedError
from planexec.fleet.saved import recorded_runner, saved_plan_engine
from planexec.plan.model import Plan
from planexec.plan.validation import check_plan, validate_plan
from planexec.records import Record
from planexec.scale import runner_for
from planexec.store.audit import require_intact
from planexec.store.base import RunStore
from planexec.store.leases import Holder
from planexec.store.queue import MAX_TAKEOVERS, Claim, QueuedRun, QueueState, QueueStore
from planexec.telemetry import start_run
from planexec.workers.registry import Registry

__all__ = [
    "PARK_AFTER",
    "RELEASED",
    "FleetStore",
    "QueueWorker",
    "WorkerReport",
    "WorkerRun",
    "queue_store",
    "submit_plan",
    "tools_registry",
]

log = logging.getLogger("planexec.fleet")

RELEASED = "released by its worker, which is stopping: another worker resumes it"
PARK_AFTER = 30.0  # seconds: a run whose next steps all wait longer than this goes back to the queue until due
RegistryFor = Callable[[Plan, Mapping[str, Any]], Registry]


@runtime_checkable
class FleetStore(RunStore, QueueStore, Holds, Protocol):
    """A run store with a queue and leases, what a fleet takes runs from: the SQL stores (`queue_store` checks one)."""

    location: str


def queue_store(store: object) -> FleetStore:
    """`store` when it keeps a run queue and leases (the stores planexec opens do); a `StoreError` naming it otherwise."""
    if not isinstance(store, FleetStore):  # none, or a plugin's
        where = str(getattr(store, "location", "none"))
        raise StoreError(f"runs are handed to workers through a run store with a queue, and {where} keeps none", location=where)
    return store


EngineFor = Callable[[Plan, Mapping[str, Any]], EngineConfig]  # a run's engine settings, its registry among them
_MAX_BACKOFF = 5.0  # seconds between claims while the store fails


def submit_plan(
    store: FleetStore,
    plan: Plan,
    *,
    registry: Registry | None = None,
    run_id: str | None = None,
    setup: Mapping[str, Any] | None = None,
    approved_by: str | None = None,
    approve_steps: bool = False,
    submitted_by: str = "",
    drafts: Iterable[Mapping[str, Any]] = (),
    denied_by: tuple[str, str] | None = None,
) -> QueuedRun:
    """Queue `plan` as a run for the store's workers; its queue row. Nothing runs here.

    With `registry` the plan is checked against it first
    (`PlanValidationError`, nothing stored): give the registry the workers
    build, from the tools modules in ``setup["tools"]``. The plan version's
    approval is requested, and decided by `approved_by` when given; without
    it no worker takes the run before a person approves it (``planexec
    approve RUN_ID``). `approve_steps` approves the steps (and plain tool
    calls) that require approval in `approved_by`'s name. `denied_by`
    (who, why: a policy that rejected it) stores it refused: it ends at once,
    for people to see why. `drafts` are the planner's drafts that wrote it
    (see `RunQueue.enqueue`). `StoreError` when the store has the run id already.
    """
    if registry is not None:
        check_plan(plan, registry)
    run_id = run_id_for(run_id)
    decided: tuple[bool, str, str | None] | None = None
    if denied_by is not None:
        decided = (False, denied_by[0], denied_by[1])
    elif approved_by:
        decided = (True, approved_by, "approved when submitted")
    return store.enqueue(
        run_id, plan, setup=setup, submitted_by=submitted_by or approved_by or "", approve_steps=approve_steps, drafts=drafts,
        decided=decided,
    )  # fmt: skip


def tools_registry(plan: Plan, setup: Mapping[str, Any]) -> Registry:
    """A run's registry: the built-ins and installed plugins, then the tools modules its setup names."""
    return Registry.default(*[str(t) for t in setup.get("tools", [])])


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerRun(Record):
    """One run a worker took: `how` (``started``, ``resumed``), its `outcome` (the run's status, or ``released``, ``refused``, ``handed back``, ``error``)."""

    run_id: str
    how: str
    outcome: str
    reason: str | None = None
    takeover: bool = False
    wall_time: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerReport(Record):
    """What a worker did until it stopped: the runs it took, in the order they ended, why it stopped (`store_failed`: the store's error)."""

    worker: str
    store: str
    runs: list[WorkerRun] = field(default_factory=list)
    stopped: str = ""
    store_failed: str | None = None


class QueueWorker:
    """Takes runs from a store's queue and runs them, `concurrency` at once, until stopped (see the module docstring).

    `idle_exit` (seconds): stop once nothing ran and nothing could be
    taken for that long. `once`: take the runs waiting now (at most
    `concurrency`), run them, stop. `grace` (seconds): how long a run being
    released may finish its running steps. `give_up_after` (seconds): stop
    when claiming has failed that long (the store is down; an orchestrator
    restarts the worker, and other workers take its runs over). `engine` is
    each run's engine settings (`EngineConfig`: limits, timeouts); `park_after` (seconds, default
    `PARK_AFTER`; None: never): a run whose next steps all wait for their time longer than this stops as
    ``scheduled`` and goes back to the queue, taken again when due (the settings' own `park_after` wins); `engine_for`, when given,
    gives them per run instead, its registry among them (a `Team`'s worker: the team's registry,
    replanner and joiner, see `Team.worker`); `on_note` receives a line per thing worth saying
    (default: the ``planexec.fleet`` log).
    """

    def __init__(
        self,
        store: FleetStore,
        *,
        concurrency: int = 1,
        registry_for: RegistryFor | None = None,
        engine: EngineConfig | None = None,
        engine_for: EngineFor | None = None,
        poll: float = 0.5,
        idle_exit: float | None = None,
        once: bool = False,
        grace: float = 20.0,
        max_takeovers: int = MAX_TAKEOVERS,
        give_up_after: float = 60.0,
        on_note: Callable[[str], None] | None = None,
        runner: RunnerConfig | None = None,
        park_after: float | None = PARK_AFTER,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"a worker runs at least one run at a time, not {concurrency}")
        if poll <= 0 or grace < 0 or (idle_exit is not None and idle_exit < 0):
            raise ValueError("poll must be positive; grace and idle_exit cannot be negative")
        self.store = store
        # where steps run: these settings when they name a runner, else where each run was started (its setup)
        self.runner = runner or RunnerConfig()
        self._runners: dict[tuple[int, str], Runner | None] = {}
        self.concurrency = concurrency
        self.registry_for = registry_for or tools_registry
        self.engine_config = engine if engine is not None else EngineConfig()
        self.engine_for = engine_for
        self.poll = poll
        self.idle_exit = idle_exit
        self.once = once
        self.grace = grace
        self.max_takeovers = max_takeovers
        self.give_up_after = give_up_after
        self.park_after = park_after
        self.note = on_note or log.info
        me = Holder.me()
        self.name = f"process {me.pid} on {me.host}"
        self.done: list[WorkerRun] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._runs: dict[str, Run] = {}
        self._stopping = False
        self._now = False
        self._why = ""
        self._wake: asyncio.Event | None = None
        self._failures = 0
        self._failing_since = 0.0
        self.failed: str | None = None  # why the store failed, when the worker stopped because of it
        self._registries: dict[str, Registry] = {}

    # --- the loop ----------------------------------------------------------------------

    async def serve(self, *, handle_signals: bool = False) -> WorkerReport:
        """Take and run runs until stopped (`stop`, `idle_exit`, `once`); what it did. `handle_signals`: SIGTERM and SIGINT stop it."""
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        handled = self._handle_signals(loop) if handle_signals else []
        try:
            if self.once:
                await self._fill()
                self._why = self._why or "once: ran the runs that were waiting"
            else:
                await self._loop()
            while self._tasks:  # the runs in hand end (released, when stopping)
                await asyncio.wait(list(self._tasks.values()))
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)
        return WorkerReport(
            worker=self.name, store=self.store.location, runs=list(self.done), stopped=self._why or "stopped", store_failed=self.failed
        )

    async def _loop(self) -> None:
        assert self._wake is not None
        idle_since: float | None = None
        while not self._stopping:
            took = await self._fill()
            if took or self._tasks:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            if idle_since is not None and self.idle_exit is not None and time.monotonic() - idle_since >= self.idle_exit:
                self._why = f"idle for {self.idle_exit:g}s: nothing to take"
                return
            self._wake.clear()
            pause = self.poll * random.uniform(0.8, 1.2)  # workers started together do not poll in step
            if self._failures:
                pause = min(_MAX_BACKOFF, self.poll * 2**self._failures)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=pause)
            except TimeoutError:
                pass

    async def _fill(self) -> bool:
        """Claim runs while a slot is free and one can be taken; True when one was."""
        took = False
        while len(self._tasks) < self.concurrency and not self._stopping:
            try:
                claim = await asyncio.to_thread(self.store.claim_run, max_takeovers=self.max_takeovers)
            except StoreError as exc:  # the store is down: try again later, with a growing pause, then give up
                self._failures += 1
                self._failing_since = self._failing_since or time.monotonic()
                if time.monotonic() - self._failing_since >= self.give_up_after:
                    self.failed = str(exc)
                    self.stop(why=f"the store failed for {self.give_up_after:g}s: {exc}")
                else:
                    self.note(f"cannot claim a run: {exc}")
                return took
            self._failures, self._failing_since = 0, 0.0
            if claim is None:
                return took
            took = True
            self._launch(claim)
        return took

    def _launch(self, claim: Claim) -> None:
        run_id = claim.run_id
        task = asyncio.get_running_loop().create_task(self._work(claim), name=f"planexec worker {run_id}")
        self._tasks[run_id] = task

        def ended(_: asyncio.Task[None]) -> None:
            self._tasks.pop(run_id, None)
            if self._wake is not None:
                self._wake.set()  # a slot is free: claim again at once

        task.add_done_callback(ended)

    # --- one run -------------------------------------------------------------------------

    async def _work(self, claim: Claim) -> None:
        run_id, t0 = claim.run_id, time.monotonic()
        how = "started" if claim.fresh else "resumed"
        what = f"took over run {run_id} (its worker was gone)" if claim.takeover else f"took run {run_id}"
        self.note(f"{what}: {'starting' if claim.fresh else 'resuming'} it")
        try:
            run = await self._begin(claim)
        except Exception as exc:  # it cannot be set up here: refused, never run (a finished one is done; a store that failed: handed back)
            if isinstance(exc, ResumeError):
                state = QueueState.DONE
            elif isinstance(exc, TamperedError):  # its records changed in the store: no worker may run it
                state = QueueState.REFUSED
            else:
                state = QueueState.QUEUED if isinstance(exc, StoreError) else QueueState.REFUSED
            reason = f"{self.name} could not {'start' if claim.fresh else 'resume'} it: {type(exc).__name__}: {exc}"
            await self._settle(claim, state, reason)
            self.store.let_go(run_id)
            self._ended(claim, how, "handed back" if state is QueueState.QUEUED else state.value, reason, t0)
            return
        self._runs[run_id] = run
        if self._stopping:
            self._release(run)
        try:
            result = await run.result()
        except Exception as exc:  # the engine failed: the run stays taken, and another worker takes it over
            self.store.let_go(run_id)
            self._ended(claim, how, "error", f"{type(exc).__name__}: {exc}", t0)
            return
        finally:
            self._runs.pop(run_id, None)
        # released, or its store failed: the next claim resumes it; scheduled: a claim once it is due resumes it
        handed_back = result.status in (RunStatus.CANCELLED, RunStatus.SCHEDULED)
        await self._settle(claim, QueueState.QUEUED if handed_back else QueueState.DONE, result.reason, due=result.due)
        self.store.let_go(run_id)  # given back once its RunFinished was stored; not when the store failed
        self._ended(claim, how, "released" if result.reason == RELEASED else result.status.value, result.reason, t0)

    async def _begin(self, claim: Claim) -> Run:
        """The claimed run, going on from where it stopped (its first step, for a queued run) on an engine of its own."""
        await asyncio.to_thread(require_intact, self.store, claim.run_id)  # TamperedError before its plan names a tools module
        versions = await asyncio.to_thread(self.store.plan_versions, claim.run_id)
        if not versions:
            raise ValueError(f"run {claim.run_id!r} has no stored plan")
        settings, registry = self.engine_config, None
        if self.engine_for is not None:
            settings = self.engine_for(versions[-1].plan, claim.run.setup)
            registry = settings.registry
        if settings.park_after is None and self.park_after is not None:
            settings = settings.replace(park_after=self.park_after)  # a run that can only wait goes back to the queue
        if registry is None:
            registry = self._registry(versions[-1].plan, claim.run.setup)
        runner = self._runner(registry, claim.run.setup)
        engine = saved_plan_engine(registry, engine=settings, store=self.store, runner=runner, **self._approvers(claim.run))
        return start_run(lambda: engine.resume(claim.run_id))

    def _runner(self, registry: Registry, setup: Mapping[str, Any]) -> Runner | None:
        """Where the run's steps go: the worker's runner settings, else the runner the run recorded (as `planexec resume`)."""
        settings = recorded_runner(self.runner, setup)
        key = (id(registry), settings.model_dump_json())
        if key not in self._runners:  # one per registry and place: a Ray runner keeps its actors for the next runs
            self._runners[key] = runner_for(settings, registry)
        return self._runners[key]

    def _registry(self, plan: Plan, setup: Mapping[str, Any]) -> Registry:
        """The registry of the last run with the same tools modules when the plan validates on it, else `registry_for`'s.

        Building one reads every installed plugin's entry points (8 ms a run
        here, more than 20 no-op steps cost); one registry serves many runs.
        """
        key = json.dumps(setup.get("tools", []), sort_keys=True)
        registry = self._registries.get(key)
        if registry is None or validate_plan(plan, registry):
            registry = self._registries[key] = self.registry_for(plan, setup)
        return registry

    def _approvers(self, queued: QueuedRun) -> dict[str, Any]:
        """The plan approver (the stored decision; a revision waits for a person), and the step and call approvers."""

        def waiting(run_id: str, step_id: str | None) -> None:
            what = f"step {step_id}" if step_id else "its plan"
            self.note(f"run {run_id}: {what} waits for approval: planexec approve {run_id}{f' --step {step_id}' if step_id else ''}")

        options: dict[str, Any] = {"plan_approver": PlanApprover(self.store, person=True, on_wait=waiting)}
        if queued.approve_steps:
            by = f"{queued.submitted_by or 'the submitter'} (--yes when submitted)"
            options["approver"] = StoreApprover(self.store, ask=_approve, by=by)
            options["call_approver"] = StoreApprover(self.store, ask=approve_calls, by=by, person=False)
        else:
            options["approver"] = StoreApprover(self.store, on_wait=waiting)
            options["call_approver"] = StoreApprover(self.store, on_wait=waiting, person=True)
        return options

    async def _settle(self, claim: Claim, state: QueueState, reason: str | None, *, due: datetime | None = None) -> None:
        try:
            if not await asyncio.to_thread(self.store.settle_queued, claim.run_id, claim.owner, state, reason, due=due):
                self.note(f"run {claim.run_id}: another worker holds it now; its queue row is theirs")
        except StoreError as exc:  # its lease expires, and another worker settles it
            self.note(f"run {claim.run_id}: cannot record it as {state.value}: {exc}")

    def _ended(self, claim: Claim, how: str, outcome: str, reason: str | None, t0: float) -> None:
        wall = round(time.monotonic() - t0, 3)
        self.done.append(WorkerRun(run_id=claim.run_id, how=how, outcome=outcome, reason=reason, takeover=claim.takeover, wall_time=wall))
        why = f": {reason}" if reason and outcome != "succeeded" else ""
        self.note(f"run {claim.run_id} {how} here ended {outcome} in {wall:.2f}s{why}")

    def wake(self) -> None:
        """Claim at once instead of at the next poll (a run was just submitted or approved); call it from the worker's loop."""
        if self._wake is not None:
            self._wake.set()

    # --- stopping ------------------------------------------------------------------------

    def stop(self, *, now: bool = False, why: str = "stopped") -> None:
        """Take no more runs; release the runs in hand at their next step boundary (within `grace`), or at once with `now`.

        Call it from the worker's event loop (from another thread:
        ``loop.call_soon_threadsafe(worker.stop)``).
        """
        first = not self._stopping
        self._stopping = True
        self._why = self._why or why
        if now and not self._now:
            self._now = True
        elif not first:
            return
        if self._wake is not None:
            self._wake.set()
        for run in list(self._runs.values()):
            self._release(run)

    def _release(self, run: Run) -> None:
        """Cancel `run` (reason `RELEASED`) once none of its steps runs, at the latest after `grace` seconds."""
        if self._now:
            run.cancel(RELEASED)
            return
        asyncio.get_running_loop().call_later(self.grace, run.cancel, RELEASED)
        run.cancel_between_steps(RELEASED)  # no step starts from now on: the run stops between steps

    def _handle_signals(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        handled: list[int] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError):  # no signal handlers in this loop (Windows, not the main thread)
                continue
            handled.append(sig)
        return handled

    def _on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if not self._stopping:
            held = len(self._runs)
            self.note(
                f"{name}: taking no more runs; releasing the {held} run(s) in hand at their next step boundary "
                f"(at most {self.grace:g}s; {name} again: at once)"
            )
            self.stop(why=name)
        else:
            self.note(f"{name} again: cancelling the runs in hand at once")
            self.stop(now=True, why=name)


async def _approve(_step: Any) -> bool:
    """``--yes`` given when the run was submitted: a step that requires approval is approved."""
    return True
