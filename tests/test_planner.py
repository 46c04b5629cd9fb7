"""The planner: restricted schema, repair loop, typed failure, and plans streamed into execution."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest

from planexec import Engine, Plan, RunStatus, StepState
from planexec.engine.events import PlanCompleted, PlanDrafted, PlanStepParsed, StepStarted
from planexec.errors import ModelOutputError, ModelServerError, PlanningError
from planexec.planning.draft_schema import draft_schema
from planexec.planning.planner import Planner, load_prompt, render_catalog
from planexec.planning.stream import PlanStream
from planexec.team.settings import PlanningOptions, ReviewOptions
from planexec.testing import ScriptedModel, sleep_tool


def step(sid, action, parameters, deps=(), worker="tool", **extra):
    return {
        "id": sid,
        "worker": worker,
        "action": action,
        "instruction": f"do {sid}",
        "parameters": parameters,
        "depends_on": list(deps),
        **extra,
    }


def draft(*steps):
    return json.dumps({"steps": list(steps)})


GOOD = draft(
    step("s1", "echo", {"value": "hello"}),
    step("s2", "echo", {"value": "world"}),
    step("s3", "concat", {"parts": ["${s1}", "${s2}"], "separator": " "}, ["s1", "s2"]),
)


def test_a_valid_first_draft_becomes_the_plan(registry):
    model = ScriptedModel([GOOD])
    planning = asyncio.run(Planner(model, registry).draft("greet the world"))
    assert planning.plan.step_ids == ["s1", "s2", "s3"]
    assert planning.plan.goal == "greet the world"
    assert planning.repairs == 0 and planning.drafts[0].valid
    assert planning.usage.model_calls == 1 and planning.usage.input_tokens > 0
    result = Engine(registry).run_sync(planning.plan)
    assert result.answer == "hello world"


def test_the_request_carries_the_restricted_schema_the_catalog_and_a_seed(registry):
    model = ScriptedModel([GOOD])
    asyncio.run(Planner(model, registry, seed=7).plan("g"))
    req = model.requests[0]
    assert req.seed == 7 and req.temperature == 0.0
    assert req.output_schema is not None
    system = req.messages[0].content
    assert "action concat(parts: list of" in system and "{{" not in system
    assert load_prompt("planner/system.md").splitlines()[0] in system  # the prompt comes from the package file
    assert req.messages[-1].content == "Goal: g"


def test_the_schema_only_allows_registered_workers_and_actions(registry):
    schema = draft_schema(registry)
    jsonschema.validate(json.loads(GOOD), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(draft(step("s1", "launch_rockets", {}))), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(draft(step("s1", "echo", {"value": 1}, worker="wizard"))), schema)
    with pytest.raises(jsonschema.ValidationError):  # parameters follow the action's own schema
        jsonschema.validate(json.loads(draft(step("s1", "sleep", {"secs": 1}))), schema)


def test_the_positional_schema_makes_every_draft_a_dag_of_earlier_steps(registry):
    schema = draft_schema(registry, max_steps=3, positional=True)
    jsonschema.validate(json.loads(GOOD), schema)
    with pytest.raises(jsonschema.ValidationError):  # a dependency on a later step
        jsonschema.validate(json.loads(draft(step("s1", "echo", {"value": "x"}, ["s2"]), step("s2", "noop", {}))), schema)
    with pytest.raises(jsonschema.ValidationError):  # ids are s1, s2, ... in order
        jsonschema.validate(json.loads(draft(step("s2", "noop", {}))), schema)
    with pytest.raises(jsonschema.ValidationError):  # at most max_steps
        jsonschema.validate(json.loads(draft(*[step(f"s{i}", "noop", {}) for i in range(1, 5)])), schema)
    # a whole reference to an earlier step is allowed for any parameter, even a number
    jsonschema.validate(json.loads(draft(step("s1", "echo", {"value": 2}), step("s2", "sleep", {"seconds": "${s1}"}, ["s1"]))), schema)


def test_problems_go_back_to_the_model_and_the_repaired_plan_is_used(registry):
    bad = draft(step("s1", "echo", {"value": "hi"}), step("s2", "shout", {"text": "${s1}"}, ["s1"]))
    model = ScriptedModel([bad, "not json at all", GOOD])
    planning = asyncio.run(Planner(model, registry).draft("g"))
    assert planning.plan.step_ids == ["s1", "s2", "s3"]
    assert [d.valid for d in planning.drafts] == [False, False, True]
    assert "unknown_action" in planning.drafts[0].problems[0] and "shout" in planning.drafts[0].problems[0]
    assert "malformed_json" in planning.drafts[1].problems[0]
    repair = model.requests[1].messages
    assert repair[-2].role == "assistant" and repair[-2].content == bad
    assert "shout" in repair[-1].content and "cannot run" in repair[-1].content
    assert planning.usage.model_calls == 3


def test_after_the_last_repair_a_typed_error_shows_the_last_draft_and_its_problems(registry):
    bad = draft(step("s1", "echo", {"value": "x"}, ["s9"]))
    model = ScriptedModel([bad, bad])
    with pytest.raises(PlanningError) as info:
        asyncio.run(Planner(model, registry, max_repairs=1).plan("g"))
    err = info.value
    assert err.attempts == 2 and err.model == "test:scripted"
    assert err.last_text == bad
    assert any(p.rule == "unknown_dependency" and p.step_id == "s1" for p in err.problems)
    assert "test:scripted" in str(err) and "s9" in str(err)
    assert err.usage.model_calls == 2


def test_an_off_schema_reply_is_repaired_with_its_text_and_usage_kept(registry):
    from planexec.usage import Usage

    off = ModelOutputError(
        "structured output does not match", model="m", text='{"steps": []}', usage=Usage(input_tokens=5, output_tokens=3, model_calls=1)
    )
    model = ScriptedModel([off, GOOD])
    planning = asyncio.run(Planner(model, registry).draft("g"))
    assert planning.drafts[0].text == '{"steps": []}' and planning.drafts[0].usage.output_tokens == 3
    assert planning.drafts[0].problems
    assert planning.usage.model_calls == 2


def test_a_model_error_is_not_swallowed(registry):
    model = ScriptedModel([ModelServerError("test:scripted: 500", model="test:scripted")])
    with pytest.raises(ModelServerError):
        asyncio.run(Planner(model, registry).plan("g"))


def test_the_runs_events_and_usage_include_the_planners_drafts(registry):
    model = ScriptedModel([draft(step("s1", "nope", {})), GOOD])
    planning = asyncio.run(Planner(model, registry).draft("g"))

    async def go():
        run = Engine(registry).start(planning.plan, planning=planning)
        return await run.result(), run.history

    result, history = asyncio.run(go())
    drafted = [e for e in history if isinstance(e, PlanDrafted)]
    assert [bool(e.problems) for e in drafted] == [True, False]
    assert result.planning_usage == planning.usage
    assert result.usage.model_calls == 2
    assert result.usage_by_role()["planner"].model_calls == 2


def test_the_catalog_text_names_every_action_with_its_parameters(registry):
    text = render_catalog(registry.catalog())
    assert "action sleep(seconds: number, value: any (optional))" in text


# --- streaming --------------------------------------------------------------------


def _stream_registry(registry):
    registry.add_tool(sleep_tool("wait"))
    return registry


SLOW_PLAN = draft(
    step("s1", "wait", {"seconds": 0.0, "value": "a"}),
    step("s2", "wait", {"seconds": 0.0, "value": "b"}),
    step("s3", "concat", {"parts": ["${s1}", "${s2}"], "separator": "+"}, ["s1", "s2"]),
)


def test_steps_start_while_the_plan_is_still_being_written(registry):
    reg = _stream_registry(registry)
    model = ScriptedModel([SLOW_PLAN], token_delay=0.01)

    async def go():
        stream = PlanStream(Planner(model, reg), "combine")
        run = Engine(reg).start_streaming(stream)
        return await run.result(), run.history, stream

    result, history, stream = asyncio.run(go())
    assert result.status is RunStatus.SUCCEEDED and result.answer == "a+b"
    assert result.plan.step_ids == ["s1", "s2", "s3"]
    completed = next(e for e in history if isinstance(e, PlanCompleted))
    first_start = next(e for e in history if isinstance(e, StepStarted) and e.step_id == "s1")
    assert first_start.seq < completed.seq  # s1 ran before the plan was finished
    assert first_start.at < completed.at
    parsed = [e.step_id for e in history if isinstance(e, PlanStepParsed)]
    assert parsed == ["s1", "s2", "s3"]
    assert completed.content_hash == result.plan.content_hash
    assert stream.parsed_at["s1"] < stream.finished_at
    assert result.planning_usage.model_calls == 1 and result.usage.model_calls == 1


def test_a_step_invalid_on_its_own_stops_the_stream_and_the_run_cleanly(registry):
    reg = _stream_registry(registry)
    plan = draft(step("s1", "wait", {"seconds": 0.2, "value": "a"}), step("s2", "fly", {}), step("s3", "noop", {}))
    model = ScriptedModel([plan], token_delay=0.005)

    async def go():
        run = Engine(reg).start_streaming(PlanStream(Planner(model, reg), "g"))
        return await run.result()

    result = asyncio.run(go())
    assert result.status is RunStatus.FAILED
    assert "s2" in result.reason and "fly" in result.reason
    assert list(result.steps) == ["s1"]
    assert result.steps["s1"].state in (StepState.CANCELLED, StepState.SUCCEEDED)


def test_a_late_whole_plan_problem_fails_the_run_and_no_step_is_left_running(registry):
    reg = _stream_registry(registry)
    # each step is fine on its own, but the plan names an answer step that does not exist
    text = json.dumps({"steps": [step("s1", "wait", {"seconds": 5, "value": "a"}), step("s2", "noop", {})], "answer_step": "s9"})
    model = ScriptedModel([text], token_delay=0.002)

    async def go():
        run = Engine(reg, cancel_grace=1).start_streaming(PlanStream(Planner(model, reg), "g"))
        return await run.result()

    result = asyncio.run(go())
    assert result.status is RunStatus.FAILED and "answer_step" in result.reason
    assert all(rec.state.terminal for rec in result.steps.values())
    assert result.steps["s1"].state is StepState.CANCELLED


def test_cancelling_a_streaming_run_stops_the_planner(registry):
    reg = _stream_registry(registry)
    model = ScriptedModel([SLOW_PLAN], token_delay=0.05)

    async def go():
        run = Engine(reg).start_streaming(PlanStream(Planner(model, reg), "g"))
        await asyncio.sleep(0.3)
        run.cancel()
        return await run.result()

    result = asyncio.run(go())
    assert result.status is RunStatus.CANCELLED
    assert all(rec.state.terminal for rec in result.steps.values())


def test_a_model_that_fails_mid_stream_fails_the_run(registry):
    reg = _stream_registry(registry)
    model = ScriptedModel([ModelServerError("boom", model="test:scripted")])

    async def go():
        run = Engine(reg).start_streaming(PlanStream(Planner(model, reg), "g"))
        return await run.result()

    result = asyncio.run(go())
    assert result.status is RunStatus.FAILED and "boom" in result.reason


def test_a_streamed_plan_equals_the_plan_planned_in_one_piece(registry):
    reg = _stream_registry(registry)
    one = asyncio.run(Planner(ScriptedModel([SLOW_PLAN]), reg).plan("g"))

    async def go():
        stream = PlanStream(Planner(ScriptedModel([SLOW_PLAN]), reg), "g")
        return [s async for s in stream], stream.plan

    steps, streamed = asyncio.run(go())
    assert isinstance(streamed, Plan) and streamed.content_hash == one.content_hash
    assert [s.step_id for s in steps] == one.step_ids


def test_examples_that_fit_the_catalog_become_earlier_turns_the_others_stay_in_the_prompt(registry):
    from planexec.workers.toolkit import calculator

    planner = Planner(ScriptedModel([]), registry)
    messages = planner.messages("g")
    assert [m.role for m in messages] == ["system", "user"]  # no example fits echo/concat/sleep/noop
    assert "Examples (they use other tools than yours)" in messages[0].content and "population of France" in messages[0].content
    registry.add_tool(calculator)
    messages = Planner(ScriptedModel([]), registry).messages("g")
    assert [m.role for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1].content == "Goal: What is 12 * 7 + 3?"
    assert json.loads(messages[2].content)["steps"][0]["action"] == "calculator"
    assert "Examples (they use other tools" not in messages[0].content


def test_every_string_parameter_in_a_draft_is_bounded(registry):
    from planexec.workers.toolkit import file_tools

    for t in file_tools("."):
        registry.add_tool(t)
    schema = json.dumps(draft_schema(registry, positional=True))
    assert '"content": {"title": "Content", "type": "string", "maxLength": 400}' in schema
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(draft(step("s1", "write_file", {"path": "a.txt", "content": "x" * 401}))), json.loads(schema))


def test_a_draft_cut_off_at_max_tokens_is_asked_to_be_shorter(registry):
    from planexec.models import ModelResponse

    cut = ModelResponse(
        text='{"steps": [{"id": "s1", "worker": "tool", "action": "echo", "instruction": "' + "x " * 300, finish_reason="length"
    )
    model = ScriptedModel([cut, GOOD])
    planning = asyncio.run(Planner(model, registry, max_tokens=300).draft("g"))
    assert "cut_off" in planning.drafts[0].problems[0] and "300 tokens" in planning.drafts[0].problems[0]
    assert model.requests[1].messages[-2].content.endswith("…(cut off)")
    assert len(model.requests[1].messages[-2].content) < 450


def test_a_step_is_handed_out_as_soon_as_the_next_one_opens(registry):
    from planexec.models import ModelDelta, ModelResponse

    s1 = json.dumps(step("s1", "echo", {"value": "a"}))
    s2_rest = json.dumps(step("s2", "echo", {"value": "b"}))[1:]
    pieces = ['{"steps": [', s1, ", ", "{", s2_rest, "]}"]

    class Chunked:
        name = "test:chunks"
        sent = 0

        async def complete(self, request):
            raise AssertionError("streamed only")

        async def stream(self, request):
            for piece in pieces:
                self.sent += 1
                yield ModelDelta(text=piece)
            yield ModelResponse(text="".join(pieces), model=self.name)

    model = Chunked()

    async def go():
        stream = PlanStream(Planner(model, registry), "g")
        return [(s.step_id, model.sent) async for s in stream]

    # s1 comes out on the delta that opens s2 (the 4th), not when s2 is complete
    assert asyncio.run(go()) == [("s1", 4), ("s2", 6)]


def test_an_unexpected_error_while_streaming_fails_the_run_instead_of_hanging(registry):
    class Broken(Planner):
        def messages(self, goal):
            raise KeyError("tools")

    async def go():
        run = Engine(registry).start_streaming(PlanStream(Broken(ScriptedModel([]), registry), "g"))
        return await asyncio.wait_for(run.result(), 5)

    result = asyncio.run(go())
    assert result.status is RunStatus.FAILED and "KeyError" in result.reason


def test_a_streamed_step_rejected_on_its_own_still_counts_its_model_call(registry):
    reg = _stream_registry(registry)
    plan = draft(step("s1", "wait", {"seconds": 0, "value": "a"}, ["k1"]), step("s2", "noop", {}))
    model = ScriptedModel([plan], token_delay=0.001)

    async def go():
        run = Engine(reg).start_streaming(PlanStream(Planner(model, reg), "g"))
        return await run.result()

    result = asyncio.run(go())
    assert result.status is RunStatus.FAILED and result.planning_usage.model_calls == 1


def test_a_json_draft_names_its_answer_step_and_the_team_needs_no_joiner_call(tmp_path):
    """The JSON draft schema offers ``answer_step`` (any earlier id when positional), the prompt and its examples ask
    for it, and a plan that names it is answered by that step's output: one model call, the planner's."""
    from planexec import Team
    from planexec.workers.toolkit import calculator

    team = Team(
        ScriptedModel(["{}"], name="test:probe"),
        tools=[calculator],
        mode="plan",
        store=None,
        planning=PlanningOptions(joiner=True),
        review=ReviewOptions(auto_approve=True),
    )
    registry = team.registry
    positional = draft_schema(registry, positional=True, max_steps=3)
    assert positional["properties"]["answer_step"] == {"enum": ["s1", "s2", "s3"]} and positional["required"] == ["steps"]
    named = {"steps": [step("s1", "calculator", {"expression": "17 * 23"})], "answer_step": "s1"}
    jsonschema.validate(named, positional)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**named, "answer_step": "s4"}, positional)  # a step the plan cannot have
    jsonschema.validate(named, draft_schema(registry))  # the open shape takes any step id
    assert "answer_step" not in draft_schema(registry, positional=True, answer=False)["properties"]
    # a small model under a grammar is not asked (SmolLM2 wrote longer plans when it was): its last step is the answer
    small = Planner(ScriptedModel([], name="test:small"), registry, positional=True)
    assert not small.name_answer and "answer_step" not in small.schema["properties"]
    system = small.messages("g")[0].content
    assert "answer_step" not in system and "The last step's result is the answer." in system

    planned = json.dumps(
        {
            "steps": [
                step("s1", "calculator", {"expression": "17 * 23"}),
                step("s2", "calculator", {"expression": "${s1} + 5"}, deps=["s1"]),
            ],
            "answer_step": "s2",
        }
    )
    model = ScriptedModel([planned], name="test:json")
    team = Team(
        model, tools=[calculator], mode="plan", store=None, planning=PlanningOptions(joiner=True), review=ReviewOptions(auto_approve=True)
    )
    result = team.run_sync("What is 17 times 23, plus 5?")
    assert result.status is RunStatus.SUCCEEDED and result.answer == 396 and result.plan.answer_step == "s2"
    assert len(model.requests) == 1  # the planner only: the named step's output is the answer
    system = model.requests[0].messages[0].content
    assert '"answer_step"' in system
    shown = [m.content for m in model.requests[0].messages[1:-1] if m.role == "assistant"]
    assert shown and all(json.loads(text)["answer_step"] == json.loads(text)["steps"][-1]["id"] for text in shown)

    replies = [
        json.dumps({"steps": [step("s1", "calculator", {"expression": "2 + 2"})]}),
        json.dumps({"action": "finish", "answer": "four"}),
    ]
    unnamed = ScriptedModel(replies, name="test:json")
    answered = Team(
        unnamed, tools=[calculator], mode="plan", store=None, planning=PlanningOptions(joiner=True), review=ReviewOptions(auto_approve=True)
    ).run_sync("What is 2 + 2?")
    assert answered.answer == "four" and len(unnamed.requests) == 2  # no answer named: the joiner assembles it
