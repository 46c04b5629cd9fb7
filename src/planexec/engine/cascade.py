"""Model cascades: which models a step's attempts run on, in what order, and which model a step starts on.

A step may name an ordered list of models (`Step.models`), and a role may
have one (`EngineConfig.cascades`, from ``[planexec.role_models]`` or
`ModelOptions.roles`): cheapest first, as a rule. The step starts on the
model its `ModelRouter` picks (by default the first) and, when an attempt
fails in a way another model may not (`MOVES_ON`: the worker raised or gave
no usable answer, it timed out, the success criteria or a critic rejected
its output), the next attempt runs on the next model. This is not a retry:
the cascade is tried first, and the step's failure action applies only to a
failure it does not move on from, or when the last model has failed (a
``retry`` then retries the last model, its `max_attempts` counting the
attempts on that model). A fallback worker works on its own model.

Owns `ModelRouter` (the protocol: ``start(step, models) -> RouteChoice |
None``), `RouteChoice`, the built-in routers `FirstModel` (the cascade's
first model), `ByDifficulty` (a step declared hard starts on the last,
strongest model; an easy one on the first), `ByWorker` (a worker's steps
start on a model named for it) and `FirstOf` (the first router that
decides), `Cascade` (a step's models and which one its attempts are on) and
`route_step`, which asks a router and never lets a broken one fail a step:
a router that raises or picks a model outside the cascade starts the step
on its first model, and the reason says why. A router that learns from a
store's past runs is `planexec.governance.routing.LearnedRouter`.
`Cascades` is the run's collaborator that keeps its steps' cascades (it
acts on the run through `RunControl`, as `Attempts` does).
Imports `engine.events`, `engine.results`, `engine.state`, `plan` and `usage`; never the run.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from planexec.engine.events import StepEscalated, StepFailed, StepRouted
from planexec.engine.results import ErrorInfo, ModelAttempt, StepRecord
from planexec.engine.state import RunControl, RunState, append_to_record, update_record
from planexec.plan.model import Step
from planexec.usage import Usage

__all__ = [
    "MOVES_ON",
    "ByDifficulty",
    "ByWorker",
    "Cascade",
    "Cascades",
    "FirstModel",
    "FirstOf",
    "ModelRouter",
    "RouteChoice",
    "route_step",
]

# the failures a stronger model may not make: its worker raised or gave no usable answer (out of turns, cut off, off its
# schema), it timed out, an exception, an output that could not be stored, or the criteria or a critic rejected it. A
# reference that did not resolve, parameters a tool refused and the contract's refusals are the plan's, not the model's
MOVES_ON = frozenset({"worker", "incomplete", "exception", "timeout", "tool_output", "check_failed"})


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """A router's pick: the model a step starts on (one of its cascade's), and why, in words."""

    model: str
    reason: str


@runtime_checkable
class ModelRouter(Protocol):
    """Picks the model a step starts on from its cascade (cheapest first); None when it has nothing to say.

    `name` identifies it in the `StepRouted` event. `start` must be quick and
    do no I/O that can block for long: it is asked in the run's event loop,
    once per step, before its first attempt.
    """

    name: str

    def start(self, step: Step, models: Sequence[str]) -> RouteChoice | None: ...


class FirstModel:
    """Every step starts on its cascade's first model (the cheapest, as cascades are written)."""

    name = "first"

    def start(self, step: Step, models: Sequence[str]) -> RouteChoice:
        """The first model."""
        return RouteChoice(models[0], "the cascade starts on its first model")


class ByDifficulty:
    """A step declared ``hard`` starts on the cascade's last (strongest) model, one declared ``easy`` on its first;
    a step that declares nothing is left to the next router."""

    name = "difficulty"

    def start(self, step: Step, models: Sequence[str]) -> RouteChoice | None:
        """By `Step.difficulty`."""
        if step.difficulty == "hard":
            return RouteChoice(models[-1], "the step is declared hard: it starts on the strongest model")
        if step.difficulty == "easy":
            return RouteChoice(models[0], "the step is declared easy: it starts on the cheapest model")
        return None


class ByWorker:
    """The steps of a worker named in `start` begin on the model named for it, when their cascade has that model."""

    name = "worker"

    def __init__(self, start: Mapping[str, str]) -> None:
        self.start_models = dict(start)

    def start(self, step: Step, models: Sequence[str]) -> RouteChoice | None:
        """The model named for the step's worker, if its cascade has it."""
        model = self.start_models.get(step.worker)
        if model is None or model not in models:
            return None
        return RouteChoice(model, f"steps of {step.worker!r} start on {model}")


class FirstOf:
    """Routers asked in order: the first that decides wins; when none does, the cascade's first model."""

    def __init__(self, routers: Sequence[ModelRouter]) -> None:
        self.routers = list(routers)
        self.name = "+".join(r.name for r in self.routers) or "first"

    def start(self, step: Step, models: Sequence[str]) -> RouteChoice:
        """The first router's choice that is not None; the first model when none has one."""
        for router in self.routers:
            choice = router.start(step, models)
            if choice is not None:
                return choice
        return RouteChoice(models[0], "no rule applies: the cascade starts on its first model")


@dataclass(slots=True)
class Cascade:
    """One step's models, in order, and which its attempts are on: `at` indexes `models`, `base` is the number of
    attempts made before the current model's first (so a retry counts only the attempts on the last model)."""

    models: tuple[str, ...]
    at: int = 0
    base: int = 0

    @property
    def model(self) -> str:
        """The model the next (or current) attempt runs on."""
        return self.models[self.at]

    def moves_on(self, error: ErrorInfo) -> bool:
        """True when the attempt's failure is one the next model may not make, and there is a next model."""
        return error.rule in MOVES_ON and self.at + 1 < len(self.models)

    def advance(self, attempt: int) -> str:
        """Move to the next model after failed attempt `attempt`; returns it."""
        self.at += 1
        self.base = attempt
        return self.model

    def on_model(self, attempt: int) -> int:
        """How many attempts, `attempt` included, ran on the current model: what a retry's `max_attempts` counts."""
        return attempt - self.base


def route_step(router: ModelRouter, step: Step, models: Sequence[str]) -> tuple[int, str]:
    """(the index of the model the step starts on, why): the router's pick, or the first model when it picked none,
    picked a model outside the cascade, or failed (a broken router never fails a step; the reason says so)."""
    name = getattr(router, "name", type(router).__name__)
    try:
        choice = router.start(step, models)
    except Exception as exc:  # a router is a plug-in: its bug is told, never a failed step
        return 0, f"router {name!r} failed ({type(exc).__name__}: {exc}): the cascade starts on its first model"
    if choice is None:
        return 0, "no rule applies: the cascade starts on its first model"
    if inspect.isawaitable(choice):  # an async start: its coroutine is never run (the router is asked in the event loop)
        if inspect.iscoroutine(choice):
            choice.close()
        return 0, f"router {name!r} is async: start must return a RouteChoice, not an awaitable; the cascade starts on its first model"
    if not isinstance(choice, RouteChoice) or choice.model not in models:
        picked = choice.model if isinstance(choice, RouteChoice) else repr(choice)
        return 0, f"router {name!r} picked {picked}, which is not in the cascade: it starts on its first model"
    return list(models).index(choice.model), choice.reason


class Cascades:
    """The cascades of one run's steps: each routed once, before its first attempt (`StepRouted`), moved to its next
    model after a failure it may move on from (`StepFailed` then ``escalate``, `StepEscalated`), and each attempt on a
    chosen model kept on the step's record (`StepRecord.model_attempts`).

    `cascades` are the workers' (roles') own, for steps that name no models; `workers` the registry's, to tell a
    step whose worker's model works it from one that calls a tool directly. A resumed step goes on from the model its
    record says (no new routing): a finished attempt is never run again on another model.
    """

    def __init__(
        self, state: RunState, run: RunControl, *, cascades: Mapping[str, Sequence[str]], router: ModelRouter, workers: Mapping[str, Any]
    ) -> None:
        self._state = state
        self._run = run
        self._cascades = cascades
        self._router = router
        self._workers = workers
        self._steps: dict[str, tuple[Step, Cascade]] = {}  # by step id, with the step it was made for (a revision may reuse an id)

    def _models(self, step: Step) -> Sequence[str] | None:
        if step.models is not None:
            return step.models
        models = self._cascades.get(step.worker)
        uses_model = getattr(self._workers.get(step.worker), "uses_model", None)
        return models if models and uses_model is not None and uses_model(step.action) else None

    def model_for(self, step: Step, worker: str) -> str | None:
        """The model the step's next attempt runs on; None when it has no cascade, or runs on its fallback worker."""
        if worker != step.worker:
            return None  # a fallback worker works on its own model
        sid = step.step_id
        known = self._steps.get(sid)
        if known is not None and known[0] is step:
            return known[1].model
        models = self._models(step)
        if not models:
            return None
        rec = self._state.records[sid]
        cascade = Cascade(tuple(models))
        if rec.model is not None and rec.model in cascade.models:  # a resumed step goes on where it was
            cascade.at = cascade.models.index(rec.model)
            cascade.base = max((a.attempt for a in rec.model_attempts if a.model != rec.model), default=0)
            last = rec.model_attempts[-1] if rec.model_attempts else None
            if last is not None and last.model == rec.model and last.then == "escalate" and cascade.at + 1 < len(cascade.models):
                # the run stopped between a failure that moved the cascade on and the move itself: it moves now
                to = cascade.advance(last.attempt)
                update_record(rec, model=to)
                reason = last.error.rule if last.error is not None else "escalate"
                self._run._emit(StepEscalated, step_id=sid, attempt=last.attempt, from_model=last.model, to_model=to, reason=reason)
        else:
            cascade.at, reason = route_step(self._router, step, cascade.models)
            name = getattr(self._router, "name", type(self._router).__name__)
            self._run._emit(
                StepRouted,
                step_id=sid,
                models=list(cascade.models),
                start=cascade.model,
                router=name,
                reason=reason,
                difficulty=step.difficulty,
            )
            update_record(rec, model=cascade.model)
        self._steps[sid] = (step, cascade)
        return cascade.model

    def moved_on(self, step: Step, attempt: int, model: str, error: ErrorInfo, wall: float, usage: Usage) -> bool:
        """After attempt `attempt` on `model` failed: when the step's cascade moves on, say so (its `StepFailed`,
        then ``escalate``, and `StepEscalated`), keep the attempt on its record and return True."""
        cascade = self._steps[step.step_id][1]
        if not cascade.moves_on(error):
            return False
        sid = step.step_id
        rec = self._state.records[sid]
        to = cascade.advance(attempt)
        self.tried(rec, attempt, model, usage, error, "escalate")
        update_record(rec, model=to)
        self._run._emit(
            StepFailed,
            step_id=sid,
            attempt=attempt,
            worker=rec.worker,
            error=error,
            then="escalate",
            wall_time=wall,
            usage=usage,
            model=model,
        )
        self._run._emit(StepEscalated, step_id=sid, attempt=attempt, from_model=model, to_model=to, reason=error.rule)
        return True

    def on_model(self, step: Step, attempt: int) -> int:
        """How many attempts, `attempt` included, ran on the step's current model (what a retry counts)."""
        return self._steps[step.step_id][1].on_model(attempt)

    @staticmethod
    def tried(rec: StepRecord, attempt: int, model: str, usage: Usage, error: ErrorInfo | None, then: str | None) -> None:
        """Keep an attempt on a chosen model on the step's record."""
        append_to_record(rec, "model_attempts", ModelAttempt(attempt=attempt, model=model, usage=usage, error=error, then=then))
