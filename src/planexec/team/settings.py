"""What a `Team` takes besides its model and tools: a few frozen settings, each with its defaults.

Owns `ModelOptions` (the workers' and roles' models, a server URL, the
environment names are read from), `Toolbox` (tools modules, a registry of
one's own, the built-in roles, the workspace toolkit), `PlanningOptions`
(routing, the planner's bounds and form, reuse, the joiner), `ReviewOptions`
(policies, the reviewer, the approvers, ``--yes``), `Submission` (a goal
handed to the store's queue instead of run here: who submits it, whether a
person approves every plan); the engine's settings as ``planexec.toml``
gives them are `EngineConfig.from_config`. Every
field left None is planexec.toml's value, then the default, resolved once by
the `Team`; the engine's own settings (concurrency, timeouts, retries of a
plan, budget, output size, the contract switch) are an `EngineConfig`, never
copied into a `Team` field. Imports `config`, `engine`, `governance`,
`models`, `planning` and `workers`.

    from planexec import EngineConfig, Team
    from planexec.team.settings import PlanningOptions, ReviewOptions

    team = Team(
        "openai:gpt-4o-mini",
        tools=[add],
        planning=PlanningOptions(max_steps=4, plan_format="compact"),
        review=ReviewOptions(auto_approve=True),
        engine=EngineConfig(max_concurrency=8, max_replans=1),
    )
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from planexec.engine.approval import Approver, PlanApprover, StoreApprover
from planexec.engine.cascade import ModelRouter
from planexec.engine.join import Joiner
from planexec.governance.policies import Policy
from planexec.governance.review import ReviewOutcome
from planexec.models.base import Model
from planexec.plan.model import Plan
from planexec.planning.router import ROUTINGS, Routing
from planexec.workers.gate import CallApprover
from planexec.workers.registry import Registry

__all__ = ["ModelOptions", "PlanningOptions", "ReviewOptions", "Reviewer", "Submission", "Toolbox"]

ModelRef = str | Model

# A person or a program reviewing a plan: (plan, the policies' review) -> ReviewOutcome, or True/False.
Reviewer = Callable[[Plan, Any], "ReviewOutcome | bool | Awaitable[ReviewOutcome | bool]"]

PLAN_FORMATS = ("json", "compact")


def _frozen(obj: object, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # a frozen dataclass's one way in: a normalised copy of what was given


@dataclass(frozen=True, kw_only=True)
class ModelOptions:
    """The models besides the planner's: `worker` (default: the planner's), `roles` (role -> model, or a list of
    models: a cascade its steps try in order, the next when an attempt fails), `router` (which model of a cascade a step
    starts on: a `ModelRouter`, or a name as in planexec.toml's ``model_router``: ``first``, ``difficulty`` (the default),
    ``learned``, or a list of them), a `base_url` for ``openai:`` names, and `env`, the environment model names and keys
    are read from (default: the process's)."""

    worker: ModelRef | None = None
    roles: Mapping[str, ModelRef | Sequence[ModelRef]] = field(default_factory=dict)
    router: ModelRouter | str | Sequence[str] | None = None
    base_url: str | None = None
    env: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        roles = {role: ref if isinstance(ref, str) or not isinstance(ref, Sequence) else tuple(ref) for role, ref in self.roles.items()}
        empty = [role for role, ref in roles.items() if isinstance(ref, tuple) and not ref]
        if empty:
            raise ValueError(f"roles[{empty[0]!r}] is an empty cascade: name at least one model")
        _frozen(self, "roles", MappingProxyType(roles))
        if self.router is not None and not isinstance(self.router, (str, ModelRouter)):
            _frozen(self, "router", tuple(self.router))


@dataclass(frozen=True, kw_only=True)
class Submission:
    """A goal or plan handed to the store's queue (`Team.submit`): `by` (who submits it: the run's submitter, and who
    stands for `approve_steps`), `person` (every plan waits for a person's approval in the store, as the console and the
    MCP server want; False: a plan every policy approves is queued approved) and `approve_steps` (the steps and plain tool
    calls that require approval are approved in `by`'s name, as ``--yes``)."""

    by: str = ""
    person: bool = True
    approve_steps: bool = False


@dataclass(frozen=True, kw_only=True)
class Toolbox:
    """Where the tools come from besides the functions given: `modules` (loaded like ``--tools``; planexec.toml's come
    first), a `registry` of one's own, the built-in `roles` (True, or names) and, with a `workspace`, the toolkit."""

    modules: Sequence[str] = ()
    registry: Registry | None = None
    roles: bool | Sequence[str] = False
    workspace: str | Path | None = None

    def __post_init__(self) -> None:
        _frozen(self, "modules", tuple(self.modules))
        if not isinstance(self.roles, bool):
            _frozen(self, "roles", tuple(self.roles))


@dataclass(frozen=True, kw_only=True)
class PlanningOptions:
    """How goals are planned. None is planexec.toml's value, then the default.

    `routing` (auto mode): ``"planner"`` (no router call; a plan of one step
    is worked by one agent) or ``"router"`` (one short call first).
    `max_steps`, `max_tokens` (a draft's) and `agent_turns` (the single
    agent's) default to the planner model's bounds (`assembly.bounds_for`:
    shorter for a model whose profile says small). `max_repairs`: how often
    problems go back to the planner. `positional` and `plan_format` shape
    the draft (default: the model's profile's, see `Planner`). `reuse`:
    templates of the store answer a goal that fits (True, False, or the
    matchers, ``["rules"]``: never a model call). `joiner`: after the steps
    a model decides to finish or replan (True, a `Joiner`, or False).
    `handoff`: a single agent that the contract stops (it read untrusted
    text, then needed a side effect) hands the goal to a plan, whose steps
    carry the values found by reading as typed slots and each effect under
    its grant; False ends it `incomplete`.
    """

    routing: Routing | None = None
    max_steps: int | None = None
    max_repairs: int = 2
    max_tokens: int | None = None
    agent_turns: int | None = None
    positional: bool | None = None
    plan_format: Literal["json", "compact"] | None = None
    reuse: bool | Sequence[str] | None = None
    joiner: bool | Joiner | None = None
    handoff: bool = True

    def __post_init__(self) -> None:
        if self.routing is not None and self.routing not in ROUTINGS:
            raise ValueError(f"routing must be 'planner' or 'router'; got {self.routing!r}")
        if self.plan_format is not None and self.plan_format not in PLAN_FORMATS:
            raise ValueError(f"plan_format must be 'json' or 'compact'; got {self.plan_format!r}")
        if self.max_repairs < 0:
            raise ValueError("max_repairs must be 0 or more")
        for name in ("max_steps", "max_tokens", "agent_turns"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1; got {value!r}")
        if self.reuse is not None and not isinstance(self.reuse, bool):
            _frozen(self, "reuse", tuple(self.reuse))


@dataclass(frozen=True, kw_only=True)
class ReviewOptions:
    """Who decides. Every plan goes through `policies`; then `reviewer`, if given, decides (a person, a page, a program).

    Without a reviewer a plan runs when no policy rejects or escalates it;
    `auto_approve` (``--yes``) approves escalations too, steps that require
    approval, and a role's plain side-effecting calls (never a call that
    untrusted data steered). `approver` decides steps marked
    `requires_approval`, `call_approver` each such call the plan did not
    pre-approve, `plan_approver` each plan version (`StoreApprover` and
    `PlanApprover` keep the decisions in the store, for another process).
    """

    policies: Sequence[Policy] = ()
    reviewer: Reviewer | None = None
    approver: Approver | StoreApprover | None = None
    plan_approver: PlanApprover | None = None
    call_approver: CallApprover | StoreApprover | None = None
    auto_approve: bool = False

    def __post_init__(self) -> None:
        _frozen(self, "policies", tuple(self.policies))
