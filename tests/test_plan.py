"""The Plan model: shape, JSON form, schema, content hash, references."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import jsonschema
import pytest

from planexec import FailureAction, Plan
from planexec.errors import PlanParseError
from planexec.plan.model import (
    JsonSchemaCriterion,
    NotEmptyCriterion,
    PredicateCriterion,
)
from planexec.plan.references import find_references, lookup, resolve_references


def make_plan(**overrides):
    data = {
        "plan_id": "p1",
        "goal": "add numbers",
        "steps": [
            {"id": "a", "action": "add", "parameters": {"a": 1, "b": 2}},
            {"id": "b", "action": "add", "parameters": {"a": "${a}", "b": 3}},
        ],
    }
    data.update(overrides)
    return Plan.model_validate(data)


def test_json_round_trip_is_stable():
    plan = make_plan(risk_level="high", estimated_duration="15 minutes", rollback_plan="undo-it")
    text = plan.to_json()
    again = Plan.from_json(text)
    assert again == plan
    assert again.to_json() == text
    data = json.loads(text)
    assert data["steps"][0]["id"] == "a"  # the JSON says id, the code says step_id
    assert data["content_hash"] == plan.content_hash
    assert data["estimated_duration"] == "PT15M"


def test_content_hash_ignores_identity_but_not_content():
    plan = make_plan()
    assert make_plan(plan_id="other", version=3, revises=2).content_hash == plan.content_hash
    changed = make_plan(steps=[{"id": "a", "action": "add", "parameters": {"a": 1, "b": 99}}])
    assert changed.content_hash != plan.content_hash
    assert plan.content_hash.startswith("sha256:")


def test_schema_is_a_valid_json_schema_that_accepts_dumped_plans():
    schema = Plan.model_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"  # a root object, as structured-output APIs require
    assert {"plan_id", "goal", "steps"} <= set(schema["required"])
    plan = make_plan(
        steps=[
            {
                "id": "a",
                "action": "add",
                "success_criteria": ["not_empty", {"kind": "regex", "pattern": "^3$"}],
                "failure_action": {"kind": "retry", "max_attempts": 2},
            }
        ]
    )
    dumped = json.loads(plan.to_json())
    dumped.pop("content_hash")
    jsonschema.validate(dumped, schema)
    bad = dict(dumped, steps=[{"id": "a"}])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_shorthands_expand_to_typed_records():
    step = make_plan(steps=[{"id": "a", "action": "x", "success_criteria": "all_good", "failure_action": "skip"}]).steps[0]
    assert step.success_criteria == [PredicateCriterion(name="all_good")]
    assert step.failure_action == FailureAction(kind="skip")
    step = make_plan(
        steps=[{"id": "a", "action": "x", "success_criteria": ["not_empty", {"kind": "json_schema", "schema": {"type": "object"}}]}]
    ).steps[0]
    assert isinstance(step.success_criteria[0], NotEmptyCriterion)
    assert isinstance(step.success_criteria[1], JsonSchemaCriterion)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15 minutes", 900), ("2h", 7200), ("30 s", 30), ("1 day", 86400), ("PT5M", 300), (42, 42)],
)
def test_estimated_duration_accepts_human_forms(text, seconds):
    assert make_plan(estimated_duration=text).estimated_duration == timedelta(seconds=seconds)


def test_references_imply_dependencies():
    plan = make_plan(
        steps=[
            {"id": "a", "action": "x"},
            {"id": "b", "action": "x"},
            {"id": "c", "action": "x", "depends_on": ["b"], "parameters": {"v": "${a.items.0}", "t": "see ${b}"}},
        ]
    )
    assert plan.steps[2].dependencies == ["b", "a"]
    assert plan.sinks() == ["c"]


def test_find_and_resolve_references():
    params = {
        "whole": "${a}",
        "path": "${a.items.1.name}",
        "tmpl": "n=${b} and ${a.count}",
        "nested": ["${b}", {"k": "${a.count}"}],
        "lit": "$${a}",
    }
    assert sorted(find_references(params)) == sorted(
        [("a", ""), ("a", "items.1.name"), ("b", ""), ("a", "count"), ("b", ""), ("a", "count")]
    )
    outputs = {"a": {"items": [{"name": "x"}, {"name": "y"}], "count": 2}, "b": 7}
    resolved = resolve_references(params, outputs)
    assert resolved["whole"] == outputs["a"]  # whole references keep the type
    assert resolved["path"] == "y"
    assert resolved["tmpl"] == "n=7 and 2"  # templates are text
    assert resolved["nested"] == [7, {"k": 2}]
    assert resolved["lit"] == "${a}"  # $${ escapes a literal
    assert resolve_references({"v": "${a.count}"}, {}, frozenset({"a"})) == {"v": None}


def test_lookup_names_what_is_missing():
    with pytest.raises(LookupError, match="no key 'nope'"):
        lookup({"a": 1}, "nope")
    with pytest.raises(LookupError, match="no index '5'"):
        lookup([1, 2], "5")


def test_malformed_json_names_the_line():
    with pytest.raises(PlanParseError) as info:
        Plan.from_json('{"plan_id": "p",\n "goal": }')
    assert info.value.problems[0].rule == "malformed_json"
    assert "line 2" in str(info.value)


def test_shape_errors_name_step_and_field_all_at_once():
    data = {
        "plan_id": "p",
        "goal": "g",
        "steps": [
            {"id": "ok", "action": "x"},
            {"id": "s2", "action": "x", "timeout": -1, "colour": "red"},
            {"id": "bad id!", "action": "x"},
        ],
    }
    with pytest.raises(PlanParseError) as info:
        Plan.from_data(data)
    found = {(p.step_id, p.field, p.rule) for p in info.value.problems}
    assert ("s2", "timeout", "greater_than") in found
    assert ("s2", "colour", "unknown_field") in found
    assert ("bad id!", "id", "string_pattern_mismatch") in found
    assert "3 problems" in str(info.value)


def test_missing_required_fields_are_named():
    with pytest.raises(PlanParseError) as info:
        Plan.from_data({"plan_id": "p", "steps": [{"id": "a"}]})
    found = {(p.step_id, p.field, p.rule) for p in info.value.problems}
    assert (None, "goal", "missing_field") in found
    assert ("a", "action", "missing_field") in found


def test_retry_delay_grows_exponentially_with_bounded_jitter():
    fa = FailureAction(kind="retry", backoff=1.0, backoff_multiplier=2.0, backoff_max=5.0, jitter=0.2)
    assert [fa.retry_delay(n, 0.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    assert fa.retry_delay(2, 1.0) == pytest.approx(1.6)


def test_copies_recompute_derived_values():
    plan = make_plan()
    before = plan.content_hash
    step = plan.steps[1]
    assert step.dependencies == ["a"]
    changed = plan.model_copy(update={"goal": "something else"})
    assert changed.content_hash != before
    new_step = step.model_copy(update={"parameters": {"a": 1, "b": 2}})
    assert new_step.dependencies == []


def test_an_exported_plan_shows_decisions_not_defaults_and_round_trips_to_the_same_hash():
    plan = Plan.from_data(
        {
            "plan_id": "p",
            "goal": "g",
            "steps": [
                {"id": "a", "action": "echo", "parameters": {"x": 1}},
                {"id": "b", "worker": "tool", "action": "echo", "depends_on": ["a"], "failure_action": "retry"},
            ],
            "rollback_plan": {"steps": [{"id": "undo", "action": "echo"}]},
        }
    )
    text = plan.to_json()
    data = json.loads(text)
    assert data["steps"][0] == {"id": "a", "worker": "tool", "action": "echo", "parameters": {"x": 1}}
    assert data["steps"][1]["failure_action"] == {"kind": "retry"}
    assert data["rollback_plan"]["steps"] == [{"id": "undo", "worker": "tool", "action": "echo"}]
    assert "version" not in data and "instruction" not in data["steps"][0]
    back = Plan.from_json(text)
    assert back == plan and back.content_hash == plan.content_hash == data["content_hash"]


def test_the_content_hash_is_the_canonical_json_of_what_the_plan_does_hashed_a_step_at_a_time():
    """The hash is computed a step at a time (no 190 MB of Python data for a 100,000-step plan); its bytes must be
    those of the whole canonical JSON at once: stored approvals and templates are keyed by it."""

    def whole(plan: Plan) -> str:
        content = plan.model_dump(mode="json", by_alias=True, include={"goal", "steps", "rollback_plan", "risk_level", "answer_step"})
        blob = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()

    step = {"id": "a", "action": "t", "parameters": {"z": 1, "a": [1.5, None, {"b": 'é \u2028 "q"'}]}}
    checked = {"id": "b", "action": "t", "depends_on": ["a"], "success_criteria": [{"kind": "json_schema", "schema": {"type": "object"}}]}
    plans = [
        make_plan(),
        Plan.from_data({"plan_id": "x", "goal": "ü", "steps": [step]}),
        Plan.from_data(
            {
                "plan_id": "y",
                "goal": "g",
                "risk_level": "high",
                "answer_step": "b",
                "steps": [step, checked],
                "rollback_plan": {"steps": [{"id": "r", "action": "undo"}]},
            }
        ),
        Plan.from_data({"plan_id": "z", "goal": "g", "rollback_plan": "saved-undo", "steps": [step, checked]}),
    ]
    for plan in plans:
        assert plan.content_hash == whole(plan)
    assert len({p.content_hash for p in plans}) == len(plans)
