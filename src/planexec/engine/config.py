"""The engine's settings, and what a run sees of the engine that started it.

Owns `EngineConfig` (every setting `Engine` takes, validated once, frozen,
changed only through `replace`), `Subscriber` (an event callback), `Host`
(the narrow view a `Run` has of its engine; `Engine` is the one
implementation) and `RunHandle` (what a run started by a host offers back).
Settings left None here are resolved by the `Engine` (a default registry, a
local runner, the criteria checker), so `replace(registry=...)` never keeps
a runner or checker built for another registry.
Imports `engine.approval`, `engine.cascade`, `engine.criteria`, `engine.join`,
`engine.recording`, `engine.replan`, `engine.results`, `engine.runner`,
`engine.synthesis`, `plan`, `usage` and `workers.registry`; never the run.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from planexec.config import Config
from planexec.engine.approval import Approver, PlanApprover
from planexec.engine.cascade import ModelRouter
from planexec.engine.clock import SYSTEM_CLOCK, Clock
from planexec.engine.criteria import Checker, CriteriaChecker
from planexec.engine.join import Joiner
from planexec.engine.recording import RunLog
from planexec.engine.replan import Replanner
from planexec.engine.results import RunResult
from planexec.engine.runner import Runner
from planexec.engine.synthesis import Synthesizer
from planexec.plan.model import Plan, Step
from planexec.usage import Budget
from planexec.workers.gate import CallApprover
from planexec.workers.outputs import DEFAULT_MAX_OUTPUT_BYTES
from planexec.workers.registry import Registry

__all__ = ["EngineConfig", "Host", "RunHandle", "Subscriber"]

Subscriber = Callable[[Any], None]


@dataclass(frozen=True)
class EngineConfig:
    """Every setting of an `Engine`; see `Engine` for what each does. Invalid values raise `ValueError` here.

    `registry`, `runner` and `checker` left None are the engine's defaults
    (`Registry.default()`, a `LocalRunner` on the registry, the criteria
    checker). `worker_limits` is kept as a read-only mapping.

    `max_output_bytes` bounds each step's output as compact JSON (default
    32 MiB): a larger output fails its step (rule ``tool_output``, the
    message naming the size and the limit), found off the event loop and
    within the step's timeout. None or 0: no size limit; NaN, infinity,
    iterators, sets and objects that are not data are refused either way.

    `clock` is the time scheduled steps (`Step.not_before`, the plan's
    windows) are measured by (`engine.clock`; tests pass a
    `planexec.testing.ManualClock`). `park_after` (seconds): a run whose
    next steps are all scheduled more than this far ahead stops as
    ``scheduled`` (its `RunResult.due` says until when) instead of waiting
    in the process, for a queue's worker to take it when due; None (the
    default, a foreground run): it waits here.

    `cascades` gives a worker (a role) the models its steps try in order,
    ``{"researcher": ("openai:small", "openai:large")}``, where a step names
    none of its own (`Step.models`; see `engine.cascade`); `model_router`
    picks the model such a step starts on (None: `ByDifficulty`, then the
    cascade's first model).
    """

    registry: Registry | None = None
    runner: Runner | None = None
    max_concurrency: int = 64
    worker_limits: Mapping[str, int] = field(default_factory=dict)
    default_timeout: float | None = 300.0
    synthesizer: Synthesizer | None = None
    checker: Checker | None = None
    seed: int | None = None
    on_event: Subscriber | None = None
    approver: Approver | None = None
    cancel_grace: float = 5.0
    replanner: Replanner | None = None
    max_replans: int = 2
    joiner: Joiner | None = None
    replan_failed_checks: bool = True
    budget: Budget | None = None
    store: RunLog | None = None
    plan_approver: PlanApprover | None = None
    call_approver: CallApprover | None = None
    enforce_contract: bool = True
    goal_trusted: bool = True
    max_output_bytes: int | None = DEFAULT_MAX_OUTPUT_BYTES
    clock: Clock = SYSTEM_CLOCK
    park_after: float | None = None
    cascades: Mapping[str, Sequence[str]] = field(default_factory=dict)
    model_router: ModelRouter | None = None

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        limits = dict(self.worker_limits or {})
        bad = {w: n for w, n in limits.items() if not isinstance(n, int) or n < 1}
        if bad:
            raise ValueError(f"worker_limits must be whole numbers of at least 1; got {bad}")
        if self.park_after is not None and not self.park_after >= 0:
            raise ValueError(f"park_after must be 0 or more seconds, or None (wait in the process); got {self.park_after!r}")
        if self.max_replans < 0:
            raise ValueError("max_replans must be 0 or more")
        size = self.max_output_bytes
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
            raise ValueError(f"max_output_bytes must be a whole number of bytes, 0 or None (no limit); got {size!r}")
        # frozen: the one way in is object.__setattr__; a copy, so the caller's dict cannot change it later
        object.__setattr__(self, "worker_limits", MappingProxyType(limits))
        object.__setattr__(self, "cascades", MappingProxyType(_cascades(self.cascades)))
        if self.model_router is not None and not isinstance(self.model_router, ModelRouter):
            raise ValueError(f"model_router must have a name and a start(step, models) method; got {self.model_router!r}")

    def replace(self, **changes: Any) -> EngineConfig:
        """A copy with `changes` applied and validated again (`TypeError` for a name that is not a setting)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_config(cls, config: Config, base: EngineConfig | None = None, **given: Any) -> EngineConfig:
        """The settings planexec.toml gives: `base` (default: the defaults with planexec.toml's ``max_concurrency``,
        ``default_timeout``, ``max_output_bytes`` (0: no limit), ``max_replans`` and the roles' cascades of
        ``[planexec.role_models]`` laid over them), then `given`
        (a value that is None is left as it is: a flag not given)."""
        if base is None:
            cascades = {role: tuple(models) for role, models in config.role_models.items() if isinstance(models, list)}
            toml = {
                "max_concurrency": config.max_concurrency,
                "default_timeout": config.default_timeout,
                "max_output_bytes": config.max_output_bytes,
                "max_replans": config.max_replans,
                "cascades": cascades or None,
            }
            base = cls().replace(**{k: v for k, v in toml.items() if v is not None})
        changes = {k: v for k, v in given.items() if v is not None}
        return base.replace(**changes) if changes else base


def _cascades(given: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Each worker's cascade as a tuple of model names; `ValueError` naming the worker for an empty or repeating one."""
    out = {}
    for worker, models in (given or {}).items():
        names = (models,) if isinstance(models, str) else tuple(models)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"cascades[{worker!r}] must name at least one model, as 'provider:model'; got {models!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"cascades[{worker!r}] names a model twice: {', '.join(names)}")
        out[worker] = names
    return out


class RunHandle(Protocol):
    """What a run started by a `Host` offers the run that started it (a rollback's parent)."""

    def subscribe(self, callback: Subscriber) -> None:
        """Call `callback(event)` for every later event."""
        ...

    async def result(self) -> RunResult:
        """Wait for the run to end and return its result."""
        ...


class Host(Protocol):
    """What a `Run` needs of the engine that started it: its settings, resolved collaborators and step rules."""

    registry: Registry
    runner: Runner
    checker: Checker | CriteriaChecker
    random: random.Random
    subscribers: list[Subscriber]

    @property
    def config(self) -> EngineConfig:
        """The settings, as given."""
        ...

    def needs_approval(self, step: Step) -> bool:
        """True when a person (the approver) must allow the step first."""
        ...

    def is_idempotent(self, step: Step) -> bool:
        """True when running the step twice does no harm."""
        ...

    def limit_for(self, worker: str) -> int | None:
        """How many steps of this worker may run at once (None: only the global limit)."""
        ...

    def start_rollback(self, plan: Plan, *, run_id: str) -> RunHandle:
        """Start the rollback plan of an aborted run (raises `PlanValidationError` when it cannot run)."""
        ...
