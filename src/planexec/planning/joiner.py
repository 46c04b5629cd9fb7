"""The joiner: after a plan's steps end, finish with an answer or ask for a new plan.

Owns `JoinContext` (the goal, the plan, the outputs, the failures),
`JoinDecision` (``finish`` with an answer, or ``replan`` with a reason), the
`Joiner` protocol, `ModelJoiner` (a model decides, with structured output,
as LLMCompiler's joiner does) and `FunctionJoiner` (your function decides).
A decision that is neither is a `JoinerError`; the engine records it as the
run's typed outcome. Prompts are files under ``prompts/joiner/``.
Imports `plan`, `records`, `usage`, `errors`, `toolcalls` and `models.base`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from planexec.errors import ModelOutputError, PlanexecError
from planexec.models.base import Message, Model, ModelRequest
from planexec.plan.model import Plan
from planexec.records import Record
from planexec.workers.tool_calls import prompt_file
from planexec.usage import Usage

__all__ = ["FunctionJoiner", "JoinContext", "JoinDecision", "Joiner", "JoinerError", "ModelJoiner", "JOIN_SCHEMA"]

OUTPUT_CHARS = 800  # per step's output shown to a model joiner

JOIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"enum": ["finish", "replan"]},
        "answer": {"type": "string", "maxLength": 1000},  # llama.cpp's grammar builder crashes on 2000
        "reason": {"type": "string", "maxLength": 300},
    },
    "required": ["action"],
    "additionalProperties": False,
}


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
        return data if usage.is_zero() else JoinDecision(action=data.action, answer=data.answer, reason=data.reason, usage=data.usage + usage)
    if isinstance(data, dict) and data.get("action") in ("finish", "replan"):
        reason = data.get("reason") or ""
        if data["action"] == "replan" and not str(reason).strip():
            raise JoinerError("the joiner asked for a new plan without saying why (an empty 'reason')", usage=usage)
        return JoinDecision(action=data["action"], answer=data.get("answer"), reason=str(reason), usage=usage)
    shown = json.dumps(data, default=str)[:200] if not isinstance(data, str) else data[:200]
    raise JoinerError(f"the joiner decided neither 'finish' nor 'replan': {shown}", usage=usage)


@runtime_checkable
class Joiner(Protocol):
    """Decides, once the plan's steps have ended, whether the run is finished."""

    async def join(self, context: JoinContext) -> JoinDecision:
        """``finish(answer)`` or ``replan(reason)``; `JoinerError` for anything else."""
        ...


class FunctionJoiner:
    """A joiner backed by ``fn(context) -> JoinDecision | {"action": ...}`` (sync or async)."""

    def __init__(self, fn: Callable[[JoinContext], Any]) -> None:
        self.fn = fn

    async def join(self, context: JoinContext) -> JoinDecision:
        """Call the function and read its decision."""
        out = self.fn(context)
        if inspect.isawaitable(out):
            out = await out
        return read_decision(out)


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= OUTPUT_CHARS else text[:OUTPUT_CHARS] + f"... ({len(text) - OUTPUT_CHARS} more characters)"


class ModelJoiner:
    """A model reads the goal and the results and answers ``{"action": "finish"|"replan", "answer", "reason"}``."""

    def __init__(self, model: Model, *, max_tokens: int | None = 512, seed: int | None = 0) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.seed = seed

    def __repr__(self) -> str:
        return f"ModelJoiner({self.model.name!r})"

    def request(self, context: JoinContext) -> ModelRequest:
        """The joiner's one call: its prompt, the results, the decision schema."""
        results = [f"- {sid}: {_shown(v)}" for sid, v in context.outputs.items()]
        results += [f"- {sid}: did not finish ({why})" for sid, why in context.failures.items()]
        user = prompt_file("joiner", "decide.md", goal=context.goal, results="\n".join(results) or "(no results)")
        return ModelRequest(
            messages=[Message(role="system", content=prompt_file("joiner", "system.md")), Message(role="user", content=user)],
            output_schema=JOIN_SCHEMA,
            temperature=0.0,
            seed=self.seed,
            max_tokens=self.max_tokens,
        )

    async def join(self, context: JoinContext) -> JoinDecision:
        """Ask the model; an unreadable reply or a model error is a `JoinerError` (with the usage spent)."""
        try:
            response = await self.model.complete(self.request(context))
        except ModelOutputError as exc:
            raise JoinerError(f"joiner {self.model.name}: {exc}", usage=exc.usage if isinstance(exc.usage, Usage) else Usage()) from exc
        except PlanexecError as exc:
            raise JoinerError(f"joiner {self.model.name}: {type(exc).__name__}: {exc}") from exc
        try:
            data = json.loads(response.text)
        except json.JSONDecodeError:
            raise JoinerError(f"joiner {self.model.name} answered with text that is not JSON: {response.text[:200]!r}", usage=response.usage) from None
        return read_decision(data, response.usage)
