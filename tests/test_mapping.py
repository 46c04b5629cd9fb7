"""The published deployment plan loads after its field names and values are mapped, and runs."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from planexec import Engine, Registry, RunStatus, StepState
from planexec.errors import PlanParseError
from planexec.plan.vocabulary import PlanMapping, load_foreign_plan

DATA = Path(__file__).parent / "data" / "deploy_foreign.json"
TOOLS = Path(__file__).parents[1] / "examples" / "deploy" / "tools.py"

MAPPING = PlanMapping(step_values={"failure_action": {"abort_deployment": "abort"}})


def test_foreign_plan_needs_the_mapping():
    with pytest.raises(PlanParseError) as info:
        load_foreign_plan(DATA.read_text(), PlanMapping())
    assert any(p.step_id == "step-1" and p.field and p.field.startswith("failure_action") for p in info.value.problems)


def test_foreign_deployment_plan_loads_as_a_plan():
    plan = load_foreign_plan(DATA.read_text(), MAPPING)
    assert plan.plan_id == "deploy-auth-service-v2.1.4"
    assert [s.step_id for s in plan.steps] == ["step-1", "step-2", "step-3"]
    assert [s.dependencies for s in plan.steps] == [[], ["step-1"], ["step-2"]]
    assert plan.steps[0].failure_action.kind == "abort"
    assert plan.steps[0].success_criteria[0].name == "all_tests_pass"
    assert plan.rollback_plan == "rollback-auth-service-v2.1.3"
    assert plan.estimated_duration == timedelta(minutes=15)
    assert plan.risk_level == "medium"


def test_field_renames_apply_to_plan_and_steps():
    mapping = PlanMapping(plan_fields={"objective": "goal"}, step_fields={"tool": "action", "after": "depends_on"})
    plan = load_foreign_plan(
        {"plan_id": "p", "objective": "o", "steps": [{"id": "a", "tool": "echo"}, {"id": "b", "tool": "echo", "after": ["a"]}]},
        mapping,
    )
    assert plan.goal == "o" and plan.steps[1].depends_on == ["a"] and plan.steps[0].action == "echo"


@pytest.fixture
def deploy_registry(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path))
    reg = Registry.default()
    reg.load_module(str(TOOLS))
    return reg


def _actions(tmp_path):
    log = tmp_path / "actions.jsonl"
    return [line.split('"action": "')[1].split('"')[0] for line in log.read_text().splitlines()] if log.exists() else []


def test_foreign_plan_runs_with_three_local_tools(deploy_registry, tmp_path):
    plan = load_foreign_plan(DATA.read_text(), MAPPING)
    result = Engine(deploy_registry).run_sync(plan)
    assert result.status is RunStatus.SUCCEEDED
    assert _actions(tmp_path) == ["run_tests", "backup_database", "deploy_service"]
    assert result.answer["status"] == "live"


def test_failing_tests_abort_before_the_backup_runs(deploy_registry, tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOY_FAILING_TESTS", "3")
    plan = load_foreign_plan(DATA.read_text(), MAPPING)
    result = Engine(deploy_registry).run_sync(plan)
    assert result.status is RunStatus.ABORTED
    assert _actions(tmp_path) == ["run_tests"]  # no backup, no deploy
    assert result.steps["step-1"].state is StepState.FAILED
    assert "3 of 120 tests failed" in result.steps["step-1"].error.message
    assert result.steps["step-2"].state is StepState.CANCELLED
    assert result.steps["step-3"].state is StepState.CANCELLED
