"""A plan handed to the store's queue instead of run here: the policies' review of it, and its run stored for a worker.

Owns `reviewed`
(the stages of a submitted plan: the policies' review, then `enqueue`) and
`enqueue` (the run stored with `fleet.worker.submit_plan`: ``refused`` when
a policy rejected the plan, ``waiting`` for a person's approval, or
``queued`` approved). Every plan waits for a person when the `Submission`
says so (the console and the MCP server); the run records how it was set
up (its tools modules, its models, a single agent's role), so the worker
that takes it (`Team.worker`) works it the same way. `Team.submit`,
`Team.iter(submit=...)` and `Team.iter_plan` use these. Imports `fleet`,
`governance`, `plan`, `store` and the team's `settings` and `stages`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Literal

from planexec.fleet.worker import queue_store, submit_plan
from planexec.governance.policies import Policy, PolicyContext, narrow_plan, review_plan
from planexec.governance.review import decide_review
from planexec.plan.drafts import Planning
from planexec.plan.model import Plan
from planexec.team.settings import Submission
from planexec.team.stages import Queued, Reviewed, Stage, WaitingForPerson
from planexec.workers.tools import in_thread

__all__ = ["enqueue", "reviewed"]

Setup = Callable[..., dict[str, Any]]  # (planning, **more) -> the run's setup: `Team.setup`


async def reviewed(
    planning: Planning,
    *,
    run_id: str,
    submission: Submission,
    store: object,
    policies: Sequence[Policy],
    context: PolicyContext,
    auto_approve: bool,
    setup: Setup,
) -> AsyncIterator[Stage]:
    """The policies' review of a submitted plan, then its run stored: refused (`Reviewed`, then `Queued`), waiting for a
    person (`WaitingForPerson`, then `Queued`), or queued approved (`Reviewed`, then `Queued`)."""
    plan = narrow_plan(planning.plan, policies, context)[0]  # the policies judge, and the worker runs, the narrowed plan
    if plan is not planning.plan:
        planning = dataclasses.replace(planning, plan=plan)
    review = review_plan(plan, policies, context)
    yes = "auto_approve" if auto_approve else None
    outcome = decide_review(plan, review, policies_configured=bool(policies), yes=yes, person_required=False)

    async def store_it(approved_by: str | None = None, denied: tuple[str, str] | None = None) -> Queued:
        return await enqueue(
            plan, planning, store=store, run_id=run_id, setup=setup(planning), submission=submission, auto_approve=auto_approve,
            approved_by=approved_by, denied=denied,
        )  # fmt: skip

    if outcome.by == "policy" and not outcome.approved:
        yield Reviewed(outcome)
        yield await store_it(denied=("policy", outcome.reason))
    elif submission.person or not outcome.approved:
        yield WaitingForPerson(plan, review)
        yield await store_it()
    else:
        yield Reviewed(outcome)
        yield await store_it(approved_by=outcome.by)


async def enqueue(
    plan: Plan,
    planning: Planning | None,
    *,
    store: object,
    run_id: str,
    setup: dict[str, Any],
    submission: Submission,
    auto_approve: bool = False,
    approved_by: str | None = None,
    denied: tuple[str, str] | None = None,
) -> Queued:
    """Store `plan` as the run `run_id` in the queue (see the module docstring), with the planner's drafts; its stage."""
    queue = queue_store(store)
    drafts = planning.draft_events() if planning is not None else []
    steps = submission.approve_steps or auto_approve
    await in_thread(
        lambda: submit_plan(
            queue, plan, run_id=run_id, setup=setup, approved_by=approved_by, approve_steps=steps,
            submitted_by=submission.by, drafts=drafts, denied_by=denied,
        )
    )  # fmt: skip
    mode: Literal["plan", "single"] = "single" if "single" in setup else "plan"
    if denied is not None:
        return Queued(run_id, plan, "refused", mode, denied[1])
    if approved_by is not None:
        return Queued(run_id, plan, "queued", mode, f"approved by {approved_by}: the next free worker takes it")
    return Queued(run_id, plan, "waiting", mode, f"its plan waits for a person: planexec approve {run_id}, or the console")
