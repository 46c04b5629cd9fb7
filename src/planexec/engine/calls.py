"""The engine's side of the worker's gate: approvals of single tool calls, and the record of every call.

Owns `CallApprover` (asked about one tool call: a side-effecting call the
plan did not pre-approve, or an escalation the contract would refuse),
`approve_calls` (the ``--yes`` answer: it approves plain calls and never an
escalation, which needs a person), `person` (marks an approver as a person,
who is asked about escalations too), and `CallHooks`, the `GateHooks` an
attempt sets for its worker: it asks the approver, emits
`ApprovalRequested`/`ApprovalDecided` keyed by the call's digest and a
`ToolCallDecided` per call, and keeps each call on the step's record.
While the approver decides, the step's deadline is paused: time waiting for
a person does not count against the step's timeout.
Imports `engine.deadline`, `engine.events`, `engine.state`, `workers.gate` and `workers.tools`.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from planexec.engine.clock import SYSTEM_CLOCK, Clock
from planexec.engine.deadline import CURRENT_DEADLINE, paused
from planexec.engine.events import ApprovalDecided, ApprovalRequested, ToolCallDecided
from planexec.engine.state import RunControl, RunState, append_to_record
from planexec.workers.gate import CallApprover, CallRecord, CallRequest
from planexec.workers.tools import in_thread

__all__ = ["CallApprover", "CallHooks", "approve_calls", "is_person", "person"]

F = TypeVar("F", bound=Callable[..., Any])


def person(approver: F) -> F:
    """Mark an approver as a person: escalations (calls the contract would refuse) are shown to it, not refused."""
    approver.person = True  # type: ignore[attr-defined]  # a marker attribute on the caller's callable
    return approver


def is_person(approver: Any) -> bool:
    """True when the approver was marked as a person (`person`), or says so itself."""
    return bool(getattr(approver, "person", False))


def approve_calls(request: CallRequest) -> bool:
    """The ``--yes`` answer: a plain call is approved; an escalation never is (it needs a person)."""
    return request.kind == "call"


class CallHooks:
    """The `GateHooks` of one attempt (see the module docstring)."""

    def __init__(
        self,
        run: RunControl,
        state: RunState,
        approver: CallApprover | None,
        *,
        enforce: bool,
        goal_trusted: bool = True,
        owner: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._run = run
        self._state = state
        self._approver = approver
        self.enforce = enforce
        self.goal_trusted = goal_trusted
        self._owner = owner
        self._clock = clock

    @property
    def approver(self) -> CallApprover | None:
        """Who decides the calls of this run (a sub-team's run asks the same one)."""
        return self._approver

    def owned_by(self, step_id: str) -> CallHooks:
        """These hooks for calls made on behalf of `step_id` (a critic judging it): they are recorded on that step."""
        return CallHooks(
            self._run, self._state, self._approver, enforce=self.enforce, goal_trusted=self.goal_trusted, owner=step_id, clock=self._clock
        )

    def window_closed(self, tool: str) -> str | None:
        """Why `tool` may not run now: the plan gives it maintenance windows and none is open on the engine's clock; None otherwise."""
        windows = self._state.plan.parsed_windows.get(tool)
        if not windows:
            return None
        now = self._clock.now()
        if any(w.contains(now) for w in windows):
            return None
        opens = min(w.next_open(now) for w in windows)
        return f"{tool!r} runs only in {' or '.join(w.text for w in windows)}; it is {now.isoformat()}, the next opens {opens.isoformat()}"

    async def approve_call(self, request: CallRequest) -> tuple[bool, str]:
        """(approved, who decided); an escalation reaches only a person, and a failing approver refuses."""
        approver = self._approver
        if approver is None:
            return False, "no approver"
        if request.kind == "escalation" and not is_person(approver):
            return False, "the contract (an escalation needs a person)"
        run = self._run
        if self._owner is not None:
            request = dataclasses.replace(request, step_id=self._owner)
        run._emit(
            ApprovalRequested, step_id=request.step_id, content_hash=request.digest, plan_version=self._state.plan.version, call=request
        )
        try:
            ask = getattr(approver, "approve_call", None)
            with paused(CURRENT_DEADLINE.get()):  # a person has no deadline: the step's clock stops while they decide
                verdict = await ask(request) if ask is not None else await _ask(approver, request)
        except Exception as exc:  # a broken approver refuses; it never approves by accident
            verdict, who = False, f"a failing approver ({type(exc).__name__}: {exc})"
        else:
            who = "a person" if is_person(approver) else getattr(approver, "__name__", type(approver).__name__)
        approved = verdict is True
        run._emit(ApprovalDecided, step_id=request.step_id, content_hash=request.digest, approved=approved)
        return approved, who

    def record_call(self, record: CallRecord) -> None:
        """Keep the call on the step's record and in the run's events."""
        if self._owner is not None and record.step_id != self._owner:
            record = dataclasses.replace(record, step_id=self._owner)
        rec = self._state.records.get(record.step_id)
        if rec is not None:
            append_to_record(rec, "calls", record)
        self._run._emit(ToolCallDecided, step_id=record.step_id, call=record)


async def _ask(approver: Callable[..., Any], request: CallRequest) -> Any:
    if inspect.iscoroutinefunction(approver) or inspect.iscoroutinefunction(getattr(approver, "__call__", None)):  # noqa: B004
        return await approver(request)
    verdict = await in_thread(approver, request)
    return await verdict if inspect.isawaitable(verdict) else verdict
