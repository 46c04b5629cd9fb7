"""The registry: which tools, workers and predicates a plan may name.

Owns name lookup and loading. Tools, workers and predicates are registered
in code (`Registry.tool`, `add_worker`, `predicate`), from Python modules
(`load_module`: a module's `register(registry)` function and its module-level
`Tool`, `Predicate` and worker objects; a module that declares none is an
error, since plain functions are not tools), and from the ``planexec.plugins``
entry-point group, through which planexec's own built-ins register too.
Every tool is reachable through the catch-all worker ``tool``; a tool
registered with ``worker="name"`` also belongs to that role. The models a
step may name (`Step.models`, a cascade) are looked up here too: objects
given with `add_model`, else resolved from their ``provider:model`` name.
Imports `tools`, `workers`, `models` and `errors`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Unpack

from planexec.errors import ConfigError, RegistryError
from planexec.models.base import Model
from planexec.models.providers import parse_model_name, resolve_model
from planexec.workers.tools import Predicate, Tool, ToolOptions
from planexec.workers.tools import tool as make_tool
from planexec.workers.worker import ModelWorker, ToolWorker, Worker

__all__ = ["ENTRY_POINT_GROUP", "Registry", "import_spec"]

ENTRY_POINT_GROUP = "planexec.plugins"
TOOL_WORKER = "tool"


class Registry:
    """Named tools, workers and predicates."""

    def __init__(self) -> None:
        self.tools: dict[str, Tool] = {}
        self.predicates: dict[str, Predicate] = {}
        self.workers: dict[str, Worker] = {
            TOOL_WORKER: ToolWorker(TOOL_WORKER, self.tools, description="calls any registered tool directly")
        }
        self.models: dict[str, Model] = {}  # the models a step may name (its cascade), by name: given, or resolved once
        # how a name no model was given for becomes one (a `Team` sets its settings' resolver: keys, prices, base URLs)
        self.model_source: Callable[[str], Model] = resolve_model
        self.loaded: list[str] = []
        self._registrations = 0  # calls that registered something (again, too): how load_module tells a module added nothing

    @classmethod
    def default(cls, *modules: str) -> Registry:
        """A registry with the entry-point plugins (built-ins included) and the given modules loaded."""
        registry = cls()
        registry.load_entry_points()
        for module in modules:
            registry.load_module(module)
        return registry

    # --- registration ---------------------------------------------------

    def tool(self, fn: Callable[..., Any] | None = None, **options: Unpack[ToolOptions]) -> Any:
        """Register a function as a tool (decorator, bare or with options: any of `ToolOptions`); returns the `Tool`.

        ``isolated=True`` runs each call in a child process (see `workers.isolated`)."""

        def wrap(f: Callable[..., Any]) -> Tool:
            t = f if isinstance(f, Tool) else make_tool(f, **options)
            self.add_tool(t)
            return t

        return wrap(fn) if fn is not None else wrap

    def add_tool(self, tool: Tool, *, worker: str | None = None) -> Tool:
        """Register a `Tool`; with a worker name (or `tool.worker`) it joins that role's `ToolWorker`."""
        if tool.name in self.tools and self.tools[tool.name] is not tool:
            raise RegistryError(f"a tool named {tool.name!r} is already registered", name=tool.name)
        self._registrations += 1
        self.tools[tool.name] = tool
        role = worker or tool.worker
        if role and role != TOOL_WORKER:
            existing = self.workers.get(role)
            if existing is None:
                self.workers[role] = ToolWorker(role, [tool])
            elif isinstance(existing, ToolWorker):
                existing.add(tool)
            else:
                raise RegistryError(f"worker {role!r} is not a tool worker; give the tool to it when you build it", name=role)
        return tool

    def add_worker(self, worker: Worker, *, replace: bool = False) -> Worker:
        """Register a worker under its name."""
        if not isinstance(worker, Worker):
            raise RegistryError(f"{worker!r} does not implement the Worker protocol", name=getattr(worker, "name", None))
        if worker.name in self.workers and not replace and self.workers[worker.name] is not worker:
            raise RegistryError(f"a worker named {worker.name!r} is already registered", name=worker.name)
        self._registrations += 1
        self.workers[worker.name] = worker
        return worker

    def predicate(self, fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
        """Register a predicate for success criteria (decorator, bare or with a name)."""

        def wrap(f: Callable[..., Any]) -> Predicate:
            p = f if isinstance(f, Predicate) else Predicate(f, name=name)
            if p.name in self.predicates and self.predicates[p.name] is not p:
                raise RegistryError(f"a predicate named {p.name!r} is already registered", name=p.name)
            self._registrations += 1
            self.predicates[p.name] = p
            return p

        return wrap(fn) if fn is not None else wrap

    def add_model(self, model: Model) -> Model:
        """Make a model object one a step may name (``Step.models``, a role's cascade) under its `name`."""
        if not isinstance(model, Model):
            raise RegistryError(f"{model!r} does not implement the Model protocol", name=getattr(model, "name", None))
        known = self.models.get(model.name)
        if known is not None and known is not model:
            raise RegistryError(f"another model named {model.name!r} is already registered", name=model.name)
        self.models[model.name] = model
        return model

    # --- lookup ----------------------------------------------------------

    def model(self, name: str) -> Model:
        """The model a step names: one given (`add_model`), else resolved from its name once (`model_source`)."""
        found = self.models.get(name)
        if found is None:
            found = self.models[name] = self.model_source(name)
        return found

    def model_problem(self, name: str) -> str | None:
        """Why a step may not name the model `name` (its provider is unknown, or it is not ``provider:model``); None when it may."""
        if name in self.models:
            return None
        try:
            parse_model_name(name)
        except ConfigError as exc:
            return str(exc)
        return None

    def on_model(self, worker: Worker, model: str) -> Worker:
        """`worker` working on the model named `model` (a step's cascade, a model router's choice)."""
        if not isinstance(worker, ModelWorker):
            raise RegistryError(f"worker {worker.name!r} works with no model of its own, so it cannot run on {model!r}", name=worker.name)
        return worker.with_model(self.model(model))

    def worker(self, name: str) -> Worker:
        """The worker with this name; `RegistryError` listing the known ones otherwise."""
        try:
            return self.workers[name]
        except KeyError:
            raise RegistryError(f"no worker {name!r}; known: {', '.join(sorted(self.workers))}", name=name) from None

    def catalog(self) -> list[dict[str, Any]]:
        """What a planner reads: each worker with its description and actions (tools with schemas)."""
        out = []
        for name, w in sorted(self.workers.items()):
            actions = []
            for action in sorted(w.actions):
                model = w.input_model(action)
                t = self.tools.get(action)
                actions.append(
                    {
                        "name": action,
                        "description": t.description if t else "",
                        "parameters": model.model_json_schema() if model else {"type": "object"},
                    }
                )
            out.append({"name": name, "description": w.description, "actions": actions})
        return out

    # --- loading ---------------------------------------------------------

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> None:
        """Call every ``register(registry)`` hook installed under the entry-point group."""
        for ep in sorted(entry_points(group=group), key=lambda e: (e.name != "builtin", e.name)):
            hook = ep.load()
            hook(self)
            self.loaded.append(f"entry point {ep.name} ({ep.value})")

    def load_module(self, spec: str) -> None:
        """Load tools from a module name (``pkg.tools``) or a ``.py`` file path.

        The module's ``register(registry)`` is called if it has one; its
        module-level `Tool`, `Predicate` and worker objects are registered.
        A module that declares none of these is a `RegistryError` naming it
        and saying how to declare a tool: its plain functions are not tools.
        """
        module = import_spec(spec)
        before = self._registrations
        hook = getattr(module, "register", None)
        if callable(hook) and not isinstance(hook, (Tool, Predicate)):
            hook(self)
        declared = False
        for value in list(vars(module).values()):
            if isinstance(value, Tool):
                declared = True
                if self.tools.get(value.name) is not value:
                    self.add_tool(value)
            elif isinstance(value, Predicate):
                declared = True
                if self.predicates.get(value.name) is not value:
                    self.predicate(value)
            elif not isinstance(value, type) and isinstance(value, Worker):
                declared = True
                if self.workers.get(value.name) is not value:
                    self.add_worker(value)
        if not declared and self._registrations == before:
            raise RegistryError(_nothing_declared(spec, module), name=spec)
        self.loaded.append(f"module {spec}")


def _nothing_declared(spec: str, module: Any) -> str:
    """Why a tools module gave the registry nothing, and how to declare a tool."""
    name = getattr(module, "__name__", spec)
    functions = sorted(
        key for key, value in vars(module).items() if inspect.isfunction(value) and value.__module__ == name and not key.startswith("_")
    )
    if len(functions) == 1:
        found = f"; its function {functions[0]} is a plain function, not a tool"
    else:
        found = f"; its functions {', '.join(functions)} are plain functions, not tools" if functions else ""
    return (
        f"tools module {spec!r} declares no tool, predicate or worker{found}. Declare a tool with the @tool decorator "
        "(from planexec import tool), as a module-level Tool object, or in a register(registry) function that adds them"
    )


def import_spec(spec: str, *, what: str = "tools") -> Any:
    """Import a module by dotted name or ``.py`` path; `RegistryError` names the `what` file or module that fails."""
    path = Path(spec)
    if spec.endswith(".py"):
        if not path.is_file():
            raise RegistryError(f"{what} file {spec!r} does not exist", name=spec)
        name = f"planexec_user_{path.stem}_{abs(hash(str(path.resolve())))}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise RegistryError(f"cannot load {what} file {spec!r}", name=spec)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # a SyntaxError, sys.exit(), whatever the module raises: name the file
            sys.modules.pop(name, None)
            raise RegistryError(f"cannot load {what} file {spec!r}: {type(exc).__name__}: {exc}", name=spec) from exc
        return module
    try:
        return importlib.import_module(spec)
    except (Exception, SystemExit) as exc:  # ImportError, or an error raised while the module runs
        raise RegistryError(f"cannot import {what} module {spec!r}: {type(exc).__name__}: {exc}", name=spec) from exc
