"""A team for a goal: the registry a planner plans over when the user states a goal.

Owns `build_team`: the built-in tools and predicates, the built-in toolkit
bound to a workspace (files, sandboxed Python, calculator) on the catch-all
``tool`` worker, and the built-in roles (researcher, coder, critic, writer),
each on the model `ModelSettings` gives its role; plus any tools modules.
Imports `registry`, `roles`, `settings` and `toolkit`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from planexec.models.settings import ModelSettings
from planexec.workers.registry import Registry
from planexec.workers.roles import ROLES, builtin_roles
from planexec.workers.toolkit import check_tools, default_toolkit

__all__ = ["build_team"]


def build_team(
    settings: ModelSettings,
    *,
    workspace: str | Path,
    modules: Iterable[str] = (),
    registry: Registry | None = None,
    roles: Iterable[str] | None = None,
) -> Registry:
    """A registry with the toolkit, the built-in roles on their configured models, and `modules`' tools.

    The workspace folder is created when missing. Models are resolved
    lazily: nothing is loaded or contacted until a role first works.
    """
    folder = Path(workspace)
    folder.mkdir(parents=True, exist_ok=True)
    registry = registry if registry is not None else Registry.default()
    toolkit = default_toolkit(folder)
    for t in toolkit:
        if t.name not in registry.tools:
            registry.add_tool(t)
    for module in modules:
        registry.load_module(module)
    names = list(roles) if roles is not None else [spec.name for spec in ROLES]
    models = {name: settings.model(settings.for_role(name).name) for name in names}
    workers = builtin_roles(
        settings.model(settings.worker.name), models=models, tools=registry.tools, roles=names, checks=check_tools(folder)
    )
    for worker in workers:
        registry.add_worker(worker)
    return registry
