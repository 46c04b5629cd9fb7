"""Workers: the roles that perform steps.

Owns the `Worker` protocol and its two kinds: `ToolWorker` (performs an
action by calling one of its tools with the step's parameters) and
`RoleWorker` (a role with a description the planner reads, a system prompt,
a set of tools and a model; it works the step in a bounded tool-calling
loop). Imports `calls`, `tools`, `usage`, `errors` and `models.base`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from .calls import StepCall, WorkResult
from .errors import PlanexecError, RegistryError, ToolError
from .models.base import Message, Model, ModelRequest, ToolCall
from .tools import Tool
from .usage import Usage

__all__ = ["RoleWorker", "ToolWorker", "Worker", "WorkerError"]


class WorkerError(PlanexecError):
    """A worker could not perform a step (unknown action, a failed model call, a model that never finished).

    `usage` is what the attempt consumed before it failed, so the step's accounting stays exact.
    """

    def __init__(self, message: str, *, usage: Usage | None = None) -> None:
        self.usage = usage if usage is not None else Usage()
        super().__init__(message)


@runtime_checkable
class Worker(Protocol):
    """Something that performs a plan step.

    `actions` are the action names it accepts; `input_model(action)` gives the
    argument schema the validator checks parameters against (None when the
    action takes free-form parameters); `max_concurrency` caps how many of
    its steps run at once (None: only the global limit).
    """

    name: str
    description: str
    max_concurrency: int | None

    @property
    def actions(self) -> set[str]: ...

    def input_model(self, action: str) -> type[BaseModel] | None: ...

    async def perform(self, call: StepCall) -> WorkResult: ...


class ToolWorker:
    """A deterministic worker: the step's action names one of its tools, which it calls."""

    def __init__(
        self,
        name: str,
        tools: Iterable[Tool] | Mapping[str, Tool] = (),
        *,
        description: str = "",
        max_concurrency: int | None = None,
    ) -> None:
        self.name = name
        self.description = description or f"calls its tools directly: {name}"
        self.max_concurrency = max_concurrency
        # A Mapping is shared, not copied: the registry's catch-all 'tool' worker sees tools added later.
        self.tools: dict[str, Tool] = tools if isinstance(tools, dict) else {t.name: t for t in tools}

    def __repr__(self) -> str:
        return f"ToolWorker({self.name!r}, tools={sorted(self.tools)})"

    def add(self, tool: Tool) -> None:
        """Give this worker another tool."""
        self.tools[tool.name] = tool

    @property
    def actions(self) -> set[str]:
        """The names of its tools."""
        return set(self.tools)

    def input_model(self, action: str) -> type[BaseModel] | None:
        """The tool's argument model."""
        return self.tools[action].input_model if action in self.tools else None

    async def perform(self, call: StepCall) -> WorkResult:
        """Call the tool named by the action with the resolved parameters."""
        found = self.tools.get(call.action)
        if found is None:
            raise WorkerError(f"worker {self.name!r} has no tool {call.action!r} (it has: {', '.join(sorted(self.tools))})")
        output = await found.invoke(call.parameters, call)
        return WorkResult(output=output, tools=[found.name])


class RoleWorker:
    """A role-specialised LLM worker: researcher, coder, critic, writer, ...

    It receives the step's instruction, resolved parameters and dependency
    outputs, may call its tools (arguments checked before they run; a tool
    error goes back to the model as the tool's result), and answers with
    text, or JSON when the reply parses as JSON. Its actions are its `tasks`
    (free-form) plus its tools' names.
    """

    def __init__(
        self,
        name: str,
        *,
        model: Model,
        description: str,
        system_prompt: str,
        tools: Iterable[Tool] = (),
        tasks: Iterable[str] = ("respond",),
        max_turns: int = 8,
        max_concurrency: int | None = None,
        temperature: float | None = None,
    ) -> None:
        if not isinstance(model, Model):
            raise RegistryError(f"role worker {name!r}: model must implement planexec.models.Model", name=name)
        self.name = name
        self.model = model
        self.description = description
        self.system_prompt = system_prompt
        self.tools = {t.name: t for t in tools}
        self.tasks = set(tasks)
        self.max_turns = max_turns
        self.max_concurrency = max_concurrency
        self.temperature = temperature

    def __repr__(self) -> str:
        return f"RoleWorker({self.name!r}, model={self.model.name!r})"

    @property
    def actions(self) -> set[str]:
        """Its free-form tasks and its tools' names."""
        return self.tasks | set(self.tools)

    def input_model(self, action: str) -> type[BaseModel] | None:
        """Free-form parameters for tasks; a tool's model when the action is a tool."""
        return self.tools[action].input_model if action in self.tools and action not in self.tasks else None

    def render_task(self, call: StepCall) -> str:
        """The user message: the goal, the instruction, parameters and upstream outputs."""
        parts = [f"Overall goal: {call.goal}"] if call.goal else []
        parts.append(f"Your task ({call.action}): {call.instruction or call.step.instruction or call.action}")
        if call.parameters:
            parts.append("Parameters:\n" + json.dumps(call.parameters, indent=2, ensure_ascii=False, default=str))
        for step_id, out in call.context.items():
            parts.append(f"Result of step {step_id}:\n" + json.dumps(out.value, ensure_ascii=False, default=str))
        for step_id, err in call.failed_inputs.items():
            parts.append(f"Step {step_id} failed: {err}")
        return "\n\n".join(parts)

    async def perform(self, call: StepCall) -> WorkResult:
        """Run the tool-calling loop until the model answers without tool calls."""
        messages = [Message(role="system", content=self.system_prompt), Message(role="user", content=self.render_task(call))]
        definitions = [t.definition() for t in self.tools.values()]
        usage = Usage()
        used: list[str] = []
        for _ in range(self.max_turns):
            try:
                response = await self.model.complete(
                    ModelRequest(messages=messages, tools=definitions, temperature=self.temperature)
                )
            except PlanexecError as exc:  # a model error: keep what the earlier turns cost
                raise WorkerError(f"worker {self.name!r}: {type(exc).__name__}: {exc}", usage=usage) from exc
            usage = usage + response.usage
            if not response.tool_calls:
                return WorkResult(output=_maybe_json(response.text), usage=usage, tools=used)
            messages.append(Message(role="assistant", content=response.text, tool_calls=response.tool_calls))
            for tc in response.tool_calls:
                used.append(tc.name)
                messages.append(Message(role="tool", call_id=tc.call_id, content=await self._run_tool(tc, call)))
        raise WorkerError(f"worker {self.name!r} made tool calls for {self.max_turns} turns without answering", usage=usage)

    async def _run_tool(self, tc: ToolCall, call: StepCall) -> str:
        found = self.tools.get(tc.name)
        if found is None:
            return f"error: no tool {tc.name!r}; available: {', '.join(sorted(self.tools)) or 'none'}"
        try:
            result = await found.invoke(tc.arguments, call)
        except ToolError as exc:
            return f"error: {exc}"
        except Exception as exc:  # the model sees the failure and may try again
            return f"error: {type(exc).__name__}: {exc}"
        return json.dumps(result, ensure_ascii=False)


def _maybe_json(text: str) -> Any:
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError:
            pass
    return text
