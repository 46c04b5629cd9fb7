"""The joiner: after a plan's steps end, finish with an answer or ask for a new plan.

Owns `ModelJoiner` (a model decides, with structured output, as
LLMCompiler's joiner does) and its `JOIN_SCHEMA`. What a joiner is told and
answers (`JoinContext`, `JoinDecision`, the `Joiner` protocol,
`FunctionJoiner`, `JoinerError`) belongs to the engine (`engine.join`) and
is re-exported here. Prompts are files under ``prompts/joiner/``.
Imports `engine.join`, `usage`, `errors`, `workers.tool_calls` and `models.base`.
"""

from __future__ import annotations

import json
from typing import Any

from planexec.engine.join import FunctionJoiner, JoinContext, JoinDecision, Joiner, JoinerError, read_decision
from planexec.errors import ModelOutputError, PlanexecError
from planexec.models.base import Message, Model, ModelRequest
from planexec.models.profile import profile_of
from planexec.usage import Usage
from planexec.workers.tool_calls import prompt_file

__all__ = ["JOIN_SCHEMA", "FunctionJoiner", "JoinContext", "JoinDecision", "Joiner", "JoinerError", "ModelJoiner"]

OUTPUT_CHARS = 800  # per step's output shown to a model joiner

JOIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"enum": ["finish", "replan"]},
        "answer": {"type": "string", "maxLength": 1000},  # llama.cpp's grammar builder crashes on 2000
        "reason": {"type": "string", "maxLength": 300},
    },
    "required": ["action"],
    "additionalProperties": False,
}


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= OUTPUT_CHARS else text[:OUTPUT_CHARS] + f"... ({len(text) - OUTPUT_CHARS} more characters)"


class ModelJoiner:
    """A model reads the goal and the results and answers ``{"action": "finish"|"replan", "answer", "reason"}``.

    It is asked only when it can change the outcome: when a step did not
    succeed, or the plan does not name its answer (`answer_step`). A run
    whose every step succeeded and whose plan names its answer ends with
    that step's output, and saves the call. With
    `always` it is asked after every version, to judge the results too.
    """

    def __init__(self, model: Model, *, max_tokens: int | None = 512, seed: int | None = 0, always: bool = False) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.seed = seed
        self.always = always

    def __repr__(self) -> str:
        return f"ModelJoiner({self.model.name!r})"

    def request(self, context: JoinContext) -> ModelRequest:
        """The joiner's one call: its prompt, the results, the decision schema."""
        results = [f"- {sid}: {_shown(v)}" for sid, v in context.outputs.items()]
        results += [f"- {sid}: did not finish ({why})" for sid, why in context.failures.items()]
        user = prompt_file("joiner", "decide.md", goal=context.goal, results="\n".join(results) or "(no results)")
        return ModelRequest(
            messages=[Message(role="system", content=prompt_file("joiner", "system.md")), Message(role="user", content=user)],
            output_schema=JOIN_SCHEMA,
            temperature=0.0,
            seed=self.seed,
            max_tokens=self.max_tokens,
        )

    async def join(self, context: JoinContext) -> JoinDecision:
        """Ask the model; an unreadable reply or a model error is a `JoinerError` (with the usage spent)."""
        try:
            response = await self.model.complete(self.request(context))
        except ModelOutputError as exc:
            raise JoinerError(f"joiner {self.model.name}: {exc}", usage=exc.usage if isinstance(exc.usage, Usage) else Usage()) from exc
        except PlanexecError as exc:
            raise JoinerError(f"joiner {self.model.name}: {type(exc).__name__}: {exc}") from exc
        try:
            data = json.loads(response.text)
        except json.JSONDecodeError:
            raise JoinerError(
                f"joiner {self.model.name} answered with text that is not JSON: {response.text[:200]!r}", usage=response.usage
            ) from None
        return read_decision(data, response.usage)


GRAMMAR_STRING_MAX = 1000
"""The longest string bound a grammar-decoding model is given: llama.cpp's grammar builder refuses
longer ones, and llama-cpp-python 0.3.36 then crashes the process (a maxLength of 2000 does)."""


def _longest_string_bound(schema: Any) -> int:
    if isinstance(schema, dict):
        own = schema.get("maxLength", 0) if schema.get("type") == "string" else 0
        return max([own, *(_longest_string_bound(v) for v in schema.values())])
    if isinstance(schema, list):
        return max([0, *(_longest_string_bound(v) for v in schema)])
    return 0


def joiner_note(model: Model) -> str | None:
    """Why a plan run on this model gets no model joiner (None: it gets one)."""
    bound = _longest_string_bound(JOIN_SCHEMA)
    if profile_of(model).grammar and bound > GRAMMAR_STRING_MAX:
        return (
            f"no model joiner on {model.name}: its schema bounds a string at {bound} characters, and a grammar "
            f"over {GRAMMAR_STRING_MAX} crashes llama.cpp; the answer is the plan's last step's output"
        )
    return None
