"""The Ray runner: steps that call a function tool run on a Ray cluster; the engine, store and approvals stay with the driver.

Owns `RayRunner` (a `engine.runner.Runner`), `runner_for` (the runner a
`config.RunnerConfig` asks for), `remote_ref` (which tools' steps go to the
cluster) and the mapping of Ray's failures to step errors. Imports `config`,
`errors`, `engine.runner`, `scale.remote` and `workers`; Ray itself only
inside functions (an optional dependency: ``pip install 'planexec[ray]'``).

What runs where. The engine decides what runs and when, in the driver's
event loop: the plan, the run store, approvals, policies and the contract's
checks never leave it. A step whose worker is a `ToolWorker` and whose tool
is a plain function a worker can import (a ``def`` at the top level of a
module, no injected `ToolContext` or `StepCall`) runs on the cluster: a
sync tool as a Ray task, an async one on an async actor (Ray refuses
``async def`` remote functions), one actor per node. Everything else runs
on the driver through `LocalRunner`: role workers (their model calls and
the tool calls inside their loop), sub-teams, schema tools (MCP), tools
that are closures, and planexec's own tools (they pass values along, or
work in the driver's workspace). The driver checks the call against the
contract and the tool's schema before anything is sent.

Resources and placement. A task takes the resources its tool declares
(``@tool(resources={"num_cpus": 2, "memory": 2**30})``), overridden per tool
by ``[planexec.runner.resources]`` and per step by the plan's
``"resources"`` (`Step.resources`); with `spread` (the default) tasks are
spread over the nodes, where Ray's default packs them on the first node
with room. An async actor takes no CPU (its calls wait on I/O) and is
pinned to its node; an async tool's resources are not applied (a warning
says so): a CPU-bound tool is a sync one. A step's timeout counts its wait
for room on the cluster.

Timeouts and failures. When a step times out or is cancelled, its task is
cancelled with ``force=True``, which ends the worker process (a Python
function cannot be stopped otherwise); an async call is cancelled in its
actor (`CancelledError` in the tool). Ray never retries a task here: the
step's failure action decides. A worker that dies (killed, out of memory,
a crash, its node gone) fails the step with ``step 'x': the Ray worker
running it died (...)`` (rule ``worker``); an exception the tool raises
fails it as it would locally. Outputs are bounded by the run's
`max_output_bytes` on the worker, before they cross.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from planexec.config import RunnerConfig, ToolResources
from planexec.engine.runner import LocalRunner, Runner
from planexec.errors import ConfigError, RegistryError
from planexec.plan.model import StepResources
from planexec.scale.remote import AsyncTools, RemoteCall, RemoteToolError, call_tool
from planexec.workers.gate import admit_direct
from planexec.workers.io import Source, StepCall, WorkResult
from planexec.workers.isolated import ISOLATION, FunctionRef
from planexec.workers.registry import Registry
from planexec.workers.tools import Tool, in_thread
from planexec.workers.worker import ToolWorker, WorkerError

__all__ = ["INSTALL_HINT", "RayRunner", "remote_ref", "runner_for"]

log = logging.getLogger("planexec.scale")

INSTALL_HINT = "the Ray runner needs Ray: pip install 'planexec[ray]'"
_PROBE_SECONDS = 5.0  # how long the head's port may take to answer: Ray itself waits minutes for a head that is not there
_NODES_TTL = 5.0  # seconds a list of the cluster's alive nodes is trusted (an async actor per node)
_ACTOR_CALLS = 1000  # calls one async actor runs at once
_SHORT = 300  # characters of a Ray error quoted in a step's error


def ray_module() -> Any:
    """The `ray` package; `ConfigError` with the install hint when it is not installed."""
    try:
        import ray
    except ImportError:
        raise ConfigError(INSTALL_HINT) from None
    return ray


def runner_for(settings: RunnerConfig | None, registry: Registry, *, connect: bool = False) -> Runner | None:
    """The runner `settings` asks for on `registry`: a `RayRunner` for kind ``ray``, None for the local one (the engine's default).

    With `connect`, the runner connects now: `ConfigError` (Ray not
    installed, no cluster at the address) before anything runs.
    """
    if settings is None or settings.kind in (None, "local"):
        return None
    runner = RayRunner(
        registry,
        address=settings.address,
        namespace=settings.namespace,
        spread=settings.spread,
        runtime_env=settings.runtime_env,
        resources=settings.resources,
    )
    if connect:
        runner.connect()
    return runner


def remote_ref(tool: Tool) -> FunctionRef | None:
    """Where a Ray worker finds `tool`'s function; None when its steps stay on the driver (see the module docstring)."""
    fn = tool.fn
    if tool.call_param is not None or tool.context_param is not None:
        return None  # a ToolContext's dependencies and the StepCall live in the driver
    if not isinstance(tool.input_model, type):
        return None  # a schema tool (an MCP server's): its handler talks to something in this process
    if not inspect.isfunction(fn) or fn.__name__ == "<lambda>" or "<locals>" in fn.__qualname__:
        return None  # a closure, a lambda, a method: no worker can find it by name
    module = fn.__module__
    if module == "planexec" or module.startswith("planexec."):
        return None  # planexec's own tools pass values along, or work in this machine's workspace
    file = getattr(sys.modules.get(module), "__file__", None)
    return FunctionRef(module=module, qualname=fn.__qualname__, file=str(file) if file else None)


class RayRunner:
    """A `Runner` that runs function-tool steps on a Ray cluster and every other step here; see the module docstring.

    `address` is the cluster (``host:port`` of its head, ``ray://host:port``,
    ``auto``; None: ``RAY_ADDRESS``, else Ray's own lookup), `namespace` its
    Ray namespace, `runtime_env` Ray's runtime environment for the job (how
    the tools' code reaches the workers when they do not share this
    machine's files), `resources` what a tool's steps take, by tool name,
    over the tool's own declaration. `ConfigError` with the install hint
    when Ray is not installed. The runner connects at its first remote
    step (or at `connect`); Ray is set up once per process, so a second
    runner shares the first one's connection.
    """

    def __init__(
        self,
        registry: Registry,
        *,
        address: str | None = None,
        namespace: str | None = None,
        spread: bool = True,
        runtime_env: Mapping[str, Any] | None = None,
        resources: Mapping[str, ToolResources | Mapping[str, Any]] | None = None,
        local: Runner | None = None,
    ) -> None:
        if importlib.util.find_spec("ray") is None:
            raise ConfigError(INSTALL_HINT)
        self.registry = registry
        self.address = address
        self.namespace = namespace
        self.spread = spread
        self.runtime_env = dict(runtime_env) if runtime_env else None
        self.resources = {name: ToolResources.model_validate(spec) for name, spec in (resources or {}).items()}
        self.local = local if local is not None else LocalRunner(registry)
        self._refs: dict[Tool, FunctionRef | None] = {}
        self._tasks: dict[Tool, Any] = {}  # each tool's Ray remote function, with its options
        self._base: Any = None  # the remote function a step with its own resources takes its options from
        self._actors = _ActorPool(self)
        self._connected = False

    def __repr__(self) -> str:
        return f"RayRunner(address={self.address!r}, spread={self.spread})"

    # --- where a step runs -------------------------------------------------------------------------

    def remote(self, call: StepCall) -> tuple[ToolWorker, Tool, FunctionRef] | None:
        """The tool worker, tool and reference of a step that runs on the cluster; None for one that runs here."""
        worker = self.registry.workers.get(call.worker)
        if not isinstance(worker, ToolWorker):
            return None
        tool = worker.tools.get(call.action)
        if tool is None:
            return None  # the local worker says it has no such tool
        if tool not in self._refs:
            self._refs[tool] = remote_ref(tool)
            if self._refs[tool] is not None and tool.is_async and (tool.resources or tool.name in self.resources):
                log.warning(
                    "tool %r is async: it runs on the async actors, which hold no resources; its resources are not applied", tool.name
                )
        ref = self._refs[tool]
        return (worker, tool, ref) if ref is not None else None

    async def run(self, call: StepCall) -> WorkResult:
        """Perform `call`: on the cluster when its tool can go there, else here on the registry's worker."""
        route = self.remote(call)
        if route is None:
            return await self.local.run(call)
        worker, tool, ref = route
        await admit_direct(call, tool, worker.tools)  # the contract's check of a direct call, as the local tool worker makes it
        tool.check_arguments(call.parameters, step_id=call.step_id)  # refused here, before a round trip
        if not self._connected:
            try:
                await in_thread(self.connect)
            except ConfigError as exc:
                raise WorkerError(f"step {call.step_id!r}: {exc}") from None
        bounds = ISOLATION.get()  # the run's max_output_bytes and cancel_grace
        request = RemoteCall(
            ref=ref,
            tool=tool.name,
            step_id=call.step_id,
            arguments=dict(call.parameters),
            max_bytes=bounds.max_output_bytes,
            relative=_relative(ref.file),
        )
        if tool.is_async:
            output = await self._actors.call(request, call.step_id, bounds.cancel_grace)
        else:
            task = self._task(tool) if call.step.resources is None else self._step_task(tool, call.step.resources)
            output = await _settle(task.remote(request), call.step_id, force=True, grace=bounds.cancel_grace)
        source = Source(kind="tool", step_id=call.step_id, tool=tool.name, untrusted=tool.untrusted_output)
        return WorkResult(output=output, tools=[tool.name], sources=[source])

    # --- the cluster -------------------------------------------------------------------------------

    def connect(self) -> None:
        """Connect this process to the cluster (blocking), once; `ConfigError` naming the address when it cannot."""
        ray = ray_module()
        with _CONNECTING:
            if not ray.is_initialized():
                _probe(self.address)
                try:
                    ray.init(
                        address=self.address,
                        namespace=self.namespace,
                        runtime_env=self.runtime_env,
                        log_to_driver=False,  # the workers' prints stay in their logs: stdout is the command's
                        logging_level=logging.ERROR,  # not its notes (connecting..., no SIGTERM handler off the main thread)
                    )
                except Exception as exc:  # ConnectionError, an auth failure, a bad runtime_env: say which cluster and why
                    where = self.address or os.environ.get("RAY_ADDRESS") or "the default address"
                    raise ConfigError(f"cannot connect to the Ray cluster at {where}: {type(exc).__name__}: {_short(exc)}") from None
                _errors_to_stderr(ray)
        self._connected = True

    def _task(self, tool: Tool) -> Any:
        """The tool's Ray remote function: its resources, spread or not, never retried by Ray."""
        task = self._tasks.get(tool)
        if task is None:
            ray = ray_module()
            options: dict[str, Any] = {
                "name": f"planexec:{tool.name}",
                "max_retries": 0,  # the step's failure action decides, not Ray
                "retry_exceptions": False,
                "scheduling_strategy": "SPREAD" if self.spread else "DEFAULT",
                **self._resources_of(tool),
            }
            task = self._tasks[tool] = ray.remote(call_tool).options(**options)
        return task

    def _step_task(self, tool: Tool, wanted: StepResources) -> Any:
        """The tool's remote function with a step's own resources over the tool's (`Step.resources`)."""
        ray = ray_module()
        merged = {**self._resources_of(tool), **wanted.model_dump(exclude_none=True)}
        if not merged.get("resources"):
            merged.pop("resources", None)
        options: dict[str, Any] = {
            "name": f"planexec:{tool.name}",
            "max_retries": 0,
            "retry_exceptions": False,
            "scheduling_strategy": "SPREAD" if self.spread else "DEFAULT",
            **merged,
        }
        if self._base is None:
            self._base = ray.remote(call_tool)
        return self._base.options(**options)

    def _resources_of(self, tool: Tool) -> dict[str, Any]:
        """The tool's declared resources with `resources`' entry for it over them, as Ray's task options."""
        try:
            declared = ToolResources.model_validate(tool.resources)
        except ValidationError as exc:
            raise RegistryError(f"tool {tool.name!r}: its resources are not valid: {exc.errors()[0]['msg']}", name=tool.name) from None
        override = self.resources.get(tool.name)
        merged = {**declared.model_dump(exclude_none=True), **(override.model_dump(exclude_none=True) if override else {})}
        if not merged.get("resources"):
            merged.pop("resources", None)
        return merged


_CONNECTING = threading.Lock()


class _ActorPool:
    """The async actors that run async tools: one per alive node with `spread`, else one; a dead one is replaced at the next call."""

    def __init__(self, runner: RayRunner) -> None:
        self._runner = runner
        self._actors: dict[str, Any] = {}  # node id (or "any") -> actor handle
        self._turn = 0
        self._nodes: list[str] = []
        self._nodes_at = -_NODES_TTL

    async def call(self, request: RemoteCall, step_id: str, grace: float) -> Any:
        """Run `request` on the next actor; the actor is dropped from the pool when it died."""
        key, actor = self._next()
        try:
            return await _settle(actor.call.remote(request), step_id, force=False, grace=grace)
        except WorkerError:
            if self._actors.get(key) is actor and not await _alive(actor):
                self._actors.pop(key, None)
            raise

    def _next(self) -> tuple[str, Any]:
        keys = self._alive_nodes() if self._runner.spread else ["any"]
        key = keys[self._turn % len(keys)] if keys else "any"
        self._turn += 1
        actor = self._actors.get(key)
        if actor is None:
            actor = self._actors[key] = self._start(key)
        return key, actor

    def _alive_nodes(self) -> list[str]:
        now = time.monotonic()
        if now - self._nodes_at > _NODES_TTL:
            ray = ray_module()
            self._nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
            self._nodes_at = now
        return self._nodes

    def _start(self, key: str) -> Any:
        ray = ray_module()
        options: dict[str, Any] = {
            "num_cpus": 0,  # its calls wait on I/O: it holds no CPU a task could use
            "max_concurrency": _ACTOR_CALLS,
            "max_restarts": 0,
            "max_task_retries": 0,
        }
        if key != "any":
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=key, soft=False)
        return ray.remote(AsyncTools).options(**options).remote()


async def _alive(actor: Any) -> bool:
    """True when the actor still answers (a call it ran failed, not the actor)."""
    try:
        return bool(await asyncio.wait_for(actor.ready.remote(), 2.0))
    except Exception:
        return False


async def _settle(ref: Any, step_id: str, *, force: bool, grace: float) -> Any:
    """Await a Ray call's result; a cancel (the step's timeout) cancels the call on the cluster; Ray's failures become step errors."""
    ray = ray_module()
    try:
        return await ref
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # it may have finished meanwhile
            ray.cancel(ref, force=force, recursive=True)
        gone = asyncio.wrap_future(ref.future())
        gone.add_done_callback(_retrieved)
        await asyncio.wait([gone], timeout=grace)  # the cancel has reached the cluster (bounded by the grace)
        raise
    except ray.exceptions.RayTaskError as exc:
        cause = exc.cause
        if isinstance(exc, ray.exceptions.TaskCancelledError) or isinstance(cause, ray.exceptions.TaskCancelledError):
            raise WorkerError(f"step {step_id!r}: its Ray task was cancelled outside planexec") from None
        if isinstance(cause, RemoteToolError):
            raise cause.rebuilt() from None  # planexec's error (arguments, output, loading), as it reads locally
        if isinstance(cause, Exception):
            raise cause from None  # the tool's own error, as it reads locally
        raise WorkerError(f"step {step_id!r}: the tool failed on its Ray worker: {_short(exc)}") from None
    except ray.exceptions.RayError as exc:
        raise WorkerError(_ray_failure(ray, exc, step_id)) from None


def _ray_failure(ray: Any, exc: BaseException, step_id: str) -> str:
    """The step's error for a failure of Ray itself: the worker's death, a cancel from outside, the cluster's refusal."""
    errors = ray.exceptions
    died = tuple(
        getattr(errors, name)
        for name in ("WorkerCrashedError", "NodeDiedError", "RayActorError", "ObjectLostError", "LocalRayletDiedError", "OutOfMemoryError")
        if hasattr(errors, name)
    )
    if isinstance(exc, died):
        return f"step {step_id!r}: the Ray worker running it died ({type(exc).__name__}: {_short(exc)})"
    if isinstance(exc, errors.TaskCancelledError):
        return f"step {step_id!r}: its Ray task was cancelled outside planexec"
    return f"step {step_id!r}: the Ray cluster could not run it ({type(exc).__name__}: {_short(exc)})"


def _short(exc: BaseException) -> str:
    """The first line of an error's text, cut to a few hundred characters (Ray's messages run to paragraphs)."""
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # read, so asyncio does not log it as never retrieved


def _relative(file: str | None) -> str | None:
    """The tools file relative to this folder, when it is inside it: where a ``working_dir`` runtime environment puts it."""
    if not file:
        return None
    try:
        return str(Path(file).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return None


def _probe(address: str | None) -> None:
    """`ConfigError` when nothing answers at a ``host:port`` address (Ray's own connection waits minutes before it says so)."""
    if not address or address in ("auto", "local"):
        return
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ConfigError(f"the Ray address {address!r} is not host:port or ray://host:port") from None
    if host is None or port is None:
        return
    try:
        socket.create_connection((host, port), timeout=_PROBE_SECONDS).close()
    except OSError as exc:
        raise ConfigError(f"cannot connect to the Ray cluster at {address}: nothing answers at {host}:{port} ({exc})") from None


def _errors_to_stderr(ray: Any) -> None:
    """Send the errors Ray prints on the driver (a worker died, ...) to stderr: stdout is the command's (``--json``).

    Ray's listener prints them to stdout through the module-level function
    replaced here; a Ray without it is left alone.
    """
    worker: Any = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(worker, "print_to_stdstream", None)
    if worker is None or original is None or getattr(original, "planexec_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr.planexec_stderr = True  # type: ignore[attr-defined]  # marks the replacement: never wrapped twice
    worker.print_to_stdstream = to_stderr
