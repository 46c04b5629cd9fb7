"""The main job as the MCP server offers it: plan a goal, start a planned run or a template, read runs, decide approvals.

Owns `Service`, one per server, over a `Team` (its registry, planner and
policies; its store is the run store) and a `Launcher`, and `RequestError`
(a request refused with a message for the caller: an unknown run or
template, a missing parameter, a plan the planner could not write).

- `plan_goal` plans (the plan library first, unless told not to), has
  the policies review the plan, and stores it as a planned run (see
  `launch.park`): the run id, the plan, its content hash and the verdicts
  come back; nothing runs. A plan a policy rejects is stored denied.
- `run_plan` starts a planned run in a process of its own (``planexec
  resume``): it runs once a person approves its plan in the store, or at
  once if one already did. It starts nothing else: a run a person stopped,
  or whose process died, is theirs to resume.
- `run_template` fills in a template of the plan library, checks it, stores
  it as a planned run and starts it.
- `show_run`, `list_runs`, `list_templates` and `list_approvals` read.
- `pending_approval` and `decide` are what the server uses to record a
  decision the client's *user* made (see `server`): the caller never
  gives a decision, so a model cannot approve anything.

Store calls run in threads. Imports `team`, `library`, `governance`
(through `policies`), the store and the face's `launch`, `views`, `answers`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from planexec import Plan, Planning, Team
from planexec.errors import ApprovalError, ModelError, PlanningError, PlanValidationError, StoreError
from planexec.library.reuse import ReusePlanning
from planexec.library.templates import TemplateError, instantiate
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
from planexec.mcp_server.launch import PARKED, Launcher, is_planned, park
from planexec.mcp_server.views import STATES, next_step, pending_approvals, run_details, run_lines
from planexec.policies import Review, decide_review, narrow_plan, review_plan
from planexec.secrets import redact
from planexec.store import ApprovalState, RunStore
from planexec.workers.tools import in_thread

__all__ = ["START_WAIT", "RequestError", "Service"]

START_WAIT = 15.0  # seconds run_plan waits for its process to take the run before answering "starting"


class RequestError(Exception):
    """A request the server refuses; the message says why and what to do instead (the caller sees it as a tool error)."""


@dataclasses.dataclass
class Service:
    """What the MCP tools do (see the module docstring); decisions are recorded under `user`."""

    team: Team
    launcher: Launcher
    user: str

    @property
    def store(self) -> RunStore:
        """The run store (the team's)."""
        store: RunStore = self.team.store  # type: ignore[assignment]  # the server always gives its team a store
        return store

    # --- planning and starting ---------------------------------------------------------------

    async def plan_goal(self, goal: str, *, reuse: bool = True) -> PlannedRun:
        """Plan `goal`, have the policies review the plan, store it as a planned run; nothing runs."""
        if not goal.strip():
            raise RequestError("say what you want done: the goal is empty")
        try:
            planning = await (self.team.plan(goal) if reuse else self.team.planner.draft(goal))
        except PlanningError as exc:
            raise RequestError(f"the planner wrote no valid plan: {exc}") from None
        except ModelError as exc:
            raise RequestError(f"the planner's model failed: {type(exc).__name__}: {exc}") from None
        source = planning.reuse.describe() if isinstance(planning, ReusePlanning) else f"planned by {self.team.planner_model.name}"
        return await self._store(planning.plan, source=source, planning=planning)

    async def run_template(self, name: str, parameters: Mapping[str, Any], version: int | None = None) -> StartedRun:
        """Fill in the template `name` (its latest version, or `version`), store it as a planned run and start it."""
        try:
            template = await in_thread(self.store.template, name, version)
        except StoreError as exc:
            names = sorted({t.name for t in await in_thread(self.store.templates)})
            raise RequestError(f"{exc}; the plan library has: {', '.join(names) or 'no templates'} (list_templates)") from None
        try:
            plan = instantiate(template, dict(parameters))
        except TemplateError as exc:
            raise RequestError(str(exc)) from None
        except PlanValidationError as exc:
            raise RequestError(f"template {name!r} v{template.version} filled in is not a valid plan: {exc}") from None
        planned = await self._store(plan, source=f"template {template.name} v{template.version}")
        if planned.state == "rejected":
            return StartedRun(run_id=planned.run_id, state="rejected", next=planned.next, planned=planned)
        started = await self.run_plan(planned.run_id)
        return started.model_copy(update={"planned": planned})

    async def _store(self, plan: Plan, *, source: str, planning: Planning | None = None) -> PlannedRun:
        """Review `plan` with the policies and store it as a planned run (see `launch.park`); denied at once when one rejects it."""
        context = self.team.policy_context()
        plan = narrow_plan(plan, self.team.policies, context)[0]  # the policies judge, and the run runs, the narrowed plan
        review = review_plan(plan, self.team.policies, context)
        if planning is not None and plan is not planning.plan:
            planning = dataclasses.replace(planning, plan=plan)
        run_id = f"mcp-{datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
        try:
            result = await park(self.team, plan, run_id=run_id, planning=planning)
        except PlanValidationError as exc:
            raise RequestError(f"the plan cannot run with this project's tools: {exc}") from None
        if result.reason != PARKED:
            raise RequestError(f"the plan could not be stored: {result.reason}")
        state = "planned"
        next_ = f"a person approves it (planexec approve {run_id}, or the console); run_plan({run_id!r}) starts it now or after"
        decided = decide_review(
            plan, review, policies_configured=bool(self.team.policies)
        )  # a person decides later: only a policy's reject is final
        if decided.by == "policy" and not decided.approved:
            reason = decided.reason
            await in_thread(self.store.decide_approval, run_id, approved=False, by="policy", reason=reason, content_hash=plan.content_hash)
            state, next_ = "rejected", f"nothing will run: {reason}"
        return redact(
            PlannedRun(
                run_id=run_id,
                state=state,
                goal=plan.goal,
                source=source,
                plan=json.loads(plan.to_json(indent=None)),  # the stable form: what the plan decides, without defaults
                content_hash=plan.content_hash,
                steps=len(plan.steps),
                review=_review(review),
                draft_problems=[f"draft {d.attempt}: {p}" for d in (planning.drafts if planning else ()) for p in d.problems],
                usage=planning.usage.model_dump(mode="json") if planning is not None else {},
                next=next_,
            )
        )

    async def run_plan(self, run_id: str) -> StartedRun:
        """Start the planned run `run_id` in a process of its own; what it does next (it may wait for a person)."""
        summary = await self._summary(run_id)
        held = summary.lease is not None and summary.lease.live
        if not held and not is_planned(summary):
            raise RequestError(
                f"run {run_id!r} is {summary.state}: run_plan starts only a run planned here (plan_goal, run_template) that has "
                f"not started; {next_step(summary, summary.state, [])}"
            )
        denied = await in_thread(_denied, self.store, run_id) if not held else None
        if denied is not None:
            raise RequestError(f"the plan of run {run_id!r} was denied{denied}: nothing runs; plan again with plan_goal")
        started = self.launcher.running(run_id)  # from here to `start`, no await: two calls at once start one process
        if held or started is not None:
            pid = started.process.pid if started is not None else summary.lease.pid if summary.lease is not None else None
            return await self._started(run_id, pid, "a process already works on it")
        started = self.launcher.start(run_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_WAIT
        while loop.time() < deadline:  # until the process takes the run (or ends without taking it)
            await asyncio.sleep(0.1)
            if not is_planned(await self._summary(run_id)):
                return await self._started(run_id, started.process.pid)
            if started.process.poll() is not None and is_planned(await self._summary(run_id)):
                raise RequestError(f"run {run_id!r} did not start: {self.launcher.ended(run_id)}")
        return StartedRun(run_id=run_id, state="starting", pid=started.process.pid, next=f"show_run({run_id!r}) follows it")

    async def _started(self, run_id: str, pid: int | None, note: str = "") -> StartedRun:
        details = await self.show_run(run_id)
        state = "starting" if details.state == "planned" else details.state
        return StartedRun(
            run_id=run_id, state=state, pid=pid, pending=details.pending, next=f"{note}; {details.next}" if note else details.next
        )

    # --- reading ------------------------------------------------------------------------------

    async def show_run(self, run_id: str) -> RunDetails:
        """The run: its state, plan, steps, what waits for a person, its answer and usage."""
        try:
            details: RunDetails = await in_thread(run_details, self.store, run_id, process=self.launcher.ended(run_id))
        except StoreError as exc:
            raise RequestError(f"{exc} (list_runs shows the runs)") from None
        return details

    async def list_runs(self, state: str | None = None, limit: int = 20) -> RunList:
        """The newest runs, optionally only those in `state` (one of `views.STATES`)."""
        if state is not None and state not in STATES:
            raise RequestError(f"state must be one of {', '.join(STATES)}, not {state!r}")
        if not 1 <= limit <= 1000:
            raise RequestError(f"limit must be between 1 and 1000, not {limit}")
        runs = await in_thread(run_lines, self.store, state=state, limit=limit)
        return RunList(store=self.store.location, runs=runs)

    async def list_templates(self) -> TemplateList:
        """The latest version of every template of the plan library."""
        latest = {t.name: t for t in await in_thread(self.store.templates)}  # by name then version: the last one stays
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
            return ApprovalList(approvals=await in_thread(pending_approvals, self.store, run_id))
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
            decided = await in_thread(
                self.store.decide_approval, pending.run_id, step_id=pending.step_id, approved=approved, by=self.user,
                reason=reason, content_hash=pending.content_hash,
            )  # fmt: skip
        except ApprovalError as exc:
            raise RequestError(str(exc)) from None
        details = await self.show_run(pending.run_id)
        return Decision(
            run_id=pending.run_id, what=pending.what, state=decided.state.value, by=decided.by, reason=decided.reason, next=details.next
        )

    async def _summary(self, run_id: str) -> Any:
        try:
            return await in_thread(self.store.run, run_id)
        except StoreError as exc:
            raise RequestError(f"{exc} (list_runs shows the runs)") from None


def _review(review: Review) -> PolicyReview:
    return PolicyReview(decision=review.decision, verdicts=[v.to_dict() for v in review.verdicts])


def _denied(store: RunStore, run_id: str) -> str | None:
    """`` by NAME: why`` when the run's latest plan version was denied; else None (a version a person edited is not the latest)."""
    versions = store.plan_versions(run_id)
    latest = versions[-1].plan.content_hash if versions else None
    asked = [a for a in store.approvals(run_id) if a.step_id is None and a.content_hash == latest]
    if not asked or asked[-1].state is not ApprovalState.DENIED:
        return None
    return f" by {asked[-1].by}: {asked[-1].reason}" if asked[-1].by else ""
