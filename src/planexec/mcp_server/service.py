"""The main job as the MCP server offers it: plan a goal, hand a planned run or a template to the workers, read runs,
decide approvals.

Owns `Service`, one per server, over a `Team` (its registry, planner,
policies and store: the run store) and the worker that runs what the
server hands on (`fleet.local.LocalWorker`, unless a fleet does), and
`RequestError` (a request refused with a message for the caller: an
unknown run or template, a missing parameter, a plan the planner could
not write).

- `plan_goal` works the goal through `Team.iter` with a `Submission`:
  planned (the plan library first, unless told not to), reviewed by the
  policies, and stored as a run in the state ``waiting`` in the store's
  queue. The run id, the plan, its content hash and the verdicts come
  back; nothing runs until a person approves the plan (``planexec
  approve``, the console, or `decide` through the client's user). A plan a
  policy rejects is stored refused.
- `run_plan` hands a waiting run on: it wakes the worker and says what the
  run waits for. It never starts a run nobody approved, nor one that
  ended (a person resumes that with ``planexec resume``).
- `run_template` fills in a template of the plan library and submits it
  the same way (`Team.iter_plan`).
- `show_run`, `list_runs`, `list_templates` and `list_approvals` read.
- `pending_approval` and `decide` are what the server uses to record a
  decision the client's *user* made (see `server`): the caller never
  gives a decision, so a model cannot approve anything.

Store calls run in threads. Imports the public API (`planexec`,
`.errors`, `.policies`, `.store`), `library` (templates), the fleet's
local worker and the face's `views` and `answers`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from planexec import Planning, RunStatus, Submission, Team, new_run_id
from planexec.errors import ApprovalError, ModelError, PlanningError, PlanValidationError, StoreError
from planexec.fleet import LocalWorker
from planexec.library import ReusePlanning, TemplateError, instantiate
from planexec.mcp_server.answers import (
    ApprovalList,
    Decision,
    PendingApproval,
    PlannedRun,
    PolicyReview,
    RunDetails,
    RunList,
    StartedRun,
    TemplateLine,
    TemplateList,
)
from planexec.mcp_server.views import STATES, next_step, pending_approvals, run_details, run_lines
from planexec.runs import redact
from planexec.stages import Planned, Queued, Reviewed, Stage, WaitingForPerson
from planexec.store import RunStore

__all__ = ["RequestError", "Service"]

_STATE = {"waiting": "waiting_for_approval", "queued": "queued", "refused": "rejected"}


class RequestError(Exception):
    """A request the server refuses; the message says why and what to do instead (the caller sees it as a tool error)."""


@dataclasses.dataclass
class Service:
    """What the MCP tools do (see the module docstring); decisions are recorded under `user`; `worker` runs what it hands on."""

    team: Team
    user: str
    worker: LocalWorker | None = None

    @property
    def store(self) -> RunStore:
        """The run store (the team's)."""
        store: RunStore = self.team.store  # type: ignore[assignment]  # the server always gives its team a store
        return store

    # --- planning and handing on ---------------------------------------------------------------

    async def plan_goal(self, goal: str, *, reuse: bool = True) -> PlannedRun:
        """Plan `goal`, have the policies review the plan, store it as a waiting run; nothing runs before a person approves."""
        if not goal.strip():
            raise RequestError("say what you want done: the goal is empty")
        team = self.team if reuse else self.team.variant(planning=dataclasses.replace(self.team.planning_options, reuse=()))
        stages = team.iter(goal, mode="plan", run_id=new_run_id("mcp"), submit=Submission(by=self.user))
        return await self._planned(stages, source=f"planned by {team.planner_model.name}")

    async def run_template(self, name: str, parameters: Mapping[str, Any], version: int | None = None) -> StartedRun:
        """Fill in the template `name` (its latest version, or `version`) and submit it as a waiting run."""
        try:
            template = await asyncio.to_thread(self.store.template, name, version)
        except StoreError as exc:
            names = sorted({t.name for t in await asyncio.to_thread(self.store.templates)})
            raise RequestError(f"{exc}; the plan library has: {', '.join(names) or 'no templates'} (list_templates)") from None
        try:
            plan = instantiate(template, dict(parameters))
        except TemplateError as exc:
            raise RequestError(str(exc)) from None
        except PlanValidationError as exc:
            raise RequestError(f"template {name!r} v{template.version} filled in is not a valid plan: {exc}") from None
        stages = self.team.iter_plan(plan, run_id=new_run_id("mcp"), submit=Submission(by=self.user))
        planned = await self._planned(stages, source=f"template {template.name} v{template.version}")
        if planned.state == "rejected":
            return StartedRun(run_id=planned.run_id, state="rejected", next=planned.next, planned=planned)
        started = await self.run_plan(planned.run_id)
        return started.model_copy(update={"planned": planned})

    async def _planned(self, stages: AsyncIterator[Stage], *, source: str) -> PlannedRun:
        """Follow a submission's stages to its `Queued` one; what the caller is told of the stored run."""
        planning: Planning | None = None
        review = PolicyReview(decision="approve")
        queued: Queued | None = None
        try:
            async for stage in stages:
                if isinstance(stage, Planned):
                    planning = stage.planning
                elif isinstance(stage, WaitingForPerson):
                    review = PolicyReview(decision=stage.review.decision, verdicts=[v.to_dict() for v in stage.review.verdicts])
                elif isinstance(stage, Reviewed):
                    outcome = stage.outcome
                    review = PolicyReview(decision=outcome.decision, verdicts=[v.to_dict() for v in outcome.verdicts])
                elif isinstance(stage, Queued):
                    queued = stage
        except PlanningError as exc:
            raise RequestError(f"the planner wrote no valid plan: {exc}") from None
        except ModelError as exc:
            raise RequestError(f"the planner's model failed: {type(exc).__name__}: {exc}") from None
        except PlanValidationError as exc:
            raise RequestError(f"the plan cannot run with this project's tools: {exc}") from None
        except StoreError as exc:
            raise RequestError(f"the plan could not be stored: {exc}") from None
        assert queued is not None  # a submission ends queued or raises
        if isinstance(planning, ReusePlanning):
            source = planning.reuse.describe()
        if self.worker is not None:
            self.worker.wake()
        plan, run_id = queued.plan, queued.run_id
        next_ = {
            "waiting": f"a person approves it (planexec approve {run_id}, the console, or decide_approval); a worker runs it then",
            "queued": "approved: the next free worker runs it",
            "refused": f"nothing will run: {queued.reason}",
        }[queued.state]
        drafts = planning.drafts if planning is not None else ()
        return redact(
            PlannedRun(
                run_id=run_id,
                state=_STATE[queued.state],
                goal=plan.goal,
                source=source,
                plan=json.loads(plan.to_json(indent=None)),  # the stable form: what the plan decides, without defaults
                content_hash=plan.content_hash,
                steps=len(plan.steps),
                review=review,
                draft_problems=[f"draft {d.attempt}: {p}" for d in drafts for p in d.problems],
                usage=planning.usage.model_dump(mode="json") if planning is not None and drafts else {},
                next=next_,
            )
        )

    async def run_plan(self, run_id: str) -> StartedRun:
        """Hand the waiting run `run_id` to the workers (see the module docstring); what it does next (it may wait for a person)."""
        summary = await self._summary(run_id)
        held = summary.lease is not None and summary.lease.live
        if summary.status is not RunStatus.WAITING and not held:
            said = f": {summary.reason}" if summary.reason else ""
            raise RequestError(
                f"run {run_id!r} is {summary.state}{said}; run_plan hands on only a run that waits (plan_goal, run_template); "
                f"{next_step(summary, summary.state, [])}"
            )
        if self.worker is not None:
            self.worker.wake()
        details = await self.show_run(run_id)
        pid = summary.lease.pid if held and summary.lease is not None else None
        note = "a worker already works on it; " if held else ""
        return StartedRun(run_id=run_id, state=details.state, pid=pid, pending=details.pending, next=note + details.next)

    # --- reading ------------------------------------------------------------------------------

    async def show_run(self, run_id: str) -> RunDetails:
        """The run: its state, plan, steps, what waits for a person, its answer and usage."""
        try:
            details: RunDetails = await asyncio.to_thread(run_details, self.store, run_id)
        except StoreError as exc:
            raise RequestError(f"{exc} (list_runs shows the runs)") from None
        return details

    async def list_runs(self, state: str | None = None, limit: int = 20) -> RunList:
        """The newest runs, optionally only those in `state` (one of `views.STATES`)."""
        if state is not None and state not in STATES:
            raise RequestError(f"state must be one of {', '.join(STATES)}, not {state!r}")
        if not 1 <= limit <= 1000:
            raise RequestError(f"limit must be between 1 and 1000, not {limit}")
        runs = await asyncio.to_thread(run_lines, self.store, state=state, limit=limit)
        return RunList(store=self.store.location, runs=runs)

    async def list_templates(self) -> TemplateList:
        """The latest version of every template of the plan library."""
        latest = {t.name: t for t in await asyncio.to_thread(self.store.templates)}  # by name then version: the last one stays
        lines = [
            TemplateLine(
                name=t.name,
                version=t.version,
                params=t.params,
                description=t.description,
                goal=str(t.plan.get("goal", "")),
                steps=len(t.plan.get("steps", [])),
            )
            for t in latest.values()
        ]
        return redact(TemplateList(templates=lines))

    async def list_approvals(self, run_id: str | None = None) -> ApprovalList:
        """What waits for a person (of one run, or of all)."""
        try:
            return ApprovalList(approvals=await asyncio.to_thread(pending_approvals, self.store, run_id))
        except StoreError as exc:
            raise RequestError(str(exc)) from None

    # --- deciding (for the client's user, see `server`) ---------------------------------------------

    async def pending_approval(self, run_id: str, step_id: str | None) -> PendingApproval:
        """The request of `run_id` that waits for a person: the plan's (`step_id` None) or the step's (or a call in it)."""
        approvals = (await self.list_approvals(run_id)).approvals
        matching = [a for a in approvals if a.step_id == step_id]
        if not matching:
            what = f"step {step_id!r}" if step_id else "its plan"
            others = ", ".join(f"{a.what} ({a.step_id or 'no step_id'})" for a in approvals) or "nothing"
            raise RequestError(f"nothing of run {run_id!r} about {what} waits for approval (waiting: {others})")
        return matching[-1]

    async def decide(self, pending: PendingApproval, *, approved: bool, reason: str | None) -> Decision:
        """Record the person's decision on exactly this request (its content hash); `RequestError` when it no longer waits."""
        try:
            decided = await asyncio.to_thread(
                self.store.decide_approval, pending.run_id, step_id=pending.step_id, approved=approved, by=self.user,
                reason=reason, content_hash=pending.content_hash,
            )  # fmt: skip
        except ApprovalError as exc:
            raise RequestError(str(exc)) from None
        if approved and self.worker is not None:  # a plan approved: the worker takes it now, not at its next poll
            self.worker.wake()
        details = await self.show_run(pending.run_id)
        return Decision(
            run_id=pending.run_id, what=pending.what, state=decided.state.value, by=decided.by, reason=decided.reason, next=details.next
        )

    async def _summary(self, run_id: str) -> Any:
        try:
            return await asyncio.to_thread(self.store.run, run_id)
        except StoreError as exc:
            raise RequestError(f"{exc} (list_runs shows the runs)") from None
