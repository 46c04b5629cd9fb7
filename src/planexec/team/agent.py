"""The single-agent path: one ReAct-style agent with every tool, run as a one-step plan.

Owns `AGENT_WORKER`, `agent_worker` (a `RoleWorker` whose system prompt is
``prompts/agent/system.md``: think, call tools, observe, answer),
`single_plan` (the one-step plan that hands the whole goal to it),
`single_registry` (the agent over a registry's tools), `role_tools` (the
tools of one role, for an agent working a goal in its place), and
`start_single`/`run_single`, which run that plan through the `Engine`, so a
single-agent run has the same events, usage accounting and `RunResult` as a
team run and the two can be compared on equal terms; and `handoff_note`,
what a planner is told when the agent stopped because the contract refused
a call after it read untrusted text (trusted context only). The agent uses the same
`Model` interface and tool calling as the team's roles (native, or JSON mode
for models without native tool calls). Imports `engine`, `registry`,
`workers`, `plan`, `plan_schema`, `toolcalls` and `models.base`; never the
CLI, the planner's internals or the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from planexec.engine.config import EngineConfig
from planexec.engine.engine import Engine, Run
from planexec.engine.results import CONTRACT_STOPS, RunResult, RunStatus
from planexec.models.base import Model
from planexec.plan.model import Plan, Step
from planexec.planning.draft_schema import plan_id_for
from planexec.planning.planner import Planning
from planexec.usage import Usage
from planexec.workers.io import StepCall
from planexec.workers.registry import TOOL_WORKER, Registry
from planexec.workers.tool_calls import prompt_file
from planexec.workers.tools import Tool
from planexec.workers.worker import RoleWorker

__all__ = ["AGENT_WORKER", "agent_worker", "handoff_note", "role_tools", "run_single", "single_plan", "single_registry", "start_single"]

AGENT_WORKER = "agent"
AGENT_STEP = "agent"


class _AgentWorker(RoleWorker):
    """A role worker whose task message is the goal itself when the step's instruction is the goal; a refused escalation
    ends its step (see `RoleWorker.stops_on_escalation`)."""

    stops_on_escalation = True

    def render_task(self, call: StepCall) -> str:
        """The goal alone for the single-agent step (no goal repeated as a task); a role's message otherwise."""
        task = call.instruction or call.step.instruction
        if task and task == call.goal and not (call.parameters or call.context or call.failed_inputs):
            return task
        return super().render_task(call)


def agent_worker(
    model: Model,
    tools: Iterable[Tool],
    *,
    max_turns: int = 12,
    max_tokens: int | None = 1024,
    name: str = AGENT_WORKER,
) -> RoleWorker:
    """A ReAct-style agent: a `RoleWorker` with `tools`, the agent's system prompt and the task ``respond``.

    It loops for up to `max_turns` model calls (the last offers no tools, so
    it must answer), each bounded by `max_tokens`. A tool error goes back to
    the model as the tool's result; a tool declared `requires_approval` runs
    only in a step that required, and so received, approval.
    """
    tools = list(tools)
    names = ", ".join(t.name for t in tools) or "none"
    return _AgentWorker(
        name,
        model=model,
        description=f"A single agent that works a whole goal alone, calling tools as it goes. Tools: {names}.",
        system_prompt=prompt_file("agent", "system.md"),
        tools=tools,
        tasks=("respond",),
        max_turns=max_turns,
        max_tokens=max_tokens,
    )


def single_plan(goal: str, *, worker: str = AGENT_WORKER, requires_approval: bool = False) -> Plan:
    """The one-step plan of a single-agent run: step ``agent``, action ``respond``, the goal as its instruction.

    `requires_approval` marks the step so the engine's approver is asked
    before it starts; once approved, the agent may use tools that need approval.
    """
    step = Step(step_id=AGENT_STEP, worker=worker, action="respond", instruction=goal, requires_approval=requires_approval)
    return Plan(plan_id=plan_id_for(goal), goal=goal, steps=[step])


def single_registry(registry: Registry, *, model: Model, max_turns: int = 12) -> Registry:
    """A fresh registry with `registry`'s tools and predicates and the agent over them: the caller's is left as it was.

    What a single-agent run runs on, here (`start_single`) or in a worker
    that took one from the store's queue (`Team.run_settings`).
    """
    worker = agent_worker(model, registry.tools.values(), max_turns=max_turns)
    own = Registry()
    for t in registry.tools.values():
        own.add_tool(t, worker=TOOL_WORKER)  # reachable through the catch-all only; no role workers are made
    own.predicates.update(registry.predicates)
    own.add_worker(worker)
    return own


def start_single(
    goal: str,
    *,
    model: Model,
    registry: Registry,
    max_turns: int = 12,
    engine: EngineConfig | None = None,
    overhead: Mapping[str, Usage] | None = None,
    run_id: str | None = None,
    planning: Planning | None = None,
    requires_approval: bool = False,
    setup: Mapping[str, Any] | None = None,
) -> Run:
    """Start a single-agent run in the current event loop and return its `Run` handle (see `run_single`).

    `planning` records planner drafts that came before (a one-step plan run
    directly as a single agent): their events and usage join the run's.
    """
    agent_engine = Engine(single_registry(registry, model=model, max_turns=max_turns), config=engine)
    plan = single_plan(goal, requires_approval=requires_approval)
    return agent_engine.start(plan, run_id=run_id, planning=planning, overhead=overhead, setup=setup)


async def run_single(
    goal: str,
    *,
    model: Model,
    registry: Registry,
    max_turns: int = 12,
    engine: EngineConfig | None = None,
    overhead: Mapping[str, Usage] | None = None,
    run_id: str | None = None,
    requires_approval: bool = False,
) -> RunResult:
    """Run `goal` with one agent that has every tool in `registry.tools`; its final answer is the run's answer.

    The agent works the one-step plan of `single_plan` on an `Engine` built
    with the settings `engine` (timeouts, approver, subscribers...) over a copy of
    the registry, so the result has the same events, usage and status as a
    team run: the agent's usage is under its role (``agent``) and
    `overhead` (role -> usage, such as ``{"router": ...}``) is counted too.
    An agent that does not answer within `max_turns` fails its step with a
    `WorkerError` (the run ends ``aborted``, every turn's usage counted).
    """
    run = start_single(
        goal,
        model=model,
        registry=registry,
        max_turns=max_turns,
        engine=engine,
        overhead=overhead,
        run_id=run_id,
        requires_approval=requires_approval,
    )
    return await run.result()


def handoff_note(result: RunResult, registry: Registry | None = None) -> str | None:
    """What the planner reads when a single agent's run ended `incomplete` because the contract refused an escalation
    (it read untrusted text, then needed a side effect or chose a sensitive argument from what it read); else None.

    Only trusted context: that the agent stopped, and the side effects it made
    before it read anything untrusted (so the plan does not repeat them).
    Never the untrusted text, nor the call it was refused: after reading, the
    tool it asked for may be the attacker's choice.
    """
    record = result.steps.get(AGENT_STEP)
    if result.status is not RunStatus.INCOMPLETE or record is None or record.error is None or record.error.rule not in CONTRACT_STOPS:
        return None
    tools = registry.tools if registry is not None else {}
    done = []
    for c in record.calls:
        found = tools.get(c.tool)
        if c.ran and c.allowed and not c.chain and (found is None or not found.read_only):
            args = ", ".join(f"{k}={v!r}" for k, v in c.arguments.items())
            done.append(f"- {c.tool}({args})")
    lines = [
        "A single agent began this goal and stopped before finishing: after it read untrusted text, the plan's contract "
        f"refused a call it asked for ({record.error.rule}). Plan the whole goal as steps so the work is done safely: read "
        "in reading steps; when a later step needs a value found by reading (an amount, a recipient, a file name), give "
        'the reading step an "output_schema" and refer to the field; make each change its own step, with a grant that '
        "bounds where it lands.",
    ]
    if done:
        lines.append("These calls already ran before it read anything; do not plan them again:\n" + "\n".join(done))
    return "\n\n".join(lines)


def role_tools(registry: Registry, role: str) -> Registry:
    """A registry of the tools of `role` in `registry` alone (none for an unknown role, or one without tools): what one agent
    working a goal in that role's place may call."""
    worker = registry.workers.get(role)
    own = Registry()
    for t in worker.tools.values() if isinstance(worker, RoleWorker) else ():
        own.add_tool(t, worker=TOOL_WORKER)
    return own
