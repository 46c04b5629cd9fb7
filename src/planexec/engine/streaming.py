"""A run whose steps arrive while it runs: the engine's side of a streamed plan.

Owns `StreamingRun` (a `Run` that takes steps while it runs: `extend`,
`close`, `fail`), `StepStream` (what feeds it: an async iterable of steps
that holds the whole plan, and the draft it came from, once it ended) and
`follow`, which feeds a run from a stream. The planner's stream is
`planning.stream.PlanStream`. A subclass of `Run` because it is one: the
same state and collaborators, plus three ways in for steps that arrive.
Imports `engine.run`, `engine.state`, `engine.events`, `engine.results`,
`plan` and `errors`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from planexec.engine.events import PlanCompleted, PlanStepParsed
from planexec.engine.results import RunStatus, StepRecord
from planexec.engine.run import Run
from planexec.engine.state import ZERO
from planexec.errors import ModelError, PlanningError
from planexec.plan.drafts import PlanDraft
from planexec.plan.model import Plan, Step

__all__ = ["StepStream", "StreamingRun", "follow"]

log = logging.getLogger("planexec.planner")


class StepStream(Protocol):
    """Steps handed out as they are written; `plan` and `draft` are set once the whole plan was read."""

    plan_id: str
    goal: str
    plan: Plan | None
    draft: PlanDraft | None

    def __aiter__(self) -> AsyncIterator[Step]: ...


class StreamingRun(Run):
    """A `Run` whose steps arrive while it runs: `extend` adds one, `close` ends the plan, `fail` stops it."""

    def extend(self, step: Step) -> None:
        """Add a step of a streamed plan, already checked on its own; it starts once its dependencies end."""
        state = self.state
        if not state.open:
            raise RuntimeError(f"run {self.run_id} is not taking steps (it was not started streaming, or it ended)")
        sid = step.step_id
        state.sched.add(sid, step.dependencies, tolerant=step.accepts_failed_inputs)
        state.records[sid] = StepRecord(step_id=sid, worker=step.worker, action=step.action, usage=ZERO)
        state.steps[sid], state.deps[sid] = step, step.dependencies
        if not step.references and "$${" not in repr((step.parameters, step.instruction)):
            state.verbatim.add(sid)
        state.plan = state.plan.model_copy(update={"steps": [*state.plan.steps, step]})
        self._emit(PlanStepParsed, step_id=sid, worker=step.worker, action=step.action, depends_on=step.dependencies)
        self._launch_ready()

    def close(self, plan: Plan) -> None:
        """The streamed plan is complete and valid: it becomes the run's plan; the run ends when its steps do."""
        state = self.state
        if not state.open:
            return
        if plan.step_ids != state.plan.step_ids:
            self._end(RunStatus.FAILED, f"the completed plan's steps {plan.step_ids} differ from those streamed {state.plan.step_ids}")
            return
        state.open = False
        state.plan = plan
        self._emit(PlanCompleted, content_hash=plan.content_hash, step_ids=plan.step_ids)
        if not state.sched.is_active():
            state.done.set()

    def fail(self, reason: str) -> None:
        """The plan could not be completed (a late validation error, a planner failure): stop cleanly."""
        self._end(RunStatus.FAILED, reason)

    def feed(self, stream: StepStream, *, name: str) -> None:
        """Start the task that feeds this run from `stream` (see `follow`); `cancel()` and the run's end stop it."""
        self.state.tasks[PLAN_TASK] = asyncio.get_running_loop().create_task(follow(self, stream), name=name)


PLAN_TASK = "<plan stream>"  # the key of the task that feeds a streaming run (no step id can look like it)


async def follow(run: StreamingRun, stream: StepStream) -> None:
    """Feed `run` the steps of `stream` as they come; close it with the whole plan, or fail it cleanly."""
    try:
        async for step in stream:
            run.extend(step)
        assert stream.plan is not None
        run.close(stream.plan)
    except asyncio.CancelledError:
        raise  # the run ended (cancel, abort) while the plan was still being written
    except PlanningError as exc:
        run.fail(f"the streamed plan cannot run: {exc}")
    except ModelError as exc:
        run.fail(f"the planner's model failed: {exc}")
    except Exception as exc:  # whatever it is, the run must not be left waiting for steps that never come
        log.exception("run %s: streaming the plan failed", run.run_id)
        run.fail(f"streaming the plan failed: {type(exc).__name__}: {exc}")
    finally:
        if stream.draft is not None:
            d = stream.draft
            run.record_draft(**d.event_fields())
