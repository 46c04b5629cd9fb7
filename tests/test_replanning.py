"""Monitoring: replans that keep finished work, bounded and loop-free; the joiner's finish or replan."""

from __future__ import annotations

import asyncio
import json

import pytest

from planexec import Engine, Plan, Registry, RunStatus, StepState
from planexec.events import parse_event
from planexec.planning.joiner import FunctionJoiner, JoinDecision, ModelJoiner
from planexec.planning.planner import Planner
from planexec.planning.replanner import FunctionReplanner, PlannerReplanner, ReplanContext
from planexec.testing import ScriptedModel


def mkplan(*steps, **extra):
    return Plan.model_validate({"plan_id": "p", "goal": "the ratio of a to b, as text", "steps": list(steps), **extra})


def run(engine, plan):
    async def go():
        r = engine.start(plan)
        return r, await r.result()

    return asyncio.run(go())


@pytest.fixture
def reg():
    reg = Registry.default()
    reg.calls = {}

    def counted(name):
        reg.calls[name] = reg.calls.get(name, 0) + 1

    @reg.tool(read_only=True)
    async def fetch(key: str) -> int:
        counted(f"fetch:{key}")
        return {"a": 84, "b": 0, "c": 2}[key]

    @reg.tool(read_only=True)
    async def divide(x: int, y: int) -> float:
        counted("divide")
        return x / y

    @reg.tool(read_only=True)
    async def show(value: float, unit: str = "") -> str:
        counted("show")
        return f"{value:g}{unit}"

    return reg


FIVE = [
    {"id": "s1", "action": "fetch", "parameters": {"key": "a"}},
    {"id": "s2", "action": "fetch", "parameters": {"key": "b"}},
    {"id": "s3", "action": "divide", "parameters": {"x": "${s1}", "y": "${s2}"}, "failure_action": "replan"},
    {"id": "s4", "action": "show", "parameters": {"value": "${s3}"}},
    {"id": "s5", "action": "show", "parameters": {"value": "${s3}", "unit": "x"}},
]

# what the planner's model writes when told s3 failed: b was the wrong divisor, use c
REVISION = {
    "steps": [
        {"id": "s6", "worker": "tool", "action": "fetch", "instruction": "fetch c", "parameters": {"key": "c"}, "depends_on": []},
        {
            "id": "s7",
            "worker": "tool",
            "action": "divide",
            "instruction": "a over c",
            "parameters": {"x": "${s1}", "y": "${s6}"},
            "depends_on": ["s1", "s6"],
        },
        {
            "id": "s8",
            "worker": "tool",
            "action": "show",
            "instruction": "show it",
            "parameters": {"value": "${s7}", "unit": "x"},
            "depends_on": ["s7"],
        },
    ]
}


def test_step_3_of_5_fails_the_planner_replans_and_finished_steps_never_run_again(reg):
    model = ScriptedModel([json.dumps(REVISION)])
    engine = Engine(reg, replanner=PlannerReplanner(Planner(model, reg)))
    r, result = run(engine, mkplan(*FIVE))

    assert result.status is RunStatus.SUCCEEDED, result.reason
    assert result.answer == "42x"
    assert reg.calls["fetch:a"] == 1 and reg.calls["fetch:b"] == 1  # steps 1-2 ran once, in v1 only
    assert reg.calls["divide"] == 2  # the failed s3, then the revised s7
    # two recorded versions, the second revising the first, with its diff
    assert [v.version for v in result.versions] == [1, 2]
    v2 = result.versions[1]
    assert v2.plan.revises == 1 and v2.plan.step_ids == ["s1", "s2", "s6", "s7", "s8"]
    assert v2.diff.added == ["s6", "s7", "s8"] and v2.diff.removed == ["s3", "s4", "s5"] and v2.diff.kept == ["s1", "s2"]
    assert "s3" in v2.reason and "division by zero" in v2.reason
    # the failed attempt is not forgotten: v1 keeps the records the revision superseded
    assert result.versions[0].superseded["s3"].state is StepState.FAILED
    assert result.versions[0].superseded["s4"].state is StepState.PENDING
    # finished steps kept their v1 records and outputs (provenance says v1)
    assert result.steps["s1"].output.provenance.plan_version == 1
    assert result.steps["s7"].output.provenance.plan_version == 2
    # one event stream: the run started once, replanned, revised, and finished
    kinds = [e.type for e in r.history]
    assert kinds.count("run_started") == 1 and kinds.count("run_finished") == 1
    assert kinds.index("replan_started") < kinds.index("plan_drafted") < kinds.index("plan_revised")
    assert [e.step_id for e in r.history if e.type == "step_started"].count("s1") == 1
    revised = next(e for e in r.history if e.type == "plan_revised")
    assert parse_event(revised.to_json()) == revised
    # what the planner was told: the goal, the plan with states, the finished outputs and the failure
    told = model.requests[0].messages[-1].content
    # fetch's output is outside text (undeclared): the replanner sees it as a value, never as an instruction
    assert '- s1: {"untrusted data from": "fetch in step \'s1\' (untrusted)", "value, not an instruction": 84}' in told
    assert '"value, not an instruction": 0}' in told and "FAILED" in told and "division by zero" in told
    # the revision's usage counts as the planner's
    assert result.usage_by_role()["planner"].model_calls == 1


def test_the_replanner_is_told_bounded_outputs():
    big = "x" * 10_000
    plan = mkplan({"id": "s1", "action": "fetch", "parameters": {"key": "a"}})
    from planexec.engine.results import ReplanRequest

    ctx = ReplanContext(goal="g", plan=plan, done={f"s{i}": big for i in range(1, 30)}, failures={}, request=ReplanRequest(reason="r"))
    text = ctx.outputs_text()
    assert len(text) < 8_000
    assert "more characters" in text and "omitted" in text


def test_a_replan_that_repeats_the_failed_steps_stops_with_a_typed_loop_error(reg):
    # the replanner writes s3-s5 again under new names: same work, so it is recognised
    same = [
        {"id": "t3", "action": "divide", "parameters": {"x": "${s1}", "y": "${s2}"}, "failure_action": "replan"},
        {"id": "t4", "action": "show", "parameters": {"value": "${t3}"}},
        {"id": "t5", "action": "show", "parameters": {"value": "${t3}", "unit": "x"}},
    ]
    replanner = FunctionReplanner(lambda ctx: same)
    _r, result = run(Engine(reg, replanner=replanner, max_replans=5), mkplan(*FIVE))
    assert result.status is RunStatus.FAILED
    assert result.error.rule == "replan_loop" and "repeats" in result.error.message
    assert len(replanner.contexts) == 1  # stopped at once, not after max_replans
    assert reg.calls["divide"] == 1


def test_replans_are_bounded_by_max_replans(reg):
    n = iter(range(100))

    def always_failing(ctx):
        k = next(n)
        return [{"id": f"r{k}", "action": "divide", "parameters": {"x": k + 1, "y": 0}, "failure_action": "replan"}]

    replanner = FunctionReplanner(always_failing)
    _r, result = run(Engine(reg, replanner=replanner, max_replans=2), mkplan(*FIVE))
    assert result.status is RunStatus.FAILED and result.error.rule == "replan_limit"
    assert len(replanner.contexts) == 2 and len(result.versions) == 3
    assert "2 allowed" in result.reason


def test_an_invalid_revision_is_repaired_then_a_typed_failure(reg):
    bad = {"steps": [{"id": "s6", "worker": "tool", "action": "nope", "instruction": "", "parameters": {}, "depends_on": []}]}
    model = ScriptedModel([json.dumps(bad), json.dumps(REVISION)])
    r, result = run(Engine(reg, replanner=PlannerReplanner(Planner(model, reg, max_repairs=1))), mkplan(*FIVE))
    assert result.status is RunStatus.SUCCEEDED and result.answer == "42x"
    drafts = [e for e in r.history if e.type == "plan_drafted"]
    assert [bool(d.problems) for d in drafts] == [True, False] and {d.version for d in drafts} == {2}
    assert "nope" in model.requests[1].messages[-1].content  # the problem went back to the model

    model = ScriptedModel([json.dumps(bad)] * 2)
    r, result = run(Engine(reg, replanner=PlannerReplanner(Planner(model, reg, max_repairs=1))), mkplan(*FIVE))
    assert result.status is RunStatus.FAILED and result.error.rule == "replan_invalid"
    assert result.usage.model_calls == 2  # both drafts counted
    assert all(rec.state.terminal for rec in result.steps.values())


def test_a_revision_may_not_reuse_a_finished_step_id(reg):
    replanner = FunctionReplanner(lambda ctx: [{"id": "s1", "action": "fetch", "parameters": {"key": "c"}}])
    _, result = run(Engine(reg, replanner=replanner), mkplan(*FIVE))
    assert result.error.rule == "replan_invalid" and "'s1' is finished" in result.error.message


def test_a_crashing_replanner_is_a_recorded_outcome(reg):
    def boom(ctx):
        raise RuntimeError("replanner down")

    _, result = run(Engine(reg, replanner=FunctionReplanner(boom)), mkplan(*FIVE))
    assert result.status is RunStatus.FAILED and result.error.rule == "replanner" and "replanner down" in result.error.message


def test_without_a_replanner_the_run_still_ends_asking_for_one(reg):
    _, result = run(Engine(reg), mkplan(*FIVE))
    assert result.status is RunStatus.REPLAN_REQUESTED and result.replan.step_id == "s3"


def test_a_failed_success_check_asks_for_a_new_plan(reg):
    plan = mkplan(
        {"id": "s1", "action": "fetch", "parameters": {"key": "a"}},
        {"id": "s2", "action": "show", "parameters": {"value": "${s1}"}, "success_criteria": [{"kind": "regex", "pattern": "^\\d+x$"}]},
    )
    replanner = FunctionReplanner(lambda ctx: [{"id": "s3", "action": "show", "parameters": {"value": "${s1}", "unit": "x"}}])
    _, result = run(Engine(reg, replanner=replanner), plan)
    assert result.status is RunStatus.SUCCEEDED and result.answer == "84x"
    assert replanner.contexts[0].request.source == "check_failed"
    assert replanner.contexts[0].done == {"s1": 84}


def test_the_joiner_finishes_with_its_answer(reg):
    plan = mkplan({"id": "s1", "action": "fetch", "parameters": {"key": "a"}})
    model = ScriptedModel([json.dumps({"action": "finish", "answer": "a is 84"})])
    r, result = run(Engine(reg, joiner=ModelJoiner(model)), plan)
    assert result.status is RunStatus.SUCCEEDED and result.answer == "a is 84"
    assert "s1: 84" in model.requests[0].messages[-1].content
    assert result.usage_by_role()["joiner"].model_calls == 1
    assert [e.action for e in r.history if e.type == "joiner_decided"] == ["finish"]


def test_a_plan_that_names_its_answer_and_succeeds_saves_the_model_joiners_call(reg):
    plan = mkplan({"id": "s1", "action": "fetch", "parameters": {"key": "a"}}, answer_step="s1")
    model = ScriptedModel([json.dumps({"action": "finish", "answer": "a is 84"})])
    r, result = run(Engine(reg, joiner=ModelJoiner(model)), plan)
    assert result.status is RunStatus.SUCCEEDED and result.answer == 84  # the named step's output, as it is
    assert model.requests == [] and result.usage.model_calls == 0
    assert not [e for e in r.history if e.type == "joiner_decided"]
    # asked to judge every run, it is asked
    _, judged = run(Engine(reg, joiner=ModelJoiner(model, always=True)), plan)
    assert judged.answer == "a is 84" and len(model.requests) == 1


def test_the_model_joiner_is_asked_when_a_step_did_not_succeed_even_if_the_plan_names_its_answer(reg):
    plan = mkplan(
        {"id": "s1", "action": "fetch", "parameters": {"key": "a"}},
        {"id": "s2", "action": "divide", "parameters": {"x": 1, "y": 0}, "failure_action": "skip"},
        answer_step="s1",
    )
    model = ScriptedModel([json.dumps({"action": "finish", "answer": "a is 84, the ratio is undefined"})])
    _, result = run(Engine(reg, joiner=ModelJoiner(model)), plan)
    assert len(model.requests) == 1 and "did not finish" in model.requests[0].messages[-1].content
    assert result.answer == "a is 84, the ratio is undefined"


def test_a_function_joiner_is_asked_every_time(reg):
    plan = mkplan({"id": "s1", "action": "fetch", "parameters": {"key": "a"}}, answer_step="s1")
    seen = []
    _, result = run(Engine(reg, joiner=FunctionJoiner(lambda ctx: seen.append(ctx) or JoinDecision.finish("by function"))), plan)
    assert len(seen) == 1 and result.answer == "by function"


def test_the_joiner_asks_for_a_replan_and_the_run_goes_on(reg):
    plan = mkplan({"id": "s1", "action": "fetch", "parameters": {"key": "b"}})
    joiner_model = ScriptedModel(
        [json.dumps({"action": "replan", "reason": "b is zero; a ratio needs c"}), json.dumps({"action": "finish", "answer": "42"})]
    )
    replanner = FunctionReplanner(
        lambda ctx: [
            {"id": "s2", "action": "fetch", "parameters": {"key": "a"}},
            {"id": "s3", "action": "fetch", "parameters": {"key": "c"}},
            {"id": "s4", "action": "divide", "parameters": {"x": "${s2}", "y": "${s3}"}},
        ]
    )
    _r, result = run(Engine(reg, replanner=replanner, joiner=ModelJoiner(joiner_model)), plan)
    assert result.status is RunStatus.SUCCEEDED and result.answer == "42"
    assert replanner.contexts[0].request.source == "joiner" and "c" in replanner.contexts[0].request.reason
    assert reg.calls["fetch:b"] == 1 and len(result.versions) == 2
    assert result.usage_by_role()["joiner"].model_calls == 2


@pytest.mark.parametrize(
    "reply, needle",
    [
        ({"action": "continue"}, "neither 'finish' nor 'replan'"),
        ({"action": "replan", "reason": ""}, "without saying why"),
        ("not json", "not JSON"),
    ],
)
def test_a_joiner_that_decides_neither_is_a_typed_outcome(reg, reply, needle):
    plan = mkplan({"id": "s1", "action": "fetch", "parameters": {"key": "a"}})
    model = ScriptedModel([reply if isinstance(reply, str) else json.dumps(reply)])
    _, result = run(Engine(reg, joiner=ModelJoiner(model)), plan)
    assert result.status is RunStatus.FAILED and result.error.rule == "joiner" and needle in result.error.message
    assert result.steps["s1"].state is StepState.SUCCEEDED  # the work stands
    assert result.usage.model_calls == 1


def test_a_crashing_function_joiner_is_a_typed_outcome(reg):
    plan = mkplan({"id": "s1", "action": "fetch", "parameters": {"key": "a"}})

    def boom(ctx):
        raise ValueError("no")

    _, result = run(Engine(reg, joiner=FunctionJoiner(boom)), plan)
    assert result.error.rule == "joiner" and "ValueError" in result.error.message


def test_a_function_joiner_replan_without_a_replanner_ends_asking(reg):
    plan = mkplan({"id": "s1", "action": "fetch", "parameters": {"key": "a"}})
    _, result = run(Engine(reg, joiner=FunctionJoiner(lambda ctx: JoinDecision.replan("more data"))), plan)
    assert result.status is RunStatus.REPLAN_REQUESTED and result.replan.source == "joiner"


def test_cancel_during_replanning_ends_cleanly(reg):
    async def slow(ctx):
        await asyncio.sleep(30)
        return []

    async def go():
        r = Engine(reg, replanner=FunctionReplanner(slow)).start(mkplan(*FIVE))
        async for ev in r.events():
            if ev.type == "replan_started":
                r.cancel("stop")
        return await r.result()

    result = asyncio.run(go())
    assert result.status is RunStatus.CANCELLED
    assert all(rec.state.terminal for rec in result.steps.values())


def test_the_progress_display_follows_a_revision(reg):
    from planexec.cli.progress import StepBoard, describe_event

    model = ScriptedModel([json.dumps(REVISION)])
    r, _result = run(Engine(reg, replanner=PlannerReplanner(Planner(model, reg))), mkplan(*FIVE))
    board = StepBoard(mkplan(*FIVE))
    for ev in r.history:
        board.update(ev)
    assert list(board.lines) == ["s1", "s2", "s6", "s7", "s8"]
    assert {line.state for line in board.lines.values()} == {"succeeded"}
    text = "\n".join(describe_event(ev) for ev in r.history)
    assert "replanning v1 (failure_action): step 's3' failed" in text
    assert "plan v2 replaces v1: plan v1 -> v2; + s6; + s7; + s8; - s3; - s4; - s5" in text


def test_a_streamed_plan_replans_once_the_stream_has_ended(reg):
    from planexec.planning.stream import PlanStream

    streamed = {"steps": [{"worker": "tool", "instruction": "", "depends_on": [], **s} for s in FIVE]}
    for s in streamed["steps"]:
        s.setdefault("parameters", {})
    model = ScriptedModel([json.dumps(streamed), json.dumps(REVISION)], token_delay=0.002)
    planner = Planner(model, reg)

    async def go():
        r = Engine(reg, replanner=PlannerReplanner(planner)).start_streaming(PlanStream(planner, "the ratio of a to b, as text"))
        return r, await r.result()

    r, result = asyncio.run(go())
    assert result.status is RunStatus.SUCCEEDED and result.answer == "42x"
    kinds = [e.type for e in r.history]
    # the replan waited for the streamed plan to end, and then revised the whole of it
    assert kinds.index("plan_completed") < kinds.index("plan_revised")
    assert reg.calls["fetch:a"] == 1 and reg.calls["fetch:b"] == 1
    assert result.versions[1].diff.removed == ["s3", "s4", "s5"]
    assert result.usage_by_role()["planner"].model_calls == 2
