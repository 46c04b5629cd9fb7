"""Plan reuse: a goal that fits a saved template gets its plan filled in (rules, or a cheap model), else the planner plans."""

from __future__ import annotations

import asyncio
import json

import pytest

from planexec import Registry, tool
from planexec.cli.main import main
from planexec.config import Config
from planexec.engine.config import EngineConfig
from planexec.engine.events import RunStarted
from planexec.errors import PlanningError, PlanRejectedError, ToolError
from planexec.eval.oracle import OracleModel
from planexec.eval.suite import SolutionCall
from planexec.library.learning import goal_values, learn_template
from planexec.library.reuse import (
    Reuse,
    ReusePlanning,
    candidates,
    choice_schema,
    choose_request,
    goal_spans,
    latest_templates,
    match_rules,
    matchers_of,
    read_choice,
)
from planexec.library.templates import TemplateError
from planexec.models.providers import register_provider
from planexec.plan.references import find_references
from planexec.policies import ForbidTools
from planexec.store import open_store
from planexec.team.settings import PlanningOptions, ReviewOptions, Toolbox
from planexec.team.team import Team
from planexec.testing import ScriptedModel


@tool
def deploy(service: str, version: str, replicas: int = 1) -> str:
    """Deploy a version of a service."""
    return f"{service}@{version}x{replicas}"


@tool
def backup(database: str) -> str:
    """Back up a database; where the backup is."""
    return f"{database}.bak"


@tool
def broken(city: str) -> str:
    """Always fails."""
    raise ToolError(f"no luck in {city}", tool="broken")


DEPLOY = {
    "plan_id": "deploy",
    "goal": "Deploy {{service}} version {{version}} with {{replicas}} replicas",
    "steps": [
        {"id": "ship", "action": "deploy", "instruction": "deploy {{service}} {{version}}",
         "parameters": {"service": "{{service}}", "version": "{{version}}", "replicas": "{{replicas}}"}},
    ],
}  # fmt: skip
BACKUP = {
    "plan_id": "backup",
    "goal": "Back up the {{database}} database",
    "steps": [{"id": "save", "action": "backup", "instruction": "back up {{database}}", "parameters": {"database": "{{database}}"}}],
}
PLANNED = json.dumps(
    {
        "steps": [
            {"id": "s1", "worker": "tool", "action": "backup", "instruction": "back up", "parameters": {"database": "x"}, "depends_on": []}
        ]
    }
)
CHOICE = json.dumps({"template": "deploy", "values": {"service": "auth", "version": "2.1", "replicas": 3}})
LOOSE_GOAL = "Please deploy auth, version 2.1, with 3 replicas now"  # no rule fits: the words around differ


@pytest.fixture
def registry():
    r = Registry()
    r.add_tool(deploy)
    r.add_tool(backup)
    return r


@pytest.fixture
def store(tmp_path):
    s = open_store(str(tmp_path / "runs.db"))
    s.save_template("deploy", DEPLOY, params=["service", "version", "replicas"])
    s.save_template("backup", BACKUP, params=["database"])
    yield s
    s.close()


def team(registry, store, answers, *, reuse=None, max_repairs=2, policies=(), config=None, max_replans=2):
    """A team whose one scripted model plans, chooses templates and works (it raises when asked more than `answers`)."""
    return Team(
        ScriptedModel(answers),
        store=store,
        config=config,
        toolbox=Toolbox(registry=registry),
        planning=PlanningOptions(reuse=reuse, max_repairs=max_repairs),
        review=ReviewOptions(policies=policies, auto_approve=True),
        engine=EngineConfig(max_replans=max_replans),
    )


# --- the rules -------------------------------------------------------------------------------------


def test_rules_fill_text_and_typed_values_without_a_model_call(registry, store):
    t = team(registry, store, [])  # no answers: any model call would fail
    planning = t.plan_sync("deploy   AUTH version 2.10 with 3 replicas.")
    assert isinstance(planning, ReusePlanning) and planning.drafts == [] and planning.repairs == 0
    assert planning.reuse.reused and planning.reuse.matcher == "rules"
    assert (planning.reuse.template, planning.reuse.version) == ("deploy", 1)
    assert planning.reuse.values == {"service": "AUTH", "version": "2.10", "replicas": 3}  # text stays text, an int is read as JSON
    assert planning.plan.step("ship").parameters == {"service": "AUTH", "version": "2.10", "replicas": 3}
    assert planning.plan.goal == "deploy   AUTH version 2.10 with 3 replicas."  # the goal as given
    assert planning.usage.model_calls == 0 and t.models.worker.requests == []


def test_rules_refuse_a_value_that_is_not_of_its_parameters_type_and_prefer_the_most_specific_template(registry, store):
    templates = latest_templates(store)
    assert match_rules("Deploy auth version 2 with three replicas", templates, registry) == []  # replicas: an int
    store.save_template("deploy-any", {**DEPLOY, "goal": "Deploy {{service}}"}, params=["service"])
    fits = match_rules("Deploy auth version 2 with 4 replicas", latest_templates(store), registry)
    assert [t.name for t, _ in fits] == ["deploy", "deploy-any"]  # the longest literal text first
    assert fits[1][1] == {"service": "auth version 2 with 4 replicas"}
    assert match_rules("Deploy {{x}}", [], registry) == []


def test_a_template_that_is_all_placeholders_is_left_to_the_model(registry, store):
    store.save_template("anything", {**BACKUP, "goal": "{{database}}"}, params=["database"])
    assert match_rules("whatever", latest_templates(store), registry) == []


def test_the_latest_version_of_each_template_takes_part(registry, store):
    store.save_template("backup", {**BACKUP, "goal": "Save the {{database}} database"}, params=["database"])
    t = team(registry, store, [])
    assert t.plan_sync("Save the orders database").reuse.version == 2
    assert [x.version for x in latest_templates(store) if x.name == "backup"] == [2]


# --- the model ---------------------------------------------------------------------------------------


def test_a_model_chooses_the_template_and_its_values_when_no_rule_fits(registry, store):
    t = team(registry, store, [CHOICE])
    planning = t.plan_sync(LOOSE_GOAL)
    assert planning.reuse.reused and planning.reuse.matcher == "model" and planning.reuse.model == "test:scripted"
    assert planning.reuse.candidates == ["deploy"]  # backup shares too few words with the goal
    assert planning.plan.step("ship").parameters == {"service": "auth", "version": "2.1", "replicas": 3}
    assert planning.usage == planning.reuse.usage and planning.usage.model_calls == 1
    request = t.models.worker.requests[0]
    assert '"template": "deploy"' in request.messages[-1].content and request.output_schema["properties"]["template"]["enum"] == [
        "deploy",
        "none",
    ]


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ('{"template": "ghost", "values": {}}', "named template 'ghost', not one of deploy"),
        ('{"template": "deploy", "values": {"service": "auth"}}', "missing version, replicas"),
        ('{"template": "deploy", "values": {"service": "auth", "version": "2.1", "replicas": 3, "zone": "eu"}}', "unknown zone"),
        ('{"template": "deploy", "values": {"service": "billing", "version": "2.1", "replicas": 3}}', "('billing') is not in the goal"),
        ('{"template": "deploy", "values": {"service": "auth", "version": 2.1, "replicas": 3}}', "value of version is float, not text"),
        ('{"template": "none", "values": {}}', "found no template that fits"),
        ("sure, the deploy one!", "not JSON"),
    ],
)
def test_a_bad_or_empty_choice_falls_back_to_the_planner_saying_why(registry, store, answer, why):
    t = team(registry, store, [answer, PLANNED])
    planning = t.plan_sync(LOOSE_GOAL)
    assert not planning.reuse.reused and why in planning.reuse.fallback
    assert len(planning.drafts) == 1 and planning.plan.steps[0].action == "backup"  # the planner's plan
    assert planning.usage.model_calls == 2 and planning.reuse.usage.model_calls == 1  # the choosing call counts


def test_read_choice_takes_a_fenced_object_and_refuses_extra_keys(registry, store):
    shortlist = candidates(LOOSE_GOAL, latest_templates(store))
    chosen = read_choice(f"```json\n{CHOICE}\n```", shortlist, LOOSE_GOAL, registry)
    assert not isinstance(chosen, str) and chosen[0].name == "deploy"
    assert "not {" in str(read_choice('{"template": "deploy", "values": {}, "why": "x"}', shortlist, LOOSE_GOAL, registry))
    request = choose_request(LOOSE_GOAL, shortlist, registry)
    assert request.max_tokens and request.temperature == 0.0
    assert request.output_schema["properties"]["values"]["anyOf"][0]["properties"]["replicas"]["type"] == "integer"


def test_a_chosen_text_value_is_a_run_of_the_goals_words_under_the_schema(registry, store):
    """A model under the choice schema's grammar cannot make a value up: each text value is one of the goal's runs of words."""
    import jsonschema

    spans = goal_spans(LOOSE_GOAL)
    assert {"auth", "2.1", "deploy auth", "3 replicas now"} <= set(spans) and "Amaranthake" not in spans
    assert all(" ".join(span.split()).lower() in LOOSE_GOAL.lower() for span in spans) and len(spans) == len(set(spans))
    shortlist = candidates(LOOSE_GOAL, latest_templates(store))
    schema = choose_request(LOOSE_GOAL, shortlist, registry, spans=True).output_schema  # for a grammar-decoding model
    jsonschema.validate({"template": "deploy", "values": {"service": "auth", "version": "2.1", "replicas": 3}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"template": "deploy", "values": {"service": "Amaranthake", "version": "2.1", "replicas": 3}}, schema)
    # a hosted model may write a value of more than four words: its schema takes any text, `read_choice` checks it
    hosted = choose_request(LOOSE_GOAL, shortlist, registry).output_schema
    jsonschema.validate(
        {"template": "deploy", "values": {"service": "deploy auth, version 2.1, with", "version": "2.1", "replicas": 3}}, hosted
    )
    long_goal = " ".join(f"word{i}" for i in range(60))  # too many runs for an enum: any text, checked by read_choice
    templates = latest_templates(store)
    shapes = choice_schema(templates, registry, goal=long_goal)["properties"]["values"]["anyOf"]
    deploy = shapes[[t.name for t in templates].index("deploy")]["properties"]
    assert len(goal_spans(long_goal)) > 120 and deploy["service"]["type"] == "string" and "enum" not in deploy["service"]
    assert (
        goal_spans(" ".join(f"w{i}" for i in range(200_000)), limit=120) is None
    )  # a pasted document: given up on at once, not every run built


def test_a_goal_that_fits_nothing_calls_the_planner_once(registry, store):
    t = team(registry, store, [PLANNED])
    planning = t.plan_sync("Summarise yesterday's incidents")
    assert "shares half its words" in planning.reuse.fallback and planning.reuse.model is None
    assert len(t.models.worker.requests) == 1  # the planner's only: no choosing call without a candidate


def test_rules_only_never_asks_a_model(registry, store):
    t = team(registry, store, [PLANNED], reuse=["rules"])
    assert "no template's goal fits" in t.plan_sync(LOOSE_GOAL).reuse.fallback
    assert len(t.models.worker.requests) == 1


def test_a_filled_plan_that_no_longer_validates_goes_to_the_planner(registry, store):
    store.save_template("teleport", {**BACKUP, "goal": "Teleport {{database}} home", "steps": [{**BACKUP["steps"][0], "action": "teleport"}]},
                        params=["database"])  # fmt: skip
    t = team(registry, store, [PLANNED])
    planning = t.plan_sync("Teleport orders home")
    assert planning.reuse.template == "teleport" and "teleport v1 gives no valid plan" in planning.reuse.fallback
    assert "teleport" in planning.reuse.fallback.split("plan:")[1]  # the validator's problem, naming the action
    assert len(planning.drafts) == 1


def test_a_planner_that_gives_up_counts_the_choosing_call(registry, store):
    t = team(registry, store, ['{"template": "none", "values": {}}', "not a plan"], max_repairs=0)
    with pytest.raises(PlanningError) as caught:
        t.plan_sync(LOOSE_GOAL)
    assert caught.value.usage.model_calls == 2


# --- the team: off, review, the run's record ---------------------------------------------------------


def test_reuse_off_plans_from_scratch(registry, store):
    for t in (team(registry, store, [PLANNED], reuse=False), team(registry, store, [PLANNED], config=Config(reuse=False))):
        planning = t.plan_sync("Back up the orders database")
        assert not isinstance(planning, ReusePlanning) and len(planning.drafts) == 1
    assert matchers_of(None) == matchers_of(True) == ("rules", "model") and matchers_of(False) == ()
    with pytest.raises(ValueError, match="unknown matcher"):
        matchers_of(["rules", "magic"])


def test_a_reused_plan_is_reviewed_by_the_policies_like_a_planned_one(registry, store):
    t = team(registry, store, [], policies=[ForbidTools("deploy")])
    with pytest.raises(PlanRejectedError, match="deploy"):
        t.run_sync("Deploy auth version 2.1 with 3 replicas")
    assert t.run_sync("Back up the orders database").answer == "orders.bak"  # the policy lets the other template through


def test_the_run_records_where_its_plan_came_from_and_counts_the_choice(registry, store):
    t = team(registry, store, [CHOICE])
    result = t.run_sync(LOOSE_GOAL, mode="plan")
    assert result.status.value == "succeeded" and result.answer == "auth@2.1x3"
    assert result.usage_by_role()["reuse"].model_calls == 1 and result.usage.model_calls == 1
    started = next(e for e in store.events(result.run_id) if isinstance(e, RunStarted))
    recorded = Reuse.from_dict(started.setup["reuse"])
    assert (recorded.template, recorded.matcher, recorded.values["service"]) == ("deploy", "model", "auth")
    assert Reuse.from_json(recorded.to_json()) == recorded and recorded.describe().startswith("reused template deploy v1 (chosen by")


def test_in_auto_mode_a_goal_a_rule_fits_skips_the_router(registry, store):
    """A saved plan fits the goal word for word: no router call, no model call at all; a goal that fits nothing is routed."""
    silent = ScriptedModel([])  # any model call is recorded, then raises
    t = Team(silent, store=store, toolbox=Toolbox(registry=registry), review=ReviewOptions(auto_approve=True))
    result = t.run_sync("Deploy auth version 2.1 with 3 replicas", mode="auto")
    assert result.status.value == "succeeded" and result.answer == "auth@2.1x3"
    assert silent.requests == [] and result.usage.model_calls == 0
    model = ScriptedModel(['{"decompose": true, "reason": "a backup"}', PLANNED])
    routed = Team(
        model,
        store=store,
        toolbox=Toolbox(registry=registry),
        review=ReviewOptions(auto_approve=True),
        planning=PlanningOptions(reuse=["rules"], routing="router"),
    )
    result = routed.run_sync("Make a backup of every database we have", mode="auto")
    assert result.status.value == "succeeded" and result.usage_by_role()["router"].model_calls == 1
    planner = ScriptedModel([PLANNED])  # the default routing: the planner's call, no router's
    planned = Team(
        planner,
        store=store,
        toolbox=Toolbox(registry=registry),
        review=ReviewOptions(auto_approve=True),
        planning=PlanningOptions(reuse=["rules"]),
    )
    result = planned.run_sync("Make a backup of every database we have", mode="auto")
    assert result.status.value == "succeeded" and set(result.usage_by_role()) == {"planner"} and len(planner.requests) == 1


def test_a_value_never_becomes_a_step_reference_or_a_placeholder(registry, store):
    t = team(registry, store, [])
    planning = t.plan_sync("Deploy ${backup.path} version {{x}} with 2 replicas")
    step = planning.plan.step("ship")
    assert step.parameters["service"] == "$${backup.path}" and step.instruction == "deploy $${backup.path} {{x}}"  # escaped
    assert step.dependencies == [] and find_references(step.parameters) == [] and find_references(step.instruction) == []
    assert step.parameters["version"] == "{{x}}"  # literal text: a plan has no placeholders
    result = t.execute_sync(planning.plan)
    assert result.answer == "${backup.path}@{{x}}x2"  # the tool got the text as written


# --- learning templates from runs --------------------------------------------------------------------


def test_a_successful_run_is_learned_with_its_goals_values_text_and_typed(registry, tmp_path):
    plan = {"steps": [{"id": "s1", "worker": "tool", "action": "deploy", "instruction": "ship auth",
                       "parameters": {"service": "auth", "version": "2.1", "replicas": 3}, "depends_on": []}]}  # fmt: skip
    with open_store(str(tmp_path / "runs.db")) as store:
        t = team(registry, store, [json.dumps(plan)], reuse=False)
        result = t.run_sync("Deploy auth version 2.1 with 3 replicas", mode="plan")
        assert goal_values(result.plan) == {"service": "auth", "version": "2.1", "replicas": 3}
        saved = learn_template(store, result.run_id, registry=registry)
        assert saved is not None and saved.template.name.startswith("learned-deploy-version-with-replicas-")
        assert saved.template.plan["goal"] == "Deploy {{service}} version {{version}} with {{replicas}} replicas"
        assert saved.template.plan["steps"][0]["parameters"]["replicas"] == "{{replicas}}"
        assert learn_template(store, result.run_id, registry=registry) is None  # nothing new
        again = team(registry, store, []).plan_sync("Deploy billing version 3.0 with 5 replicas")
        assert again.reuse.reused and again.plan.steps[0].parameters == {"service": "billing", "version": "3.0", "replicas": 5}


def test_only_a_run_that_succeeded_is_learned(registry, tmp_path):
    registry.add_tool(broken)
    plan = {
        "steps": [
            {"id": "s1", "worker": "tool", "action": "broken", "instruction": "x", "parameters": {"city": "Avalon"}, "depends_on": []}
        ]
    }
    with open_store(str(tmp_path / "runs.db")) as store:
        result = team(registry, store, [json.dumps(plan)], reuse=False, max_replans=0).run_sync("Break Avalon", mode="plan")
        assert result.status.value != "succeeded"
        with pytest.raises(TemplateError, match="did not succeed") as caught:
            learn_template(store, result.run_id, registry=registry)
        assert caught.value.rule == "no_plan"


# --- the oracle's choice (the benchmark's fill-in model) --------------------------------------------------


def test_the_oracle_chooses_the_template_whose_steps_are_its_solution(registry, store):
    solution = [SolutionCall(call_id="ship", tool="deploy", args={"service": "auth", "version": "2.1", "replicas": 3})]
    oracle = OracleModel(solution)
    request = choose_request(LOOSE_GOAL, latest_templates(store), registry)
    answer = json.loads(asyncio.run(oracle.complete(request)).text)
    assert answer == {"template": "deploy", "values": {"service": "auth", "version": "2.1", "replicas": 3}}
    other = OracleModel([SolutionCall(call_id="x", tool="backup", args={"database": "orders"}), *solution])
    assert json.loads(asyncio.run(other.complete(request)).text)["template"] == "none"


# --- the CLI -------------------------------------------------------------------------------------------


TOOLS = '''
from planexec import tool


@tool
def deploy(service: str, version: str, replicas: int = 1) -> str:
    """Deploy a version of a service."""
    return f"{service}@{version}x{replicas}"
'''
CLI_PLAN = json.dumps(
    {"steps": [{"id": "s1", "worker": "tool", "action": "deploy", "instruction": "ship", "depends_on": [],
                "parameters": {"service": "billing", "version": "3.0", "replicas": 1}}]}
)  # fmt: skip


def test_the_cli_says_which_template_it_reused_and_no_reuse_plans_from_scratch(tmp_path, monkeypatch, capsys):
    answers: list[str] = []
    register_provider("reuse", lambda model, options: ScriptedModel(answers, name=f"reuse:{model}"), replace=True)
    monkeypatch.chdir(tmp_path)
    for key in ("OPENAI_API_KEY", "PLANEXEC_PLANNER_MODEL", "PLANEXEC_WORKER_MODEL", "PLANEXEC_STORE"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "tools.py").write_text(TOOLS)
    db = str(tmp_path / "runs.db")
    with open_store(db) as s:
        s.save_template("deploy", DEPLOY, params=["service", "version", "replicas"])
    run = ["run", "Deploy billing version 3.0 with 2 replicas", "--tools", "tools.py", "--model", "reuse:p", "--store", db, "--yes",
           "--mode", "plan"]  # fmt: skip
    assert main(run) == 0
    out, err = capsys.readouterr()
    assert "reused template deploy v1 (matched by rules, no model call)" in err
    assert "reused template deploy v1 (matched by rules, no model call): 0 tokens in" in out and "billing@3.0x2" in out

    answers.append(CLI_PLAN)
    assert main([*run, "--no-reuse"]) == 0
    out, err = capsys.readouterr()
    assert "reused" not in err + out and "planned in 1 draft(s)" in out and "billing@3.0x1" in out
