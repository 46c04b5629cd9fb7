"""Synthesis: turning the steps' outputs into the run's deliverable.

Owns the `Synthesizer` protocol, `FunctionSynthesizer` (your function
assembles the answer) and `default_answer` (the plan's `answer_step`, else
the single sink's output, else every sink's output by step id). An LLM
synthesizer plugs into the same protocol. `assemble` waits for one, bounded.
Imports `calls`, `plan`, `tools`, `usage`.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from planexec.plan.model import Plan
from planexec.usage import Usage
from planexec.workers.io import Output, Source, WorkResult
from planexec.workers.tools import in_thread

__all__ = ["Assembled", "FunctionSynthesizer", "Synthesizer", "answer_inputs", "assemble", "default_answer"]


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


def answer_inputs(plan: Plan, outputs: dict[str, Output]) -> list[Output]:
    """The outputs `default_answer` is made of: the answer step's if the plan names one, else the sinks'."""
    chosen = [plan.answer_step] if plan.answer_step is not None else plan.sinks()
    return [outputs[sid] for sid in chosen if sid in outputs]


@dataclass(frozen=True)
class Assembled:
    """How a synthesizer's task ended: the answer and usage, or why there is none."""

    answer: Any = None
    usage: Usage = field(default_factory=Usage)
    sources: list[Source] = field(default_factory=list)  # what the synthesizer read besides the outputs (its tools)
    problem: str | None = None
    cancelled: bool = False


async def assemble(task: asyncio.Task[Any], timeout: float | None) -> Assembled:
    """Wait for a synthesizer's task, at most `timeout` seconds; never raise for what the synthesizer did."""
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        return Assembled(problem=f"synthesizer timed out after {timeout:g}s")
    if task.cancelled():
        return Assembled(cancelled=True)
    exc = task.exception()
    if exc is not None:
        return Assembled(problem=f"synthesizer failed: {type(exc).__name__}: {exc}")
    result = task.result()
    if not isinstance(result, WorkResult):
        return Assembled(problem=f"synthesizer returned {type(result).__name__}, not a WorkResult")
    return Assembled(answer=result.output, usage=result.usage, sources=result.sources)
