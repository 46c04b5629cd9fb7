"""One attempt at one step: resolving its inputs, calling its worker, judging the output.

Owns `Attempts`, the part of a `Run` (in `execution`) that runs a single
attempt: the `StepCall` with references resolved, the worker called through
the engine's runner within the step's deadline and the worker limits, every
exception mapped to a recorded `ErrorInfo` (a tool's failure never escapes),
usage metered even when the attempt is cut off, the success criteria and
critics' verdicts (`StepJudged`), and abandoning a tool that ignores its
timeout. Also owns `CURRENT_STEP`, the (run, step) whose attempt is in
progress, so a run started there (a sub-team) knows its parent.
Imports `calls`, `checks`, `deadline`, `events`, `limits`, `plan`, `results`,
`usage`, `workers` and `errors`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from planexec.engine.criteria import CriteriaChecker, Judgement
from planexec.engine.deadline import Deadline
from planexec.engine.events import StepFailed, StepJudged, StepStarted, utcnow
from planexec.engine.limits import Slots
from planexec.engine.results import ErrorInfo, RunStatus, StepRecord, StepState
from planexec.errors import CheckFailedError, StepTimeoutError, ToolInputError, ToolOutputError
from planexec.plan.model import Step, resolve_references
from planexec.usage import Usage, start_meter, stop_meter
from planexec.workers.io import StepCall, WorkResult
from planexec.workers.worker import WorkerError

if TYPE_CHECKING:
    from planexec.engine.run import Run

__all__ = ["CURRENT_STEP", "Attempts"]

log = logging.getLogger("planexec.engine")

# the run and step whose attempt is in progress in this context: a run started there is its sub-run
CURRENT_STEP: ContextVar[tuple[Run, str] | None] = ContextVar("planexec_current_step", default=None)
_ZERO = Usage()


class Attempts:
    """Single attempts at steps, for a `Run`; see the module docstring."""

    async def _attempt(self, step: Step, worker: str, attempt: int) -> tuple[WorkResult | None, ErrorInfo | None, float, Usage]:
        rec = self.records[step.step_id]
        async with self._slots(step.step_id, worker):
            _update(rec, state=StepState.RUNNING, attempts=attempt, worker=worker)
            if rec.started_at is None:
                _update(rec, started_at=utcnow())
            self._emit(StepStarted, step_id=step.step_id, worker=worker, action=step.action, attempt=attempt)
            t0 = self._attempt_t0[step.step_id] = time.perf_counter()
            timeout = step.timeout or self.engine.default_timeout
            deadline = None
            # every model call of this attempt reports here, so a timeout or cancel still counts what it used
            meter, token = start_meter()
            try:
                call = self._call(step, worker, attempt)
                deadline = Deadline(timeout, on_stuck=lambda: self._abandon(step, timeout), grace=self.engine.cancel_grace)
                try:
                    here = CURRENT_STEP.set((self, step.step_id))
                    try:
                        result = await self.engine.runner.run(call)
                    finally:
                        CURRENT_STEP.reset(here)
                    if not isinstance(result, WorkResult):
                        raise ToolOutputError(f"worker {worker!r} returned {type(result).__name__}, not a WorkResult", tool=step.action)
                    result = result.as_json(worker)
                    worked = result.usage if not result.usage.is_zero() else meter.total  # before any critic's calls
                    if step.success_criteria or not isinstance(self.engine.checker, CriteriaChecker):
                        judged = await self._check(step, result.output, call, attempt)
                        if judged is not _ZERO:
                            worked = worked + judged
                except CheckFailedError as exc:
                    judged = self._judged(step.step_id, attempt, exc.judgement)
                    return None, _error("check_failed", exc), time.perf_counter() - t0, worked + judged if judged is not _ZERO else worked
                except asyncio.CancelledError as exc:
                    if deadline.expired():
                        return None, _error("timeout", StepTimeoutError(step.step_id, timeout)), time.perf_counter() - t0, meter.total
                    if asyncio.current_task().cancelling() == 0:  # type: ignore[union-attr]
                        # nobody cancelled this step: the tool raised CancelledError itself (a cancelled inner task)
                        return None, _error("exception", exc), time.perf_counter() - t0, meter.total
                    _update(rec, usage=rec.usage + meter.total)  # the run is being cancelled: keep what was used
                    raise
                finally:
                    deadline.disarm()
            except _ReferenceError as exc:
                return None, _error("reference", exc), time.perf_counter() - t0, _ZERO
            except ToolInputError as exc:
                return None, _error("tool_input", exc), time.perf_counter() - t0, meter.total
            except ToolOutputError as exc:
                return None, _error("tool_output", exc), time.perf_counter() - t0, meter.total
            except WorkerError as exc:  # the worker failed; what it had used is still counted
                return None, _error("worker", exc), time.perf_counter() - t0, exc.usage if not exc.usage.is_zero() else meter.total
            except (Exception, SystemExit) as exc:  # whatever a tool raises becomes a recorded failure
                return None, _error("exception", exc), time.perf_counter() - t0, meter.total
            finally:
                stop_meter(token)
            return result, None, time.perf_counter() - t0, worked

    async def _check(self, step: Step, output: Any, call: StepCall, attempt: int) -> Usage:
        """Apply the step's success criteria; record the critics' verdicts; return what judging cost."""
        checker = self.engine.checker
        if isinstance(checker, CriteriaChecker):
            if not step.success_criteria:
                return _ZERO
            return self._judged(step.step_id, attempt, await checker.check(step, output, call=call))
        await checker.check(step, output)
        return _ZERO

    def _judged(self, sid: str, attempt: int, judgement: Judgement | None) -> Usage:
        """Emit a `StepJudged` per verdict and keep them on the step's record."""
        if judgement is None:
            return _ZERO
        for critic, v in judgement.verdicts:
            self.records[sid].verdicts.append({"attempt": attempt, "critic": critic, **v})
            self._emit(
                StepJudged,
                step_id=sid,
                attempt=attempt,
                critic=critic,
                approved=v["approved"],
                judged=v.get("judged", True),
                reasons=list(v.get("reasons", [])),
                tools_used=list(v.get("tools_used", [])),
            )
        return _ZERO if judgement.usage.is_zero() else judgement.usage

    def _call(self, step: Step, worker: str, attempt: int) -> StepCall:
        deps = self._deps[step.step_id]
        context = {}
        failed = {}
        for d in deps:
            out = self._outputs.get(d)
            if out is None:
                failed[d] = self._failure_text(d)
            else:
                context[d] = out
        values = {d: out.value for d, out in context.items()}
        try:
            if step.step_id in self._verbatim:  # no references, no escapes: nothing to resolve
                params, instruction = step.parameters, step.instruction
            else:
                missing = frozenset(failed)
                params = resolve_references(step.parameters, values, missing)
                instruction = resolve_references(step.instruction, values, missing)
        except (LookupError, KeyError) as exc:
            raise _ReferenceError(f"a reference in step {step.step_id!r} did not resolve: {exc}") from None
        return StepCall(
            run_id=self.run_id,
            plan_id=self.plan.plan_id,
            plan_version=self.plan.version,
            goal=self.plan.goal,
            step=step,
            worker=worker,
            instruction=instruction,
            parameters=params,
            context=context,
            failed_inputs=failed,
            attempt=attempt,
        )

    def _failure_text(self, sid: str) -> str:
        rec = self.records[sid]
        return rec.error.render() if rec.error else (rec.reason or rec.state.value)

    def _slots(self, step_id: str, worker: str) -> Slots:
        slots = self._held[step_id] = self._limits.slots(worker)
        return slots

    def _abandon(self, step: Step, timeout: float) -> None:
        """The step's tool ignored its timeout for the grace period: record the timeout and go on without it."""
        sid = step.step_id
        rec = self.records[sid]
        if rec.state.terminal or self._status is not RunStatus.RUNNING:
            return
        self._abandoned.add(sid)
        grace = self.engine.cancel_grace
        log.warning("run %s: step %s ignored its %gs timeout for %gs; abandoned", self.run_id, sid, timeout, grace)
        t0 = self._attempt_t0.pop(sid, None)
        wall = time.perf_counter() - t0 if t0 is not None else 0.0
        _update(rec, wall_time=rec.wall_time + wall)
        slots = self._held.pop(sid, None)
        if slots is not None:
            slots.release()  # its slots go back to the steps that can still run
        error = ErrorInfo(
            rule="timeout",
            type="StepTimeoutError",
            message=f"step {sid!r} timed out after {timeout:g}s and did not stop within {grace:g}s; abandoned",
        )
        fa = step.failure_action
        then = fa.then if fa.kind in ("retry", "fallback") else fa.kind
        then = then if then in ("skip", "replan") else "abort"  # an uncooperative tool is not tried again
        self._emit(StepFailed, step_id=sid, attempt=rec.attempts, worker=rec.worker, error=error, then=then, wall_time=wall, usage=_ZERO)
        self._fail(step, error, then)


class _ReferenceError(Exception):
    """A reference did not resolve against the upstream output (a wrong path)."""


def _update(record: StepRecord, **fields: Any) -> None:
    """Set fields of a step record the engine owns, skipping pydantic's per-attribute
    `__setattr__` (the hot path sets about ten fields per step; the values are the engine's own)."""
    record.__dict__.update(fields)


def _error(rule: str, exc: BaseException) -> ErrorInfo:
    message = str(exc) or type(exc).__name__
    return ErrorInfo(rule=rule, type=type(exc).__name__, message=message)
