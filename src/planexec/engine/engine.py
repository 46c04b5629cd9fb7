"""The execution engine: runs validated plans with asyncio, driven by dependencies alone.

Owns `Engine`: its settings are one frozen `EngineConfig` (in `config`),
from which it resolves its collaborators (registry, runner, checker, the
seeded random source, subscribers); it starts runs (`start`, `resume`,
`start_streaming`), each a `Run` (in `run`) that does the running, and the
rollback run of an aborted one, with the settings a rollback keeps.
Imports `engine.config`, `engine.criteria`, `engine.loop`, `engine.recording`,
`engine.results`, `engine.resume`, `engine.run`, `engine.runner`,
`engine.streaming`, `plan`, `usage` and `workers.registry`.
"""

from __future__ import annotations

import random
import unicodedata
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from planexec.engine.approval import Approver
from planexec.engine.config import EngineConfig, Subscriber
from planexec.engine.criteria import Checker, CriteriaChecker
from planexec.engine.loop import run_to_end
from planexec.engine.recording import DurableRunner, hold_run, let_go, record_run, require_intact
from planexec.engine.results import RunResult
from planexec.engine.resume import plan_resumption
from planexec.engine.run import Run
from planexec.engine.runner import LocalRunner
from planexec.engine.streaming import StepStream, StreamingRun
from planexec.plan.drafts import Planning
from planexec.plan.model import Plan, Step
from planexec.plan.validation import check_plan
from planexec.usage import Usage
from planexec.workers.registry import Registry
from planexec.workers.worker import ModelWorker

__all__ = ["Approver", "Engine", "EngineConfig", "Run"]


class Engine:
    """Runs plans on a registry's workers.

    `max_concurrency` caps steps running at once; `worker_limits` caps steps
    per worker (a worker's own `max_concurrency` applies when not given);
    `default_timeout` (seconds) applies to steps without a timeout; `seed`
    makes retry jitter reproducible; `approver` decides steps marked
    `requires_approval` (without one they are refused, never run silently);
    `cancel_grace` (seconds) is how long a cancelled step may take to stop
    before the run ends without it. The synthesizer is bounded by `default_timeout`.

    Revisions (see `revisions`): with a `replanner`, a step's ``replan``
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

    The plan is a contract (see `planexec.workers.gate`): every tool call a
    role worker makes passes its step's grants, quarantine and the sensitive
    argument rule; `call_approver` decides a call that changes things and
    that the plan did not pre-approve (without one it is refused; an
    escalation reaches it only when it is a person), and a revision that
    grants more than the version it revises needs a person. `goal_trusted`
    False (a sub-team's goal built from untrusted output) starts every
    worker quarantined. `enforce_contract` False turns it off, to measure
    what it costs.

    Models: a step that names `models` (or whose worker has a cascade in
    `cascades`) starts on the model `model_router` picks and moves to the
    next when an attempt fails (see `engine.cascade`); a cascade of a worker
    that works with no model, or naming a model the registry cannot resolve,
    is a `ValueError` here.

    Give the settings as keywords (`Engine(registry, max_concurrency=8)`) or
    as one `EngineConfig` (`Engine(config=...)`; keywords given as well
    replace its values); `engine.config` is what the engine runs with.
    """

    def __init__(self, registry: Registry | None = None, *, config: EngineConfig | None = None, **settings: Any) -> None:
        config = config if config is not None else EngineConfig()
        if registry is not None:
            settings["registry"] = registry
        if settings:
            config = config.replace(**settings)  # validated again, and a TypeError names a keyword that is no setting
        self._config = config
        self.registry = config.registry if config.registry is not None else Registry.default()
        self.runner = config.runner if config.runner is not None else LocalRunner(self.registry)
        if config.store is not None and not isinstance(self.runner, DurableRunner):
            self.runner = DurableRunner(self.runner)  # no step runs before its start is stored
        self.checker: Checker | CriteriaChecker = config.checker if config.checker is not None else CriteriaChecker(self.registry)
        _check_cascades(config.cascades, self.registry)
        self.random = random.Random(config.seed)
        self.subscribers: list[Subscriber] = [config.on_event] if config.on_event else []

    @property
    def config(self) -> EngineConfig:
        """The settings this engine runs with (frozen; `config.replace(...)` makes another)."""
        return self._config

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
        drafts = planning.draft_events() if planning is not None else []
        run = Run(self, plan, run_id_for(run_id), setup=setup, drafts=drafts)
        for role, used in (overhead or {}).items():
            run.add_overhead(role, used)
        self._record(run)
        run.launch(name=f"planexec {run.run_id}")
        return run

    def resume(self, run_id: str) -> Run:
        """Continue a stored run that stopped (a crash, `kill -9`, a cancel, a decision it waited for).

        Steps that ended are never run again; a step cut off mid-attempt runs
        again only if idempotent (or a person said retry with `StepResolved`);
        otherwise the run ends ``needs_decision`` once nothing else can go on.
        Raises `ResumeError` for a run that finished, `RunNotFoundError` for an
        unknown one, `LeaseHeldError` (naming the process) for a run another
        live process is running: the store leases each run to one process;
        `TamperedError` (naming what changed) for a run whose stored records
        do not match the store's audit log.
        """
        store = self._config.store
        if store is None:
            raise ValueError("resume needs an engine with a store: Engine(..., store=open_store(...))")
        store.run(run_id)  # RunNotFoundError before a lease is taken for a run that does not exist
        hold_run(store, run_id)  # LeaseHeldError while another process runs it; taken before reading, so nothing is missed
        try:
            require_intact(store, run_id)  # TamperedError: records changed after they were written are never acted on
            events = store.events(run_id)
            versions = store.plan_versions(run_id)
            resumption = plan_resumption(run_id, events, versions, self.is_idempotent)
            check_plan(resumption.plan, self.registry)
            run = Run(self, resumption.plan, run_id, resumption=resumption)
            self._record(run)
        except BaseException:
            let_go(store, run_id)
            raise
        run.launch(name=f"planexec {run.run_id} (resumed)")
        return run

    def _record(self, run: Run) -> None:
        if self._config.store is not None:
            record_run(run, self._config.store)

    def start_streaming(self, stream: StepStream, *, run_id: str | None = None, setup: Mapping[str, Any] | None = None) -> Run:
        """Start a run whose steps arrive from a `PlanStream`: each starts once it is parsed and its dependencies end.

        Each step is checked on its own before it joins; the whole plan is
        validated when the stream ends, and a late problem stops the run
        cleanly (status ``failed``, every started step recorded). A streamed
        plan cannot be approved before its steps start: an engine with a
        `plan_approver` refuses to stream (ValueError). `setup` is recorded in
        `RunStarted`, as `start`'s.
        """
        if self._config.plan_approver is not None:
            raise ValueError(
                "a streamed plan starts running before it is complete, so it cannot be approved first: run it without a plan_approver"
            )
        empty = Plan.model_construct(plan_id=stream.plan_id, goal=stream.goal, steps=[])
        run = StreamingRun(self, empty, run_id_for(run_id), setup=setup, streaming=True)
        run.launch(name=f"planexec {run.run_id}")
        self._record(run)
        run.feed(stream, name=f"planexec {run.run_id} plan stream")
        return run

    def start_rollback(self, plan: Plan, *, run_id: str) -> Run:
        """Start the rollback plan of an aborted run, with this engine's settings less those a rollback must not have."""
        config = self._config.replace(
            # the same resolved collaborators, not new defaults: the steps undone ran on these
            registry=self.registry,
            runner=self.runner,
            checker=self.checker,
            # dropped: a rollback is not revised (it undoes the plan; it does not pursue its goal), so no replanner or joiner
            replanner=None,
            joiner=None,
            # dropped: its answer is not read (only its steps matter), so no synthesizer spends a model call on one
            synthesizer=None,
            # dropped: its events reach the store and the subscribers through the aborted run (as `SubRunEvent`);
            # recorded or delivered again they would count twice, and it would look resumable on its own
            store=None,
            on_event=None,
            # dropped: the rollback plan is part of the plan's content hash, approved with it (a saved plan by its name)
            plan_approver=None,
        )  # kept: the budget (bounding the rollback's own use), limits, timeouts, cancel grace, step approver, checker, seed
        return Engine(config=config).start(plan, run_id=run_id)

    async def run(self, plan: Plan, *, run_id: str | None = None) -> RunResult:
        """Run the plan to the end and return its result."""
        return await self.start(plan, run_id=run_id).result()

    def run_sync(self, plan: Plan, *, run_id: str | None = None) -> RunResult:
        """`run` for code without an event loop; returns even when a tool that ignored its cancellation is still running."""
        return run_to_end(self.run(plan, run_id=run_id), grace=self._config.cancel_grace)

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
        limits = self._config.worker_limits
        if worker in limits:
            return limits[worker]
        w = self.registry.workers.get(worker)
        return getattr(w, "max_concurrency", None) if w is not None else None


def _check_cascades(cascades: Mapping[str, Any], registry: Registry) -> None:
    """`ValueError` naming a cascade of a registered worker that works with no model, or a model its registry cannot
    name (a worker not registered yet is left to whoever registers it: a role a team does not load)."""
    for name, models in cascades.items():
        worker = registry.workers.get(name)
        if worker is not None and not isinstance(worker, ModelWorker):
            raise ValueError(f"cascades[{name!r}]: worker {name!r} works with no model of its own, so it has no cascade")
        for model in models:
            problem = registry.model_problem(model)
            if problem is not None:
                raise ValueError(f"cascades[{name!r}]: {problem}")


RUN_ID_MAX = 200  # characters: an id is a file name's worth, shown in tables, addresses and logs


def check_run_id(run_id: str) -> str:
    """`run_id` when a run may be given it, else `ValueError` naming the rule it breaks.

    Any text of 1 to `RUN_ID_MAX` characters, but no control character
    (a newline would forge a line of a log or a report) and not ``.`` or
    ``..`` (a browser reads those as a folder of the console's address, not
    a run). A sub-run's ``/`` is fine (``R/step``).
    """
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("a run id must be a non-empty string")
    if len(run_id) > RUN_ID_MAX:
        raise ValueError(f"a run id has at most {RUN_ID_MAX} characters, not {len(run_id):,}")
    bad = next((c for c in run_id if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise ValueError(f"a run id may not hold a control character ({bad!r} in {run_id!r})")
    if run_id in (".", ".."):
        raise ValueError(f"a run id may not be {run_id!r}: the console's addresses would read it as a folder")
    return run_id


def run_id_for(run_id: str | None) -> str:
    """The id a new run gets: `run_id` when one is given (`check_run_id`: `ValueError` naming the rule it breaks), else a new one."""
    return check_run_id(run_id) if run_id else new_run_id()


def new_run_id(prefix: str = "run") -> str:
    """A sortable run id: ``run-YYYYmmdd-HHMMSS-xxxxxx`` (a face names itself: ``web-…``, ``mcp-…``)."""
    return f"{prefix}-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
