"""What an A2A task does in planexec: a request becomes a stored run, and the task follows that run to its end.

Owns `RunExecutor` (the SDK's `AgentExecutor` over the MCP server's
`Service`, which plans and submits through `Team.iter` and hands runs to
the worker: the one goal path), `parse_request` (what a caller's message
asks) and `task_state` (a run's state as an A2A task state).

A message asks one of three things: a goal as text (or data ``{"goal":
...}``) is planned, reviewed and stored waiting for a person; data
``{"template": NAME, "parameters": {...}}`` fills in a template of the plan
library; data ``{"run_id": ...}`` hands on a stored run that waits. The
task then follows the run, read back from the store every `poll` seconds:

- ``input-required`` while a person must decide (the plan, a step, a
  call), the status message naming it and the command that decides it;
  the caller cannot: nothing it sends approves anything;
- ``working`` while the run is queued, running or scheduled (its next
  steps wait for their time: the run's reason says until when); one status update per
  step that starts or ends (its id, state and output or error; metadata
  ``planexec``: run, step, state), in the run's state of the moment;
- ``completed`` with the answer as the task's artifact, ``failed`` with
  the reason, ``rejected`` when a policy refused the plan, ``canceled``
  when the run was. The usage of the run is in the task's metadata
  (``usage``), as a planexec caller reads it back.

A caller that cancels its task withdraws a plan nobody approved yet (it is
recorded denied, with the task's id); a run that has started goes on in
the store, where a person follows it (the status message says so). A
request that cannot be worked ends the task ``rejected`` or ``failed``
with a one-line message, never a traceback. Imports the a2a SDK, the
public API and the MCP server's `Service`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from a2a.helpers import new_data_part, new_task, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, Part, TaskState
from google.protobuf.json_format import MessageToDict

from planexec.errors import PlanexecError
from planexec.mcp_server.answers import PendingApproval, RunDetails, StepLine
from planexec.mcp_server.service import RequestError, Service
from planexec.runs import redact

__all__ = ["RunExecutor", "RunRequest", "parse_request", "task_state"]

log = logging.getLogger("planexec.a2a")

POLL = 0.5  # seconds between two reads of the run from the store
_WAITING = {"waiting_for_approval", "interrupted", "needs_decision"}  # a person must act before it goes on
_GOING = {"queued", "running", "waiting", "planned", "scheduled"}  # scheduled: its next steps wait for their time
_ENDED_WELL = {"succeeded", "partial"}


@dataclass(frozen=True)
class RunRequest:
    """What a caller's message asks: a `goal`, a `template` with `parameters` (and `version`), or a stored `run_id`."""

    goal: str | None = None
    template: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    version: int | None = None
    run_id: str | None = None


def parse_request(message: Message | None) -> RunRequest:
    """The request a message makes (see the module docstring); `RequestError` saying what a request looks like otherwise."""
    if message is None:
        raise RequestError("send a message: a goal as text, or data {'goal'}, {'template', 'parameters'} or {'run_id'}")
    texts = [p.text for p in message.parts if p.WhichOneof("content") == "text" and p.text.strip()]
    data = [MessageToDict(p.data) for p in message.parts if p.WhichOneof("content") == "data"]
    objects = [d for d in data if isinstance(d, dict)]
    if len(objects) > 1 or len(objects) != len(data):
        raise RequestError("send at most one data part, an object: {'goal'}, {'template', 'parameters'} or {'run_id'}")
    if objects:
        found = objects[0]
        keys = {k for k in ("goal", "template", "run_id") if k in found}
        if len(keys) != 1:
            raise RequestError(
                f"the data part names exactly one of goal, template or run_id (it has: {', '.join(sorted(found)) or 'nothing'})"
            )
        if "template" in found:
            return _template(found)
        value = found[keys.pop()]
        if not isinstance(value, str) or not value.strip():
            raise RequestError("goal and run_id are non-empty strings")
        return RunRequest(goal=value) if "goal" in found else RunRequest(run_id=value)
    if not texts:
        raise RequestError("the message is empty: send a goal as text, or data {'goal'}, {'template', 'parameters'} or {'run_id'}")
    return RunRequest(goal="\n".join(texts))


def _template(found: dict[str, Any]) -> RunRequest:
    name, parameters, version = found.get("template"), found.get("parameters", {}), found.get("version")
    if not isinstance(name, str) or not name.strip():
        raise RequestError("template is a template's name (the plan library's)")
    if not isinstance(parameters, dict):
        raise RequestError("parameters is an object: a value for each parameter the template declares")
    if version is not None and (not isinstance(version, (int, float)) or int(version) != version or version < 1):
        raise RequestError("version is a template's version, a whole number from 1")
    return RunRequest(template=name, parameters=parameters, version=int(version) if version is not None else None)


def task_state(state: str) -> TaskState:
    """The A2A task state of a run whose face state (`mcp_server.views.face_state`) is `state`."""
    if state in _WAITING:
        return TaskState.TASK_STATE_INPUT_REQUIRED
    if state in _GOING:
        return TaskState.TASK_STATE_WORKING
    if state in _ENDED_WELL:
        return TaskState.TASK_STATE_COMPLETED
    if state == "cancelled":
        return TaskState.TASK_STATE_CANCELED
    return TaskState.TASK_STATE_FAILED


class RunExecutor(AgentExecutor):
    """Each A2A task works one request through `service` and follows its run (see the module docstring)."""

    def __init__(self, service: Service, *, poll: float = POLL) -> None:
        self.service = service
        self.poll = poll
        self.runs: dict[str, str] = {}  # task id → run id of the tasks in progress, for cancel

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Work the request of `context` and follow its run; every refusal ends the task with a message."""
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        if context.current_task is None:
            history = [context.message] if context.message is not None else []
            await event_queue.enqueue_event(new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED, history=history))
        try:
            request = parse_request(context.message)
        except RequestError as exc:
            await updater.reject(_says(updater, str(exc)))
            return
        try:
            run_id = await self._start(request, updater)
            if run_id is not None:
                self.runs[task_id] = run_id
                await self._follow(run_id, updater)
        except RequestError as exc:
            await updater.failed(_says(updater, redact(str(exc))))
        except PlanexecError as exc:  # a store or a model that failed: named, not a crash
            await updater.failed(_says(updater, redact(f"{type(exc).__name__}: {exc}")))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("planexec A2A task %s failed: %s: %s", task_id, type(exc).__name__, exc)
            log.debug("the failure in full", exc_info=True)
            await updater.failed(_says(updater, redact(f"planexec failed unexpectedly: {type(exc).__name__}: {exc}")))
        finally:
            self.runs.pop(task_id, None)  # an ended task cannot be cancelled: nothing to keep

    async def _start(self, request: RunRequest, updater: TaskUpdater) -> str | None:
        """Store the run the request asks for; its id (None when a policy rejected its plan: the task says so)."""
        if request.run_id is not None:
            started = await self.service.run_plan(request.run_id)
            await updater.start_work(_says(updater, f"run {started.run_id}: {started.next}"))
            return started.run_id
        await updater.start_work(_says(updater, "planning the goal" if request.goal is not None else f"filling in {request.template}"))
        state: str
        if request.goal is not None:
            planned = await self.service.plan_goal(request.goal)
            run_id, state, next_ = planned.run_id, planned.state, planned.next
            plan = planned.plan
        else:
            assert request.template is not None
            started = await self.service.run_template(request.template, request.parameters, request.version)
            run_id, state, next_ = started.run_id, started.state, started.next
            plan = started.planned.plan if started.planned is not None else {}
        info = {"run_id": run_id, "state": state}
        if state == "rejected":
            await updater.reject(_says(updater, f"run {run_id}: the project's policies rejected the plan; {next_}", info))
            return None
        stored = _says(updater, f"run {run_id} stored ({state}): {next_}", info)
        stored.parts.append(new_data_part(plan))  # the plan a person reviews, for the caller to read
        await updater.update_status(TaskState.TASK_STATE_WORKING, stored, metadata={"planexec": info})
        return run_id

    async def _follow(self, run_id: str, updater: TaskUpdater) -> None:
        """Report the run's states and its steps' until it ends; the answer and usage then."""
        steps: dict[str, str] = {}
        shown: tuple[Any, ...] | None = None
        while True:
            details = await self.service.show_run(run_id)
            state = task_state(details.state)
            ended = state in (TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED)
            for line in details.steps:
                if line.state != steps.get(line.step_id, "pending"):
                    steps[line.step_id] = line.state
                    shown_as = TaskState.TASK_STATE_WORKING if ended else state  # the end is said once, after the steps
                    await updater.update_status(shown_as, _says(updater, _step(line)), metadata=_step_info(run_id, line))
            if ended:
                await self._ended(updater, details, state)
                return
            now = (state, details.state, tuple(p.approval_id for p in details.pending))
            if now != shown:
                shown = now
                await updater.update_status(state, _says(updater, _status(details)), metadata=_info(details))
            await asyncio.sleep(self.poll)

    async def _ended(self, updater: TaskUpdater, details: RunDetails, state: TaskState) -> None:
        """The run ended: its answer as an artifact when it has one, then the terminal state with the usage."""
        metadata = {"usage": details.usage, **_info(details)}
        if details.answer is not None:
            await updater.add_artifact([_part(details.answer)], name="answer", metadata={"run_id": details.run_id})
        message = _says(updater, _status(details))
        await updater.update_status(state, message, metadata=metadata)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """The caller cancels its task: a plan nobody approved is withdrawn (recorded denied); a started run goes on."""
        task_id, context_id = str(context.task_id), str(context.context_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        run_id = self.runs.get(task_id)
        said = "cancelled before a run was stored"
        if run_id is not None:
            said = await self._withdraw(run_id, task_id)
        await updater.cancel(_says(updater, said))

    async def _withdraw(self, run_id: str, task_id: str) -> str:
        try:
            details = await self.service.show_run(run_id)
            plan = [p for p in details.pending if p.kind == "plan"]
            if details.state == "waiting_for_approval" and plan and not any(s.state != "pending" for s in details.steps):
                await self.service.decide(plan[-1], approved=False, reason=f"withdrawn: the A2A caller cancelled task {task_id}")
                return f"run {run_id} withdrawn: its plan is recorded denied, nothing ran"
            return f"the A2A task is cancelled; run {run_id} ({details.state}) goes on in planexec's store: planexec show {run_id}"
        except (RequestError, PlanexecError) as exc:
            return f"the A2A task is cancelled; run {run_id} could not be withdrawn: {exc}"


def _status(details: RunDetails) -> str:
    """What the caller reads of the run's state: who must act, or how it ended."""
    if details.pending:
        return f"run {details.run_id} waits for a person (the caller cannot approve): " + "; ".join(_pending(p) for p in details.pending)
    reason = f": {details.reason}" if details.reason else ""
    return f"run {details.run_id} {details.state}{reason}; {details.next}"


def _step(line: StepLine) -> str:
    """A step that started or ended, in a line: its id, worker and action, state, and output or error."""
    said = f"step {line.step_id} ({line.worker}.{line.action}) {line.state}"
    if line.error:
        return f"{said}: {line.error}"
    if line.output is not None and line.state == "succeeded":
        return f"{said}: {_short(line.output)}"
    return said


def _step_info(run_id: str, line: StepLine) -> dict[str, Any]:
    return {"planexec": {"run_id": run_id, "step_id": line.step_id, "state": line.state}}


def _pending(p: PendingApproval) -> str:
    return f"{p.what} ({p.details.splitlines()[0] if p.details else ''}) — {p.decide_with}"


def _info(details: RunDetails) -> dict[str, Any]:
    return {"planexec": {"run_id": details.run_id, "state": details.state, "plan_version": details.plan_version}}


def _says(updater: TaskUpdater, text: str, info: dict[str, Any] | None = None) -> Message:
    message = new_text_message(text, context_id=updater.context_id, task_id=updater.task_id)
    if info:
        message.metadata.update({"planexec": info})
    return message


def _part(value: Any) -> Part:
    """The answer as a part: text as text, anything else as data."""
    return new_text_part(value) if isinstance(value, str) else new_data_part(json.loads(json.dumps(value, default=str)))


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 300 else text[:300] + "…"
