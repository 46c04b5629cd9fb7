"""Model routers that read past runs, and choosing a router by name.

Owns `LearnedRouter`, which starts a step on the cheapest model of its
cascade that has done well enough for its worker before: it reads the
attempts recorded in a run store (`StepStarted`, `StepSucceeded` and
`StepFailed` events that name a model, and the step's declared difficulty
from `StepRouted`), counts per worker, difficulty and model how many
succeeded, and passes over a model whose success rate, over at least
`min_attempts` recorded attempts, is below `threshold`. A model with fewer
attempts on record is tried (it has not been judged yet); when every model
is passed over, the step starts on the last. It reads the store only
through the public `RunRecords` protocol (its runs and their events), from
the newest `runs` runs, once and then again when its figures are older
than `max_age` seconds (`refresh` reads them now); events written before
attempts named their model are skipped, as is a run whose events cannot be
read, and a store that fails keeps its old figures until the next read. Once a model is passed over it gets
no new attempts, so its old figures age out as `runs` newer runs are
recorded, and it is tried again.

Also owns `load_router`, the router a name gives (``model_router`` in
planexec.toml, `ModelOptions.router`): ``first``, ``difficulty``,
``learned`` (it needs the store), a list of them (asked in order), or
``module:name`` / ``file.py:name`` for a router of one's own (an object
with a `name` and ``start(step, models)``, or a class or function that
makes one). A name that gives no router is a `ConfigError` naming it.
Imports `engine.cascade`, `store.base` (the store's public protocol),
`plan`, `workers.registry` (module loading) and `errors`.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from planexec.engine.cascade import MOVES_ON, ByDifficulty, FirstModel, FirstOf, ModelRouter, RouteChoice
from planexec.errors import ConfigError, RegistryError
from planexec.plan.model import Step
from planexec.store.base import RunRecords
from planexec.workers.registry import import_spec

__all__ = ["ROUTERS", "LearnedRouter", "ModelRecord", "load_router", "model_records"]

ROUTERS = ("first", "difficulty", "learned")

log = logging.getLogger(__name__)

# (worker, declared difficulty or None, model)
_Key = tuple[str, str | None, str]


@dataclass(frozen=True, slots=True)
class ModelRecord:
    """How a model did on a worker's steps of one declared difficulty: `succeeded` of `attempts` recorded."""

    succeeded: int = 0
    attempts: int = 0

    @property
    def rate(self) -> float:
        """The share of attempts that succeeded (0 with none)."""
        return self.succeeded / self.attempts if self.attempts else 0.0


def model_records(runs: Iterable[Iterable[Any]]) -> dict[_Key, ModelRecord]:
    """The record of each (worker, difficulty, model) in the events of `runs`: an attempt that succeeded, or that failed
    in a way another model may not (`MOVES_ON`); a refusal or a bad reference is the plan's doing and is not counted."""
    counts: dict[_Key, list[int]] = {}
    for events in runs:
        started: dict[tuple[str, int], tuple[str, str]] = {}  # (step, attempt) -> (worker, model)
        difficulty: dict[str, str | None] = {}
        for ev in events:
            kind = getattr(ev, "type", None)
            if kind == "step_routed":
                difficulty[ev.step_id] = getattr(ev, "difficulty", None)
            elif kind == "step_started" and getattr(ev, "model", None):
                started[(ev.step_id, ev.attempt)] = (ev.worker, ev.model)
            elif kind in ("step_succeeded", "step_failed") and getattr(ev, "model", None):
                worker, model = started.get((ev.step_id, ev.attempt), (getattr(ev, "worker", ""), ev.model))
                if kind == "step_failed" and ev.error.rule not in MOVES_ON:
                    continue
                row = counts.setdefault((worker, difficulty.get(ev.step_id), model), [0, 0])
                row[0] += kind == "step_succeeded"
                row[1] += 1
    return {key: ModelRecord(succeeded=s, attempts=n) for key, (s, n) in counts.items()}


class LearnedRouter:
    """Starts a step on the first model of its cascade whose recorded success rate for the step's worker (and declared
    difficulty) is not below `threshold`, over at least `min_attempts` attempts; see the module docstring.

    It says nothing (None: the next router decides, else the first model)
    when the first model has not been found wanting: only passing a model
    over is a decision worth telling.
    """

    name = "learned"

    def __init__(self, store: RunRecords, *, threshold: float = 0.7, min_attempts: int = 5, runs: int = 200, max_age: float = 30.0) -> None:
        if not 0 <= threshold <= 1:
            raise ValueError(f"threshold is a share of attempts, between 0 and 1; got {threshold!r}")
        if min_attempts < 1 or runs < 1:
            raise ValueError("min_attempts and runs must be at least 1")
        self.store = store
        self.threshold = threshold
        self.min_attempts = min_attempts
        self.runs = runs
        self.max_age = max_age
        self._records: dict[_Key, ModelRecord] | None = None
        self._read_at = 0.0

    def refresh(self) -> dict[_Key, ModelRecord]:
        """Read the newest `runs` runs' attempts from the store now; returns the records.

        A run whose events cannot be read (tampered, malformed, gone meanwhile)
        is skipped, and a store that cannot list its runs keeps the figures it
        had (none at first): either way they are not read again before
        `max_age`, so a broken store never costs every step a full read."""
        self._read_at = time.monotonic()
        try:
            summaries = self.store.runs(limit=self.runs)
        except Exception:  # the store is down: the old figures (or none) until the next read is due
            log.warning("model router 'learned' could not list the store's runs", exc_info=True)
            if self._records is None:
                self._records = {}
            return self._records
        self._records = model_records(self._readable(s.run_id) for s in summaries)
        return self._records

    def _readable(self, run_id: str) -> list[Any]:
        """The run's events, or none when they cannot be read."""
        try:
            return self.store.events(run_id)
        except Exception:  # one bad run must not blind the router to the others
            log.warning("model router 'learned' skipped run %s: its events could not be read", run_id, exc_info=True)
            return []

    def records(self) -> dict[_Key, ModelRecord]:
        """The records, read again when older than `max_age` seconds."""
        if self._records is None or time.monotonic() - self._read_at > self.max_age:
            return self.refresh()
        return self._records

    def start(self, step: Step, models: Sequence[str]) -> RouteChoice | None:
        """The first model not found wanting; None when that is the first."""
        records = self.records()
        passed = []
        for model in models:
            rec = records.get((step.worker, step.difficulty, model), ModelRecord())
            if rec.attempts < self.min_attempts or rec.rate >= self.threshold:
                break
            passed.append(f"{model} succeeded {rec.succeeded} of {rec.attempts}")
        else:
            model = models[-1]
        if not passed:
            return None
        kind = f"{step.difficulty} steps" if step.difficulty else "steps"
        why = "; ".join(passed)
        return RouteChoice(model, f"on {kind} of {step.worker!r}, {why} (below {self.threshold:.0%}): it starts on {model}")


def load_router(spec: str | Sequence[str] | ModelRouter, *, store: Any = None) -> ModelRouter:
    """The router a name (or a list of names, asked in order, then the first model) gives; see the module docstring."""
    if isinstance(spec, ModelRouter):
        return spec
    if not isinstance(spec, str):
        return FirstOf([load_router(one, store=store) for one in spec])
    if spec == "first":
        return FirstModel()
    if spec == "difficulty":
        return FirstOf([ByDifficulty()])
    if spec == "learned":
        if not isinstance(store, RunRecords):
            raise ConfigError(
                "model router 'learned' reads the attempts of past runs: it needs a run store (store= or store in planexec.toml)"
            )
        return LearnedRouter(store)
    module, sep, attr = spec.rpartition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"model router {spec!r}: known routers are {', '.join(ROUTERS)}, or 'module:name' for one of your own")
    try:
        found = getattr(import_spec(module, what="model router"), attr)
    except RegistryError as exc:
        raise ConfigError(f"model router {spec!r}: {exc}") from None
    except AttributeError:
        raise ConfigError(f"model router {spec!r}: {module!r} has no {attr!r}") from None
    router = found if isinstance(found, ModelRouter) else _made(spec, found)
    if not isinstance(router, ModelRouter):
        raise ConfigError(f"model router {spec!r} is not a router: it needs a name and a start(step, models) method")
    if inspect.iscoroutinefunction(router.start):
        raise ConfigError(f"model router {spec!r}: its start(step, models) is async; it must return a RouteChoice (or None) at once")
    return router


def _made(spec: str, factory: Any) -> Any:
    if not callable(factory):
        return factory
    try:
        return factory()
    except Exception as exc:  # a factory of one's own: say which, not a traceback
        raise ConfigError(f"model router {spec!r} could not be made: {type(exc).__name__}: {exc}") from exc
