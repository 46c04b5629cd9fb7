"""What the span builders share: the open spans a call may go under, the OpenTelemetry kit, and small conversions.

Owns `Open` (an open attempt or run span with its ids), `SpanIndex` (the
open attempts by run and step and by asyncio task: a model call goes under
its task's attempt, else the engine's `CURRENT_STEP`'s, else the current
OpenTelemetry context), `Scope` and `SCOPE` (a run span opened before its
run exists: the planner's calls go under it), `Kit` (the OpenTelemetry API
modules, the tracer, the index and whether content is captured), and the
conversions: `traceparent` and `parse_traceparent`, `ns` (an event's time),
`usage_attributes` and `content` (a prompt or an output, redacted and
bounded). Imports `engine.attempt` (`CURRENT_STEP`), `secrets`, `usage` and
`telemetry.names`; OpenTelemetry comes in as the modules its caller loaded.
"""

from __future__ import annotations

import asyncio
import json
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from planexec.engine.attempt import CURRENT_STEP
from planexec.secrets import redact
from planexec.telemetry import names as n
from planexec.usage import Usage

__all__ = [
    "CONTENT_LIMIT",
    "SCOPE",
    "Kit",
    "Open",
    "Scope",
    "SpanIndex",
    "content",
    "current_task",
    "ns",
    "parse_traceparent",
    "traceparent",
    "usage_attributes",
]

CONTENT_LIMIT = 8_000  # characters of a prompt, output or argument a span keeps (capture_content)


@dataclass
class Open:
    """An open span a model or tool call may go under: an attempt (with its run, step and attempt) or a run."""

    span: Any
    run_id: str
    step_id: str | None = None
    attempt: int | None = None
    start_ns: int = 0
    mark_ns: int = 0  # when the last call under it ended: a tool call the events report at its end started after it
    tool: str | None = None  # the tool a tool step's attempt calls
    task: Any = None  # the asyncio task it was opened in, while it is open
    closed: bool = False


@dataclass
class Scope:
    """A run span opened before its run exists (`scopes.run_scope`); `adopted` once a run took it."""

    span: Any
    run_id: str | None = None
    adopted: bool = False


# the run span opened around a goal's routing and planning, current in this context
SCOPE: ContextVar[Scope | None] = ContextVar("planexec_telemetry_scope", default=None)


class SpanIndex:
    """The open attempts (and runs' main tasks) by run and step, and by asyncio task; see the module docstring."""

    def __init__(self) -> None:
        self._steps: dict[tuple[str, str], Open] = {}
        self._tasks: weakref.WeakKeyDictionary[asyncio.Task[Any], Open] = weakref.WeakKeyDictionary()

    def opened(self, found: Open, *, task: asyncio.Task[Any] | None) -> None:
        """An attempt (or a run, `step_id` None) opened, in `task` when its event came from one."""
        if found.step_id is not None:
            self._steps[(found.run_id, found.step_id)] = found
        if task is not None:
            self._tasks[task] = found
            found.task = task

    def closed(self, found: Open) -> None:
        """The span ended: no call goes under it any more."""
        found.closed = True
        if found.step_id is not None and self._steps.get((found.run_id, found.step_id)) is found:
            del self._steps[(found.run_id, found.step_id)]
        task, found.task = found.task, None
        if task is not None and self._tasks.get(task) is found:
            del self._tasks[task]

    def current(self) -> Open | None:
        """Where a call made here goes: this task's attempt (or run), else the engine's current step's attempt."""
        task = current_task()
        if task is not None:
            found = self._tasks.get(task)
            if found is not None and not found.closed:
                return found
        here = CURRENT_STEP.get()
        if here is None:
            return None
        try:
            run_id = here[0].run_id
        except ReferenceError:  # the run is gone
            return None
        return self._steps.get((run_id, here[1]))


@dataclass
class Kit:
    """What span builders need: the OpenTelemetry API modules, the tracer, the index, and whether content is captured."""

    trace: Any  # opentelemetry.trace
    context: Any  # opentelemetry.context
    tracer: Any
    index: SpanIndex = field(default_factory=SpanIndex)
    capture: bool = False

    def in_context(self, span: Any) -> Any:
        """A context whose current span is `span`."""
        return self.trace.set_span_in_context(span)

    def error(self, span: Any, message: str, kind: str) -> None:
        """Mark `span` failed: ERROR status with the message (secrets redacted), and ``error.type``."""
        span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, redact(message)[:1000]))
        span.set_attribute(n.ERROR_TYPE, kind)


def traceparent(span: Any) -> str:
    """The W3C ``traceparent`` of a span: ``00-<trace id>-<span id>-<flags>``."""
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def parse_traceparent(text: Any) -> tuple[int, int, int] | None:
    """(trace id, span id, flags) of a ``traceparent``, or None when it is not one."""
    parts = text.split("-") if isinstance(text, str) else []
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    return (trace_id, span_id, flags) if trace_id and span_id else None


def ns(at: datetime) -> int:
    """An event's time in nanoseconds since the epoch, as spans take it."""
    return round(at.timestamp() * 1_000_000) * 1000


def usage_attributes(usage: Usage) -> dict[str, Any]:
    """A step's, an attempt's or a run's totals as ``planexec.usage.*`` (never ``gen_ai.usage.*``: the model calls carry those)."""
    if usage.is_zero():
        return {}
    out: dict[str, Any] = {
        n.USAGE + "input_tokens": usage.input_tokens,
        n.USAGE + "output_tokens": usage.output_tokens,
        n.USAGE + "model_calls": usage.model_calls,
    }
    if usage.cached_input_tokens:
        out[n.USAGE + "cached_input_tokens"] = usage.cached_input_tokens
    if usage.cost_known:
        out[n.USAGE + "cost_usd"] = usage.cost
    return out


def content(value: Any) -> str:
    """A value as span content: text as is, anything else as JSON; secrets redacted, at most `CONTENT_LIMIT` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return redact(text)[:CONTENT_LIMIT]


def current_task() -> asyncio.Task[Any] | None:
    """The asyncio task running here, or None (no event loop)."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no event loop here
        return None
