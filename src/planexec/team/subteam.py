"""Hierarchical teams: a step handed to a sub-team that plans, runs and replans its own chunk.

Owns `SubTeam`, a worker whose task (``delegate``) is done by a team of its
own: a sub-planner with its own registry of workers plans the step as a
goal, an engine runs it (replanning locally on failure, bounded by
`max_replans`, and within a `Budget`), and the sub-run's answer is the
step's output. The sub-run is a run of its own (id ``<parent>/<step>``)
one level below the parent: its events are relayed into the parent's
stream as `SubRunEvent`s, its `RunResult` is kept in the parent step's
record (`StepRecord.subrun`), and `RunResult.calls_by_level()` reports how
many model calls each level made. Sub-teams nest to `max_depth` levels
below the top run (default 2); deeper is refused.
Imports `engine`, `execution` (the current step), `planner`, `replanning`,
`calls`, `results`, `usage`, `errors` and `workers`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from planexec.engine.attempt import CURRENT_STEP
from planexec.engine.calls import CallHooks
from planexec.engine.config import EngineConfig
from planexec.engine.engine import Engine
from planexec.engine.results import RunStatus
from planexec.errors import PlanningError
from planexec.planning.planner import Planner
from planexec.planning.replanner import PlannerReplanner
from planexec.usage import Usage
from planexec.workers.gate import GATE_HOOKS
from planexec.workers.io import Source, StepCall, WorkResult
from planexec.workers.worker import WorkerError

__all__ = ["SubTeam"]


class SubTeam:
    """A worker that hands its step to a team of its own (see the module docstring).

    `planner` plans over the sub-team's own registry (`planner.registry`);
    `engine` is the sub-run's engine settings (`EngineConfig`; default: one
    revision of its plan): its budget (planning, steps, replans, joiner),
    limits, timeouts, a synthesizer or joiner of its own. The contract one
    level down is the parent's and wins over them (`contract_options`): a
    sub-team cannot switch off what its parent enforces. `max_concurrency`
    caps how many of its steps the parent runs at once.
    """

    def __init__(
        self,
        name: str,
        *,
        planner: Planner,
        description: str,
        tasks: Iterable[str] = ("delegate",),
        max_depth: int = 2,
        engine: EngineConfig | None = None,
        max_concurrency: int | None = None,
    ) -> None:
        if max_depth < 1:
            raise ValueError("max_depth must be at least 1")
        self.name = name
        self.planner = planner
        self.description = description
        self.tasks = set(tasks)
        self.max_depth = max_depth
        self.engine_config = engine if engine is not None else EngineConfig(max_replans=1)
        self.max_concurrency = max_concurrency  # how many of its steps the parent runs at once (the Worker protocol)

    def __repr__(self) -> str:
        return f"SubTeam({self.name!r}, planner={self.planner.model.name!r}, workers={sorted(self.planner.registry.workers)})"

    @property
    def actions(self) -> set[str]:
        """Its tasks: free-form chunks of work."""
        return set(self.tasks)

    def input_model(self, action: str) -> type[BaseModel] | None:
        """Free-form parameters."""
        return None

    def goal_for(self, call: StepCall) -> str:
        """The sub-team's goal: the step's instruction, its parameters and the results it depends on."""
        parts = [call.instruction or call.step.instruction or call.action]
        if call.parameters:
            parts.append("Parameters: " + json.dumps(call.parameters, ensure_ascii=False, default=str))
        for step_id, out in call.context.items():
            parts.append(f"Result of {step_id}: " + json.dumps(out.value, ensure_ascii=False, default=str)[:1000])
        if call.goal:
            parts.append(f"(This is part of the larger goal: {call.goal})")
        return "\n".join(parts)

    def contract_options(self, call: StepCall) -> dict[str, Any]:
        """The contract one level down: the parent's call approver and enforcement; a goal built from untrusted output is untrusted."""
        hooks = GATE_HOOKS.get()
        options: dict[str, Any] = {"goal_trusted": not any(out.untrusted for out in call.context.values())}
        if isinstance(hooks, CallHooks):
            options["enforce_contract"] = hooks.enforce
            options["goal_trusted"] = options["goal_trusted"] and hooks.goal_trusted
            if hooks.approver is not None:
                options["call_approver"] = hooks.approver
        return options

    async def perform(self, call: StepCall) -> WorkResult:
        """Plan the step as a goal, run it one level down, and return its answer with the sub-run."""
        parent = CURRENT_STEP.get()
        depth = parent[0].depth + 1 if parent is not None else 1
        if depth > self.max_depth:
            raise WorkerError(f"sub-team {self.name!r} would run at level {depth}, below its max_depth of {self.max_depth}; refused")
        goal = self.goal_for(call)
        try:
            planning = await self.planner.draft(goal)
        except PlanningError as exc:
            raise WorkerError(
                f"sub-team {self.name!r} could not plan its task: {exc}", usage=exc.usage if isinstance(exc.usage, Usage) else None
            ) from exc
        engine = Engine(
            self.planner.registry,
            config=self.engine_config,
            replanner=PlannerReplanner(self.planner),
            **self.contract_options(call),  # the parent's contract wins over the sub-team's own settings
        )
        run = engine.start(planning.plan, planning=planning, run_id=f"{call.run_id}/{call.step_id}")
        if parent is not None:
            run.subscribe(lambda ev: parent[0].relay(call.step_id, depth, ev))
        result = await run.result()
        if result.status not in (RunStatus.SUCCEEDED, RunStatus.PARTIAL):
            why = result.error.render() if result.error is not None else (result.reason or result.status.value)
            raise WorkerError(f"sub-team {self.name!r} run {result.run_id} {result.status.value}: {why}", usage=result.usage)
        # its answer is assembled from the sub-run's outputs: untrusted text in any of them taints it, one level up too
        tainted = any(rec.output is not None and rec.output.untrusted for rec in result.steps.values())
        sources = [Source(kind="tool", step_id=call.step_id, tool=self.name, untrusted=True)] if tainted else []
        return WorkResult(output=result.answer, usage=result.usage, subrun=result, sources=sources)
