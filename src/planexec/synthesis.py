"""Synthesis: turning the steps' outputs into the run's deliverable.

Owns the `Synthesizer` protocol, `FunctionSynthesizer` (your function
assembles the answer) and `default_answer` (the plan's `answer_step`, else
the single sink's output, else every sink's output by step id). An LLM
synthesizer plugs into the same protocol. Imports `calls`, `plan`, `tools`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from .calls import Output, WorkResult
from .plan import Plan
from .tools import in_thread

__all__ = ["FunctionSynthesizer", "Synthesizer", "default_answer"]


@runtime_checkable
class Synthesizer(Protocol):
    """Assembles the deliverable from the goal and the outputs of the steps that succeeded."""

    async def synthesize(self, plan: Plan, outputs: dict[str, Output]) -> WorkResult:
        """Return the answer (with the usage it cost)."""
        ...


class FunctionSynthesizer:
    """A synthesizer backed by ``fn(plan, outputs) -> answer`` (sync or async)."""

    def __init__(self, fn: Callable[[Plan, dict[str, Output]], Any]) -> None:
        self.fn = fn

    async def synthesize(self, plan: Plan, outputs: dict[str, Output]) -> WorkResult:
        """Call the function; a sync one runs in a thread."""
        if inspect.iscoroutinefunction(self.fn):
            answer = await self.fn(plan, outputs)
        else:
            answer = await in_thread(self.fn, plan, outputs)
        return answer if isinstance(answer, WorkResult) else WorkResult(output=answer)


def default_answer(plan: Plan, outputs: dict[str, Output]) -> Any:
    """The answer step's output if the plan names one, else the sinks' outputs."""
    if plan.answer_step is not None:
        out = outputs.get(plan.answer_step)
        return out.value if out is not None else None
    sinks = plan.sinks()
    if len(sinks) == 1:
        out = outputs.get(sinks[0])
        return out.value if out is not None else None
    return {sid: outputs[sid].value for sid in sinks if sid in outputs}
