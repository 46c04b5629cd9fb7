"""Isolated tools: a tool's function run in a child process of its own for each call, which can always be stopped.

Owns `FunctionRef` (where a child finds a tool's function: module, name,
and the file of a module loaded from a path), `reference` (the check made
when a tool is declared ``isolated``), `IsolatedCall` (one call: the child
started, its result read back, the child stopped), `Isolation` and
`ISOLATION` (the bounds a call takes from its run: `max_output_bytes` and
`cancel_grace`, the engine's defaults unless whoever runs the step sets
them) and the child's side of a call. Imports `errors` only: the child
builds its tool with the class the parent hands it (`workers.tools.Tool`,
which imports this module), so no import goes the other way.

Why a process: a thread that blocks in C, or a function that ignores every
cancellation, cannot be stopped; a process can. A child is started from
multiprocessing's ``forkserver`` (a server spawned once, so never a fork of
this threaded process; each call forks a clean copy of it, about 10 ms;
``spawn`` where there is no forkserver, about 0.5 s a call). It receives
the arguments as JSON, checks them with the tool's own schema, runs the
function and sends back the result as compact JSON, strictly encoded
(`workers.outputs`) and at most `max_output_bytes`. Stopping it (the step
timed out or was cancelled) sends SIGTERM, then SIGKILL after the cancel
grace; a child still alive when the interpreter exits is killed, never
waited for; a child whose parent died exits (it watches a pipe). A child
that dies (``os._exit``, a segfault, the OOM killer) fails its step:
``tool 'crunch' died: killed by signal 9 (SIGKILL)``. Its stdout and stderr
go to a file of its own, never to the parent's; the last line is quoted
when it dies.

The child imports the tool's module afresh: module-level code runs again
there, and a tool defined in a script needs the usual multiprocessing guard
(``if __name__ == "__main__":``) around what the script does.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib
import importlib.util
import inspect
import json
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.util  # its exit handler joins children: ours, registered after it, kills them first
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from contextvars import ContextVar
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from pathlib import Path
from typing import Any

from planexec.errors import Problem, RegistryError, ToolError, ToolInputError, ToolOutputError

__all__ = ["ISOLATION", "FunctionRef", "IsolatedCall", "Isolation", "reference"]

_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
_CONTEXT: ForkServerContext | SpawnContext = (
    multiprocessing.get_context("forkserver") if _METHOD == "forkserver" else multiprocessing.get_context("spawn")
)
_ENVELOPE = 64  # bytes of the result's JSON wrapping, beyond the output itself
_LAST_WORDS = 300  # characters of a dead child's last line of output quoted in the error


@dataclasses.dataclass(frozen=True, slots=True)
class Isolation:
    """The bounds of an isolated call: its output's size (None: none) and how long a stopped child has before SIGKILL."""

    max_output_bytes: int | None = 32 * 1024 * 1024  # `workers.outputs.DEFAULT_MAX_OUTPUT_BYTES`, the engine's default
    cancel_grace: float = 5.0  # `EngineConfig.cancel_grace`'s default


_DEFAULTS = Isolation()
# set by whoever runs steps with other bounds than the defaults: asyncio copies it into every task
ISOLATION: ContextVar[Isolation] = ContextVar("planexec_isolation", default=_DEFAULTS)


@dataclasses.dataclass(frozen=True, slots=True)
class FunctionRef:
    """Where a child process finds a function: ``getattr(import_module(module), qualname)``, or the module's `file`."""

    module: str
    qualname: str
    file: str | None = None


def reference(fn: Callable[..., Any], tool: str) -> FunctionRef:
    """Where a child finds `fn`; `RegistryError` naming the tool when no child could (a lambda, a nested function, a method)."""
    why = None
    qualname = getattr(fn, "__qualname__", "")
    if not inspect.isfunction(fn):
        why = f"{fn!r} is not a plain function (a method, a partial or a callable object cannot be found by name)"
    elif fn.__name__ == "<lambda>":
        why = "it is a lambda"
    elif "<locals>" in qualname:
        why = f"{qualname} is defined inside another function"
    if why is not None:
        raise RegistryError(
            f"tool {tool!r} is isolated, so its function must be importable by module path (a def at the top level of a module): {why}",
            name=tool,
        )
    module = sys.modules.get(fn.__module__)
    file = getattr(module, "__file__", None) if module is not None else None
    _warm_up()
    return FunctionRef(module=fn.__module__, qualname=qualname, file=str(file) if file else None)


_warming = threading.Lock()
_warmed = False


def _warm_up() -> None:
    """Start the forkserver in the background once a tool is declared isolated, so a first call does not wait ~1 s for it."""
    global _warmed
    with _warming:
        # not in a call's child, nor in the server importing the main script: the tool's module is imported there too
        inside = multiprocessing.parent_process() is not None or getattr(multiprocessing.current_process(), "_inheriting", False)
        if _warmed or _METHOD != "forkserver" or inside:
            return
        _warmed = True
        # the server imports planexec once, so a call's child need not: ~10 ms a call, not ~0.5 s ("__main__" is
        # multiprocessing's own default). A server something else started already keeps its own list.
        _CONTEXT.set_forkserver_preload(["__main__", "planexec"])
    threading.Thread(target=_start_server, name="planexec-forkserver-start", daemon=True).start()


def _start_server() -> None:
    with contextlib.suppress(Exception):  # the first call starts it, or says why it cannot
        multiprocessing.forkserver.ensure_running()


class IsolatedCall:
    """One call of an isolated tool: `run` blocks (in a thread) until the answer; `stop`, from another thread, ends the child.

    Only `run`'s thread waits for the child; `stop` sends it signals and
    waits for `run` to see it gone, so the two never reap it at once.
    """

    def __init__(
        self,
        ref: FunctionRef,
        arguments: dict[str, Any],
        *,
        tool: str,
        tool_class: type,
        step_id: str | None = None,
        bounds: Isolation | None = None,
    ) -> None:
        self.tool = tool
        self.step_id = step_id
        self.bounds = bounds if bounds is not None else ISOLATION.get()
        try:
            arguments_json = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ToolInputError(
                f"{self._who()}: the arguments of an isolated tool must be JSON data to reach its process ({exc})", tool=tool
            ) from None
        self._request = {
            "ref": dataclasses.asdict(ref),
            "tool": tool,
            "step_id": step_id,
            "arguments": arguments_json,
            "max_bytes": self.bounds.max_output_bytes,
            "cwd": os.getcwd(),
            "env": dict(os.environ),  # a forkserver's child starts with the server's environment: give it this one, as spawn would
        }
        self._tool_class = tool_class
        self._lock = threading.Lock()
        self._process: Any = None
        self._stopped = False
        self.pid: int | None = None
        self.gone = threading.Event()  # the child is gone (or never started)

    def _who(self) -> str:
        return f"step {self.step_id!r}: tool {self.tool!r}" if self.step_id is not None else f"tool {self.tool!r}"

    def run(self) -> Any:
        """Start the child and wait for its answer: the result as JSON data, the tool's own error, or `ToolError` when it died."""
        fd, log = tempfile.mkstemp(prefix="planexec-tool-", suffix=".log")
        os.close(fd)
        results, child_results = _CONTEXT.Pipe(duplex=False)
        alive_r, alive_w = _CONTEXT.Pipe(duplex=False)
        process = None
        try:
            request = json.dumps({**self._request, "log": log}).encode()
            with self._lock:
                if self._stopped:  # stopped before it began: nothing to start
                    raise ToolError(f"{self._who()} was stopped before its process started", tool=self.tool)
                process = _CONTEXT.Process(
                    target=_child, args=(request, self._tool_class, child_results, alive_r), name=f"planexec-tool-{self.tool}"
                )
                process.start()
                self._process, self.pid = process, process.pid
                _LIVE.add(process)
            child_results.close()  # ours closed, the child's end is the only writer: its death reads as EOF
            alive_r.close()
            payload = _receive(results, self.bounds.max_output_bytes)
            process.join()  # after its answer it exits at once; after EOF it is dead or being stopped
            if self._stopped:
                raise ToolError(f"{self._who()} was stopped", tool=self.tool)
            return self._answer(payload, process.exitcode, log)
        finally:
            for end in (results, child_results, alive_r, alive_w):
                end.close()  # alive_w last of all: a child that somehow outlived this sees its parent give up, and exits
            if process is not None:
                _LIVE.discard(process)
            self.gone.set()
            with contextlib.suppress(OSError):
                os.unlink(log)

    def stop(self, grace: float | None = None) -> None:
        """End the child: SIGTERM, then SIGKILL after `grace` (default: the call's cancel grace); returns once it is gone."""
        grace = self.bounds.cancel_grace if grace is None else grace
        with self._lock:
            self._stopped = True
            process = self._process
        if process is None or self.gone.is_set():
            return
        _signal(process, signal.SIGTERM)
        if not self.gone.wait(grace):
            _signal(process, signal.SIGKILL)
            self.gone.wait(5)  # `run` reaps it: a killed process is gone at once

    def _answer(self, payload: bytes | None, exitcode: int | None, log: str) -> Any:
        """The result in `payload`, or the error it carries, or the child's death told with its exit code or signal."""
        if payload is None:
            raise ToolError(f"{self._who()} died: {_death(exitcode)}{_last_words(log)}", tool=self.tool)
        reply = json.loads(payload)
        if "ok" in reply:
            return reply["ok"]
        error = reply["error"]
        problems = [Problem(**p) for p in error.get("problems", [])]
        kind, message = error["kind"], error["message"]
        if kind == "input":
            raise ToolInputError(message, tool=self.tool, problems=problems)
        if kind == "output":
            raise ToolOutputError(message, tool=self.tool, problems=problems)
        if kind == "load":
            raise ToolError(f"{self._who()} could not be loaded in its process: {message}", tool=self.tool)
        if kind == "raised":
            raise ToolError(f"{self._who()} raised {error['type']}: {message}", tool=self.tool)
        raise ToolError(message, tool=self.tool, problems=problems)


def _receive(results: Connection, max_bytes: int | None) -> bytes | None:
    """The child's answer, or None when it died without one; an answer far over the limit is refused unread."""
    # the child counts the output as compact JSON, escapes aside; an escape takes at most 6 bytes
    limit = max_bytes * 6 + _ENVELOPE if max_bytes else None
    try:
        return results.recv_bytes(limit)
    except EOFError:
        return None


def _signal(process: Any, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, TypeError):
        if process.exitcode is None:
            os.kill(process.pid, sig)


def _death(exitcode: int | None) -> str:
    """``killed by signal 9 (SIGKILL)``, ``exited with code 3``."""
    if exitcode is None:
        return "ended without an answer"
    if exitcode < 0:
        try:
            name = f" ({signal.Signals(-exitcode).name})"
        except ValueError:
            name = ""
        return f"killed by signal {-exitcode}{name}"
    return f"exited with code {exitcode} before it answered"


def _last_words(log: str) -> str:
    """``; its last output: '...'``: the last line the child wrote to its stdout or stderr, if any."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1] if len(lines[-1]) <= _LAST_WORDS else lines[-1][: _LAST_WORDS - 3] + "..."
    return f"; its last output: {last!r}"


# --- at exit: no child outlives the process, none is waited for -------------------------------------

_LIVE: set[Any] = set()


@atexit.register
def _kill_live_children() -> None:
    """Kill every isolated child still running: multiprocessing's own exit handler (registered before) would wait for it."""
    for process in list(_LIVE):
        _signal(process, signal.SIGKILL)


# --- the child's side ------------------------------------------------------------------------------


def _child(request: bytes, tool_class: type, results: Connection, alive: Connection) -> None:
    """Run one call in this (child) process and send back its result or its error; never returns."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it stops its children
    call = json.loads(request)
    _own_output(call["log"])
    threading.Thread(target=_exit_with_parent, args=(alive,), name="planexec-parent-watch", daemon=True).start()
    with contextlib.suppress(OSError):
        os.chdir(call["cwd"])
    os.environ.clear()
    os.environ.update(call["env"])
    try:
        found = _load(FunctionRef(**call["ref"]))
        tool = found if callable(getattr(found, "call_here", None)) else tool_class(found, name=call["tool"])
    except BaseException as exc:  # its module does not import here, or no longer has the function
        payload = json.dumps({"error": {"kind": "load", "message": f"{type(exc).__name__}: {exc}"}}, ensure_ascii=False).encode()
    else:
        try:
            data = tool.call_here(json.loads(call["arguments"]), step_id=call["step_id"], max_bytes=call["max_bytes"])
            payload = json.dumps({"ok": data}, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
        except BaseException as exc:  # whatever the tool raised goes back as data; the child's own exit stays ours
            payload = json.dumps({"error": _error_record(exc)}, ensure_ascii=False).encode()
    try:
        results.send_bytes(payload)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(0)  # no waiting for threads the tool left running, no exit handlers of the tool's


def _own_output(log: str) -> None:
    """Point this process's stdout and stderr (the file descriptors: C code writes there too) at its own log file."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _exit_with_parent(alive: Connection) -> None:
    """Wait on a pipe the parent never writes: it closes when the parent is done with this call, or dies."""
    with contextlib.suppress(EOFError, OSError):
        alive.recv_bytes()
    os._exit(70)


def _load(ref: FunctionRef) -> Any:
    """The object ``ref`` names: imported by module name, else from the module's file (a tools file loaded by path)."""
    try:
        module = importlib.import_module(ref.module)
    except ImportError:
        if ref.file is None or not Path(ref.file).is_file():
            raise
        spec = importlib.util.spec_from_file_location(ref.module, ref.file)
        if spec is None or spec.loader is None:
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules[ref.module] = module
        spec.loader.exec_module(module)
    found: Any = module
    for part in ref.qualname.split("."):
        found = getattr(found, part)
    return found


def _error_record(exc: BaseException) -> dict[str, Any]:
    """What the parent needs to raise the error again: its kind, message and problems (or the type that was raised)."""
    if isinstance(exc, ToolError):
        kind = "input" if isinstance(exc, ToolInputError) else "output" if isinstance(exc, ToolOutputError) else "tool"
        return {"kind": kind, "message": str(exc), "problems": [p.to_dict() for p in exc.problems]}
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    return {"kind": "raised", "type": name, "message": str(exc)}
