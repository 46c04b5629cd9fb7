"""What a `Team` is made of: its models and its registry, from names, objects and settings.

Owns `TeamModels` (the planner's model, the workers' model and each role's,
as objects, with the lines that say which was chosen and why, and each
role's cascade of models, which the registry can resolve), the one set
of planner and agent bounds every front end shares (`PlannerBounds`,
`bounds_for`: a model whose profile says it is small gets shorter plans
and fewer agent turns), and `build_registry` (the entry-point built-ins, the
caller's tools and tools modules, the tools of MCP servers, the toolkit and
the built-in roles on request), and `with_cascades` (the engine's settings
with the roles' cascades and the model router). Imports `models`, `workers`,
`mcp`, `config`, `engine.config`, `engine.cascade`, `governance.routing` and `errors`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planexec.a2a.agents import load as load_a2a
from planexec.config import A2aAgentConfig, Config, McpServerConfig
from planexec.engine.cascade import ModelRouter
from planexec.engine.config import EngineConfig
from planexec.governance.routing import load_router
from planexec.mcp.tools import load as load_mcp
from planexec.models.base import Model
from planexec.models.managed import ManagedModel
from planexec.models.profile import profile_of
from planexec.models.settings import ModelSettings
from planexec.workers.registry import Registry
from planexec.workers.roles import ROLES, builtin_roles
from planexec.workers.toolkit import check_tools, default_toolkit
from planexec.workers.tools import Tool

__all__ = ["PlannerBounds", "TeamModels", "bounds_for", "build_registry", "with_cascades"]

ModelRef = str | Model


@dataclass(frozen=True, slots=True)
class PlannerBounds:
    """How long a plan may be, how many tokens a draft may take, how many turns the single agent gets."""

    max_steps: int
    max_tokens: int
    agent_turns: int


SMALL_BOUNDS = PlannerBounds(max_steps=5, max_tokens=640, agent_turns=4)
"""A 135M model writes short plans faster and better, rambles under its grammar past a few hundred
tokens, and loops on tools: each of its turns re-reads the prompt for tens of seconds on a CPU."""
CAPABLE_BOUNDS = PlannerBounds(max_steps=8, max_tokens=4096, agent_turns=12)


def bounds_for(model: Model) -> PlannerBounds:
    """The planner and agent bounds for a planner model, by its profile: the same in `planexec run`, `plan`, `eval` and the library."""
    return SMALL_BOUNDS if profile_of(model).small else CAPABLE_BOUNDS


@dataclass
class TeamModels:
    """The models of a team, resolved once: the planner's, the workers', and any role's own."""

    settings: ModelSettings
    planner: Model
    worker: Model
    roles: dict[str, Model] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cascades: dict[str, tuple[str, ...]] = field(default_factory=dict)  # role -> the models its steps try, in order
    cascade_models: dict[str, Model] = field(default_factory=dict)  # the models of the cascades given as objects, by name

    @classmethod
    def resolve(
        cls,
        config: Config,
        *,
        model: ModelRef | None = None,
        worker_model: ModelRef | None = None,
        role_models: Mapping[str, ModelRef | Sequence[ModelRef]] | None = None,
        base_url: str | None = None,
        seed: int | None = 0,
        env: Mapping[str, str] | None = None,
    ) -> TeamModels:
        """Names go through `ModelSettings` (arguments, then environment, then planexec.toml, then defaults); objects are used as given."""
        settings = ModelSettings(
            config,
            env,
            planner=model if isinstance(model, str) else None,
            worker=worker_model if isinstance(worker_model, str) else None,
            base_url=base_url,
            seed=seed,
        )
        planner = model if model is not None and not isinstance(model, str) else settings.model(settings.planner.name)
        notes = settings.describe()
        if not isinstance(model, str) and model is not None:
            notes[0] = f"planner: {planner.name} (given as an object)"
        source = planner.profile_source if isinstance(planner, ManagedModel) else "its own"
        notes.insert(1, f"planner profile: {profile_of(planner).describe()} ({source})")
        if worker_model is not None and not isinstance(worker_model, str):
            worker = worker_model
            notes[2] = f"workers: {worker.name} (given as an object)"
        elif worker_model is None and settings.worker.reason == "same as the planner":
            worker = planner  # the planner's object, not a second instance of its name
        else:
            worker = settings.model(settings.worker.name)
        roles: dict[str, Model] = {}
        for spec in ROLES:
            choice = settings.for_role(spec.name)
            if choice is not settings.worker:
                roles[spec.name] = settings.model(choice.name)
        cascades = settings.cascades()
        given: dict[str, Model] = {}
        for role, ref in (role_models or {}).items():
            if isinstance(ref, str) or not isinstance(ref, Sequence):
                roles[role] = ref if not isinstance(ref, str) else settings.model(ref)
                cascades.pop(role, None)
                notes.append(f"role {role}: {roles[role].name} (given)")
                continue
            chain = [m if not isinstance(m, str) else settings.model(m) for m in ref]
            if not chain:
                raise ValueError(f"role_models[{role!r}] is an empty cascade: name at least one model")
            given.update((m.name, m) for m in ref if not isinstance(m, str))  # a name resolves through the settings
            roles[role], cascades[role] = chain[0], tuple(m.name for m in chain)
            notes.append(f"role {role}: {' → '.join(cascades[role])} (a cascade, given)")
        return cls(settings=settings, planner=planner, worker=worker, roles=roles, notes=notes, cascades=cascades, cascade_models=given)

    def for_role(self, role: str) -> Model:
        """A role's model: its own, else the workers'."""
        return self.roles.get(role, self.worker)


def build_registry(
    models: TeamModels,
    *,
    tools: Iterable[Callable[..., Any] | Tool] = (),
    tools_modules: Iterable[str] = (),
    registry: Registry | None = None,
    roles: bool | Iterable[str] = False,
    workspace: str | Path | None = None,
    mcp_servers: Mapping[str, McpServerConfig] | None = None,
    a2a_agents: Mapping[str, A2aAgentConfig] | None = None,
) -> Registry:
    """A registry with the entry-point built-ins, `tools` (functions or `Tool`s), `tools_modules`, and on request the rest.

    The tools of `mcp_servers` join (`planexec.mcp.load`: each server is
    started to list them, and closed with the runs); each of `a2a_agents`
    joins as a role of its name (`planexec.a2a.load`: nothing is contacted
    before a step messages it). With a `workspace`,
    the built-in toolkit (workspace files, sandboxed Python, calculator) is
    added, the folder created when missing. With
    `roles` (True for all, or names), the built-in roles join, each on its
    model. A module that registers nothing is the registry's error.
    """
    registry = registry if registry is not None else Registry.default()
    for item in tools:
        tool = item if isinstance(item, Tool) else Tool(item)
        if registry.tools.get(tool.name) is not tool:
            registry.add_tool(tool)
    for module in tools_modules:
        registry.load_module(module)
    if mcp_servers:
        load_mcp(registry, mcp_servers)
    if a2a_agents:
        load_a2a(registry, a2a_agents)
    if workspace is not None:
        folder = Path(workspace)
        folder.mkdir(parents=True, exist_ok=True)
        for t in default_toolkit(folder):
            if t.name not in registry.tools:
                registry.add_tool(t)
    registry.model_source = models.settings.model  # a model a step names resolves with the team's keys, prices and URLs
    for cascade_model in models.cascade_models.values():
        registry.add_model(cascade_model)
    if roles:
        names = [spec.name for spec in ROLES] if roles is True else list(roles)
        chosen = {name: models.for_role(name) for name in names}
        checks = check_tools(workspace) if workspace is not None else ()  # the critic's read-only run_python
        for worker in builtin_roles(models.worker, models=chosen, tools=registry.tools, roles=names, checks=checks):
            registry.add_worker(worker)
    return registry


def with_cascades(
    engine: EngineConfig, models: TeamModels, router: ModelRouter | str | Sequence[str] | None, store: Any, *, given: bool
) -> EngineConfig:
    """`engine` with the roles' cascades (`models.cascades`; when the engine's settings were `given`, a cascade they name
    for a worker wins) and the router a step with a cascade starts by (`router`, loaded with `store` for ``learned``;
    one the settings name wins)."""
    changes: dict[str, Any] = {}
    # not given: planexec.toml's cascades are in `models.cascades` already, less the roles given a model of their own
    cascades = {**models.cascades, **engine.cascades} if given else dict(models.cascades)
    if cascades != dict(engine.cascades):
        changes["cascades"] = cascades
    if router is not None and engine.model_router is None:
        changes["model_router"] = load_router(router, store=store)
    return engine.replace(**changes) if changes else engine
