"""A run's spans, built from its events: the run, each plan version, each step, each attempt and each tool call.

Owns `RunTracer`, a subscriber to one run (`Run.subscribe`) that opens and
ends spans as the events arrive, with the events' own timestamps, so the
engine does no work for telemetry::

    invoke_workflow planexec        RunStarted (or RunResumed) .. RunFinished
    └── plan v1                     RunStarted / PlanRevised .. the next version, RunFinished
        └── step s1                 StepReady (or StepStarted) .. its last attempt, a skip, a cancel
            └── attempt 1           StepStarted .. StepSucceeded / StepFailed / StepCancelled
                ├── chat <model>    each model call (`telemetry.calls`)
                └── execute_tool    a tool step's call, or a call a role worker made (ToolCallDecided)

A sub-team's run (relayed as `SubRunEvent`) gets a tracer of its own whose
run span is a child of the parent step's attempt. A resumed run's span
links to the span of the run it continues: its ``traceparent`` is kept in
`RunStarted.setup`. Each attempt is registered in the `kit.SpanIndex`, so
the model calls made in it find it. Goals, outputs and a tool's arguments
enter spans only with `capture_content`. Imports `engine.events`,
`workers.registry`, `secrets` and `telemetry` (`names`, `kit`);
OpenTelemetry comes in through the `Kit` its caller built.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from planexec.engine.events import parse_event
from planexec.secrets import redact
from planexec.telemetry import names as n
from planexec.telemetry.kit import Kit, Open, content, current_task, ns, parse_traceparent, usage_attributes
from planexec.workers.registry import TOOL_WORKER

__all__ = ["RUN_SPAN", "WORKFLOW", "RunTracer"]

log = logging.getLogger("planexec.telemetry")

RUN_SPAN = "invoke_workflow planexec"
WORKFLOW = "planexec"
ERROR_STATUSES = frozenset({"failed", "aborted", "cancelled"})


class RunTracer:
    """One run's spans from its events (a subscriber); see the module docstring.

    `span` is the run's span when it was opened before the run (a `Scope`);
    else it opens at the run's first event, under `parent` (a context).
    `run`, when given, is the run handle: its registry tells a tool step
    from a role's task, its store the trace a resumed run continues.
    """

    def __init__(self, kit: Kit, run_id: str, *, span: Any = None, parent: Any = None, run: Any = None, depth: int = 0) -> None:
        self.kit = kit
        self.run_id = run_id
        self.span = span
        self.parent = parent
        self.run = run
        self.depth = depth
        self.root: Open | None = None
        self.version: tuple[int, Any] | None = None  # the plan version in force and its span
        self.steps: dict[str, Any] = {}  # open step spans
        self.attempts: dict[str, Open] = {}  # open attempt per step
        self.children: dict[str, RunTracer] = {}  # sub-runs by run id
        self.finished = False
        self.live = True  # False while events that happened before are replayed: no task is theirs
        self._failing = False  # a handler failed once: said once, never with a traceback
        self._handlers: dict[str, Callable[[Any], None]] = {
            "run_started": self._run_started,
            "run_resumed": self._run_resumed,
            "plan_revised": self._plan_revised,
            "step_ready": self._step_ready,
            "step_started": self._step_started,
            "step_succeeded": self._step_succeeded,
            "step_failed": self._step_failed,
            "step_skipped": self._step_skipped,
            "step_cancelled": self._step_cancelled,
            "tool_call_decided": self._tool_call,
            "sub_run_event": self._sub_run,
            "run_finished": self._run_finished,
            "plan_drafted": self._note,
            "replan_started": self._note,
            "joiner_decided": self._note,
            "rollback_started": self._note,
            "rollback_finished": self._note,
            "step_retried": self._step_note,
            "step_rerouted": self._step_note,
            "step_routed": self._step_note,
            "step_escalated": self._step_note,
            "step_resolved": self._step_note,
            "step_judged": self._step_note,
            "approval_requested": self._approval,
            "approval_decided": self._approval,
        }

    def __call__(self, event: Any) -> None:
        """Take one event of the run."""
        handler = self._handlers.get(event.type)
        if handler is None or self.finished:
            return
        try:
            handler(event)
        except Exception as exc:  # telemetry never breaks a run, and prints no traceback
            if not self._failing:
                self._failing = True
                log.warning("telemetry: run %s: no spans for %s (%s: %s)", self.run_id, event.type, type(exc).__name__, exc)

    # --- the run ----------------------------------------------------------------------------

    def open_run(self, at_ns: int | None = None) -> Any:
        """The run's span, opened now (or at `at_ns`) if it is not open yet."""
        if self.span is None:
            self.span = self.kit.tracer.start_span(RUN_SPAN, context=self.parent, start_time=at_ns, attributes=self._run_attributes())
        return self.span

    def _run_attributes(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {n.OPERATION: "invoke_workflow", n.WORKFLOW: WORKFLOW, n.RUN_ID: self.run_id, n.DEPTH: self.depth}
        parent, _, step = self.run_id.rpartition("/")
        if self.depth and parent:
            attrs[n.PARENT_RUN], attrs[n.PARENT_STEP] = parent, step
        return attrs

    def _started(self, event: Any, version: int) -> Any:
        span = self.open_run(ns(event.at))
        span.set_attributes(self._run_attributes())  # a span opened before the run did not know its id
        self.root = Open(span, self.run_id, start_ns=ns(event.at))
        self.kit.index.opened(self.root, task=self._task())  # calls in the run's own task (replanner, joiner) go under the run
        self._open_version(version, ns(event.at))
        return span

    def _run_started(self, event: Any) -> None:
        span = self._started(event, event.plan_version)
        span.set_attributes({n.PLAN_ID: event.plan_id, "planexec.plan.steps": len(event.step_ids)})
        if self.kit.capture:
            span.set_attribute(n.INPUT_MESSAGES, _user_message(event.goal))

    def _run_resumed(self, event: Any) -> None:
        span = self._started(event, event.plan_version)
        span.set_attributes({n.RESUMED: True, "planexec.resumed.kept": len(event.kept), "planexec.resumed.rerun": len(event.rerun)})
        original = self._original_traceparent()
        parsed = parse_traceparent(original)
        if parsed is not None:
            trace = self.kit.trace
            trace_id, span_id, flags = parsed
            link = trace.SpanContext(trace_id=trace_id, span_id=span_id, is_remote=True, trace_flags=trace.TraceFlags(flags))
            span.set_attribute(n.RESUMES, original)
            span.add_link(link, {"planexec.link": "resumes"})

    def _original_traceparent(self) -> str | None:
        """The ``traceparent`` the run's `RunStarted` recorded (a resumed run's store has it)."""
        store = getattr(getattr(getattr(self.run, "engine", None), "config", None), "store", None)
        if store is None:
            return None
        for event in store.events(self.run_id, limit=1):
            setup = getattr(event, "setup", None)
            found = setup.get("traceparent") if isinstance(setup, dict) else None
            if isinstance(found, str):
                return found
        return None

    def _run_finished(self, event: Any) -> None:
        at = ns(event.at)
        status = event.status.value if hasattr(event.status, "value") else str(event.status)
        for sid in list(self.attempts):
            self._end_attempt(sid, at)
        for sid in list(self.steps):  # steps that never ended: held for a person, or stopped with the run
            self._end_step(sid, at, "needs_decision" if status == "needs_decision" else "cancelled")
        self._close_version(at)
        span = self.open_run(at)
        span.set_attributes({n.RUN_STATUS: status, **usage_attributes(event.usage)})
        if self.kit.capture and event.answer is not None:
            span.set_attribute(n.OUTPUT_MESSAGES, _assistant_message(event.answer))
        if status in ERROR_STATUSES:
            error = event.error
            self.kit.error(span, (error.message if error else None) or event.reason or status, (error.rule if error else None) or status)
        elif event.reason:
            span.set_attribute("planexec.run.reason", redact(event.reason)[:500])
        span.end(end_time=at)
        if self.root is not None:
            self.kit.index.closed(self.root)
        self.finished = True

    def _note(self, event: Any) -> None:
        """An event worth seeing on the run's span: drafts, replans, the joiner, a rollback."""
        span = self.span if self.span is not None else self.open_run(ns(event.at))
        attrs: dict[str, Any] = {}
        for key in ("attempt", "model", "version", "source", "step_id", "action", "status"):
            value = getattr(event, key, None)
            if value is not None:
                attrs[f"planexec.{key}"] = value.value if hasattr(value, "value") else value
        problems = getattr(event, "problems", None)
        if problems is not None:
            attrs["planexec.problems"] = len(problems)
        span.add_event(event.type, attrs, timestamp=ns(event.at))

    # --- plan versions ------------------------------------------------------------------------

    def _open_version(self, version: int, at: int) -> None:
        self._close_version(at)
        span = self.kit.tracer.start_span(
            f"plan v{version}",
            context=self.kit.in_context(self.open_run(at)),
            start_time=at,
            attributes={n.RUN_ID: self.run_id, n.PLAN_VERSION: version},
        )
        self.version = (version, span)

    def _close_version(self, at: int) -> None:
        if self.version is not None:
            self.version[1].end(end_time=at)
            self.version = None

    def _plan_revised(self, event: Any) -> None:
        at = ns(event.at)
        self._open_version(event.version, at)
        assert self.version is not None
        diff = event.diff
        self.version[1].set_attributes(
            {
                "planexec.plan.revises": event.revises,
                "planexec.plan.added": len(diff.added),
                "planexec.plan.removed": len(diff.removed),
                "planexec.plan.changed": len(diff.changed),
                "planexec.plan.reason": redact(event.reason)[:500],
            }
        )

    # --- steps and attempts --------------------------------------------------------------------

    def _step_span(self, step_id: str, at: int) -> Any:
        span = self.steps.get(step_id)
        if span is None:
            if self.version is None:
                self._open_version(1, at)  # a streamed run's steps come before its plan is whole
            assert self.version is not None
            span = self.steps[step_id] = self.kit.tracer.start_span(
                f"step {step_id}",
                context=self.kit.in_context(self.version[1]),
                start_time=at,
                attributes={n.RUN_ID: self.run_id, n.STEP_ID: step_id},
            )
        return span

    def _step_ready(self, event: Any) -> None:
        self._step_span(event.step_id, ns(event.at))

    def _step_started(self, event: Any) -> None:
        at = ns(event.at)
        sid = event.step_id
        self._end_attempt(sid, at)  # a retry's start ends an attempt no event ended
        step = self._step_span(sid, at)
        step.set_attributes({n.WORKER: event.worker, n.ACTION: event.action})
        attrs: dict[str, Any] = {n.RUN_ID: self.run_id, n.STEP_ID: sid, n.ATTEMPT: event.attempt, n.WORKER: event.worker}
        name = f"attempt {event.attempt}"
        if not self._is_tool_step(event.worker, event.action):
            attrs.update({n.OPERATION: "invoke_agent", n.AGENT_NAME: event.worker})
        if getattr(event, "model", None) is not None:  # the model a cascade or a router chose for this attempt
            attrs[n.REQUEST_MODEL] = event.model
        span = self.kit.tracer.start_span(name, context=self.kit.in_context(step), start_time=at, attributes=attrs)
        tool = event.action if n.OPERATION not in attrs else None
        found = self.attempts[sid] = Open(span, self.run_id, sid, event.attempt, start_ns=at, mark_ns=at, tool=tool)
        self.kit.index.opened(found, task=self._task())  # the attempt's own task: the worker's and the critics' calls

    def _task(self) -> asyncio.Task[Any] | None:
        """The task this event came from, when it is live (a replayed event's task is not the run's)."""
        return current_task() if self.live else None

    def _is_tool_step(self, worker: str, action: str) -> bool:
        """A step that calls a tool itself (a plain tool step, or a tool action of a role), not a role's task."""
        registry = getattr(getattr(self.run, "engine", None), "registry", None)
        found = registry.workers.get(worker) if registry is not None else None
        if found is None:
            return worker == TOOL_WORKER
        tools = getattr(found, "tools", None)
        return isinstance(tools, Mapping) and action in tools and action not in getattr(found, "tasks", ())

    def _end_attempt(self, step_id: str, at: int, event: Any = None) -> Open | None:
        found = self.attempts.pop(step_id, None)
        if found is None:
            return None
        if found.tool is not None and event is not None:
            self._tool_step_call(found, found.tool, at, event)
        if event is not None and getattr(event, "usage", None) is not None:
            found.span.set_attributes(usage_attributes(event.usage))
        found.span.end(end_time=max(at, found.start_ns))
        self.kit.index.closed(found)
        return found

    def _tool_step_call(self, found: Open, tool: str, at: int, event: Any) -> None:
        """A tool step's attempt is one tool call: its span, as long as the attempt."""
        attrs = {n.OPERATION: "execute_tool", n.TOOL_NAME: tool, n.TOOL_TYPE: "function", n.RUN_ID: self.run_id, n.STEP_ID: found.step_id}
        span = self.kit.tracer.start_span(
            f"execute_tool {tool}", context=self.kit.in_context(found.span), start_time=found.start_ns, attributes=attrs
        )
        if event.type == "step_failed":
            self.kit.error(span, event.error.message, event.error.type)
        elif self.kit.capture and getattr(event, "output", None) is not None:
            span.set_attribute(n.TOOL_RESULT, content(event.output.value))
        span.end(end_time=max(at, found.start_ns))

    def _end_step(self, step_id: str, at: int, status: str, *, error: Any = None) -> None:
        span = self.steps.pop(step_id, None)
        if span is None:
            return
        span.set_attribute(n.STEP_STATUS, status)
        if error is not None:
            self.kit.error(span, error.message, error.type)
            span.set_attribute(n.ERROR_RULE, error.rule)
        span.end(end_time=at)

    def _step_succeeded(self, event: Any) -> None:
        at = ns(event.at)
        found = self._end_attempt(event.step_id, at, event)
        span = self.steps.get(event.step_id)
        if span is not None and self.kit.capture:
            span.set_attribute(n.OUTPUT, content(event.output.value))
        if span is not None and found is None:
            span.set_attributes(usage_attributes(event.usage))
        self._end_step(event.step_id, at, "succeeded")

    def _step_failed(self, event: Any) -> None:
        at = ns(event.at)
        error = event.error
        found = self.attempts.get(event.step_id)
        if found is not None and found.attempt == event.attempt:
            self.kit.error(found.span, error.message, error.type)
            found.span.set_attribute(n.ERROR_RULE, error.rule)
            self._end_attempt(event.step_id, at, event)
        step = self._step_span(event.step_id, at)
        step.add_event("step_failed", {n.ATTEMPT: event.attempt, "planexec.then": event.then, n.ERROR_RULE: error.rule}, timestamp=at)
        if event.then not in ("retry", "fallback", "escalate"):  # the step has ended; a retry, the fallback or the next model goes on
            self._end_step(event.step_id, at, "failed", error=error)

    def _step_skipped(self, event: Any) -> None:
        at = ns(event.at)
        self._step_span(event.step_id, at).set_attribute("planexec.skipped_because", event.because)
        self._end_step(event.step_id, at, "skipped")

    def _step_cancelled(self, event: Any) -> None:
        at = ns(event.at)
        self._end_attempt(event.step_id, at)
        self._step_span(event.step_id, at).set_attribute("planexec.cancel_reason", redact(event.reason)[:500])
        self._end_step(event.step_id, at, "cancelled")

    def _step_note(self, event: Any) -> None:
        """An event about a step, on its attempt's span (a critic's verdict) or its step's."""
        at = ns(event.at)
        found = self.attempts.get(event.step_id)
        target = found.span if found is not None and event.type == "step_judged" else self._step_span(event.step_id, at)
        attrs: dict[str, Any] = {}
        keys = ("next_attempt", "delay", "from_worker", "to_worker", "decision", "by", "critic", "approved", "attempt")
        for key in (*keys, "start", "router", "from_model", "to_model", "reason"):  # the last five: a cascade's start and moves
            value = getattr(event, key, None)
            if value is not None:
                attrs[f"planexec.{key}"] = value
        target.add_event(event.type, attrs, timestamp=at)

    def _approval(self, event: Any) -> None:
        """An approval asked for or given: on the step's span (a plan version's: on the run's)."""
        at = ns(event.at)
        attrs: dict[str, Any] = {"planexec.content_hash": event.content_hash}
        if event.type == "approval_decided":
            attrs["planexec.approved"] = event.approved
        call = getattr(event, "call", None)
        if call is not None:
            attrs[n.TOOL_NAME] = call.tool
        if event.step_id is None:
            self.open_run(at).add_event(event.type, attrs, timestamp=at)
            return
        self._step_span(event.step_id, at).add_event(event.type, attrs, timestamp=at)
        found = self.attempts.get(event.step_id)
        if found is not None:
            found.mark_ns = max(found.mark_ns, at)  # a call waited for this: it ran after it

    def _tool_call(self, event: Any) -> None:
        """A call a role worker made inside an attempt: run (from after the call before it) or refused (at once)."""
        call = event.call
        at = ns(event.at)
        found = self.attempts.get(event.step_id)
        parent = found.span if found is not None else self._step_span(event.step_id, at)
        start = found.mark_ns if found is not None and call.ran else at
        attrs: dict[str, Any] = {
            n.OPERATION: "execute_tool",
            n.TOOL_NAME: call.tool,
            n.TOOL_TYPE: "function",
            n.RUN_ID: self.run_id,
            n.STEP_ID: event.step_id,
            n.ATTEMPT: call.attempt,
            "planexec.tool.allowed": call.allowed,
            "planexec.tool.decided_by": call.decided_by,
        }
        if self.kit.capture:
            attrs[n.TOOL_ARGUMENTS] = content(call.arguments)
        span = self.kit.tracer.start_span(
            f"execute_tool {call.tool}", context=self.kit.in_context(parent), start_time=min(start, at), attributes=attrs
        )
        if not call.allowed:
            self.kit.error(span, f"refused ({call.rule}): {call.reason}", call.rule or "refused")
        elif call.error is not None:
            self.kit.error(span, call.error, "tool_error")
        span.end(end_time=at)
        if found is not None:
            found.mark_ns = max(found.mark_ns, at)

    # --- sub-teams --------------------------------------------------------------------------------

    def _sub_run(self, event: Any) -> None:
        """An event of a sub-team's run: its own tracer, its run span under the parent step's attempt."""
        inner = parse_event(event.event)
        child = self.children.get(inner.run_id)
        if child is None:
            at = ns(inner.at)
            found = self.attempts.get(event.step_id)
            parent = found.span if found is not None else (self.steps.get(event.step_id) or self.open_run(at))
            child = self.children[inner.run_id] = RunTracer(self.kit, inner.run_id, parent=self.kit.in_context(parent), depth=event.depth)
        child.live = self.live
        child(inner)
        if child.finished:
            del self.children[inner.run_id]


def _user_message(text: str) -> str:
    return json.dumps([{"role": "user", "parts": [{"type": "text", "content": content(text)}]}], ensure_ascii=False)


def _assistant_message(answer: Any) -> str:
    return json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": content(answer)}]}], ensure_ascii=False)
