"""The single agent: a ReAct loop over the team's tools, run as a one-step plan through the engine."""

from __future__ import annotations

import asyncio
import json

import pytest

from planexec import EngineConfig, Registry, RunStatus, Tool, Usage
from planexec.models import EMBEDDED, ModelProfile, ModelResponse
from planexec.plan.validation import validate_plan
from planexec.team.agent import AGENT_WORKER, agent_worker, run_single, single_plan
from planexec.testing import ScriptedModel, tool_call
from planexec.workers.tool_calls import prompt_file

POPULATION = {"oslo": 709_000, "bergen": 291_000}


def _registry() -> Registry:
    registry = Registry()

    @registry.tool(read_only=True)
    def population(city: str) -> int:
        """The population of a city."""
        return POPULATION[city.lower()]

    @registry.tool(read_only=True)
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return registry


def _single(goal, model, registry=None, **options):
    return asyncio.run(run_single(goal, model=model, registry=registry or _registry(), **options))


def _reply(usage_in: int, usage_out: int, *, text: str = "", calls=()) -> ModelResponse:
    """A scripted reply that brings its own usage, so the totals can be checked to the token."""
    return ModelResponse(
        text=text, tool_calls=list(calls), usage=Usage(input_tokens=usage_in, output_tokens=usage_out, model_calls=1, cost=0.001)
    )


def test_the_agent_calls_tools_over_several_turns_sees_their_results_and_answers():
    model = ScriptedModel(
        [
            _reply(100, 10, calls=[tool_call("population", city="Oslo"), tool_call("population", city="Bergen")]),
            _reply(150, 12, calls=[tool_call("add", a=709_000, b=291_000)]),
            _reply(180, 8, text="Oslo and Bergen have 1000000 people together."),
        ]
    )
    registry = _registry()
    result = _single("How many people live in Oslo and Bergen together?", model, registry)

    assert result.status is RunStatus.SUCCEEDED
    assert result.answer == "Oslo and Bergen have 1000000 people together."
    assert list(result.steps) == ["agent"] and result.steps["agent"].worker == AGENT_WORKER
    # both lookups of the first turn came back before the second turn, the sum before the third
    second = model.requests[1].messages
    assert [(m.role, m.content) for m in second[-2:]] == [("tool", "709000"), ("tool", "291000")]
    assert model.requests[2].messages[-1].content == "1000000"
    # the agent is offered every tool, and its first message is the goal alone
    assert {t.name for t in model.requests[0].tools} == {"population", "add"}
    first = model.requests[0].messages
    assert first[0].content == prompt_file("agent", "system.md")
    assert first[1].content == "How many people live in Oslo and Bergen together?"
    # the caller's registry is left as it was
    assert AGENT_WORKER not in registry.workers


def test_the_agents_usage_is_exact_per_call_and_overhead_counts_in_the_run():
    replies = [_reply(100, 10, calls=[tool_call("add", a=1, b=2)]), _reply(130, 5, text="3")]
    router = Usage(input_tokens=40, output_tokens=9, model_calls=1, cost=0.0002)
    result = _single("one plus two", ScriptedModel(replies), overhead={"router": router})

    agent = Usage(input_tokens=230, output_tokens=15, model_calls=2, cost=0.002)
    roles = result.usage_by_role()
    assert roles["agent"] == agent and result.steps["agent"].usage == agent
    assert roles["router"] == router
    assert result.usage.model_calls == 3 and result.usage.input_tokens == 270 and result.usage.output_tokens == 24
    assert result.usage.cost == pytest.approx(0.0022)


def test_a_tool_error_goes_back_to_the_model_which_can_recover():
    model = ScriptedModel(
        [
            tool_call("population", city="Atlantis"),
            tool_call("population", city="Oslo"),
            "Oslo has 709000 people; Atlantis is not a city I could find.",
        ]
    )
    result = _single("Population of Atlantis and Oslo?", model)
    assert result.status is RunStatus.SUCCEEDED
    error = model.requests[1].messages[-1]
    assert error.role == "tool" and error.content.startswith("error: KeyError") and "atlantis" in error.content
    assert model.requests[2].messages[-1].content == "709000"
    assert "Atlantis is not a city" in result.answer


def test_an_agent_that_never_answers_stops_at_max_turns_with_a_worker_failure():
    model = ScriptedModel([tool_call("add", a=1, b=i) for i in range(3)])
    result = _single("keep adding", model, max_turns=3)

    assert result.status is RunStatus.ABORTED and result.answer is None
    error = result.steps["agent"].error
    assert error.rule == "incomplete" and error.type == "IncompleteError"  # out of turns with work left: never a success
    assert "ran out of turns (3) with work left: it still asked for add(a, b); 2 tool call(s) ran before" in error.message
    assert len(model.requests) == 3 and result.usage_by_role()["agent"].model_calls == 3  # every turn is counted
    assert [t.name for t in model.requests[-1].tools] == ["population", "add"]  # the last turn offered the tools too
    assert [(c.tool, c.rule) for c in result.steps["agent"].calls][-1] == ("add", "turn_limit")  # refused, recorded


def test_the_agent_works_in_json_mode_on_a_model_without_native_tool_calls():
    model = ScriptedModel(
        [
            '{"tool": "population", "arguments": {"city": "Bergen"}}',
            '{"answer": "Bergen has 291000 people."}',
        ],
        name="test:no-tools",
        profile=ModelProfile(tool_calling=False),  # like the embedded local model
    )
    result = _single("How many people live in Bergen?", model)

    assert result.answer == "Bergen has 291000 people."
    first = model.requests[0]
    assert first.tools == [] and first.output_schema is not None
    consts = {b["properties"]["tool"]["const"] for b in first.output_schema["anyOf"] if "tool" in b["properties"]}
    assert consts == {"population", "add"}
    assert first.messages[0].content.startswith(prompt_file("agent", "system.md"))
    assert model.requests[1].messages[-1].content == "Result of tool population:\n291000"


def _guarded_registry(written: list[str]) -> Registry:
    registry = Registry()

    def write_note(text: str) -> str:
        """Write a note."""
        written.append(text)
        return "written"

    registry.add_tool(Tool(write_note, requires_approval=True))
    return registry


def test_a_tool_that_needs_approval_is_refused_unless_the_run_was_approved():
    written: list[str] = []
    refused = ScriptedModel([tool_call("write_note", text="hi"), "I could not write the note."])
    result = _single("write hi", refused, _guarded_registry(written))  # no approver configured
    assert result.status is not RunStatus.SUCCEEDED and written == [] and len(refused.requests) == 1
    assert result.steps["agent"].error.rule == "approval_required" and "no approver is configured" in result.steps["agent"].error.message
    (call,) = result.steps["agent"].calls
    assert (call.tool, call.allowed, call.rule, call.ran) == ("write_note", False, "approval_required", False)

    # the call itself is approved, with its arguments shown
    asked = []

    def approve(request):
        asked.append((request.tool, request.arguments, request.kind))
        return True

    approved = ScriptedModel([tool_call("write_note", text="hi"), "Done."])
    result = _single("write hi", approved, _guarded_registry(written), engine=EngineConfig(call_approver=approve))
    assert result.answer == "Done." and written == ["hi"]
    assert asked == [("write_note", {"text": "hi"}, "call")]
    assert result.steps["agent"].calls[0].ran and result.steps["agent"].calls[0].decided_by == "approve"
    denied = ScriptedModel([])
    result = _single("write hi", denied, _guarded_registry(written), requires_approval=True)  # no approver: refused
    assert result.steps["agent"].error.rule == "approval_required" and denied.requests == []


def test_single_plan_is_one_valid_step_that_hands_the_goal_to_the_agent():
    plan = single_plan("Summarise the notes")
    assert [(s.step_id, s.worker, s.action, s.instruction) for s in plan.steps] == [("agent", "agent", "respond", "Summarise the notes")]
    assert plan.goal == "Summarise the notes"
    registry = _registry()
    registry.add_worker(agent_worker(ScriptedModel([]), registry.tools.values()))
    assert validate_plan(plan, registry) == []
    assert json.loads(plan.to_json())["steps"][0]["id"] == "agent"


def test_agent_worker_takes_a_name_and_bounds_its_turns():
    worker = agent_worker(ScriptedModel([]), _registry().tools.values(), max_turns=4, max_tokens=256, name="solo")
    assert worker.name == "solo" and worker.max_turns == 4 and worker.max_tokens == 256
    assert worker.actions == {"respond", "population", "add"}
    assert "population, add" in worker.description


def test_tools_taking_any_value_can_be_offered_to_a_grammar_decoded_local_model():
    grammar = pytest.importorskip("llama_cpp.llama_grammar", reason="needs llama-cpp-python")
    model = ScriptedModel(['{"tool": "echo", "arguments": {"value": [1, {"a": null}]}}', '{"answer": "done"}'], profile=EMBEDDED)
    result = _single("echo a list", model, Registry.default())  # the built-ins: echo(value: Any), concat(parts: list[Any]), ...
    assert result.answer == "done" and model.requests[1].messages[-1].content == 'Result of tool echo:\n[1, {"a": null}]'
    schema = model.requests[0].output_schema
    assert "echo" in grammar.json_schema_to_gbnf(json.dumps(schema))  # llama.cpp rejected {"title": "Value"} and {"items": {}}
