"""Approval of single steps: asking the engine's approver before a step marked `requires_approval` runs.

Owns the `Approver` type and `ask_approval`, which turns the approver's
answer (or its absence, or its failure) into None or a typed refusal. A
sync approver may block on a person, so it runs off the event loop.
Durable approvals that survive a restart build on this. Imports `plan`,
`results`, `tools`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from .plan import Step
from .results import ErrorInfo
from .tools import in_thread

__all__ = ["Approver", "ask_approval"]

# Asked before a step with `requires_approval` runs; True approves. Without one, such steps are refused.
Approver = Callable[[Step], "bool | Awaitable[bool]"]


async def ask_approval(approver: Approver | None, step: Step) -> ErrorInfo | None:
    """None when the step is approved; otherwise why it may not run (`approval_required` or `approval_denied`)."""
    if approver is None:
        return ErrorInfo(
            rule="approval_required",
            type="NotApproved",
            message=f"step {step.step_id!r} requires approval and the engine has no approver",
        )
    try:
        if inspect.iscoroutinefunction(approver) or inspect.iscoroutinefunction(getattr(approver, "__call__", None)):
            verdict = await approver(step)  # type: ignore[misc]
        else:  # a sync approver may block (a prompt): keep it off the event loop
            verdict = await in_thread(approver, step)
            if inspect.isawaitable(verdict):
                verdict = await verdict
    except Exception as exc:  # a broken approver refuses; it never approves by accident
        return ErrorInfo(rule="approval_required", type=type(exc).__name__, message=f"the approver failed: {exc}")
    if verdict is True:
        return None
    return ErrorInfo(rule="approval_denied", type="NotApproved", message=f"approval for step {step.step_id!r} was denied")
