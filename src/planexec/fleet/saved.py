"""The seam for a plan that is not planned here: a plan file or template run as written, a run resumed, a queued run.

Owns `saved_plan_engine` (the engine such a run gets: the settings given,
the store, the approvers a face chose, the runner), `run_setup` (what a
run records in `RunStarted` for whoever resumes it: its tools modules and
where its steps ran) and `recorded_runner` (where a resumed run goes on:
the settings given, else where it was started). A goal goes through
`Team` (`Team.iter`); everything else that runs a plan goes through here,
so no face builds an `Engine` itself (``tests/test_layers.py`` checks it).
Imports `config`, `engine` and `workers`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from planexec.config import RunnerConfig
from planexec.engine.config import EngineConfig
from planexec.engine.engine import Engine
from planexec.engine.recording import RunLog
from planexec.engine.runner import Runner
from planexec.workers.registry import Registry

__all__ = ["recorded_runner", "run_setup", "saved_plan_engine"]

_WHERE = ("kind", "address", "namespace", "spread")


def saved_plan_engine(
    registry: Registry, *, engine: EngineConfig | None = None, store: RunLog | None = None, runner: Runner | None = None, **approvers: Any
) -> Engine:
    """The engine a saved plan runs (or a stored run resumes) on: `engine`'s settings, the store, `approvers`
    (``approver``, ``call_approver``, ``plan_approver``, and a face's ``on_event``) and the runner (None: the local one)."""
    changes: dict[str, Any] = {"store": store, **approvers}
    if runner is not None:
        changes["runner"] = runner
    return Engine(registry, config=engine, **changes)


def run_setup(tools: Iterable[str], runner: RunnerConfig, **more: Any) -> dict[str, Any]:
    """What a run records for whoever resumes it: its tools modules (each once, in order), where its steps ran when not
    here, and `more` (where its plan came from)."""
    setup: dict[str, Any] = {"tools": list(dict.fromkeys(tools))}
    if runner.kind == "ray":
        setup["runner"] = runner.recorded()
    setup.update(more)
    return setup


def recorded_runner(settings: RunnerConfig, setup: Mapping[str, Any] | None) -> RunnerConfig:
    """Where a resumed run's steps go: `settings` when they name a runner, else the runner the run recorded."""
    recorded = (setup or {}).get("runner")
    if settings.kind is None and isinstance(recorded, dict):
        return settings.model_copy(update={k: v for k, v in recorded.items() if k in _WHERE})
    return settings
