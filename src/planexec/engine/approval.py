"""Approvals: asking before a step marked `requires_approval` runs, and before a plan version runs.

Owns the `Approver` type and `ask_approval`, which turns the approver's
answer (or its absence, or its failure) into None or a typed refusal; a
sync approver may block on a person, so it runs off the event loop. Also
owns the durable approvals kept in a run store: `StoreApprover` (per step)
and `PlanApprover` (per plan version, frozen by the version's content
hash). A request is stored, keyed by run, step (none for the plan) and
content hash, so a restart finds it again, already decided or still
pending; it is decided by `ask` (a prompt, ``--yes``, a policy) or by a
person from any other process (``planexec approve``), found by polling.

A person may also answer a pending plan version with an edit (``planexec
approve --edit``, the web console): the store keeps the edit as the run's
next plan version, revising the waiting one, and denies the waiting one in
the same transaction. `find_edit` reads that back and `PlanApprover`
answers the engine with the `PlanEdit` instead of False; the engine checks
it against its registry, records it as a revision and asks for its
approval like any version (see `engine.revisions`). Imports `plan`,
`plan_diff`, `records`, `results`, `tools` and the store's records (by
their shape: the store is passed in).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from planexec.engine.results import ErrorInfo, PlanVersion
from planexec.plan.diff import PlanDiff
from planexec.plan.model import Plan, Step
from planexec.records import Record
from planexec.workers.gate import CallRequest
from planexec.workers.tools import in_thread

__all__ = ["ApprovalLog", "Approver", "PlanApprover", "PlanEdit", "StoreApprover", "ask_approval", "find_edit", "step_hash"]

# Asked before a step with `requires_approval` runs; True approves. Without one, such steps are refused.
Approver = Callable[[Step], "bool | Awaitable[bool]"]


async def ask_approval(approver: Approver | None, step: Step, *, run_id: str = "") -> ErrorInfo | None:
    """None when the step is approved; otherwise why it may not run (`approval_required` or `approval_denied`)."""
    if approver is None:
        return ErrorInfo(
            rule="approval_required",
            type="NotApproved",
            message=f"step {step.step_id!r} requires approval and the engine has no approver",
        )
    try:
        if isinstance(approver, StoreApprover):
            verdict = await approver.approve_step(run_id, step)
        else:
            verdict = await _ask(approver, step)
    except Exception as exc:  # a broken approver refuses; it never approves by accident
        return ErrorInfo(rule="approval_required", type=type(exc).__name__, message=f"the approver failed: {exc}")
    if verdict is True:
        return None
    return ErrorInfo(rule="approval_denied", type="NotApproved", message=f"approval for step {step.step_id!r} was denied")


async def _ask(ask: Callable[..., Any], *args: Any) -> Any:
    """Call an approver or a decision function, sync (off the loop: it may prompt) or async."""
    if inspect.iscoroutinefunction(ask) or inspect.iscoroutinefunction(getattr(ask, "__call__", None)):  # noqa: B004 (an object whose __call__ is async)
        return await ask(*args)
    verdict = await in_thread(ask, *args)
    return await verdict if inspect.isawaitable(verdict) else verdict


def step_hash(step: Step) -> str:
    """sha256 of what the step does (its whole JSON form): an approval is for exactly this step."""
    blob = json.dumps(step.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


class ApprovalLog(Protocol):
    """What durable approvals read and write in a run store (`store.ApprovalStore` and its plan versions)."""

    def request_approval(
        self,
        run_id: str,
        content_hash: str,
        *,
        step_id: str | None = None,
        approved: bool | None = None,
        by: str | None = None,
        reason: str | None = None,
    ) -> Any:
        """Ask for approval (the same request again returns the stored one)."""
        ...

    def decide_approval(
        self,
        run_id: str,
        *,
        step_id: str | None = None,
        approved: bool,
        by: str,
        reason: str | None = None,
        content_hash: str | None = None,
    ) -> Any:
        """Approve or deny the pending request."""
        ...

    def approvals(self, run_id: str | None = None, *, pending_only: bool = False) -> list[Any]:
        """Approval requests, oldest first."""
        ...

    def plan_versions(self, run_id: str) -> list[PlanVersion]:
        """Every stored version of the run's plan."""
        ...


class _Durable:
    """A request kept in a run store, decided by `ask` or, without one, by a person from any process."""

    def __init__(self, store: ApprovalLog, *, ask: Callable[..., Any] | None = None, by: str = "person", poll: float = 0.5,
                 on_wait: Callable[[str, str | None], None] | None = None, person: bool | None = None) -> None:  # fmt: skip
        self.store = store
        self.ask = ask
        self.by = by
        self.poll = poll
        self.on_wait = on_wait
        # a person decides (at a prompt, or from another process): escalations are shown, not refused
        self.person = ask is None if person is None else person

    async def _decide(self, run_id: str, content_hash: str, step_id: str | None, *args: Any) -> bool:
        request = await in_thread(self.store.request_approval, run_id, content_hash, step_id=step_id)
        if request.state.value != "pending":  # decided before (another process, or before a restart)
            return bool(request.state.value == "approved")
        if self.ask is not None:
            verdict = await _ask(self.ask, *args)
            approved = verdict is True
            await in_thread(
                self.store.decide_approval, run_id, step_id=step_id, approved=approved, by=self.by, content_hash=content_hash,
                reason=None if approved else "refused when asked",
            )  # fmt: skip
            return approved
        if self.on_wait is not None:
            self.on_wait(run_id, step_id)
        while True:  # a person decides from another process (planexec approve); no deadline
            await asyncio.sleep(self.poll)
            for a in await in_thread(self.store.approvals, run_id):
                if a.approval_id == request.approval_id and a.state.value != "pending":
                    return bool(a.state.value == "approved")


class StoreApprover(_Durable):
    """Per-step and per-call approvals kept in a run store (see the module docstring); the engine's `approver` or `call_approver`.

    As a call approver, `ask` receives the `CallRequest`; the request is
    keyed by the call's digest (its step, tool and arguments), so a restart
    finds the decision again and a call is never asked about twice.
    """

    async def approve_step(self, run_id: str, step: Step) -> bool:
        """True when the step, exactly as it is, is approved; waits for a person when nobody is asked here."""
        return await self._decide(run_id, step_hash(step), step.step_id, step)

    async def approve_call(self, request: CallRequest) -> bool:
        """True when exactly this call (its digest) is approved; waits for a person when nobody is asked here."""
        return await self._decide(request.run_id, request.digest, request.step_id, request)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanEdit(Record):
    """A person's edit of a pending plan version: the `plan` (the next version, revising it), who made it and why (`reason`)."""

    plan: Plan
    by: str | None = None
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form as Python data; the plan in its own JSON form (``id``, not ``step_id``)."""
        return {"plan": self.plan.model_dump(mode="json", by_alias=True), "by": self.by, "reason": self.reason}

    def to_json(self, *, indent: int | None = None) -> str:
        """The JSON form as text."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


def find_edit(store: ApprovalLog, run_id: str, plan: Plan) -> PlanEdit | None:
    """The edit that replaced `plan` (a stored version), or None: the stored next version revising it, when `plan` was denied.

    Only an edit stores a version before it is approved, and it denies the
    version it revises in the same transaction (see `store.approvals`), so
    a denied version with a stored successor was edited, never plainly denied.
    """
    successor = [v for v in store.plan_versions(run_id) if v.version == plan.version + 1 and v.plan.revises == plan.version]
    if not successor:
        return None
    decided = [a for a in store.approvals(run_id) if a.step_id is None and a.content_hash == plan.content_hash]
    if not decided or decided[-1].state.value != "denied":
        return None
    edit = successor[-1]
    return PlanEdit(plan=edit.plan, by=decided[-1].by, reason=edit.reason or "")


class PlanApprover(_Durable):
    """Approvals of whole plan versions, frozen by content hash (see the module docstring); `Engine(plan_approver=...)`.

    `ask(plan, diff)` gets the diff against the version it revises (None for the first).
    """

    async def approve_plan(self, run_id: str, plan: Plan, diff: PlanDiff | None) -> bool | PlanEdit:
        """True when this version (its content hash) is approved; a `PlanEdit` when a person replaced it with an edit.

        Waits for a person when nobody is asked here.
        """
        if await self._decide(run_id, plan.content_hash, None, plan, diff):
            return True
        edit = await in_thread(find_edit, self.store, run_id, plan)
        return edit if edit is not None else False
