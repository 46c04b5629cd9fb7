"""Workers: the roles that perform steps.

Owns the `Worker` protocol (and `ModelWorker`, one whose steps can run on
another model) and its kinds: `ToolWorker` (performs an action
by calling one of its tools with the step's parameters), `RoleWorker` (a
role with a description the planner reads, a system prompt, a set of tools
and a model; it works the step in a bounded tool-calling loop, natively or
in JSON mode) and `CriticWorker` (a role whose answer is a `Verdict`, and
whose approvals count only after a tool check). A tool's result reaches the
model as text when it is a string, as JSON otherwise. Imports `workers`
(`io`, `tools`, `tool_calls`, `arguments`), `usage`, `errors` and `models.base`.
"""

from __future__ import annotations

import copy
import json
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

from planexec.errors import (
    CallRefusedError,
    ModelOutputError,
    PlanexecError,
    RegistryError,
    ToolError,
    ToolInputError,
)
from planexec.models.base import Message, Model, ToolCall
from planexec.models.profile import profile_of
from planexec.secrets import redact
from planexec.usage import Usage
from planexec.workers.arguments import InputModel
from planexec.workers.gate import CONTRACT_STOPS, Gate, admit_direct
from planexec.workers.io import Source, StepCall, WorkResult
from planexec.workers.tool_calls import JsonToolCalls, NativeToolCalls, prompt_file, result_text
from planexec.workers.tools import Tool

__all__ = [
    "MAX_RESULT_CHARS",
    "CriticWorker",
    "IncompleteError",
    "ModelWorker",
    "RoleWorker",
    "ToolWorker",
    "Verdict",
    "Worker",
    "WorkerError",
    "cut_result",
]

MAX_RESULT_CHARS = 20_000  # of one tool result a role worker's model reads (about 5,000 tokens); the rest is cut, with a note

# a tool called directly uses no model: one frozen zero serves every call (a `Usage()` each was a pydantic validation)
_NO_USAGE = Usage()


class WorkerError(PlanexecError):
    """A worker could not perform a step (unknown action, a failed model call, a model that never finished).

    `usage` is what the attempt consumed before it failed, so the step's accounting stays exact.
    """

    def __init__(self, message: str, *, usage: Usage | None = None) -> None:
        self.usage = usage if usage is not None else Usage()
        super().__init__(message)


class IncompleteError(WorkerError):
    """A worker's work is incomplete, never a success (rule ``incomplete``): it ran out of turns while it still wanted
    to call tools, its answer was cut off by its token limit, or its answer degenerated into repetition."""


@runtime_checkable
class ModelWorker(Protocol):
    """A worker whose steps a model works, and which can work them on another model (a cascade's, a router's choice).

    `uses_model(action)` is False for an action it performs without a model
    (a tool called directly); `with_model(model)` is the worker on `model`.
    """

    def uses_model(self, action: str) -> bool: ...

    def with_model(self, model: Model) -> Worker: ...


@runtime_checkable
class Worker(Protocol):
    """Something that performs a plan step.

    `actions` are the action names it accepts; `input_model(action)` gives the
    argument model the validator checks parameters against (a pydantic model
    class, or any `InputModel` such as a JSON Schema tool's; None when the
    action takes free-form parameters); `max_concurrency` caps how many of
    its steps run at once (None: only the global limit).
    """

    name: str
    description: str
    max_concurrency: int | None

    @property
    def actions(self) -> set[str]: ...

    def input_model(self, action: str) -> InputModel | None: ...

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
        # the one-name list each result's `tools` holds, one per tool: results are records, never changed after
        # they are made, so every step of a tool shares it (one object fewer a step for the garbage collector)
        self._used: dict[str, list[str]] = {}
        # A Mapping is shared, not copied: the registry's catch-all 'tool' worker sees tools added later.
        if isinstance(tools, dict):
            self.tools: dict[str, Tool] = tools
        elif isinstance(tools, Mapping):
            self.tools = dict(tools)
        else:
            self.tools = {t.name: t for t in tools}

    def __repr__(self) -> str:
        return f"ToolWorker({self.name!r}, tools={sorted(self.tools)})"

    def add(self, tool: Tool) -> None:
        """Give this worker another tool."""
        self.tools[tool.name] = tool

    @property
    def actions(self) -> set[str]:
        """The names of its tools."""
        return set(self.tools)

    def input_model(self, action: str) -> InputModel | None:
        """The tool's argument model."""
        return self.tools[action].input_model if action in self.tools else None

    async def perform(self, call: StepCall) -> WorkResult:
        """Call the tool named by the action with the resolved parameters."""
        found = self.tools.get(call.action)
        if found is None:
            raise WorkerError(f"worker {self.name!r} has no tool {call.action!r} (it has: {', '.join(sorted(self.tools))})")
        if (found.sensitive and call.context) or call.step.capabilities is not None or call.step.untrusted_from:  # else no check
            await admit_direct(call, found, self.tools)
        output = await found.invoke(call.parameters, call)
        used = self._used.get(found.name)
        if used is None:
            used = self._used[found.name] = [found.name]
        return WorkResult(output=output, usage=_NO_USAGE, tools=used, sources=_tool_sources(call, found))


class RoleWorker:
    """A role-specialised LLM worker: researcher, coder, critic, writer, ...

    It receives the step's instruction, resolved parameters and dependency
    outputs, may call its tools (arguments checked before they run; a tool
    error goes back to the model as the tool's result), and answers with
    text, or JSON when the reply parses as JSON. Its actions are its `tasks`
    (free-form, worked by the model) plus its tools' names (called directly
    with the step's parameters, no model involved).

    Tool calling is native when the model supports it, else JSON mode
    (`tool_calling="auto"` reads the model's ``supports_tools``, default
    True; "native" and "json" force one): see `planexec.workers.tool_calls`. With an
    `answer_schema` (a pydantic model or a JSON Schema) the final answer must
    be JSON matching it. A reply that cannot be used (not JSON in JSON mode,
    an answer off the schema) is fed back to the model with the problem; it
    costs a turn. After `max_turns` turns without an answer the step fails
    with `WorkerError`, whose `usage` is every turn's usage.

    Every tool call inside the loop passes the step's `workers.gate.Gate`:
    the plan's grants, quarantine after untrusted text, sensitive
    arguments, then per-call approval of side-effecting calls. A refused
    call does not run; the model is told why.

    A tool result longer than `max_result_chars` (default `MAX_RESULT_CHARS`)
    is cut: the model reads its first `max_result_chars` characters and a
    note of how many of how many it sees, and the call's record
    (`CallRecord.result_chars`, `result_kept`) says it was cut.
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
        answer_schema: type[BaseModel] | dict[str, Any] | None = None,
        tool_calling: Literal["auto", "native", "json"] = "auto",
        max_tokens: int | None = 1024,
        max_result_chars: int = MAX_RESULT_CHARS,
    ) -> None:
        if not isinstance(model, Model):
            raise RegistryError(f"role worker {name!r}: model must implement planexec.models.Model", name=name)
        if tool_calling not in ("auto", "native", "json"):
            raise RegistryError(f"role worker {name!r}: tool_calling must be auto, native or json, not {tool_calling!r}", name=name)
        self.name = name
        self.model = model
        self.description = description
        self.system_prompt = system_prompt
        self.tools = {t.name: t for t in tools}
        self.tasks = set(tasks)
        self.max_turns = max_turns
        self.max_concurrency = max_concurrency
        self.temperature = temperature
        self.max_tokens = max_tokens  # per turn: a small model under a grammar can otherwise write until its context is full
        self.tool_calling = tool_calling
        self.max_result_chars = max_result_chars  # of one tool result in the conversation: a 30 MB result would fill any context
        self.answer_schema = _schema_of(name, answer_schema)
        self._answer_validator = (
            jsonschema.validators.validator_for(self.answer_schema)(self.answer_schema) if self.answer_schema is not None else None
        )

    # a worker that reads and acts in one loop (the single agent): a refused escalation ends its step, `incomplete`,
    # since going on would answer as if the work were done; a role's worker is told and goes on (its plan split the work)
    stops_on_escalation: bool = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, model={self.model.name!r})"

    @property
    def actions(self) -> set[str]:
        """Its free-form tasks and its tools' names."""
        return self.tasks | set(self.tools)

    def uses_model(self, action: str) -> bool:
        """True when its model works `action` (a task); False for one of its tools, called directly."""
        return action in self.tasks or action not in self.tools

    def with_model(self, model: Model) -> RoleWorker:
        """This role on another model (a step's cascade, a model router's choice): the same prompt, tools and bounds."""
        if model is self.model:
            return self
        if not isinstance(model, Model):
            raise RegistryError(f"role worker {self.name!r}: model must implement planexec.models.Model", name=self.name)
        twin = copy.copy(self)
        twin.model = model
        return twin

    @property
    def json_mode(self) -> bool:
        """True when tool calls go through JSON replies (the model has no native tool calling)."""
        if self.tool_calling == "auto":
            return not profile_of(self.model).tool_calling
        return self.tool_calling == "json"

    def input_model(self, action: str) -> InputModel | None:
        """Free-form parameters for tasks; a tool's model when the action is a tool."""
        return self.tools[action].input_model if action in self.tools and action not in self.tasks else None

    def protocol(self, answer_schema: dict[str, Any] | None = None) -> NativeToolCalls | JsonToolCalls:
        """How this worker's turns ask for tool calls (JSON mode only matters when it has tools)."""
        definitions = [t.definition() for t in self.tools.values()]
        schema = answer_schema if answer_schema is not None else self.answer_schema
        if definitions and self.json_mode:
            return JsonToolCalls(definitions, schema)
        return NativeToolCalls(definitions, schema)

    def render_task(self, call: StepCall) -> str:
        """The user message: the goal, the instruction and its parameters, with where referenced values came from.

        The worker sees only what its step references (resolved into the
        instruction and parameters), never every upstream output: ordering
        (`depends_on`) is not data flow.
        """
        parts = [f"Overall goal: {call.goal}"] if call.goal else []
        parts.append(f"Your task ({call.action}): {call.instruction or call.step.instruction or call.action}")
        if call.parameters:
            parts.append("Parameters:\n" + json.dumps(call.parameters, indent=2, ensure_ascii=False, default=str))
        untrusted = [sid for sid, out in call.context.items() if sid in call.step.references and out.untrusted]
        if untrusted:
            parts.append(prompt_file("toolcalls", "untrusted.md", steps=", ".join(untrusted)))
        for step_id, err in call.failed_inputs.items():
            parts.append(f"Step {step_id} failed: {err}")
        return "\n\n".join(parts)

    def finish(self, answer: Any, tools_ran: list[str]) -> Any:
        """The step's output from the model's accepted answer (`tools_ran`: tools that ran, in order)."""
        return answer

    async def perform(self, call: StepCall) -> WorkResult:
        """A tool action: call the tool. A task: run the tool-calling loop until the model answers.

        Every call the model asks for passes the step's `Gate` first (grants,
        quarantine, sensitive arguments, approval); a refused call does not
        run, the model is told why, and it is recorded as refused, never as used.
        """
        if call.action in self.tools and call.action not in self.tasks:
            found = self.tools[call.action]
            await admit_direct(call, found, self.tools)
            output = await found.invoke(call.parameters, call)
            return WorkResult(output=output, usage=_NO_USAGE, tools=[found.name], sources=_tool_sources(call, found))
        gate = Gate(call, self.tools)
        schema = call.step.output_schema
        protocol = self.protocol(schema)
        validator = self._answer_validator if schema is None else jsonschema.validators.validator_for(schema)(schema)
        messages = [
            Message(role="system", content=protocol.system_prompt(self.system_prompt)),
            Message(role="user", content=redact(self.render_task(call))),  # no key enters a prompt
        ]
        usage = Usage()
        ran: list[str] = []
        problem: str | None = None
        for turn in range(self.max_turns):
            try:
                # every turn offers the tools: a model that still calls them on the last one had work left, and says so
                request = protocol.request(messages, self.temperature)
                if self.max_tokens is not None:
                    request = request.model_copy(update={"max_tokens": self.max_tokens})
                response = await self.model.complete(request)
            except ModelOutputError as exc:  # the provider found the reply off-schema: fed back like ours
                usage = usage + exc.usage if isinstance(exc.usage, Usage) else usage
                problem = str(exc)
                messages += self._retry(exc.text, problem)
                continue
            except PlanexecError as exc:  # a model error: keep what the earlier turns cost
                raise WorkerError(f"worker {self.name!r}: {type(exc).__name__}: {exc}", usage=usage) from exc
            usage = usage + response.usage
            reply = protocol.read(response, turn)
            if not reply.calls:
                problem = reply.problem or _answer_problem(validator, reply.answer)
                if problem is None:
                    unfinished = _unfinished(response.finish_reason, reply.answer, self.max_tokens)
                    if unfinished is not None:  # a cut-off or looping answer is not the step's work done
                        raise IncompleteError(f"worker {self.name!r}: {unfinished}; {len(ran)} tool call(s) ran before", usage=usage)
                    output = self.finish(reply.answer, ran)
                    return WorkResult(output=output, usage=usage, tools=ran, sources=gate.sources, refused=gate.refused)
                messages += self._retry(response.text, problem)
                continue
            if turn == self.max_turns - 1:  # out of turns with work left: refused, recorded, and the step is incomplete
                for tc in reply.calls:
                    gate.refuse(tc.name, tc.arguments, "turn_limit", f"the worker used all {self.max_turns} turns")
                wanted = ", ".join(f"{tc.name}({', '.join(sorted(tc.arguments))})" for tc in reply.calls)
                raise IncompleteError(
                    f"worker {self.name!r} ran out of turns ({self.max_turns}) with work left: it still asked for {wanted}; "
                    f"{len(ran)} tool call(s) ran before",
                    usage=usage,
                )
            problem = None
            messages.append(protocol.assistant_message(response, reply))
            for tc in reply.calls:
                try:
                    content, did_run = await self._run_tool(tc, call, gate)
                except CallRefusedError as exc:  # the step stops here: what its turns used still counts
                    exc.usage = usage
                    raise
                if did_run:
                    ran.append(tc.name)
                messages.append(protocol.result_message(tc, content))
        raise WorkerError(f"worker {self.name!r} gave no usable answer in {self.max_turns} turns; last problem: {problem}", usage=usage)

    @staticmethod
    def _retry(text: str, problem: str) -> list[Message]:
        """The unusable reply and the message that says why, so the model can try again."""
        retry = prompt_file("toolcalls", "retry.md", problem=problem)
        return [Message(role="assistant", content=text), Message(role="user", content=retry)]

    def _answer_problem(self, answer: Any) -> str | None:
        return _answer_problem(self._answer_validator, answer)

    async def _run_tool(self, tc: ToolCall, call: StepCall, gate: Gate) -> tuple[str, bool]:
        """The result the model reads, and whether the tool actually ran."""
        decision = await gate.admit(tc.name, tc.arguments)
        if not decision.allowed:
            if decision.breaks_plan:  # the plan's own call cannot run: the step cannot do what it says
                raise CallRefusedError(
                    f"step {call.step_id!r}: the plan's call to {tc.name!r} was refused ({decision.rule}: {decision.reason})",
                    tool=tc.name,
                    rule=decision.rule or "approval_required",
                    chain=decision.chain,
                )
            if self.stops_on_escalation and decision.rule in CONTRACT_STOPS:  # its work and the attacker's look alike here
                raise CallRefusedError(
                    f"step {call.step_id!r}: worker {self.name!r} read untrusted text and then asked for {tc.name!r}, which "
                    f"was refused ({decision.rule}: {decision.reason}); its work stops here, unfinished",
                    tool=tc.name,
                    rule=decision.rule or "quarantine",
                    chain=decision.chain,
                )
            return gate.refuse_text(tc.name, decision), False
        found = self.tools[tc.name]
        try:
            result = await found.invoke(tc.arguments, call)
        except ToolInputError as exc:  # refused by the tool's own schema before it ran: recorded like any refusal
            refused = gate.refuse(tc.name, tc.arguments, "bad_arguments", redact(str(exc)))
            return gate.refuse_text(tc.name, refused), False
        except ToolError as exc:
            gate.ran(tc.name, tc.arguments, decision, error=redact(str(exc)))
            return redact(f"error: {exc}"), True
        except Exception as exc:  # the model sees the failure and may try again
            gate.ran(tc.name, tc.arguments, decision, error=redact(f"{type(exc).__name__}: {exc}"))
            return redact(f"error: {type(exc).__name__}: {exc}"), True
        text = result_text(redact(result))  # a key a tool returns never reaches the model
        if len(text) <= self.max_result_chars:
            gate.ran(tc.name, tc.arguments, decision)
            return text, True
        gate.ran(tc.name, tc.arguments, decision, cut=(len(text), self.max_result_chars))
        return cut_result(text, self.max_result_chars), True


def cut_result(text: str, limit: int) -> str:
    """The first `limit` characters of a tool result too long for the conversation, and a note the model reads of what was cut."""
    note = prompt_file("toolcalls", "cut.md", kept=f"{limit:,}", total=f"{len(text):,}", left=f"{len(text) - limit:,}")
    return f"{text[:limit]}\n\n{note}"


def _unfinished(finish_reason: str | None, answer: Any, max_tokens: int | None) -> str | None:
    """Why an accepted answer is not finished work: cut off by the token limit, or text that repeats itself; else None."""
    if finish_reason == "length":
        limit = f" of {max_tokens}" if max_tokens is not None else ""
        return f"its answer was cut off by its token limit{limit} (finish reason 'length'); give the worker a higher max_tokens"
    if isinstance(answer, str):
        loop = repetition(answer)
        if loop is not None:
            return f"its answer degenerated into repetition ({loop})"
    return None


def repetition(text: str) -> str | None:
    """How `text` repeats itself when it is degenerate output (a small model in a loop), else None.

    Two signs, each far from what prose does: one sentence or line of at
    least 12 characters written 4 times or more and making up over half the
    text; or, for 1,000 characters or more, text that zlib compresses to
    under a twentieth (prose keeps a third or more).
    """
    pieces = [p.strip() for p in re.split(r"(?<=[.!?])\s+|\n+", text) if len(p.strip()) >= 12]
    if pieces:
        piece, times = Counter(pieces).most_common(1)[0]
        if times >= 4 and times * len(piece) > len(text) / 2:
            return f"{piece[:60]!r} {times} times"
    if len(text) >= 1000:
        ratio = len(zlib.compress(text.encode())) / len(text.encode())
        if ratio < 0.05:
            return f"{len(text):,} characters that compress to {ratio:.0%}"
    return None


def _answer_problem(validator: Any, answer: Any) -> str | None:
    if validator is None:
        return None
    error = jsonschema.exceptions.best_match(validator.iter_errors(answer))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"the answer does not match its schema{f' at {where}' if where else ''}: {error.message}"


def _tool_sources(call: StepCall, found: Tool) -> list[Source]:
    return [Source(kind="tool", step_id=call.step_id, tool=found.name, untrusted=found.untrusted_output)]


def _schema_of(name: str, schema: type[BaseModel] | dict[str, Any] | None) -> dict[str, Any] | None:
    if schema is None:
        return None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        schema = schema.model_json_schema()
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise RegistryError(f"role worker {name!r}: answer_schema is not a valid JSON Schema: {exc.message}", name=name) from None
    return schema


# What a critic's model answers; `Verdict` adds what the worker knows (judged, tools_used).
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "reasons": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["approved", "reasons"],
    "additionalProperties": False,
}

UNJUDGED = "not judged: the critic approved without calling any tool, and an approval counts only after a check"


class Verdict(BaseModel):
    """A critic's verdict, the output of its review steps (as JSON).

    `approved` is True only for a judged approval. `judged` is False when the
    critic's model approved without any tool having run in that step: such an
    approval is recorded as ``approved: false, judged: false`` and its first
    reason says so. A rejection is always judged. `tools_used` are the tools
    that ran (an unknown tool or refused arguments is not a check).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    approved: bool
    reasons: list[str] = Field(default_factory=list)
    judged: bool = True
    tools_used: list[str] = Field(default_factory=list)

    @classmethod
    def judge(cls, approved: bool, reasons: list[str], tools_ran: list[str]) -> Verdict:
        """The verdict the critic rule gives a model's answer, knowing which tools ran."""
        used = list(dict.fromkeys(tools_ran))
        if approved and not used:
            return cls(approved=False, reasons=[UNJUDGED, *reasons], judged=False, tools_used=[])
        return cls(approved=approved, reasons=reasons, judged=True, tools_used=used)


class CriticWorker(RoleWorker):
    """A role worker that reviews work and answers with a `Verdict`.

    The critic rule: an approval given without any tool call in that step is
    not an approval. The model's final answer must be ``{"approved": bool,
    "reasons": [str]}`` (structured output); when it approves and none of its
    tools ran during the step (a tool it does not have, or arguments the tool
    refused, do not count), the step's output is an unjudged verdict:
    ``{"approved": false, "judged": false, "reasons": ["not judged: ...",
    ...], "tools_used": []}``. A rejection is a valid verdict either way. So
    a critic needs at least one tool; one without tools is refused.
    """

    def __init__(
        self,
        name: str = "critic",
        *,
        model: Model,
        description: str,
        system_prompt: str,
        tools: Iterable[Tool],
        tasks: Iterable[str] = ("review", "respond"),
        **options: Any,
    ) -> None:
        tools = list(tools)
        if not tools:
            raise RegistryError(f"critic {name!r} has no tools, so it could never approve (approvals need a tool check)", name=name)
        super().__init__(
            name,
            model=model,
            description=description,
            system_prompt=system_prompt,
            tools=tools,
            tasks=tasks,
            answer_schema=VERDICT_SCHEMA,
            **options,
        )

    def finish(self, answer: Any, tools_ran: list[str]) -> Any:
        """The verdict, judged by the critic rule, as JSON."""
        return Verdict.judge(answer["approved"], list(answer["reasons"]), tools_ran).model_dump(mode="json")
