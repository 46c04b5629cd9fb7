"""The router: one short structured call decides single agent or team, and never fails a run."""

from __future__ import annotations

import asyncio

import jsonschema
import pytest

from planexec import Usage
from planexec.errors import ModelOutputError, ModelServerError
from planexec.models import ModelResponse
from planexec.planning.router import ROUTE_SCHEMA, Route, route
from planexec.testing import FunctionModel, ScriptedModel, count_tokens
from planexec.workers.tool_calls import prompt_file


def _route(*answers) -> tuple[Route, ScriptedModel]:
    model = ScriptedModel(list(answers), name="test:router")
    return asyncio.run(route("Compare the two reports and write a summary", model)), model


def test_a_goal_the_model_would_not_decompose_goes_to_a_single_agent():
    decision, model = _route('{"decompose": false, "reason": "one lookup answers it"}')
    assert decision == Route(mode="single", reason="one lookup answers it", usage=decision.usage)
    assert decision.usage.model_calls == 1 and decision.usage.output_tokens == count_tokens(
        '{"decompose": false, "reason": "one lookup answers it"}'
    )

    request = model.requests[0]
    assert request.output_schema == ROUTE_SCHEMA and request.temperature == 0 and request.seed == 0
    assert request.max_tokens is not None and request.max_tokens <= 256
    assert request.messages[0].content == prompt_file("router", "system.md")
    assert request.messages[-1].content == "Goal: Compare the two reports and write a summary"


def test_a_goal_the_model_would_decompose_goes_to_the_team():
    decision, _ = _route('```json\n{"decompose": true, "reason": "two reports to read, then a summary"}\n```')
    assert decision.mode == "plan" and decision.reason == "two reports to read, then a summary"


def test_the_schema_asks_for_a_boolean_and_a_short_reason():
    validator = jsonschema.Draft202012Validator(ROUTE_SCHEMA)
    assert validator.is_valid({"decompose": True, "reason": "x"})
    assert not validator.is_valid({"decompose": "yes", "reason": "x"})
    assert not validator.is_valid({"decompose": True, "reason": "x" * 201})
    assert not validator.is_valid({"decompose": True})


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("sure, split it up", "no JSON object"),
        ('{"decompose": "maybe", "reason": "?"}', '"decompose"'),
        ('{"decompose": tru', "no JSON object"),
        ('{"decompose": true,, }', "not JSON"),
        ("", "an empty answer"),
    ],
)
def test_an_unreadable_answer_falls_back_to_the_team_and_says_why(answer, why):
    decision, _ = _route(answer)
    assert decision.mode == "plan"
    assert "could not be read" in decision.reason and why in decision.reason
    assert decision.usage.model_calls == 1  # the call still counts


def test_a_model_error_falls_back_to_the_team_and_a_refused_reply_keeps_its_usage():
    decision, _ = _route(ModelServerError("upstream is down", model="test:router"))
    assert decision.mode == "plan" and "ModelServerError: upstream is down" in decision.reason
    assert decision.usage == Usage()

    off_schema = ModelOutputError("not the schema", text="no idea", usage=Usage(input_tokens=50, output_tokens=2, model_calls=1))
    decision, _ = _route(off_schema)
    assert decision.mode == "plan" and decision.usage == Usage(input_tokens=50, output_tokens=2, model_calls=1)

    readable = ModelOutputError("extra key", text='{"decompose": false, "reason": "short", "x": 1}', usage=Usage(model_calls=1))
    decision, _ = _route(readable)
    assert decision.mode == "single" and decision.reason == "short"


def test_a_model_that_crashes_outright_does_not_crash_the_router():
    def broken(request):
        raise RuntimeError("socket closed")

    decision = asyncio.run(route("g", FunctionModel(broken)))
    assert decision.mode == "plan" and "RuntimeError: socket closed" in decision.reason


def test_a_long_reason_is_cut_and_a_missing_one_is_filled_in():
    decision, _ = _route('{"decompose": false, "reason": "' + "word " * 100 + '"}')
    assert decision.mode == "single" and len(decision.reason) <= 200
    decision, _ = _route(ModelResponse(text='{"decompose": true}', usage=Usage(model_calls=1, input_tokens=5)))
    assert decision.mode == "plan" and decision.reason


def test_a_route_has_a_stable_json_form():
    decision, _ = _route('{"decompose": false, "reason": "direct"}')
    assert Route.from_json(decision.to_json()) == decision
    assert decision.to_dict()["mode"] == "single"
