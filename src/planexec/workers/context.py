"""The per-run context a tool may ask for: the run's dependencies, the run id and the step id.

Owns `ToolContext` (what a tool receives when one of its parameters is
annotated ``ToolContext`` or ``ToolContext[MyDeps]``; that parameter is not
part of the tool's input schema), `run_dependencies` (the context manager
that sets a run's dependencies object) and `current_dependencies`.

The dependencies travel in a `contextvars.ContextVar`, not in the `StepCall`:
a database handle or an environment object has no JSON form, and a record
that crosses the runner seam must keep one. asyncio copies the current
context into every task it creates, and `tools.in_thread` into the thread
of a sync tool, so whoever runs a plan inside ``with run_dependencies(deps):``
gives every tool of that run `deps`, while a run started beside it (another
task, another thread) sees its own. One registry then serves many runs.

Imports `workers.io` only.
"""

from __future__ import annotations

import contextvars
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from planexec.workers.io import StepCall

__all__ = ["ToolContext", "current_dependencies", "is_context_annotation", "run_dependencies", "tool_context"]

DepsT = TypeVar("DepsT")

_DEPENDENCIES: contextvars.ContextVar[Any] = contextvars.ContextVar("planexec_run_dependencies", default=None)


@dataclass(frozen=True, slots=True)
class ToolContext(Generic[DepsT]):
    """What a tool learns about the run calling it.

    `deps` is the object given to `run_dependencies` for this run (None when
    the run was given none); `run_id`, `step_id` and `attempt` say which
    attempt at which step calls the tool (None and 1 when the tool is invoked
    outside a run); `tool` is the tool's own name.
    """

    deps: DepsT
    tool: str
    run_id: str | None = None
    step_id: str | None = None
    attempt: int = 1


@contextmanager
def run_dependencies(deps: Any) -> Iterator[Any]:
    """Within the block (and the tasks and tool threads started in it) tools receive `deps` in their `ToolContext`.

    The previous value comes back when the block ends, so runs nest and run
    side by side: each asyncio task sees the value set in its own context.
    """
    token = _DEPENDENCIES.set(deps)
    try:
        yield deps
    finally:
        _DEPENDENCIES.reset(token)


def current_dependencies() -> Any:
    """The dependencies object of the run in progress here, or None."""
    return _DEPENDENCIES.get()


def tool_context(tool: str, call: StepCall | None) -> ToolContext[Any]:
    """The context a tool named `tool` receives, for this call (or for a call outside a run)."""
    if call is None:
        return ToolContext(deps=_DEPENDENCIES.get(), tool=tool)
    return ToolContext(deps=_DEPENDENCIES.get(), tool=tool, run_id=call.run_id, step_id=call.step_id, attempt=call.attempt)


def is_context_annotation(annotation: Any) -> bool:
    """True for ``ToolContext`` and ``ToolContext[Something]``."""
    return annotation is ToolContext or typing.get_origin(annotation) is ToolContext
