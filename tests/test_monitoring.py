"""Judging results with a critic that must check with a tool, and rerouting a failed step to another role."""

from __future__ import annotations

import asyncio
import json

import pytest

from planexec import Engine, Plan, Registry, RoleWorker, RunStatus, StepState
from planexec.engine.config import EngineConfig
from planexec.errors import PlanValidationError
from planexec.events import parse_event
from planexec.testing import ScriptedModel, tool_call
from planexec.usage import Budget, Usage, record_usage
from planexec.workers.tools import tool
from planexec.workers.worker import CriticWorker


def mkplan(*steps):
    return Plan.model_validate({"plan_id": "p", "goal": "g", "steps": list(steps)})


def run(engine, plan):
    async def go():
        r = engine.start(plan)
        return r, await r.result()

    return asyncio.run(go())


@tool(read_only=True)
def recompute(expression: str) -> float:
    """Recompute an arithmetic expression (a stand-in for the calculator)."""
    return float(eval(expression, {"__builtins__": {}}))  # test input only


def team(critic_answers, *, step_value=12):
    reg = Registry.default()

    @reg.tool
    def multiply(a: int, b: int) -> int:
        return step_value

    critic_model = ScriptedModel(critic_answers, name="test:critic")
    reg.add_worker(CriticWorker(model=critic_model, description="reviews results", system_prompt="Check.", tools=[recompute]))
    return reg, critic_model


JUDGED = {
    "id": "m",
    "action": "multiply",
    "parameters": {"a": 3, "b": 4},
    "instruction": "multiply 3 by 4",
    "success_criteria": [{"kind": "critic", "criteria": "the product of 3 and 4"}],
}


def test_a_critic_that_recomputes_and_approves_passes_the_step_and_its_verdict_is_recorded():
    reg, critic_model = team([tool_call("recompute", expression="3*4"), '{"approved": true, "reasons": ["3*4 is 12"]}'])
    r, result = run(Engine(reg), mkplan(JUDGED))
    assert result.status is RunStatus.SUCCEEDED and result.answer == 12
    (verdict,) = result.steps["m"].verdicts
    assert verdict == {
        "attempt": 1,
        "critic": "critic",
        "approved": True,
        "judged": True,
        "reasons": ["3*4 is 12"],
        "tools_used": ["recompute"],
    }
    judged = next(e for e in r.history if e.type == "step_judged")
    assert (judged.step_id, judged.approved, judged.tools_used) == ("m", True, ["recompute"])
    assert parse_event(judged.to_json()) == judged
    # the critic saw the output and the criteria; its two calls count toward the step
    assert '"output": 12' in critic_model.requests[0].messages[1].content
    assert "the product of 3 and 4" in critic_model.requests[0].messages[1].content
    assert result.steps["m"].usage.model_calls == 2


def test_a_critic_that_approves_without_a_tool_call_is_no_judgement_and_the_check_fails():
    reg, _ = team(['{"approved": true, "reasons": ["looks right"]}'])
    _r, result = run(Engine(reg), mkplan(JUDGED))
    assert result.status is RunStatus.ABORTED
    err = result.steps["m"].error
    assert err.rule == "check_failed" and "not judged" in err.message
    assert result.steps["m"].verdicts[0]["judged"] is False


def test_a_critic_that_rejects_fails_the_check_with_its_reasons_and_the_planner_can_replan():
    from planexec.planning.replanner import FunctionReplanner

    reg, _ = team([tool_call("recompute", expression="3*4"), '{"approved": false, "reasons": ["expected 12, got 13"]}'], step_value=13)

    @reg.tool(read_only=True)  # a revision may add it without a person: it changes nothing
    def constant(value: int) -> int:
        return value

    replanner = FunctionReplanner(lambda ctx: [{"id": "fixed", "action": "constant", "parameters": {"value": 12}}])
    _r, result = run(Engine(reg, replanner=replanner), mkplan(JUDGED))
    assert result.status is RunStatus.SUCCEEDED and result.answer == 12
    assert "expected 12, got 13" in replanner.contexts[0].failures["m"]
    assert result.versions[0].superseded["m"].verdicts[0]["approved"] is False


def test_a_crashing_critic_fails_the_check_not_the_run():
    reg, _ = team([RuntimeError("critic model down")])
    _r, result = run(Engine(reg), mkplan(JUDGED))
    assert result.status is RunStatus.ABORTED
    assert "the critic failed" in result.steps["m"].error.message
    assert all(rec.state.terminal for rec in result.steps.values())


def test_an_unknown_critic_is_a_validation_error_naming_the_step_and_field():
    reg, _ = team([])
    bad = {**JUDGED, "success_criteria": [{"kind": "critic", "worker": "nobody"}]}
    with pytest.raises(PlanValidationError) as info:
        run(Engine(reg), mkplan(bad))
    problem = info.value.problems[0]
    assert (problem.step_id, problem.field, problem.rule) == ("m", "success_criteria.0", "unknown_critic")
    assert "critic" in problem.message


def test_a_sentinel_failure_is_rerouted_to_another_role_and_the_recovery_is_in_the_events():
    reg = Registry.default()
    researcher = ScriptedModel(["FAILED"], name="test:researcher")
    writer = ScriptedModel(["The sea is wide."], name="test:writer")
    reg.add_worker(RoleWorker("researcher", model=researcher, description="finds facts", system_prompt="Research.", tasks=["respond"]))
    reg.add_worker(RoleWorker("writer", model=writer, description="writes", system_prompt="Write.", tasks=["respond"]))
    plan = mkplan(
        {
            "id": "line",
            "worker": "researcher",
            "action": "respond",
            "instruction": "one line about the sea",
            "success_criteria": [{"kind": "regex", "pattern": "^(?!FAILED$)"}],
            "failure_action": {"kind": "fallback", "worker": "writer"},
        }
    )
    r, result = run(Engine(reg), plan)
    assert result.status is RunStatus.SUCCEEDED and result.answer == "The sea is wide."
    assert result.steps["line"].worker == "writer" and result.steps["line"].state is StepState.SUCCEEDED
    story = [
        (e.type, getattr(e, "worker", None) or getattr(e, "to_worker", None)) for e in r.history if getattr(e, "step_id", None) == "line"
    ]
    assert story == [
        ("step_started", "researcher"),
        ("step_failed", "researcher"),
        ("step_rerouted", "writer"),
        ("step_started", "writer"),
        ("step_succeeded", None),
    ]
    failed = next(e for e in r.history if e.type == "step_failed")
    assert failed.error.rule == "check_failed" and failed.then == "fallback"
    # both roles' calls are counted, and the output says who produced it
    assert result.steps["line"].usage.model_calls == 2
    assert result.steps["line"].output.provenance.worker == "writer"
    assert json.loads(result.model_dump_json())["steps"]["line"]["worker"] == "writer"


def _rollback_team():
    """A deploy that succeeds (a side effect), a smoke test that aborts, and two undo steps that may run at once."""
    reg = Registry.default()
    seen = {"running": 0, "most": 0, "undone": []}

    @reg.tool
    async def deploy(name: str) -> str:
        return f"deployed {name}"

    @reg.tool
    async def broken(name: str) -> str:
        raise RuntimeError("smoke test failed")

    @reg.tool
    async def undeploy(name: str) -> str:
        seen["running"] += 1
        seen["most"] = max(seen["most"], seen["running"])
        record_usage(Usage(model_calls=3))  # as a model-backed undo would
        await asyncio.sleep(0.02)
        seen["running"] -= 1
        seen["undone"].append(name)
        return f"undeployed {name}"

    plan = Plan.model_validate(
        {
            "plan_id": "p",
            "goal": "release",
            "steps": [
                {"id": "deploy", "action": "deploy", "parameters": {"name": "v2"}},
                {"id": "smoke", "action": "broken", "parameters": {"name": "v2"}, "depends_on": ["deploy"]},
            ],
            "rollback_plan": {
                "goal": "put v1 back",
                "steps": [
                    {"id": "undo_web", "action": "undeploy", "parameters": {"name": "web"}},
                    {"id": "undo_api", "action": "undeploy", "parameters": {"name": "api"}},
                ],
            },
        }
    )
    return reg, plan, seen


def test_a_rollback_run_keeps_the_engines_worker_limits_and_checker():
    reg, plan, seen = _rollback_team()
    checked = []

    class Recording:
        async def check(self, step, output):
            checked.append(step.step_id)

    result = Engine(reg, worker_limits={"tool": 1}, checker=Recording()).run_sync(plan)
    assert result.status is RunStatus.ABORTED
    assert result.rollback is not None and result.rollback.status is RunStatus.SUCCEEDED
    assert sorted(seen["undone"]) == ["api", "web"]
    assert seen["most"] == 1  # the undo steps waited for the worker's one slot, as the run's steps would
    assert {"undo_web", "undo_api"} <= set(checked)  # the engine's checker judged the rollback's steps too


def test_a_rollback_run_keeps_the_engines_budget():
    reg, plan, _ = _rollback_team()
    result = Engine(reg, budget=Budget(max_model_calls=4), worker_limits={"tool": 1}).run_sync(plan)
    assert result.status is RunStatus.ABORTED
    rollback = result.rollback
    assert rollback is not None and rollback.status is RunStatus.FAILED
    assert rollback.error is not None and rollback.error.rule == "budget"
    assert "exceeded its budget" in rollback.error.message  # the undo steps' 6 model calls went over the 4 allowed


def test_engine_config_holds_every_setting_and_replace_validates_again():
    budget = Budget(max_model_calls=1)
    reg = Registry.default()
    engine = Engine(reg, max_concurrency=3, budget=budget, worker_limits={"tool": 2})
    config = engine.config
    assert (config.registry, config.max_concurrency, config.budget, dict(config.worker_limits)) == (reg, 3, budget, {"tool": 2})
    assert Engine(config=config).config == config
    assert Engine(config=config, max_concurrency=5).config.max_concurrency == 5
    with pytest.raises(ValueError, match="max_concurrency"):
        config.replace(max_concurrency=0)
    with pytest.raises(TypeError):
        config.replace(no_such_setting=1)
    with pytest.raises(ValueError, match="worker_limits"):
        EngineConfig(worker_limits={"tool": 0})
