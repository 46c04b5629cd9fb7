"""One attempt at one step: resolving its inputs, calling its worker, judging the output.

Owns `Attempts`, the collaborator of a `Run` that runs single attempts on
the run's `RunState`, acting on the run only through `RunControl`: the
`StepCall` with references resolved, the worker called through the
engine's runner within the step's deadline and the worker limits (with the
gate's hooks set, `engine.calls`), every
exception mapped to a recorded `ErrorInfo` (a tool's failure never escapes),
usage metered even when the attempt is cut off, the output turned into
JSON data within `max_output_bytes` off the event loop (`workers.outputs`),
the success criteria and critics' verdicts (`StepJudged`), and abandoning a
tool that ignores its timeout. Also owns `CURRENT_STEP`, the (run, step) whose attempt is in
progress, so a run started there (a sub-team) knows its parent.
Imports `engine.config`, `engine.criteria`, `engine.deadline`,
`engine.events`, `engine.limits`, `engine.results`, `engine.state`, `plan`,
`usage`, `workers` and `errors`; never the run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from functools import partial
from typing import Any

from planexec.engine.calls import CallHooks
from planexec.engine.config import Host
from planexec.engine.criteria import CriteriaChecker, Judgement
from planexec.engine.deadline import CURRENT_DEADLINE, Deadline, DeadlineClock
from planexec.engine.events import StepFailed, StepJudged, StepReady, StepStarted, utcnow
from planexec.engine.limits import Limits
from planexec.engine.results import ErrorInfo, ModelAttempt, RunStatus, StepState
from planexec.engine.state import ZERO, RunControl, RunState, append_to_record, final_action, update_record
from planexec.errors import CallRefusedError, CheckFailedError, StepTimeoutError, ToolInputError, ToolOutputError
from planexec.plan.model import Step
from planexec.plan.references import resolve_references
from planexec.usage import Usage, start_meter, stop_meter
from planexec.workers.gate import GATE_HOOKS
from planexec.workers.io import Source, StepCall, WorkResult, derive_untrusted, merge_sources
from planexec.workers.outputs import SHORT_BYTES, SHORT_TEXT, encode, encode_inline
from planexec.workers.tools import in_thread
from planexec.workers.worker import IncompleteError, WorkerError

__all__ = ["CURRENT_STEP", "Attempts"]

log = logging.getLogger("planexec.engine")

# the run and step whose attempt is in progress in this context: a run started there is its sub-run
CURRENT_STEP: ContextVar[tuple[RunControl, str] | None] = ContextVar("planexec_current_step", default=None)


class Attempts:
    """Single attempts at the steps of one run; see the module docstring.

    Reads and writes the run's `RunState`; reports through the run's
    `RunControl` (its events, a step that failed for good). The engine's
    settings it needs are read once here, off the hot path.
    """

    def __init__(self, state: RunState, run: RunControl, host: Host) -> None:
        self._state = state
        self._run = run
        self._runner = host.runner
        self._checker = host.checker
        self._by_criteria = isinstance(host.checker, CriteriaChecker)
        self._default_timeout = host.config.default_timeout
        self._grace = host.config.cancel_grace
        self._max_output = host.config.max_output_bytes or None
        # a text this long is stored as it is, without a walk (`encode_inline`'s own shortcut, taken before its call)
        self._short_text = SHORT_TEXT if self._max_output is None or self._max_output >= SHORT_BYTES else -1
        self._limits = Limits(host.config.max_concurrency, host.limit_for)
        self._clock = DeadlineClock()  # every attempt's deadline on one event-loop timer
        config = host.config
        self._hooks = CallHooks(
            run, state, config.call_approver, enforce=config.enforce_contract, goal_trusted=config.goal_trusted, clock=config.clock
        )

    def start_now(self, step: Step, worker: str, attempt: int, model: str | None = None) -> bool:
        """Start `attempt` of `step` on `worker` (on `model`, a cascade's) here and now when its slots are free: take
        them, mark its record running and emit its `StepStarted`; False (nothing done) when it has to wait for a slot.

        The run calls this as it makes a step ready, before the step's task
        exists, then passes ``started=True`` to `run`. So a step that need not
        wait is started with no turn of the event loop in between, and the
        starts of one launch are emitted together: a recorder stores them in
        one commit before any of their tasks runs (`engine.recording`).
        """
        state = self._state
        slots = None if state.behind else self._limits.slots(worker)
        if slots is None or not slots.take():
            # it waits: so does every step launched after it until its task is in the slots' queue (first come, first served)
            state.behind.add(step.step_id)
            return False
        state.held[step.step_id] = slots
        state.starting.add(step.step_id)
        self._begin(step, worker, attempt, model)
        return True

    def _begin(self, step: Step, worker: str, attempt: int, model: str | None) -> None:
        """The attempt holds its slots: its record is running and its `StepStarted` is emitted."""
        rec = self._state.records[step.step_id]
        now = utcnow()  # one time for the transition: the record's start (the first attempt's) and the event's
        if rec.started_at is None:
            update_record(rec, state=StepState.RUNNING, attempts=attempt, worker=worker, started_at=now, model=model)
        else:
            update_record(rec, state=StepState.RUNNING, attempts=attempt, worker=worker, model=model)
        self._run._emit(StepStarted, at=now, step_id=step.step_id, worker=worker, action=step.action, attempt=attempt, model=model)
        self._state.attempt_t0[step.step_id] = time.perf_counter()  # the attempt's time runs from its start

    async def run(
        self,
        step: Step,
        worker: str,
        attempt: int,
        *,
        model: str | None = None,
        started: bool = False,
        on_time: Callable[[], bool] | None = None,
    ) -> tuple[WorkResult | None, ErrorInfo | None, float, Usage]:
        """One attempt: (the worker's result or None, the error or None, wall seconds, usage). Raises only CancelledError.

        `model`: the model it runs on (a cascade's; None: the worker's own).
        `started`: `start_now` took its slots and emitted its start already.
        `on_time`: asked once the attempt has its slots; False (its window
        closed while it waited for a slot) gives the slots back and returns
        (None, None, 0.0, zero) without starting it: the step waits for its time again.
        """
        state = self._state
        sid = step.step_id
        if started:
            slots = state.held[sid]
            state.starting.discard(sid)
        else:
            slots = state.held[sid] = self._limits.slots(worker)
            state.behind.discard(sid)  # in the queue from here on: later steps may start again
            waiting = state.waiting
            if slots.would_wait() and sid not in waiting:  # held by a limit: ready and waiting (one that starts at once needs no event)
                waiting.add(sid)
                if attempt > 1:  # a retry waiting for a slot is not running: cancelled now, it says so (and is run again on resume)
                    update_record(state.records[sid], state=StepState.READY)
                self._run._emit(StepReady, step_id=sid)
            await slots.wait()
            waiting.discard(sid)
            if state.draining is not None:  # the run stops between steps: this one does not start, it waits for the run's cancel
                slots.release()
                update_record(state.records[sid], state=StepState.READY)
                self._run._cancel_if_quiet()
                await asyncio.get_running_loop().create_future()
            if on_time is not None and not on_time():  # its time passed while it waited for a slot: not started
                slots.release()
                state.held.pop(sid, None)
                return None, None, 0.0, ZERO
            self._begin(step, worker, attempt, model)
        rec = state.records[sid]
        try:
            t0 = state.attempt_t0[sid]  # set by `_begin`
            timeout = step.timeout or self._default_timeout
            # every model call of this attempt reports here, so a timeout or cancel still counts what it used
            meter, token = start_meter()
            try:
                call = self._call(step, worker, attempt, model)
                # no deadline, never stuck (a partial, not a lambda: a lambda would make this function's locals cells)
                stuck = partial(self.abandon, step, timeout) if timeout is not None else None
                deadline = Deadline(timeout, self._clock, on_stuck=stuck, grace=self._grace)
                bound = CURRENT_DEADLINE.set(deadline)  # a call waiting for a person pauses it (`engine.calls`)
                try:
                    here = CURRENT_STEP.set((self._run, step.step_id))
                    gate = GATE_HOOKS.set(self._hooks)
                    try:
                        result = await self._runner.run(call)
                    finally:
                        GATE_HOOKS.reset(gate)
                        CURRENT_STEP.reset(here)
                    if not isinstance(result, WorkResult):
                        raise ToolOutputError(f"worker {worker!r} returned {type(result).__name__}, not a WorkResult", tool=step.action)
                    output = result.output
                    kind = type(output)
                    # None, a bool and a short text are JSON within any limit (most tools' outputs): nothing to encode
                    if not (output is None or kind is bool or (kind is str and len(output) <= self._short_text)):
                        ends = t0 + timeout + deadline.paused if timeout is not None else None
                        result = await self._as_json(result, sid, worker, ends)
                    worked = result.usage if not result.usage.is_zero() else meter.total  # before any critic's calls
                    if step.success_criteria or not self._by_criteria:
                        gate = GATE_HOOKS.set(self._hooks.owned_by(step.step_id))  # a critic's calls pass the same gate
                        try:
                            # the critic reads the output as data from where it came: its own sources and the untrusted upstream
                            upstream, _ = derive_untrusted(result.sources, call.context.values())
                            sources = merge_sources(result.sources, map(Source.from_key, upstream))
                            judged = await self._check(step, result.output, call, attempt, sources)
                        finally:
                            GATE_HOOKS.reset(gate)
                        if judged is not ZERO:
                            worked = worked + judged
                except CheckFailedError as exc:
                    judged = self._judged(step.step_id, attempt, exc.judgement)
                    return None, _error("check_failed", exc), time.perf_counter() - t0, worked + judged if judged is not ZERO else worked
                except asyncio.CancelledError as exc:
                    if deadline.expired():
                        assert timeout is not None  # only a deadline with a delay expires
                        return None, _error("timeout", StepTimeoutError(step.step_id, timeout)), time.perf_counter() - t0, meter.total
                    task = asyncio.current_task()
                    if task is not None and task.cancelling() == 0:
                        # nobody cancelled this step: the tool raised CancelledError itself (a cancelled inner task)
                        return None, _error("exception", exc), time.perf_counter() - t0, meter.total
                    update_record(rec, usage=rec.usage + meter.total)  # the run is being cancelled: keep what was used
                    raise
                finally:
                    deadline.disarm()
                    CURRENT_DEADLINE.reset(bound)
            except _ReferenceError as exc:
                return None, _error("reference", exc), time.perf_counter() - t0, ZERO
            except CallRefusedError as exc:  # the contract refused the step's own call: the rule names why
                used = exc.usage if isinstance(exc.usage, Usage) and not exc.usage.is_zero() else meter.total
                return None, _error(exc.rule, exc), time.perf_counter() - t0, used
            except ToolInputError as exc:
                return None, _error("tool_input", exc), time.perf_counter() - t0, meter.total
            except ToolOutputError as exc:
                return None, _error("tool_output", exc), time.perf_counter() - t0, meter.total
            except IncompleteError as exc:  # out of turns with work left: never a success
                return None, _error("incomplete", exc), time.perf_counter() - t0, exc.usage if not exc.usage.is_zero() else meter.total
            except WorkerError as exc:  # the worker failed; what it had used is still counted
                return None, _error("worker", exc), time.perf_counter() - t0, exc.usage if not exc.usage.is_zero() else meter.total
            except (Exception, SystemExit) as exc:  # whatever a tool raises becomes a recorded failure
                return None, _error("exception", exc), time.perf_counter() - t0, meter.total
            finally:
                stop_meter(token)
            return result, None, time.perf_counter() - t0, worked
        finally:
            slots.release()

    async def _as_json(self, result: WorkResult, step_id: str, worker: str, deadline: float | None) -> WorkResult:
        """The result with its output as JSON data within `max_output_bytes` (`ToolOutputError` otherwise).

        A small output is encoded here; a larger one in a daemon thread, so
        the event loop (and the step's deadline) keeps running. The walk
        stops by itself at the step's `deadline` (a perf_counter value) and
        as soon as nobody waits for it.
        """
        tool, label = result.origin(worker)
        done, value = encode_inline(result.output, step_id=step_id, tool=tool, label=label, max_bytes=self._max_output)
        if not done:
            stop = threading.Event()
            try:
                value = await in_thread(
                    encode, result.output, step_id=step_id, tool=tool, label=label, max_bytes=self._max_output, deadline=deadline, stop=stop
                )
            finally:
                stop.set()
        return result.with_output(value)

    async def _check(self, step: Step, output: Any, call: StepCall, attempt: int, sources: list[Source]) -> Usage:
        """Apply the step's success criteria; record the critics' verdicts; return what judging cost."""
        checker = self._checker
        if isinstance(checker, CriteriaChecker):
            if not step.success_criteria:
                return ZERO
            return self._judged(step.step_id, attempt, await checker.check(step, output, call=call, sources=sources))
        await checker.check(step, output)
        return ZERO

    def _judged(self, sid: str, attempt: int, judgement: Judgement | None) -> Usage:
        """Emit a `StepJudged` per verdict and keep them on the step's record."""
        if judgement is None:
            return ZERO
        for critic, v in judgement.verdicts:
            append_to_record(self._state.records[sid], "verdicts", {"attempt": attempt, "critic": critic, **v})
            self._run._emit(
                StepJudged,
                step_id=sid,
                attempt=attempt,
                critic=critic,
                approved=v["approved"],
                judged=v.get("judged", True),
                reasons=list(v.get("reasons", [])),
                tools_used=list(v.get("tools_used", [])),
            )
        return ZERO if judgement.usage.is_zero() else judgement.usage

    def _call(self, step: Step, worker: str, attempt: int, model: str | None) -> StepCall:
        state = self._state
        context = {}
        failed = {}
        values = {}
        referenced = step.references
        outputs = state.outputs
        for d in state.deps[step.step_id]:
            out = outputs.get(d)
            if out is None:
                failed[d] = state.failure_text(d)
            elif d in referenced:  # ordering is not data flow: a worker sees only what its step references
                context[d] = out
                values[d] = out.value
        try:
            if step.step_id in state.verbatim:  # no references, no escapes: nothing to resolve
                params, instruction = step.parameters, step.instruction
            else:
                params = resolve_references(step.parameters, values, failed)
                instruction = resolve_references(step.instruction, values, failed)
        except (LookupError, KeyError) as exc:
            raise _ReferenceError(f"a reference in step {step.step_id!r} did not resolve: {exc}") from None
        plan = state.plan
        return StepCall(
            run_id=state.run_id,
            plan_id=plan.plan_id,
            plan_version=plan.version,
            goal=plan.goal,
            step=step,
            worker=worker,
            instruction=instruction,
            parameters=params,
            context=context,
            failed_inputs=failed,
            attempt=attempt,
            model=model,
        )

    def close(self) -> None:
        """No attempt runs any more (the run is ending): the deadlines' timer goes with them."""
        self._clock.close()

    def abandon(self, step: Step, timeout: float) -> None:
        """The step's tool ignored its timeout for the grace period: record the timeout and go on without it."""
        state = self._state
        sid = step.step_id
        rec = state.records[sid]
        if rec.state.terminal or state.status is not RunStatus.RUNNING:
            return
        state.abandoned.add(sid)
        grace = self._grace
        log.warning("run %s: step %s ignored its %gs timeout for %gs; abandoned", state.run_id, sid, timeout, grace)
        t0 = state.attempt_t0.pop(sid, None)
        wall = time.perf_counter() - t0 if t0 is not None else 0.0
        update_record(rec, wall_time=rec.wall_time + wall)
        slots = state.held.pop(sid, None)
        if slots is not None:
            slots.release()  # its slots go back to the steps that can still run
        error = ErrorInfo(
            rule="timeout",
            type="StepTimeoutError",
            message=f"step {sid!r} timed out after {timeout:g}s and did not stop within {grace:g}s; abandoned",
        )
        then = final_action(step.failure_action)  # an uncooperative tool is not tried again (nor on a cascade's next model)
        model = rec.model  # the cascade's model it ran on (`_begin`), kept on the record and the event as any attempt's
        if model is not None:
            append_to_record(rec, "model_attempts", ModelAttempt(attempt=rec.attempts, model=model, usage=ZERO, error=error, then=then))
        self._run._emit(
            StepFailed,
            step_id=sid,
            attempt=rec.attempts,
            worker=rec.worker,
            error=error,
            then=then,
            wall_time=wall,
            usage=ZERO,
            model=model,
        )
        self._run._fail(step, error, then)


class _ReferenceError(Exception):
    """A reference did not resolve against the upstream output (a wrong path)."""


def _error(rule: str, exc: BaseException) -> ErrorInfo:
    message = str(exc) or type(exc).__name__
    return ErrorInfo(rule=rule, type=type(exc).__name__, message=message)
