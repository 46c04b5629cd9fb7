"""Where a run's span begins: the hooks a `Team` and the commands call, each a no-op while traces are off.

Owns `run_scope` (around a goal's whole job: the run's span opens before
routing and planning, so the planner's model calls are its children, and
the run started inside takes it), `goal_scope` (around routing or planning
called on their own, as ``planexec run GOAL`` does stage by stage: the
span opened is kept for the run of that goal, by team and goal),
`start_run` (starts a run with its span current, so every task the run
creates inherits it, then traces it) and `trace_run` (traces a run someone
else started; a run is traced once). A traced run that has not started yet
records its span's ``traceparent`` in `RunStarted.setup`, where a resume
finds it. Imports `telemetry` (`names`, `setup`, `kit`, `spans`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from planexec.telemetry import names as n
from planexec.telemetry.kit import SCOPE, Scope, traceparent
from planexec.telemetry.setup import MAX_PENDING, Telemetry, active
from planexec.telemetry.spans import RUN_SPAN, WORKFLOW, RunTracer

__all__ = ["goal_scope", "run_scope", "start_run", "trace_run"]

R = TypeVar("R")

_traced: weakref.WeakKeyDictionary[Any, RunTracer] = weakref.WeakKeyDictionary()


def _run_span(telemetry: Telemetry, run_id: str | None = None) -> Any:
    attrs: dict[str, Any] = {n.OPERATION: "invoke_workflow", n.WORKFLOW: WORKFLOW}
    if run_id:
        attrs[n.RUN_ID] = run_id
    return telemetry.kit.tracer.start_span(RUN_SPAN, attributes=attrs)  # under the current context


@contextmanager
def run_scope(run_id: str | None = None) -> Iterator[None]:
    """Open the run's span now, current in the block; the run started in it takes it (else it ends with the block)."""
    telemetry = active()
    if telemetry is None or SCOPE.get() is not None:
        yield
        return
    kit = telemetry.kit
    scope = Scope(_run_span(telemetry, run_id), run_id)
    token = SCOPE.set(scope)
    attached = kit.context.attach(kit.in_context(scope.span))
    try:
        yield
    except BaseException as exc:
        if not scope.adopted:
            kit.error(scope.span, str(exc) or type(exc).__name__, type(exc).__name__)
        raise
    finally:
        kit.context.detach(attached)
        SCOPE.reset(token)
        if not scope.adopted:  # no run came of it (the plan was rejected, no valid plan)
            scope.span.set_attribute("planexec.run.started", False)
            scope.span.end()


@contextmanager
def goal_scope(owner: object, goal: str) -> Iterator[None]:
    """Routing or planning `goal` on its own: the span its run will take is current in the block (kept by `owner` and goal)."""
    telemetry = active()
    if telemetry is None or SCOPE.get() is not None:  # inside a run scope: its span is current already
        yield
        return
    key = (id(owner), goal)
    span = telemetry.pending.get(key)
    if span is None:
        if len(telemetry.pending) >= MAX_PENDING:  # goals planned and never run: their spans end
            oldest = next(iter(telemetry.pending))
            telemetry.pending.pop(oldest).end()
        span = telemetry.pending[key] = _run_span(telemetry)
    kit = telemetry.kit
    attached = kit.context.attach(kit.in_context(span))
    try:
        yield
    finally:
        kit.context.detach(attached)


def start_run(start: Callable[[], R], *, owner: object = None, goal: str | None = None) -> R:
    """``start()`` (which starts a run and returns its handle) with the run's span current, then the run traced.

    The span is the enclosing `run_scope`'s, else the one `goal_scope` kept
    for `owner` and `goal`, else a new one under the current context.
    """
    telemetry = active()
    if telemetry is None:
        return start()
    kit = telemetry.kit
    scope = SCOPE.get()
    if scope is not None and not scope.adopted:
        span, scope.adopted = scope.span, True
    else:
        scope = None
        span = telemetry.pending.pop((id(owner), goal), None) if goal is not None else None
        span = span if span is not None else _run_span(telemetry)
    attached = kit.context.attach(kit.in_context(span))
    try:
        run = start()
    except BaseException as exc:
        if scope is not None:
            scope.adopted = False  # the scope ends it
        else:
            kit.error(span, str(exc) or type(exc).__name__, type(exc).__name__)
            span.end()
        raise
    finally:
        kit.context.detach(attached)
    trace_run(run, span=span)
    return run


def trace_run(run: Any, *, span: Any = None) -> None:
    """Trace `run` from now on (its events so far too), under `span` if given; a run already traced is left as it is."""
    telemetry = active()
    if telemetry is None or run in _traced:
        return
    kit = telemetry.kit
    tracer = RunTracer(kit, run.run_id, span=span, parent=kit.context.get_current(), run=run, depth=getattr(run, "depth", 0))
    _traced[run] = tracer
    history = list(run.history)
    setup = getattr(run, "setup", None)
    if not history and isinstance(setup, dict):  # RunStarted is still to come: it records where the trace is
        setup.setdefault("traceparent", traceparent(tracer.open_run()))
    tracer.live = False
    for event in history:
        tracer(event)
    tracer.live = True
    run.subscribe(tracer)
