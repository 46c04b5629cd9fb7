"""What a Ray worker runs for one step: a tool found by reference, called with checked arguments, its output bounded.

Owns `RemoteCall` (what crosses to a worker: where the tool's function is,
the step's arguments as JSON data, the output's size limit), `call_tool`
(a Ray task's body, for a sync tool: blocking, in the worker's main thread,
so a forced cancel stops it by ending the process) and `AsyncTools` (the
class of the async actors that run async tools, many calls at once on one
event loop; a cancel reaches the call as `CancelledError`). Imports `errors`,
`workers.isolated` (`FunctionRef`), `workers.outputs` and `workers.tools`;
never Ray (the driver, `scale.ray_runner`, wraps these in Ray's decorators)
nor the engine.

A tool is shipped by reference, never pickled: the worker imports the
tool's module by name, else loads the module's file (the same path on
every node of a shared file system, else the path relative to the driver's
folder, which a ``working_dir`` runtime environment reproduces). The
module-level code of the tools module runs again in each worker process,
once. The arguments are checked again there by the tool's own schema; the
output is strictly encoded (`workers.outputs`) and at most the run's
`max_output_bytes` before it leaves the worker, so an output too large
never crosses the network. An exception the tool raises travels back as
itself (Ray pickles it), so the step's error reads as it does locally;
planexec's own errors (arguments refused, an output rejected, a tool that
does not load) travel as `RemoteToolError` and are raised again as themselves.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from planexec.errors import PlanexecError, Problem, RegistryError, ToolError, ToolInputError, ToolOutputError
from planexec.workers.isolated import FunctionRef
from planexec.workers.outputs import encode, encode_inline
from planexec.workers.tools import Tool

__all__ = ["AsyncTools", "RemoteCall", "RemoteToolError", "call_tool", "found_tool"]


@dataclass(frozen=True, slots=True)
class RemoteCall:
    """One step's call of one tool, as a worker receives it."""

    ref: FunctionRef
    tool: str
    step_id: str
    arguments: dict[str, Any] = field(default_factory=dict)
    max_bytes: int | None = None
    relative: str | None = None  # the tools file relative to the driver's folder (where a working_dir runtime env puts it)


class RemoteToolError(Exception):
    """A planexec error raised on a worker, carried back as plain data; `rebuilt()` is the error again, on the driver.

    planexec's errors take keyword arguments (the tool, the problems), which
    pickling an exception drops, so they cross as this instead.
    """

    def __init__(self, kind: str, message: str, tool: str, problems: list[dict[str, Any]]) -> None:
        super().__init__(kind, message, tool, problems)
        self.kind = kind
        self.message = message
        self.tool = tool
        self.problems = problems

    @classmethod
    def of(cls, exc: PlanexecError, tool: str) -> RemoteToolError:
        """The error `exc` as data: its kind, message, tool and problems."""
        kind = "input" if isinstance(exc, ToolInputError) else "output" if isinstance(exc, ToolOutputError) else "tool"
        if isinstance(exc, RegistryError):
            kind = "registry"
        problems = [p.to_dict() for p in getattr(exc, "problems", [])]
        return cls(kind, str(exc), getattr(exc, "tool", None) or tool, problems)

    def rebuilt(self) -> PlanexecError:
        """The error of the same kind, message, tool and problems."""
        problems = [Problem(**p) for p in self.problems]
        if self.kind == "input":
            return ToolInputError(self.message, tool=self.tool, problems=problems)
        if self.kind == "output":
            return ToolOutputError(self.message, tool=self.tool, problems=problems)
        if self.kind == "registry":
            return RegistryError(self.message, name=self.tool)
        return ToolError(self.message, tool=self.tool, problems=problems)


def call_tool(call: RemoteCall) -> Any:
    """Run a sync tool here and now (blocking): its output as JSON data of at most `call.max_bytes`; the tool's own error otherwise."""
    try:
        return found_tool(call).call_here(call.arguments, step_id=call.step_id, max_bytes=call.max_bytes)
    except PlanexecError as exc:
        raise RemoteToolError.of(exc, call.tool) from None


class AsyncTools:
    """An async actor's class: runs async tools' calls on its event loop, as many at once as the actor allows."""

    async def call(self, call: RemoteCall) -> Any:
        """Run an async tool: its arguments checked, its output strictly checked, then bounded by `call.max_bytes`."""
        try:
            tool = found_tool(call)
            value = await tool.invoke(call.arguments)
            done, data = encode_inline(value, step_id=call.step_id, tool=tool.name, max_bytes=call.max_bytes)
            if not done:  # large: walked off the actor's event loop
                data = await asyncio.to_thread(encode, value, step_id=call.step_id, tool=tool.name, max_bytes=call.max_bytes)
        except PlanexecError as exc:
            raise RemoteToolError.of(exc, call.tool) from None
        return data

    def ready(self) -> bool:
        """True once the actor is up (the driver waits on it before its first call)."""
        return True


# --- finding a tool by reference -------------------------------------------------------------------

_FOUND: dict[tuple[FunctionRef, str], Tool] = {}  # per worker process: a module is imported once, its tool built once


def found_tool(call: RemoteCall) -> Tool:
    """The `Tool` `call.ref` names in this process: the module's own `Tool` object, or one built around its function."""
    key = (call.ref, call.tool)
    tool = _FOUND.get(key)
    if tool is None:
        try:
            found = _load(call.ref, call.relative)
        except (Exception, SystemExit) as exc:  # the module does not import here, or no longer has the function
            raise RegistryError(
                f"step {call.step_id!r}: tool {call.tool!r} could not be loaded on the Ray worker: {type(exc).__name__}: {exc}",
                name=call.tool,
            ) from None
        tool = found if isinstance(found, Tool) else Tool(found, name=call.tool)
        _FOUND[key] = tool
    return tool


def _load(ref: FunctionRef, relative: str | None) -> Any:
    """The object `ref` names: imported by module name, else from the module's file (here, or relative to this folder)."""
    module = sys.modules.get(ref.module) if ref.module != "__main__" else None
    if module is None and ref.module != "__main__":
        try:
            module = importlib.import_module(ref.module)
        except ImportError:
            module = None
    if module is None:
        module = _from_file(ref, relative)
    found: Any = module
    for part in ref.qualname.split("."):
        found = getattr(found, part)
    return found


def _from_file(ref: FunctionRef, relative: str | None) -> Any:
    candidates = [p for p in (ref.file, relative) if p]
    path = next((Path(p) for p in candidates if Path(p).is_file()), None)
    if path is None:
        where = " or ".join(repr(p) for p in candidates) or "no file"
        raise ImportError(f"no module named {ref.module!r} here, and {where} is not a file in {os.getcwd()!r}")
    # a script's __main__ is not this worker's: it gets a name of its own (its `if __name__ == "__main__":` stays shut)
    name = ref.module if ref.module != "__main__" else f"planexec_remote_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {str(path)!r} as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
