"""Where a step runs: the `Runner` seam between deciding and executing.

Owns the `Runner` protocol (one method: run a `StepCall`, return a
`WorkResult`) and `LocalRunner`, which performs the call in this process on
the registry's worker. The engine decides *what* runs and *when*; a runner
only decides *where*, so a distributed backend can replace `LocalRunner`
without touching the engine (`planexec.scale.RayRunner` runs function-tool
steps on a Ray cluster and hands the others to a `LocalRunner`). A runner
is awaited inside the step's deadline: a timeout or a cancel reaches it as
`CancelledError`, which it must pass on to wherever the step runs.
Imports `calls` and `registry`.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol, runtime_checkable

from planexec.workers.io import StepCall, WorkResult
from planexec.workers.registry import Registry

__all__ = ["LocalRunner", "Runner"]


@runtime_checkable
class Runner(Protocol):
    """Performs one attempt of one step somewhere and returns its result."""

    async def run(self, call: StepCall) -> WorkResult:
        """Perform `call` on the worker it names."""
        ...


class LocalRunner:
    """Runs steps in this process's event loop, on the registry's workers."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def run(self, call: StepCall) -> Coroutine[Any, Any, WorkResult]:
        """Look the worker up by name and let it perform the call (its `perform` coroutine itself: no layer between),
        on the model the call names when it names one (a cascade's)."""
        worker = self.registry.worker(call.worker)
        if call.model is not None:
            worker = self.registry.on_model(worker, call.model)
        return worker.perform(call)
