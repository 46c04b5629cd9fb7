"""What a joiner is told and what it answers: the engine's side of joining.

Owns `JoinContext` (the goal, the plan, the outputs, the failures),
`JoinDecision` (``finish`` with an answer, or ``replan`` with a reason), the
`Joiner` protocol, `FunctionJoiner` (your function decides), `read_decision`
and `JoinerError` (a decision that is neither; the engine records it as the
run's typed outcome). The model joiner is `planning.joiner.ModelJoiner`.
Imports `plan`, `records`, `usage` and `errors`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from planexec.errors import PlanexecError
from planexec.plan.model import Plan
from planexec.records import Record
from planexec.usage import Usage

__all__ = ["FunctionJoiner", "JoinContext", "JoinDecision", "Joiner", "JoinerError", "read_decision"]


class JoinerError(PlanexecError):
    """The joiner failed, or decided neither ``finish`` nor ``replan``; `usage` is what it cost."""

    def __init__(self, message: str, *, usage: Usage | None = None) -> None:
        self.usage = usage or Usage()
        super().__init__(message)


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinContext(Record):
    """What the joiner sees: the goal, the plan, the outputs of finished steps, and why others did not finish."""

    goal: str
    plan: Plan
    outputs: dict[str, Any]
    failures: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinDecision(Record):
    """``finish`` (with the answer) or ``replan`` (with the reason); `usage` is what deciding cost."""

    action: Literal["finish", "replan"]
    answer: Any = None
    reason: str = ""
    usage: Usage = field(default_factory=Usage)

    @classmethod
    def finish(cls, answer: Any, reason: str = "") -> JoinDecision:
        """Finish the run with `answer`."""
        return cls(action="finish", answer=answer, reason=reason)

    @classmethod
    def replan(cls, reason: str) -> JoinDecision:
        """Ask for a new plan, saying why."""
        return cls(action="replan", reason=reason)


def read_decision(data: Any, usage: Usage = Usage()) -> JoinDecision:
    """A `JoinDecision` from a joiner's reply (a decision, or ``{"action": ..., ...}``); `JoinerError` if neither."""
    if isinstance(data, JoinDecision):
        return (
            data if usage.is_zero() else JoinDecision(action=data.action, answer=data.answer, reason=data.reason, usage=data.usage + usage)
        )
    if isinstance(data, dict) and data.get("action") in ("finish", "replan"):
        reason = data.get("reason") or ""
        if data["action"] == "replan" and not str(reason).strip():
            raise JoinerError("the joiner asked for a new plan without saying why (an empty 'reason')", usage=usage)
        return JoinDecision(action=data["action"], answer=data.get("answer"), reason=str(reason), usage=usage)
    shown = json.dumps(data, default=str)[:200] if not isinstance(data, str) else data[:200]
    raise JoinerError(f"the joiner decided neither 'finish' nor 'replan': {shown}", usage=usage)


@runtime_checkable
class Joiner(Protocol):
    """Decides, once the plan's steps have ended, whether the run is finished.

    A joiner may say ``always = False`` (a `ModelJoiner` does): the engine
    then asks it only when it can change the outcome (a step did not
    succeed, or the plan does not name its `answer_step`); without the attribute
    it is asked after every version.
    """

    async def join(self, context: JoinContext) -> JoinDecision:
        """``finish(answer)`` or ``replan(reason)``; `JoinerError` for anything else."""
        ...


class FunctionJoiner:
    """A joiner backed by ``fn(context) -> JoinDecision | {"action": ...}`` (sync or async)."""

    def __init__(self, fn: Callable[[JoinContext], Any], *, always: bool = True) -> None:
        self.fn = fn
        self.always = always  # a function costs no model call: asked after every version unless told otherwise

    async def join(self, context: JoinContext) -> JoinDecision:
        """Call the function and read its decision."""
        out = self.fn(context)
        if inspect.isawaitable(out):
            out = await out
        return read_decision(out)
