"""The execution engine: runs validated plans with asyncio, driven by dependencies alone.

Owns the engine's configuration (registry, runner, concurrency limits,
default timeout, synthesizer, checker, approver, seed, subscribers) and
starting runs: `Engine.start` validates a plan and hands it to a `Run`
(in `execution`), which does the running. Imports `plan`, `registry`,
`runner`, `checks`, `synthesis`, `validation`, `execution`, `results`.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from planexec.engine.approval import Approver, PlanApprover
from planexec.engine.criteria import Checker, CriteriaChecker
from planexec.engine.join import Joiner
from planexec.engine.recording import DurableRunner, RunLog, record_run
from planexec.engine.replan import Replanner
from planexec.engine.results import RunResult
from planexec.engine.resume import plan_resumption
from planexec.engine.run import Run, Subscriber
from planexec.engine.runner import LocalRunner, Runner
from planexec.engine.streaming import StepStream, StreamingRun, follow
from planexec.engine.synthesis import Synthesizer
from planexec.plan.drafts import Planning
from planexec.plan.model import Plan, Step
from planexec.plan.validation import check_plan
from planexec.usage import Budget, Usage
from planexec.workers.registry import Registry

__all__ = ["Approver", "Engine", "Run"]


class Engine:
    """Runs plans on a registry's workers.

    `max_concurrency` caps steps running at once; `worker_limits` caps steps
    per worker (a worker's own `max_concurrency` applies when not given);
    `default_timeout` (seconds) applies to steps without a timeout; `seed`
    makes retry jitter reproducible; `approver` decides steps marked
    `requires_approval` (without one they are refused, never run silently);
    `cancel_grace` (seconds) is how long a cancelled step may take to stop
    before the run ends without it. The synthesizer is bounded by `default_timeout`.

    Monitoring (see `monitor`): with a `replanner`, a step's ``replan``
    failure action, a failed success check (unless `replan_failed_checks` is
    False) or the `joiner`'s request produce a new version of the plan that
    keeps every finished step, at most `max_replans` times. With a `joiner`,
    once the steps end it decides to finish (its answer is the run's) or to
    replan. Both are bounded by `default_timeout`. With a `budget`, a run
    that uses more stops as ``failed`` (rule ``budget``), checked as each
    attempt, draft and joiner call ends. With a `store` (see `planexec.store`)
    every event is persisted as it happens, and `resume` continues a run
    that stopped for any reason. With a `plan_approver` (see `approval`), a
    plan version runs only once its exact content hash is approved (the
    first before any step, each revision before it replaces the last); a
    refusal ends the run ``failed`` (rule ``plan_rejected``). When a run
    aborts after steps with side effects (not idempotent) succeeded, the
    plan's `rollback_plan` runs as the sub-run ``<run>/rollback`` and its
    result is `RunResult.rollback`.
    """

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        runner: Runner | None = None,
        max_concurrency: int = 64,
        worker_limits: Mapping[str, int] | None = None,
        default_timeout: float | None = 300.0,
        synthesizer: Synthesizer | None = None,
        checker: Checker | None = None,
        seed: int | None = None,
        on_event: Subscriber | None = None,
        approver: Approver | None = None,
        cancel_grace: float = 5.0,
        replanner: Replanner | None = None,
        max_replans: int = 2,
        joiner: Joiner | None = None,
        replan_failed_checks: bool = True,
        budget: Budget | None = None,
        store: RunLog | None = None,
        plan_approver: PlanApprover | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        bad = {w: n for w, n in (worker_limits or {}).items() if not isinstance(n, int) or n < 1}
        if bad:
            raise ValueError(f"worker_limits must be whole numbers of at least 1; got {bad}")
        self.registry = registry if registry is not None else Registry.default()
        self.runner = runner if runner is not None else LocalRunner(self.registry)
        self.store = store
        self.plan_approver = plan_approver
        if store is not None and not isinstance(self.runner, DurableRunner):
            self.runner = DurableRunner(self.runner)  # no step runs before its start is stored
        self.max_concurrency = max_concurrency
        self.worker_limits = dict(worker_limits or {})
        self.default_timeout = default_timeout
        self.synthesizer = synthesizer
        self.checker = checker if checker is not None else CriteriaChecker(self.registry)
        self.random = random.Random(seed)
        self.subscribers: list[Subscriber] = [on_event] if on_event else []
        self.approver = approver
        self.cancel_grace = cancel_grace
        if max_replans < 0:
            raise ValueError("max_replans must be 0 or more")
        self.replanner = replanner
        self.max_replans = max_replans
        self.joiner = joiner
        self.replan_failed_checks = replan_failed_checks
        self.budget = budget

    def start(
        self,
        plan: Plan,
        *,
        run_id: str | None = None,
        validate: bool = True,
        planning: Planning | None = None,
        overhead: Mapping[str, Usage] | None = None,
        setup: Mapping[str, Any] | None = None,
    ) -> Run:
        """Validate the plan and start running it in the current event loop; returns the `Run` handle.

        Raises `PlanValidationError` (listing every problem) before anything runs.
        `planning` (from `Planner.draft`) puts the planner's drafts and their
        usage into the run's events and totals; `overhead` (role -> usage, e.g.
        a router's call) is counted in the run's usage under those roles;
        `setup` (JSON values) is recorded in `RunStarted` for whoever resumes the run.
        """
        if validate:
            check_plan(plan, self.registry)
        run = Run(self, plan, run_id or new_run_id())
        run.setup = dict(setup or {})
        for role, used in (overhead or {}).items():
            run.add_overhead(role, used)
        for d in planning.drafts if planning is not None else ():
            run._drafts.append({"attempt": d.attempt, "model": d.model, "problems": d.problems, "usage": d.usage, "wall_time": d.wall_time})
        self._record(run)
        run._task = asyncio.get_running_loop().create_task(run._main(), name=f"planexec {run.run_id}")
        return run

    def resume(self, run_id: str) -> Run:
        """Continue a stored run that stopped (a crash, `kill -9`, a cancel, a decision it waited for).

        Steps that ended are never run again; a step cut off mid-attempt runs
        again only if idempotent (or a person said retry with `StepResolved`);
        otherwise the run ends ``needs_decision`` once nothing else can go on.
        Raises `ResumeError` for a run that finished, `RunNotFoundError` for an unknown one.
        """
        if self.store is None:
            raise ValueError("resume needs an engine with a store: Engine(..., store=open_store(...))")
        events = self.store.events(run_id)
        versions = self.store.plan_versions(run_id)
        resumption = plan_resumption(run_id, events, versions, self.is_idempotent)
        check_plan(resumption.plan, self.registry)
        run = Run(self, resumption.plan, run_id, resumption=resumption)
        self._record(run)
        run._task = asyncio.get_running_loop().create_task(run._main(), name=f"planexec {run.run_id} (resumed)")
        return run

    def _record(self, run: Run) -> None:
        if self.store is not None:
            record_run(run, self.store)

    def start_streaming(self, stream: StepStream, *, run_id: str | None = None) -> Run:
        """Start a run whose steps arrive from a `PlanStream`: each starts once it is parsed and its dependencies end.

        Each step is checked on its own before it joins; the whole plan is
        validated when the stream ends, and a late problem stops the run
        cleanly (status ``failed``, every started step recorded). A streamed
        plan cannot be approved before its steps start: an engine with a
        `plan_approver` refuses to stream (ValueError).
        """
        if self.plan_approver is not None:
            raise ValueError(
                "a streamed plan starts running before it is complete, so it cannot be approved first: run it without a plan_approver"
            )
        empty = Plan.model_construct(plan_id=stream.plan_id, goal=stream.goal, steps=[])
        run = StreamingRun(self, empty, run_id or new_run_id(), streaming=True)
        loop = asyncio.get_running_loop()
        run._task = loop.create_task(run._main(), name=f"planexec {run.run_id}")
        self._record(run)
        run._tasks[PLAN_TASK] = loop.create_task(follow(run, stream), name=f"planexec {run.run_id} plan stream")
        return run

    async def run(self, plan: Plan, *, run_id: str | None = None) -> RunResult:
        """Run the plan to the end and return its result."""
        return await self.start(plan, run_id=run_id).result()

    def run_sync(self, plan: Plan, *, run_id: str | None = None) -> RunResult:
        """`run` for code without an event loop."""
        return asyncio.run(self.run(plan, run_id=run_id))

    def needs_approval(self, step: Step) -> bool:
        """True when the step says so, or the tool its action names is declared `requires_approval`."""
        if step.requires_approval:
            return True
        worker = self.registry.workers.get(step.worker)
        tools = getattr(worker, "tools", None)
        found = tools.get(step.action) if isinstance(tools, Mapping) else None
        return bool(getattr(found, "requires_approval", False))

    def is_idempotent(self, step: Step) -> bool:
        """True when running the step twice does no harm: its tool, or its worker, is declared idempotent."""
        worker = self.registry.workers.get(step.worker)
        tools = getattr(worker, "tools", None)
        found = tools.get(step.action) if isinstance(tools, Mapping) else None
        if found is not None and step.action not in getattr(worker, "tasks", ()):
            return bool(getattr(found, "idempotent", False))
        return bool(getattr(worker, "idempotent", False))

    def limit_for(self, worker: str) -> int | None:
        """How many steps of this worker may run at once (None: only the global limit)."""
        if worker in self.worker_limits:
            return self.worker_limits[worker]
        w = self.registry.workers.get(worker)
        return getattr(w, "max_concurrency", None) if w is not None else None


PLAN_TASK = "<plan stream>"  # the key of the task that feeds a streaming run (no step id can look like it)


def new_run_id() -> str:
    """A sortable run id: ``run-YYYYmmdd-HHMMSS-xxxxxx``."""
    return f"run-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
