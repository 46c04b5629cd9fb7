"""Plans streamed into execution: steps handed out while the planner model is still writing.

Owns `PlanStream` (an async iterator of the plan's steps, each yielded as
soon as the model has written it completely and it is valid on its own),
`StreamingRun` (a `Run` that takes steps while it runs) and `follow` (the
task that feeds a `StreamingRun` from a `PlanStream`).
A JSON draft is read with pydantic-core's partial JSON mode: a step is
complete once the next one has begun, or the plan has ended. A compact
draft (`plan.compact`) is read a line at a time: a step is complete when
its newline arrives (`CompactReader`), and a bad line ends the stream with
its problem, naming the line. A step that is
invalid on its own, or a whole plan that fails validation at the end, ends
the stream with `PlanningError`, and `follow` stops the run cleanly. A
streamed plan is not repaired: the steps already running came from it.
Imports `planner`, `plan`, `validation`, `execution`, `events`, `results`,
`errors`, `usage` and `models.base`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator
from typing import Any

import pydantic_core
from pydantic import ValidationError

from planexec.engine.streaming import StreamingRun, follow
from planexec.errors import PlanningError, Problem
from planexec.models.base import ModelDelta, ModelResponse, stream_response
from planexec.plan.compact import CompactReader, with_lines
from planexec.plan.model import Plan, Step
from planexec.plan.validation import validate_plan
from planexec.planning.draft_schema import feed_dependencies, free_tasks, plan_id_for
from planexec.planning.planner import PlanDraft, Planner
from planexec.usage import Usage

__all__ = ["PlanStream", "StreamingRun", "follow"]


def _partial_steps(text: str) -> list[Any]:
    """The steps readable so far from a partly written ``{"steps": [...`` (the last may be incomplete)."""
    start = text.find("{")
    if start < 0:
        return []
    try:
        data = pydantic_core.from_json(text[start:], allow_partial=True)
    except ValueError:
        return []
    steps = data.get("steps") if isinstance(data, dict) else None
    return steps if isinstance(steps, list) else []


class PlanStream:
    """The steps of one plan as the model writes them; `plan` and `draft` are set once it ended.

    `parsed_at` maps each step id to the `time.perf_counter()` at which it
    was handed out, and `finished_at` is when the whole plan was read.
    """

    def __init__(self, planner: Planner, goal: str, *, plan_id: str | None = None) -> None:
        self.planner = planner
        self.goal = goal
        self.plan_id = plan_id or plan_id_for(goal)
        self.plan: Plan | None = None
        self.draft: PlanDraft | None = None
        self.usage = Usage()
        self.started_at = 0.0
        self.parsed_at: dict[str, float] = {}
        self.finished_at: float | None = None
        self._steps: list[Step] = []

    def _fail(self, text: str, problems: list[Problem], usage: Usage, t0: float) -> PlanningError:
        self.draft = PlanDraft(
            attempt=1,
            model=self.planner.model.name,
            text=text,
            problems=[p.render() for p in problems],
            usage=usage,
            wall_time=time.perf_counter() - t0,
        )
        return PlanningError(
            f"planner {self.planner.model.name} streamed a plan for {self.goal!r} that cannot run",
            model=self.planner.model.name,
            attempts=1,
            problems=problems,
            last_text=text,
            usage=usage,
        )

    def _accept(self, data: Any, text: str, t0: float, line: int | None = None) -> Step:
        """A complete step, checked on its own against the steps before it (problems name its `line`, if it has one)."""
        feed_dependencies(data, free_tasks(self.planner.registry))
        where = data.get("id") if isinstance(data, dict) else None
        lines = {where: line} if isinstance(where, str) and line is not None else {}
        try:
            step = Step.model_validate(data)
        except ValidationError as exc:
            problems = [Problem("invalid_step", f"{'.'.join(map(str, e['loc']))}: {e['msg']}", step_id=where) for e in exc.errors()]
            raise self._fail(text, with_lines(problems, lines), Usage(model_calls=1), t0) from None  # tokens of a cut stream are unknown
        partial = Plan(plan_id=self.plan_id, goal=self.goal, steps=[*self._steps, step])
        problems = [p for p in validate_plan(partial, self.planner.registry) if p.step_id in (step.step_id, None)]
        if problems:
            raise self._fail(text, with_lines(problems, lines), Usage(model_calls=1), t0)
        self._steps.append(step)
        self.parsed_at[step.step_id] = time.perf_counter()
        return step

    async def __aiter__(self) -> AsyncIterator[Step]:
        planner = self.planner
        request = planner.request(planner.messages(self.goal))
        t0 = self.started_at = time.perf_counter()
        text = ""
        response: ModelResponse | None = None
        reader = CompactReader(registry=planner.registry) if planner.compact else None
        stream = stream_response(planner.model, request)
        try:
            async for item in stream:
                if not isinstance(item, ModelDelta):
                    response = item
                elif reader is not None:
                    text += item.text
                    for found in reader.feed(item.text):  # the lines this delta completed
                        yield self._accept(copy.deepcopy(found.data), text, t0, found.line)  # the reader's own stays as read
                    if reader.problems:
                        raise self._fail(text, [p for _, p in reader.problems], Usage(model_calls=1), t0)
                else:
                    text += item.text
                    if "}" not in item.text and "{" not in item.text:
                        continue  # a step is complete once the next one opens ("{") or the list closes
                    written = _partial_steps(text)
                    while len(self._steps) < len(written) - 1:
                        yield self._accept(written[len(self._steps)], text, t0)
        finally:
            await stream.aclose()  # stops the model when the consumer stops early
        assert response is not None
        self.usage = response.usage
        plan, problems = planner.check(response.text, self.goal, self.plan_id)
        if plan is None:
            raise self._fail(response.text, problems, response.usage, t0)
        if [s.model_dump() for s in plan.steps[: len(self._steps)]] != [s.model_dump() for s in self._steps]:
            raise self._fail(
                response.text, [Problem("stream_mismatch", "the final text differs from the steps streamed")], response.usage, t0
            )
        for step in plan.steps[len(self._steps) :]:
            self._steps.append(step)
            self.parsed_at[step.step_id] = time.perf_counter()
            yield step
        self.finished_at = time.perf_counter()
        self.draft = PlanDraft(
            attempt=1, model=planner.model.name, text=response.text, usage=response.usage, wall_time=self.finished_at - t0,
            content_hash=plan.content_hash,
        )  # fmt: skip
        self.plan = plan
