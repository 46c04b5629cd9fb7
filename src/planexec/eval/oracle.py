"""Scripted models for evaluation: an oracle that plays every role from a reference solution, and a latency model.

Owns `OracleModel` (a `FunctionModel` that answers each request from a
goal's reference solution, so evaluation numbers are exact and
reproducible), `TierModel` (a model of one size for cascades: it works a
role step that names its call, succeeding with a stated probability per
difficulty, drawn deterministically from a seed) and `LatencyModel` (any model, charged a stated latency per
call: ``overhead + input_tokens * per_input_token + output_tokens *
per_output_token`` seconds). The oracle tells roles apart by the request:

* planner (its ``output_schema`` has a ``steps`` property): the solution as
  a plan draft, worker ``tool``, one step per call, references as
  ``${id}``; ids ``s1..sn`` when the schema fixes step ids (positional),
  else the solution's own ids;
* planner asking for the compact form (`planning.compact_form.is_compact_request`):
  the same steps one line per call (`plan.compact`), references as ``$N``,
  no notes, the last call marked ``answer``;
* plan library (properties ``template`` and ``values``, `library.reuse`):
  the first saved plan shown whose steps are the solution's calls, with the
  values that make them so, else ``{"template": "none"}``;
* joiner (a property ``action`` whose enum holds ``finish``):
  ``{"action": "finish", "answer": <the last step's output as text>}``;
* ReAct agent (a request offering ``tools``, or a JSON-mode tool union):
  the solution's calls one per turn, in order, with the values it reads
  from the tool results so far, then the last result as its answer;
* anything else (a synthesizer, a writer): the last result it can read.

Token counts are `testing.count_tokens`'s, as `FunctionModel` counts them.
Imports `testing`, `models.base`, `plan` (reference rules, the compact form),
`planning.compact_form` and `eval_suite`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from planexec.eval.suite import SolutionCall, answer_text
from planexec.models.base import (
    Message,
    Model,
    ModelDelta,
    ModelRequest,
    ModelResponse,
    ToolCall,
    stream_response,
)
from planexec.models.pricing import Price
from planexec.models.profile import CAPABLE, ModelProfile
from planexec.plan.compact import print_compact
from planexec.plan.model import Plan
from planexec.plan.references import resolve_references
from planexec.planning.compact_form import is_compact_request
from planexec.testing import FunctionModel

__all__ = ["LatencyModel", "OracleModel", "TierModel"]

_REF = re.compile(r"(?<!\$)\$\{([A-Za-z0-9_][A-Za-z0-9_\-]*)((?:\.[^.}\s]+)*)\}")
_RESULT_LINE = re.compile(r"^- ([A-Za-z0-9_][A-Za-z0-9_\-]*): (.*)$")
_TOOL_RESULT = "Result of tool "
_PLACEHOLDER = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_\-]*)\}\}")


def _find_property(schema: Any, name: str) -> Any:
    """The schema of the first property `name` anywhere in `schema` (properties, anyOf, $defs ...), or None."""
    if isinstance(schema, dict):
        props = schema.get("properties")
        if isinstance(props, dict) and name in props:
            return props[name]
        for value in schema.values():
            found = _find_property(value, name)
            if found is not None:
                return found
    elif isinstance(schema, list):
        for value in schema:
            found = _find_property(value, name)
            if found is not None:
                return found
    return None


def _is_json_tool_union(schema: Any) -> bool:
    """A JSON-mode turn (`toolcalls.json_mode_schema`) that offers at least one tool."""
    branches = schema.get("anyOf") if isinstance(schema, dict) else None
    return isinstance(branches, list) and any("tool" in (b.get("properties") or {}) for b in branches if isinstance(b, dict))


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


def _bind(pattern: Any, value: Any, values: dict[str, Any]) -> bool:
    """Whether `value` fits `pattern` (a template's text with placeholders), binding them in `values`; literal texts are not compared."""
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(_bind(p, value.get(k), values) for k, p in pattern.items())
    if isinstance(pattern, list):
        return isinstance(value, list) and len(pattern) == len(value) and all(_bind(p, v, values) for p, v in zip(pattern, value))
    if not isinstance(pattern, str) or not _PLACEHOLDER.search(pattern):
        return True
    whole = _PLACEHOLDER.fullmatch(pattern)
    if whole is not None:
        found = {whole[1]: value}
    else:
        parts = re.split(r"(\{\{[A-Za-z_][A-Za-z0-9_\-]*\}\})", pattern)  # odd indexes: the placeholders
        regex = "".join(f"(?P<g{i}>.+?)" if i % 2 else re.escape(p) for i, p in enumerate(parts))
        m = re.fullmatch(regex, value, re.DOTALL) if isinstance(value, str) else None
        if m is None:
            return False
        pairs = [(parts[i][2:-2], m[f"g{i}"]) for i in range(1, len(parts), 2)]
        found = dict(pairs)
        if len(set(pairs)) != len(found):  # one placeholder twice, with two values
            return False
    if any(values.get(k, v) != v for k, v in found.items()):
        return False
    values.update(found)
    return True


class OracleModel(FunctionModel):
    """A model that plays every role from a goal's reference `solution` (see the module docstring).

    `requests` records every request, as `FunctionModel` does.
    """

    def __init__(self, solution: Sequence[SolutionCall], *, name: str = "test:oracle", profile: ModelProfile = CAPABLE) -> None:
        if not solution:
            raise ValueError("an oracle needs at least one solution call")
        self.solution = list(solution)
        super().__init__(self.answer, name=name, profile=profile)

    # --- the roles -----------------------------------------------------------------------------

    def answer(self, request: ModelRequest) -> Any:
        """The reply to one request: a plan draft, a join decision, a tool call or the last result."""
        schema = request.output_schema or {}
        properties = schema.get("properties") or {}
        if "steps" in properties:
            draft = self.plan_draft(positional="step_1" in (schema.get("$defs") or {}), request=request)
            if "answer_step" in properties:  # the schema asks which step answers the goal: the last call
                draft["answer_step"] = draft["steps"][-1]["id"]
            return json.dumps(draft)
        if is_compact_request(request):
            return self.compact_plan(request)
        if {"template", "values"} <= set(schema.get("properties") or {}):
            return json.dumps(self.choose_template(request.messages))
        results = self._tool_results(request.messages)
        if request.tools or _is_json_tool_union(schema):
            if len(results) < len(self.solution):
                call = self.solution[len(results)]
                outputs = {c.call_id: v for c, v in zip(self.solution, results)}
                args = resolve_references(call.args, outputs)
                if request.tools:
                    return ToolCall(call_id=f"oracle_{len(results) + 1}", name=call.tool, arguments=args)
                return json.dumps({"tool": call.tool, "arguments": args})
            text = answer_text(results[-1]) if results else ""
            return json.dumps({"answer": text}) if request.output_schema else text
        action = (schema.get("properties") or {}).get("action") or _find_property(schema, "action")
        if isinstance(action, dict) and "finish" in (action.get("enum") or []):
            return json.dumps({"action": "finish", "answer": self._joined_answer(request.messages)})
        last = answer_text(results[-1]) if results else self._last_result_text(request.messages)
        if request.output_schema and _find_property(schema, "answer") is not None:  # a JSON-mode final turn
            return json.dumps({"answer": last})
        return last

    def planned(self, steps: list[dict[str, Any]], request: ModelRequest | None) -> list[dict[str, Any]]:
        """The steps this model writes as planner, given the solution's (`plan_draft`'s) and the request: the solution's.

        A scripted planner (`eval.planners.ScriptedPlanner`) writes its
        variant's mistake here instead.
        """
        return steps

    def plan_draft(self, *, positional: bool, request: ModelRequest | None = None) -> dict[str, Any]:
        """The solution as a plan draft: worker ``tool``, action the tool, references ``${id}`` (as `planned` has it)."""
        ids = {c.call_id: (f"s{k}" if positional else c.call_id) for k, c in enumerate(self.solution, 1)}

        def rename(value: Any) -> Any:
            if isinstance(value, str):
                return _REF.sub(lambda m: f"${{{ids.get(m[1], m[1])}{m[2]}}}", value)
            if isinstance(value, dict):
                return {k: rename(v) for k, v in value.items()}
            if isinstance(value, list):
                return [rename(v) for v in value]
            return value

        steps = [
            {
                "id": ids[c.call_id],
                "worker": "tool",
                "action": c.tool,
                "instruction": f"Call {c.tool}.",
                "parameters": rename(c.args),
                "depends_on": [ids[r] for r in c.references],
            }
            for c in self.solution
        ]
        return {"steps": self.planned(steps, request)}

    def compact_plan(self, request: ModelRequest | None = None) -> str:
        """The solution in the compact form: one line per call, ``$N`` references, no notes, the last call marked ``answer``.

        A dependency no reference implies is written ``after N``.
        """
        steps = []
        for s in self.plan_draft(positional=True, request=request)["steps"]:
            implied = {m[1] for m in _REF.finditer(json.dumps(s.get("parameters")))}
            after = [d for d in s.get("depends_on", []) if d not in implied]
            steps.append({k: v for k, v in s.items() if k not in ("instruction", "depends_on")} | ({"depends_on": after} if after else {}))
        return print_compact(Plan.from_data({"plan_id": "oracle", "goal": "", "steps": steps, "answer_step": steps[-1]["id"]}))

    def choose_template(self, messages: list[Message]) -> dict[str, Any]:
        """The plan library's choice: the first saved plan (a JSON line with ``template`` and ``steps``) that unifies with the solution."""
        for m in messages:
            for line in m.content.splitlines() if m.role == "user" else ():
                card = _decode(line) if line.startswith("{") else None
                if not isinstance(card, dict) or not isinstance(card.get("steps"), list):
                    continue
                values = self._unify(card["steps"])
                if values is not None and sorted(values) == sorted(card.get("parameters") or []):
                    return {"template": card.get("template"), "values": values}
        return {"template": "none", "values": {}}

    def _unify(self, steps: list[Any]) -> dict[str, Any] | None:
        """The values that turn a template's steps into the solution's calls (same tools, in order), or None."""
        if len(steps) != len(self.solution):
            return None
        values: dict[str, Any] = {}
        for step, call in zip(steps, self.solution):
            if not isinstance(step, dict) or step.get("action") != call.tool or not _bind(step.get("parameters"), call.args, values):
                return None
        return values

    # --- reading the conversation ---------------------------------------------------------------

    @staticmethod
    def _tool_results(messages: list[Message]) -> list[Any]:
        """The tool results of a ReAct conversation so far, decoded: native ``tool`` messages or JSON mode's user messages."""
        out: list[Any] = []
        for m in messages:
            if m.role == "tool":
                out.append(_decode(m.content))
            elif m.role == "user" and m.content.startswith(_TOOL_RESULT):
                out.append(_decode(m.content.split("\n", 1)[1] if "\n" in m.content else ""))
        return out

    def _joined_answer(self, messages: list[Message]) -> str:
        """The last step's output in a joiner's ``- <id>: <output>`` lines (the solution's last call, by either id)."""
        lines: dict[str, str] = {}
        for m in messages:
            if m.role == "user":
                for line in m.content.splitlines():
                    found = _RESULT_LINE.match(line)
                    if found:
                        lines[found[1]] = found[2]
        for sid in (self.solution[-1].call_id, f"s{len(self.solution)}"):
            if sid in lines:
                return answer_text(_decode(lines[sid]))
        return answer_text(_decode(list(lines.values())[-1])) if lines else ""

    @staticmethod
    def _last_result_text(messages: list[Message]) -> str:
        """The last result a synthesizer or writer can read: after the last ``Result of ...:`` in the messages."""
        for m in reversed(messages):
            if "Result of " in m.content:
                tail = m.content.rsplit("Result of ", 1)[1]
                return answer_text(_decode(tail.split("\n", 1)[1].strip() if "\n" in tail else ""))
        return ""


def _draw(*parts: object) -> float:
    """A number in [0, 1) that depends only on `parts`: the same draw on every run and in any order of calls."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _step_call(task: str) -> tuple[str, dict[str, Any]] | None:
    """The call a role step names in its parameters, ``{"tool": ..., "arguments": {...}}``, read from the task the worker
    rendered (``Parameters:`` then the JSON); None when it names none."""
    at = task.find("Parameters:\n")
    if at < 0:
        return None
    try:
        params, _ = json.JSONDecoder().raw_decode(task[at + len("Parameters:\n") :])
    except json.JSONDecodeError:
        return None
    if not isinstance(params, dict) or not isinstance(params.get("tool"), str):
        return None
    args = params.get("arguments")
    return params["tool"], args if isinstance(args, dict) else {}


class TierModel(FunctionModel):
    """A scripted model of one size, for cascades and model routers: it works a role step whose parameters name one call
    (``{"tool": "population", "arguments": {"city": "Avalon"}}``), calling that tool and answering with its result,
    when it succeeds.

    Whether it succeeds on a task is drawn once per (`seed`, its name, the
    task's text) with the probability `success` gives the task's difficulty
    (`difficulty(task)` reads it from the task's text; default ``easy``): the
    same task on the same model fails or succeeds on every run, in every
    order of calls, and a retry of it on this model gives the same outcome.
    When it fails it gives up (an empty answer, which a ``not_empty``
    criterion rejects), or, for a `wrong` share of its failures, answers a
    wrong value with confidence (a number off by one, a name reversed),
    which nothing but the goal's own checker can tell. It finds nothing
    hard: difficulty is only the probability it is given. With a `price`
    (US dollars per million tokens, ``{"input": ..., "output": ...}``) its
    usage carries its cost.
    """

    def __init__(
        self,
        *,
        name: str,
        success: Mapping[str, float],
        difficulty: Callable[[str], str] = lambda task: "easy",
        seed: int = 0,
        wrong: float = 0.0,
        price: Price | Mapping[str, float] | None = None,
        profile: ModelProfile = CAPABLE,
    ) -> None:
        if not all(0 <= p <= 1 for p in success.values()) or not 0 <= wrong <= 1:
            raise ValueError("success probabilities and the wrong share lie between 0 and 1")
        self.success = dict(success)
        self.difficulty = difficulty
        self.seed = seed
        self.wrong = wrong
        self.price = price if price is None or isinstance(price, Price) else Price.model_validate(price)
        super().__init__(
            self.answer, name=name, profile=profile if self.price is None else profile.model_copy(update={"price": self.price})
        )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The answer, its usage priced at `price` when it has one (a `ManagedModel` with a price table does the same)."""
        response = await super().complete(request)
        if self.price is None:
            return response
        return response.model_copy(update={"usage": response.usage.model_copy(update={"cost": self.price.of_usage(response.usage)})})

    def succeeds(self, task: str) -> bool:
        """Whether this model works `task` (the worker's rendered task) right."""
        return _draw(self.seed, self.name, task) < self.success.get(self.difficulty(task), 0.0)

    def answer(self, request: ModelRequest) -> Any:
        """Call the step's tool, then answer with its result (or give up, or answer wrong, when this task fails)."""
        task = next((m.content for m in request.messages if m.role == "user"), "")
        call = _step_call(task)
        ok = self.succeeds(task)
        wrong = not ok and _draw(self.seed, self.name, task, "wrong") < self.wrong
        if call is None or not (ok or wrong):
            return json.dumps({"answer": ""}) if _is_json_tool_union(request.output_schema) else ""
        results = OracleModel._tool_results(request.messages)
        if not results:
            tool, args = call
            if request.tools:
                return ToolCall(call_id="tier_1", name=tool, arguments=args)
            return json.dumps({"tool": tool, "arguments": args})
        text = answer_text(results[-1]) if ok else _wrong(results[-1])
        return json.dumps({"answer": text}) if request.output_schema else text


def _wrong(value: Any) -> str:
    """A confident wrong answer: a number off by one, any other text reversed."""
    text = answer_text(value)
    try:
        return answer_text(float(text) + 1)
    except ValueError:
        return text[::-1] if len(text) > 1 else text + "?"


class LatencyModel:
    """Any model, with a stated latency per call: ``overhead + input_tokens * per_input_token + output_tokens * per_output_token`` seconds.

    `complete` waits the whole latency; `stream` waits ``overhead +
    input_tokens * per_input_token`` before the first token (the prompt
    read), then `per_output_token` before each token (a whitespace-separated
    word, as `count_tokens` counts). Token counts are the inner response's.
    Anything else (capabilities such as ``constrained_decoding``) is the inner model's.
    """

    def __init__(self, inner: Model, *, overhead: float = 0.2, per_input_token: float = 0.0005, per_output_token: float = 0.02) -> None:
        if min(overhead, per_input_token, per_output_token) < 0:
            raise ValueError("latencies must be 0 or more")
        self.inner = inner
        self.name = inner.name
        self.overhead = overhead
        self.per_input_token = per_input_token
        self.per_output_token = per_output_token

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @staticmethod
    def describe_values(overhead: float, per_input_token: float, per_output_token: float) -> str:
        """A latency model in words, e.g. ``0.2 s + 0.0005 s x input tokens + 0.02 s x output tokens per call``."""
        return f"{overhead:g} s + {per_input_token:g} s x input tokens + {per_output_token:g} s x output tokens per call"

    def describe(self) -> str:
        """This model's latency in words (see `describe_values`)."""
        return self.describe_values(self.overhead, self.per_input_token, self.per_output_token)

    def latency(self, response: ModelResponse) -> float:
        """The seconds one call with this response's usage takes."""
        u = response.usage
        return self.overhead + u.input_tokens * self.per_input_token + u.output_tokens * self.per_output_token

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The inner model's response, after its latency."""
        response = await self.inner.complete(request)
        await asyncio.sleep(self.latency(response))
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelDelta | ModelResponse]:
        """The inner model's response streamed a token at a time, each after its share of the latency."""
        response: ModelResponse | None = None
        async for item in stream_response(self.inner, request):
            if isinstance(item, ModelResponse):
                response = item
        assert response is not None
        await asyncio.sleep(self.overhead + response.usage.input_tokens * self.per_input_token)
        pieces = re.findall(r"\s*\S+|\s+$", response.text)
        for piece in pieces:
            await asyncio.sleep(self.per_output_token)
            yield ModelDelta(text=piece)
        if not pieces:  # tool calls only: their tokens still take their time
            await asyncio.sleep(response.usage.output_tokens * self.per_output_token)
        yield response
