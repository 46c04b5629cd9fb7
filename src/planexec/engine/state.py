"""The state of one run, in one place, and the operations its collaborators may call on the run.

Owns `RunState` (the plan in force, each step's record and output, the
scheduler, the tasks and slots of running attempts, how the run stands and
why) and `RunControl`, the narrow protocol through which a run's
collaborators (`attempt.Attempts`, `revisions.Revisions`) act on it: emit
an event, fail a step, end the run, launch what is ready. They read and
write the state directly, so the run, its attempts and its revisions agree
on it without subclassing one another. Imports `engine.limits`,
`engine.results`, `engine.resume`, `plan`, `usage` and `workers.io`; never the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Set
from datetime import datetime
from typing import Any, NoReturn, Protocol

from pydantic import BaseModel

from planexec.engine.limits import Slots
from planexec.engine.results import ErrorInfo, ReplanRequest, RunResult, RunStatus, StepRecord
from planexec.engine.resume import Resumption
from planexec.plan.model import FailureAction, Plan, Step
from planexec.plan.scheduler import Scheduler
from planexec.usage import Usage
from planexec.workers.io import Output

__all__ = ["ZERO", "RunControl", "RunState", "append_to_record", "final_action", "run_error", "update_record"]

ZERO = Usage()  # records are immutable: one shared zero

# the names pydantic keeps per record as "set": every field, for every record the engine makes. The engine sets
# fields without pydantic's bookkeeping (`update_record`), so a set per record (216 bytes) said nothing true;
# one set holding every name never changes, whoever assigns a field
_EVERY_FIELD = set(StepRecord.model_fields)


class RunState:
    """Everything one run knows while it runs; its `Run`, attempts and revisions share this one object."""

    def __init__(self, run_id: str, plan: Plan, *, streaming: bool = False) -> None:
        self.run_id = run_id
        self.open = streaming  # steps are still arriving (see `streaming.StreamingRun`)
        self.status = RunStatus.RUNNING
        self.reason: str | None = None
        self.replan: ReplanRequest | None = None  # the request a run that ends asking for a replan carries
        self.pending: ReplanRequest | None = None  # a replan asked for, served once running steps end
        self.draining: str | None = None  # `Run.cancel_between_steps`' reason: no step starts, the run ends once none runs
        self.error: ErrorInfo | None = None
        self.result: RunResult | None = None
        self.done = asyncio.Event()  # set when nothing runs any more (the steps ended, or the run is ending)
        self.tasks: dict[str, asyncio.Task[Any]] = {}  # step tasks, and the revisions' and plan stream's under keys no step id looks like
        self.outputs: dict[str, Output] = {}
        self.attempt_t0: dict[str, float] = {}  # start of the attempt in progress, per step
        self.abandoned: set[str] = set()  # steps whose tool ignored its timeout's cancellation
        self.held: dict[str, Slots] = {}  # the slots each running attempt holds
        self.waiting: set[str] = set()  # steps whose StepReady said they wait (a slot, a person), not started since
        self.starting: set[str] = set()  # started as they were launched (`Attempts.start_now`), their task not yet running
        self.behind: set[str] = set()  # launched to wait for a slot, their task not yet in the queue: none starts before them
        self.held_steps: set[str] = set()  # cut off by a crash, waiting for a person (see `resume`)
        self.scheduled: dict[str, datetime] = {}  # steps waiting for their time, and until when (see `timetable`)
        self.due: datetime | None = None  # a run stopped as scheduled: when its first scheduled step may start
        self.planning = ZERO  # what the planner's drafts cost
        self.overhead: dict[str, Usage] = {}  # work around the run by role (router, joiner)
        self.load_plan(plan)

    def load_plan(self, plan: Plan, *, kept: Set[str] = frozenset()) -> None:
        """Make `plan` the one to run; `kept` steps (a revision's finished ones) start settled as succeeded."""
        self.plan = plan
        self.records = {s.step_id: _new_record(s) for s in plan.steps}
        self.steps = {s.step_id: s for s in plan.steps}
        self.outputs = {sid: out for sid, out in self.outputs.items() if sid in kept}
        self.deps = {s.step_id: s.dependencies for s in plan.steps}
        # steps with no references and no escapes: their parameters are passed as written, nothing to resolve
        self.verbatim = {s.step_id for s in plan.steps if _verbatim(s)}
        self.sched = Scheduler(self.deps, [s.step_id for s in plan.steps if s.accepts_failed_inputs], succeeded=kept)
        self.scheduled = {}  # a new version's steps wait for their own times (kept ones have ended)

    def resume_from(self, r: Resumption) -> None:
        """Take a stopped run's records: ended steps settled, cut-off ones to run again or held for a person."""
        self.records = r.records
        self.outputs = {sid: rec.output for sid, rec in r.records.items() if rec.output is not None and sid in r.settled}
        self.held_steps = set(r.held)
        tolerant = [s.step_id for s in self.plan.steps if s.accepts_failed_inputs]
        self.sched = Scheduler(self.deps, tolerant, settled=r.settled, held=r.held)
        self.planning = r.planning
        self.overhead = dict(r.overhead)

    def failure_text(self, sid: str) -> str:
        """Why a step has no output, in a line (its error, or the reason it was skipped or cancelled)."""
        rec = self.records[sid]
        return rec.error.render() if rec.error else (rec.reason or rec.state.value)


class RunControl(Protocol):
    """What a run's collaborators may ask of the run (a `Run` is one); engine-internal, hence the underscores."""

    run_id: str
    depth: int

    def _emit(self, cls: type, *, at: datetime | None = None, **fields: Any) -> None:
        """Record an event (at `at`, default now) and deliver it."""
        ...

    def _fail(self, step: Step, error: ErrorInfo, then: str) -> None:
        """The step failed for good; `then` (abort, skip, replan) says what follows."""
        ...

    def _end(self, status: RunStatus, reason: str, replan: ReplanRequest | None = None, *, from_step: bool = False) -> None:
        """Stop the run with `status`."""
        ...

    def _stop(self, rule: str, message: str, replan: ReplanRequest | None = None) -> None:
        """End the run as ``failed`` with a typed error."""
        ...

    def _launch_ready(self) -> None:
        """Start every step whose dependencies ended."""
        ...

    def _cancel_if_quiet(self) -> None:
        """Cancel a run stopping between steps once none of its steps runs."""
        ...

    def _hand_back(self) -> None:
        """Cancel a run stopping between steps that owes a new version now."""
        ...

    def record_draft(self, **fields: Any) -> None:
        """Record one of the planner's drafts; its usage counts toward the run's."""
        ...

    def add_overhead(self, role: str, usage: Usage) -> None:
        """Count work done around the run under `role`."""
        ...

    def relay(self, step_id: str, depth: int, event: Any) -> None:
        """Put an event of a sub-run into this run's stream."""
        ...


# the `ErrorInfo.type` of each rule a run stops on
_ERROR_TYPES = {
    "replan_limit": "ReplanLimitError",
    "replan_loop": "ReplanLoopError",
    "replan_invalid": "PlanningError",
    "replanner": "ReplannerError",
    "joiner": "JoinerError",
    "budget": "BudgetExceededError",
    "plan_rejected": "PlanRejectedError",
}


def run_error(rule: str, message: str) -> ErrorInfo:
    """The typed error of a run that could not go on (rule ``replan_limit``, ``budget``...)."""
    return ErrorInfo(rule=rule, type=_ERROR_TYPES.get(rule, "RunError"), message=message)


def final_action(fa: FailureAction) -> str:
    """What follows a failure that is not the worker's (a refusal, an abandoned tool): retry and fallback do not apply."""
    then = fa.then if fa.kind in ("retry", "fallback") else fa.kind
    return then if then in ("skip", "replan") else "abort"


class _NoEntries(list[Any]):
    """The empty list a new record's `verdicts` and `calls` start as, one for every record: it refuses to change.

    The engine replaces it on a record (`append_to_record`), so no record can
    grow another's, and code that changes it in place fails loudly instead.
    A list per record and field was 2 of the 12 objects each step left for
    the garbage collector to trace: ~2 µs a step at 10,000 steps.
    """

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("a new step record's empty list is shared by every new record: replace it (append_to_record), do not change it")

    # every method that changes a list in place
    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse


_NO_ENTRIES = _NoEntries()

# the fields of a record that has not started, as pydantic validates them: each new record copies them. They are
# immutable and shared, the empty lists among them (`_NoEntries`); any other mutable default is made afresh
_BLANK = StepRecord(step_id="", usage=ZERO).__dict__ | {
    name: _NO_ENTRIES for name, field in StepRecord.model_fields.items() if field.default_factory is list
}
_FRESH = {
    name: field.default_factory
    for name, field in StepRecord.model_fields.items()
    if field.default_factory and field.default_factory is not list and name != "usage"
}


def _verbatim(step: Step) -> bool:
    """True when the step has no reference and no escape (``$${``) to resolve; its parameters are text only when it has some."""
    if step.references or "$${" in step.instruction:
        return False
    return not step.parameters or "$${" not in repr(step.parameters)


def _new_record(step: Step) -> StepRecord:
    """The record of a step that has not started, built as `model_construct` builds one: its values are the
    plan's own, validated with it (0.5 µs a step; validating the record again took 2.9 µs, a tenth of a no-op step)."""
    record: StepRecord = object.__new__(StepRecord)
    fields = {**_BLANK, "step_id": step.step_id, "worker": step.worker, "action": step.action}
    if _FRESH:
        for name, factory in _FRESH.items():
            fields[name] = factory()  # type: ignore[call-arg]  # pydantic types a factory as maybe taking the validated data; these take none
    _SET_DICT(record, fields)
    _SET_FIELDS_SET(record, _EVERY_FIELD)
    _SET_EXTRA(record, None)
    _SET_PRIVATE(record, None)
    return record


# pydantic's slots on every model, set through their descriptors (half the cost of `object.__setattr__`)
_SET_DICT = BaseModel.__dict__["__dict__"].__set__
_SET_FIELDS_SET = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_SET_EXTRA = BaseModel.__dict__["__pydantic_extra__"].__set__
_SET_PRIVATE = BaseModel.__dict__["__pydantic_private__"].__set__


def append_to_record(record: StepRecord, name: str, item: Any) -> None:
    """Add `item` to one of a step record's lists (`verdicts`, `calls`): a new list, so a shared empty one stays empty."""
    record.__dict__[name] = [*record.__dict__[name], item]


def update_record(record: StepRecord, **fields: Any) -> None:
    """Set fields of a step record the engine owns, skipping pydantic's per-attribute
    `__setattr__` (the hot path sets about ten fields per step; the values are the engine's own)."""
    record.__dict__.update(fields)
