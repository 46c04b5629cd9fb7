"""Validation names every problem: step, field and rule, all at once."""

from __future__ import annotations

import pytest

from planexec import Plan, Registry, check_plan, validate_plan
from planexec.errors import PlanValidationError


@pytest.fixture
def reg():
    reg = Registry.default()

    @reg.tool(worker="math")
    def add(a: int, b: int = 0) -> int:
        return a + b

    @reg.tool(worker="writer")
    def write(text: str, tags: list[str] | None = None) -> str:
        return text

    return reg


def plan(*steps, **extra):
    return Plan.model_validate({"plan_id": "p", "goal": "g", "steps": list(steps), **extra})


def rules(problems):
    return sorted(((p.step_id or ""), p.field, p.rule) for p in problems)


def test_a_valid_plan_has_no_problems(reg):
    p = plan(
        {"id": "a", "action": "add", "worker": "math", "parameters": {"a": 1}},
        {"id": "b", "action": "write", "worker": "writer", "parameters": {"text": "sum is ${a}", "tags": ["${a}"]}},
        {"id": "c", "action": "add", "worker": "tool", "parameters": {"a": "${a}", "b": "${b.length}"}},
    )
    assert validate_plan(p, reg) == []
    assert check_plan(p, reg) is p


def test_duplicate_ids_and_unknown_dependencies(reg):
    p = plan(
        {"id": "a", "action": "add", "parameters": {"a": 1}},
        {"id": "a", "action": "add", "parameters": {"a": 1}},
        {"id": "b", "action": "add", "parameters": {"a": 1}, "depends_on": ["zzz", "b"]},
    )
    assert rules(validate_plan(p, reg)) == [
        ("a", "id", "duplicate_step_id"),
        ("b", "depends_on", "self_dependency"),
        ("b", "depends_on", "unknown_dependency"),
    ]


def test_cycles_are_reported_with_their_path(reg):
    p = plan(
        {"id": "a", "action": "add", "parameters": {"a": 1}, "depends_on": ["c"]},
        {"id": "b", "action": "add", "parameters": {"a": 1}, "depends_on": ["a"]},
        {"id": "c", "action": "add", "parameters": {"a": 1}, "depends_on": ["b"]},
        {"id": "x", "action": "add", "parameters": {"a": 1}, "depends_on": ["y"]},
        {"id": "y", "action": "add", "parameters": {"a": 1}, "depends_on": ["x"]},
    )
    problems = [p for p in validate_plan(p, reg) if p.rule == "cycle"]
    assert len(problems) == 2
    texts = " | ".join(p.message for p in problems)
    assert "a -> c -> b -> a" in texts or "c -> b -> a -> c" in texts or "b -> a -> c -> b" in texts
    assert "x -> y -> x" in texts or "y -> x -> y" in texts


def test_reference_problems(reg):
    p = plan(
        {"id": "a", "action": "add", "parameters": {"a": "${b}"}},
        {"id": "b", "action": "add", "parameters": {"a": "${nobody.x}"}, "depends_on": ["a"]},
        {"id": "c", "action": "add", "parameters": {"a": "${c}"}},
    )
    assert rules(validate_plan(p, reg)) == [
        ("a", "parameters.a", "reference_not_upstream"),
        ("b", "parameters.a", "unknown_reference"),
        ("c", "parameters.a", "self_reference"),
    ]


def test_unknown_workers_and_actions(reg):
    p = plan(
        {"id": "a", "action": "nope", "worker": "math"},
        {"id": "b", "action": "add", "worker": "ghost"},
        {"id": "c", "action": "write", "worker": "math", "parameters": {"text": "t"}},
    )
    problems = validate_plan(p, reg)
    assert rules(problems) == [
        ("a", "action", "unknown_action"),
        ("b", "worker", "unknown_worker"),
        ("c", "action", "action_not_offered"),
    ]
    assert "workers that can: tool, writer" in next(p for p in problems if p.step_id == "c").message


def test_parameters_are_checked_against_the_tool_schema(reg):
    p = plan(
        {"id": "a", "action": "add", "parameters": {"b": 2}},
        {"id": "b", "action": "add", "parameters": {"a": 1, "c": 3}},
        {"id": "c", "action": "add", "parameters": {"a": "three"}},
        {"id": "d", "action": "write", "parameters": {"text": "x", "tags": [1, "${a}"]}},
    )
    assert rules(validate_plan(p, reg)) == [
        ("a", "parameters.a", "missing_parameter"),
        ("b", "parameters.c", "unknown_parameter"),
        ("c", "parameters.a", "wrong_type"),
        ("d", "parameters.tags.0", "wrong_type"),
    ]


def test_failure_actions_and_criteria_are_checked(reg):
    p = plan(
        {"id": "a", "action": "add", "worker": "math", "parameters": {"a": 1}, "failure_action": {"kind": "fallback", "worker": "nobody"}},
        {"id": "b", "action": "add", "worker": "math", "parameters": {"a": 1}, "failure_action": {"kind": "fallback"}},
        {"id": "c", "action": "add", "worker": "math", "parameters": {"a": 1}, "failure_action": {"kind": "fallback", "worker": "writer"}},
        {"id": "d", "action": "add", "worker": "math", "parameters": {"a": 1}, "failure_action": {"kind": "fallback", "worker": "math"}},
        {
            "id": "e",
            "action": "add",
            "parameters": {"a": 1},
            "success_criteria": ["is_prime", {"kind": "regex", "pattern": "(("}, {"kind": "json_schema", "schema": {"type": 5}}],
        },
        answer_step="zzz",
    )
    assert rules(validate_plan(p, reg)) == [
        ("", "answer_step", "unknown_step"),
        ("a", "failure_action.worker", "unknown_worker"),
        ("b", "failure_action.worker", "missing_fallback_worker"),
        ("c", "failure_action.worker", "action_not_offered"),
        ("d", "failure_action.worker", "fallback_to_same_worker"),
        ("e", "success_criteria.0", "unknown_predicate"),
        ("e", "success_criteria.1", "invalid_regex"),
        ("e", "success_criteria.2", "invalid_json_schema"),
    ]


def test_rollback_plan_steps_are_validated_too(reg):
    p = plan({"id": "a", "action": "add", "parameters": {"a": 1}}, rollback_plan={"steps": [{"id": "r", "action": "nope"}]})
    assert rules(validate_plan(p, reg)) == [("r", "rollback_plan.action", "unknown_action")]


def test_all_problems_in_one_exception_with_a_readable_rendering(reg):
    p = plan(
        {"id": "a", "action": "add", "parameters": {"a": 1}, "depends_on": ["b"]},
        {"id": "b", "action": "add", "parameters": {"a": 1}, "depends_on": ["a"]},
        {"id": "c", "action": "frobnicate"},
        {"id": "d", "action": "add", "parameters": {"a": "${ghost}"}},
    )
    with pytest.raises(PlanValidationError) as info:
        check_plan(p, reg)
    err = info.value
    assert {p.rule for p in err.problems} == {"cycle", "unknown_action", "unknown_reference"}
    text = str(err)
    assert text.startswith("plan 'p' has 3 problems:")
    assert "step 'c' · action · unknown_action" in text
    assert "step 'd' · parameters.a · unknown_reference: ${ghost} refers to no step of the plan" in text
    assert [p.to_dict()["rule"] for p in err.problems]


def test_structural_checks_work_without_a_registry():
    p = plan({"id": "a", "action": "anything", "depends_on": ["a"]})
    assert rules(validate_plan(p)) == [("a", "depends_on", "self_dependency")]


def test_references_in_instructions_are_checked_and_imply_dependencies(reg):
    p = plan(
        {"id": "a", "action": "add", "parameters": {"a": 1}},
        {"id": "b", "action": "add", "parameters": {"a": 1}, "instruction": "compare with ${a} and ${nobody}"},
    )
    assert rules(validate_plan(p, reg)) == [("b", "instruction", "unknown_reference")]
    assert p.steps[1].dependencies == ["a", "nobody"]


def test_references_that_close_a_loop_together_are_a_cycle(reg):
    p = plan(
        {"id": "a", "action": "add", "parameters": {"a": "${b}"}},
        {"id": "b", "action": "add", "parameters": {"a": "${a}"}},
    )
    problems = validate_plan(p, reg)
    assert [(x.rule, x.field) for x in problems] == [("cycle", "parameters")]
    assert "a -> b -> a" in problems[0].message or "b -> a -> b" in problems[0].message


def test_validation_of_a_large_plan_with_references_is_fast_enough_to_be_linear(reg):
    # 3,000 steps, each using its predecessor's output: a quadratic check would take seconds
    steps = [{"id": "s0", "action": "add", "parameters": {"a": 1}}]
    steps += [{"id": f"s{i}", "action": "add", "parameters": {"a": f"${{s{i - 1}}}"}} for i in range(1, 3000)]
    assert validate_plan(plan(*steps), reg) == []


def test_densely_cyclic_plans_are_reported_not_crashed_on(reg):
    ids = ["a", "b", "c", "d"]
    p = plan(
        *[{"id": i, "action": "add", "parameters": {"a": "${a}" if i == "d" else 1}, "depends_on": [j for j in ids if j != i]} for i in ids]
    )
    problems = validate_plan(p, reg)
    assert problems and all(x.rule in ("cycle", "reference_not_upstream", "self_reference") for x in problems)


def test_predicate_arguments_and_fallback_parameters_are_checked_up_front(reg):
    @reg.tool(worker="backup")
    def add2(a: int, bonus: int) -> int:
        return a + bonus

    reg.worker("backup").tools["add"] = reg.worker("backup").tools.pop("add2")
    p = plan(
        {"id": "a", "action": "add", "worker": "math", "parameters": {"a": 1}, "failure_action": {"kind": "fallback", "worker": "backup"}},
        {
            "id": "b",
            "action": "add",
            "parameters": {"a": 1},
            "success_criteria": [{"kind": "predicate", "name": "has_keys", "args": {"kys": ["x"]}}],
        },
    )
    found = rules(validate_plan(p, reg))
    assert ("a", "parameters.bonus", "missing_parameter") in found
    assert ("b", "success_criteria.0.args.keys", "missing_parameter") in found
    assert ("b", "success_criteria.0.args.kys", "unknown_parameter") in found
