"""Per-goal routing: does a goal need a team following a plan, or one agent alone?

Owns `Route` (the decision: ``single`` or ``plan``, why, who decided, and
what the call cost), `Routing` (who decides in ``auto`` mode) and `route`, which asks a model (the planner's) with a short prompt,
``prompts/router/system.md``, in structured output (`ROUTE_SCHEMA`) with
temperature 0 and a seed. Routing never fails a run: a model error or an
answer that cannot be read routes to ``plan`` (the team, today's default)
with the reason saying why, and the usage of the call is kept either way.
Imports `models.base`, `records`, `toolcalls` (its prompt loader), `usage`
and `errors`; never the engine, planner or CLI.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from planexec.errors import ModelOutputError
from planexec.models.base import Message, Model, ModelRequest
from planexec.records import Record
from planexec.usage import Usage
from planexec.workers.tool_calls import prompt_file

__all__ = ["ROUTE_SCHEMA", "ROUTINGS", "Route", "Routing", "route", "route_request"]

# who decides in ``auto`` mode: "planner" (the default) plans every goal without a router call and gives a plan of one
# step to one agent; "router" asks the router first, one short call, and plans only what it says needs a team
Routing = Literal["planner", "router"]
ROUTINGS: tuple[Routing, ...] = ("planner", "router")

REASON_MAX = 200
ROUTE_MAX_TOKENS = 128  # a boolean and one sentence of at most REASON_MAX characters

ROUTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decompose": {"type": "boolean"},
        "reason": {"type": "string", "maxLength": REASON_MAX},
    },
    "required": ["decompose", "reason"],
    "additionalProperties": False,
}

_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Route(Record):
    """How a goal is run: ``single`` (one agent) or ``plan`` (a team following a plan), why, and the router's usage."""

    mode: Literal["single", "plan"]
    reason: str
    usage: Usage = field(default_factory=Usage)
    # who decided: the router's call; the planner (no call: a plan of one step is then worked by one agent); a saved plan
    by: Literal["router", "planner", "template"] = "router"


def route_request(goal: str) -> ModelRequest:
    """The router's one call: its prompt, the goal, `ROUTE_SCHEMA`, temperature 0, seed 0, a small token limit."""
    return ModelRequest(
        messages=[
            Message(role="system", content=prompt_file("router", "system.md")),
            Message(role="user", content=f"Goal: {goal}"),
        ],
        output_schema=ROUTE_SCHEMA,
        temperature=0.0,
        seed=0,
        max_tokens=ROUTE_MAX_TOKENS,
    )


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _decision(text: str) -> tuple[bool, str] | str:
    """``(decompose, reason)`` from the model's reply, or what is wrong with it."""
    match = _OBJECT.search(text)  # tolerate a code fence or a word around the object
    if match is None:
        return f"no JSON object in {_short(text)!r}" if text.strip() else "an empty answer"
    try:
        data = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        return f"not JSON ({exc.msg}): {_short(text)!r}"
    if not isinstance(data, dict) or not isinstance(data.get("decompose"), bool):
        return f'no true/false "decompose" in {_short(text)!r}'
    reason = data.get("reason")
    reason = " ".join(reason.split())[:REASON_MAX] if isinstance(reason, str) else ""
    return data["decompose"], reason


async def route(goal: str, model: Model) -> Route:
    """Ask `model` whether `goal` needs decomposing into several steps: ``plan`` if so, ``single`` if not.

    Never raises for what the model does: an error or an unreadable answer
    gives ``Route(mode="plan", reason=<why>)``, with the usage of the call
    (an off-schema reply the provider refused brings its own usage).
    """
    try:
        response = await model.complete(route_request(goal))
        text, usage = response.text, response.usage
    except ModelOutputError as exc:  # refused as off-schema; its text may still say what we need
        text, usage = exc.text, exc.usage if isinstance(exc.usage, Usage) else Usage(model_calls=1)
    except Exception as exc:  # routing must not end the command: the team is the safe default
        spent = getattr(exc, "usage", None)
        usage = spent if isinstance(spent, Usage) else Usage()
        return Route(
            mode="plan", reason=f"the router's model failed ({type(exc).__name__}: {_short(str(exc))}), so the team plans", usage=usage
        )
    decision = _decision(text)
    if isinstance(decision, str):
        return Route(mode="plan", reason=f"the router's answer could not be read ({decision}), so the team plans", usage=usage)
    decompose, reason = decision
    reason = reason or ("the goal needs several steps" if decompose else "one agent can do it directly")
    return Route(mode="plan" if decompose else "single", reason=reason, usage=usage)
