"""The plan library: templates saved from stored runs, filled in and run again without a planner (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime

import pytest

from planexec import Engine, Plan, Registry
from planexec.cli.main import main
from planexec.engine.events import RunStarted
from planexec.errors import PlanValidationError, RunNotFoundError
from planexec.library.export import EXPORT_FORMAT, export_templates, import_templates
from planexec.library.templates import (
    TemplateError,
    diff_templates,
    instantiate,
    make_template,
    parse_values,
    placeholders,
    save_run_template,
)
from planexec.models.providers import register_provider
from planexec.store import Template, open_store

TOOLS = '''
from planexec import tool


@tool
def deploy(service: str, version: str, replicas: int = 1) -> str:
    """Deploy a version of a service."""
    return f"{service}@{version}x{replicas}"


@tool
def backup(database: str) -> str:
    """Back up a database; where the backup is."""
    return f"{database}.bak"
'''

PLAN = {
    "plan_id": "deploy-auth-2.1.4",
    "goal": "Ship auth 2.1.4",
    "steps": [
        {"id": "backup", "action": "backup", "instruction": "back up auth before 2.1.4", "parameters": {"database": "auth_prod"}},
        {"id": "ship", "action": "deploy", "instruction": "deploy auth 2.1.4 once ${backup} exists",
         "parameters": {"service": "auth", "version": "2.1.4", "replicas": 3}, "depends_on": ["backup"]},
    ],
}  # fmt: skip
VALUES = {"service": "auth", "version": "2.1.4", "replicas": 3}


@pytest.fixture
def tools(tmp_path, monkeypatch):
    """The tools module as a file in the project folder (the current folder), and a registry with it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PLANEXEC_STORE", raising=False)
    (tmp_path / "tools.py").write_text(TOOLS)
    registry = Registry()
    registry.load_module(str(tmp_path / "tools.py"))
    return registry


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path):
    """A fresh run store: a SQLite file, or a schema of its own on the test PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    return f"{request.getfixturevalue('postgres_url')}?schema=library_{uuid.uuid4().hex[:12]}"


def record(url, registry, plan=PLAN, run_id="run-1"):
    """Run a plan to the end with the engine recording into the store at `url`; the result."""

    async def go():
        store = open_store(url)
        try:
            return await Engine(registry, store=store).start(Plan.from_data(plan), run_id=run_id).result()
        finally:
            store.close()

    return asyncio.run(go())


def template_of(data, params, name="t", version=1):
    return Template(name=name, version=version, plan=data, params=params, created_at=datetime.now(UTC))


# --- the library ---------------------------------------------------------------------


def test_save_replaces_each_value_and_fills_back_in_with_new_ones(tools, url):
    assert record(url, tools).status.value == "succeeded"
    with open_store(url) as store:
        saved = save_run_template(store, "run-1", "deploy", values=VALUES, description="ship a service")
        t = store.template("deploy")
    assert (t.version, t.source_run_id, t.description) == (1, "run-1", "ship a service")
    assert t.params == ["service", "version", "replicas"]  # in the order they first appear
    assert t.plan["goal"] == "Ship {{service}} {{version}}"
    backup, ship = t.plan["steps"]
    assert backup["parameters"] == {"database": "{{service}}_prod"}  # every occurrence of a value
    assert ship["instruction"] == "deploy {{service}} {{version}} once ${backup} exists"  # the reference untouched
    assert ship["parameters"] == {"service": "{{service}}", "version": "{{version}}", "replicas": "{{replicas}}"}
    assert saved.occurrences["replicas"] == ["ship.parameters.replicas"]
    assert "backup.parameters.database" in saved.occurrences["service"]

    plan = instantiate(t, {"service": "billing", "version": "3.0", "replicas": 2}, tools)
    assert plan.goal == "Ship billing 3.0"
    assert plan.step("ship").parameters == {"service": "billing", "version": "3.0", "replicas": 2}
    assert plan.step("backup").parameters == {"database": "billing_prod"}
    assert plan.step("ship").dependencies == ["backup"]
    assert plan.plan_id.startswith("deploy-v1-") and plan.version == 1
    assert instantiate(t, {"service": "billing", "version": "3.0", "replicas": 2}).plan_id == plan.plan_id
    assert instantiate(t, {"service": "billing", "version": "3.1", "replicas": 2}).plan_id != plan.plan_id
    # the same values give back the run's plan
    assert instantiate(t, VALUES).content_hash == Plan.from_data(PLAN).content_hash


def test_versions_diff_and_delete(tools, url):
    record(url, tools)
    with open_store(url) as store:
        save_run_template(store, "run-1", "deploy", values={"service": "auth"})
        save_run_template(store, "run-1", "deploy", values={"service": "auth", "version": "2.1.4"})
        v1, v2 = store.templates("deploy")
        diff = diff_templates(v1, v2)
        assert (diff.old_version, diff.new_version, diff.params_added, diff.params_removed) == (1, 2, ["version"], [])
        assert diff.plan.changed == {"backup": ["instruction"], "ship": ["instruction", "parameters"]}
        text = diff.render()
        assert "+ parameter version" in text and "~ ship (instruction, parameters)" in text
        assert 'ship.parameters.version: "2.1.4" -> "{{version}}"' in text
        assert 'goal: "Ship {{service}} 2.1.4" -> "Ship {{service}} {{version}}"' in text
        assert diff_templates(v2, v2).empty
        assert json.loads(diff.to_json())["plan"]["changed"]["backup"] == ["instruction"]

        assert store.delete_template("deploy", 1) == 1
        assert [t.version for t in store.templates("deploy")] == [2]
        save_run_template(store, "run-1", "deploy", values={"service": "auth"})
        assert [t.version for t in store.templates("deploy")] == [2, 3]  # numbers go on
        assert store.delete_template("deploy") == 2 and store.templates("deploy") == []


def test_bare_params_name_placeholders_the_plan_already_has(tools, url):
    written = {**PLAN, "steps": [PLAN["steps"][0], {**PLAN["steps"][1], "parameters": {"service": "{{service}}", "version": "2.1.4"}}]}
    record(url, tools, written)  # the deploy tool was handed the text "{{service}}": that is what this run did
    with open_store(url) as store:
        t = save_run_template(store, "run-1", "svc", values={"version": "2.1.4"}, declared=["service"]).template
        assert t.params == ["version", "service"]
        assert instantiate(t, {"service": "auth", "version": "9"}).step("ship").parameters == {"service": "auth", "version": "9"}
        with pytest.raises(TemplateError, match=r"no placeholder \{\{region\}\}") as err:
            save_run_template(store, "run-1", "svc", values={}, declared=["region"])
        assert (err.value.rule, err.value.names) == ("placeholder_missing", ["region"])
        assert [x.version for x in store.templates("svc")] == [1]  # a failed save stores nothing


def test_save_errors_name_the_run_and_the_value(tools, url):
    record(url, tools)
    with open_store(url) as store:
        with pytest.raises(RunNotFoundError, match="no run 'nope'"):
            save_run_template(store, "nope", "x", values={})
        store.append(
            [RunStarted(run_id="bare", seq=0, at=datetime.now(UTC), plan_id="p", plan_version=1, content_hash="h", goal="g", step_ids=[])]
        )
        with pytest.raises(TemplateError, match="run 'bare' has no stored plan") as err:
            save_run_template(store, "bare", "x", values={})
        assert err.value.template == "bare"
        with pytest.raises(TemplateError, match=r"holds the value of region=\"eu-west\"") as err:
            save_run_template(store, "run-1", "x", values={"service": "auth", "region": "eu-west"})
        assert (err.value.rule, err.value.names) == ("value_not_found", ["region"])
        with pytest.raises(TemplateError, match="template name"):
            save_run_template(store, "run-1", "bad name!", values={"service": "auth"})
        assert store.templates() == []


def test_a_plan_version_that_was_denied_or_is_pending_is_not_saved(tools, url):
    record(url, tools)
    plan = Plan.from_data(PLAN)
    with open_store(url) as store:
        store.request_approval("run-1", plan.content_hash)
        with pytest.raises(TemplateError, match="no approved plan version") as err:
            save_run_template(store, "run-1", "x", values={"service": "auth"})
        assert err.value.rule == "not_approved"
        store.decide_approval("run-1", approved=True, by="alice")
        assert save_run_template(store, "run-1", "x", values={"service": "auth"}).plan_version == 1


def test_overlapping_values_longest_first_and_literal_braces():
    plan = Plan.from_data({"plan_id": "p", "goal": "v2.1.4 is not v2.1, {{keep}} me", "steps": [
        {"id": "s", "action": "a", "instruction": "use ${s0} and $${literal} for 2.1.4", "parameters": {"x": "{{x}} 2.1"}},
        {"id": "s0", "action": "a"},
    ]})  # fmt: skip
    data, where = make_template(plan, {"minor": "2.1", "version": "2.1.4"})
    assert data["goal"] == "v{{version}} is not v{{minor}}, {{{{keep}} me"
    assert data["steps"][0]["instruction"] == "use ${s0} and $${literal} for {{version}}"
    assert data["steps"][0]["parameters"] == {"x": "{{{{x}} {{minor}}"}
    assert placeholders(data) == ["version", "minor"] and where["minor"] == ["goal", "s.parameters.x"]
    again = instantiate(template_of(data, ["version", "minor"]), {"minor": "2.1", "version": "2.1.4"})
    assert again.content_hash == plan.content_hash  # the literal "{{" comes back as written


def test_a_value_never_becomes_a_step_reference():
    data = {"plan_id": "p", "goal": "g {{v}}", "steps": [
        {"id": "a", "action": "x", "instruction": "say {{v}}", "parameters": {"text": "{{v}}", "more": "n={{v}}"}},
        {"id": "b", "action": "x", "instruction": "${{v}}"},
    ]}  # fmt: skip
    t = template_of(data, ["v"])
    with pytest.raises(TemplateError, match="would join the text around it into a step reference") as err:
        instantiate(t, {"v": "{a}"})
    assert err.value.rule == "reference"
    plan = instantiate(t, {"v": "${a}"})
    assert plan.goal == "g ${a}"  # the goal is never resolved: no escape
    step = plan.step("a")
    assert step.parameters == {"text": "$${a}", "more": "n=$${a}"} and step.instruction == "say $${a}"
    assert step.dependencies == [] and plan.step("b").dependencies == []
    from planexec.plan.references import resolve_references

    assert resolve_references(step.parameters, {}) == {"text": "${a}", "more": "n=${a}"}


def test_missing_extra_and_undeclared_parameters_are_named():
    t = template_of({"plan_id": "p", "goal": "{{a}} {{b}}", "steps": [{"id": "s", "action": "x"}]}, ["a", "b"], name="two")
    with pytest.raises(TemplateError, match=r"template 'two' v1 takes parameters a, b: missing b; unknown c") as err:
        instantiate(t, {"a": "1", "c": "3"})
    assert err.value.names == ["b", "c"] and err.value.template == "two"
    with pytest.raises(TemplateError, match="undeclared placeholders: b") as err:
        instantiate(template_of(t.plan, ["a"], name="two"), {"a": "1"})
    assert err.value.rule == "undeclared_placeholder"


def test_the_filled_in_plan_is_checked_against_the_registry(tools):
    data, _ = make_template(Plan.from_data(PLAN), VALUES)
    t = template_of(data, ["service", "version", "replicas"])
    with pytest.raises(PlanValidationError, match="replicas"):
        instantiate(t, {"service": "a", "version": "1", "replicas": "three"}, tools)  # a string where the tool takes an int


def test_parse_values():
    assert parse_values(["a=x=y", "n:=3", 'j:={"k": [1]}', "e="]) == ({"a": "x=y", "n": 3, "j": {"k": [1]}, "e": ""}, [])
    assert parse_values(["a=1", "b"], bare=True) == ({"a": "1"}, ["b"])
    for bad in (["b"], ["a=1", "a=2"], ["n:=nope"], ["1x=2"]):
        with pytest.raises(TemplateError) as err:
            parse_values(bad)
        assert err.value.rule == "bad_assignment"


def test_export_import_round_trip_and_bad_files(tools, url, tmp_path):
    record(url, tools)
    with open_store(url) as store:
        save_run_template(store, "run-1", "deploy", values={"service": "auth"}, description="one")
        save_run_template(store, "run-1", "deploy", values=VALUES, description="two")
        data = export_templates(store.templates("deploy"))
        assert (data["format"], data["format_version"], data["name"]) == (EXPORT_FORMAT, 1, "deploy")
        assert [v["params"] for v in data["versions"]] == [["service"], ["service", "version", "replicas"]]
        path = tmp_path / "deploy.json"
        path.write_text(json.dumps(data))
        again = import_templates(store, path)  # an existing name: new versions, nothing overwritten
        assert [(t.version, t.description) for t in again] == [(3, "one"), (4, "two")]
        assert store.template("deploy", 4).plan == store.template("deploy", 2).plan
        assert [t.version for t in import_templates(store, path, name="copy")] == [1, 2]

        bad = {
            "nope.json": "{not json",
            "foreign.json": json.dumps({"plan_id": "p", "goal": "g", "steps": []}),
            "later.json": json.dumps({**data, "format_version": 99}),
            "undeclared.json": json.dumps({**data, "versions": [{**data["versions"][1], "params": ["service"]}]}),
            "broken.json": json.dumps({**data, "versions": [data["versions"][0], {**data["versions"][1], "plan": {"goal": "g"}}]}),
        }
        for name, text in bad.items():
            (tmp_path / name).write_text(text)
            with pytest.raises(TemplateError, match=name) as err:
                import_templates(store, tmp_path / name)
            assert err.value.rule == "bad_file"
        assert [t.version for t in store.templates("deploy")] == [1, 2, 3, 4]  # a bad file stores nothing


# --- the commands ---------------------------------------------------------------------


@pytest.fixture
def no_model(monkeypatch):
    """Every model the configuration could name is a provider that counts its uses and fails: a run must not call one."""
    made = []

    def factory(model, options):
        made.append(model)
        raise AssertionError(f"a model was made: {model}")

    register_provider("forbidden", factory, replace=True)
    for key in ("PLANEXEC_PLANNER_MODEL", "PLANEXEC_WORKER_MODEL", "PLANEXEC_MODEL_AGENT"):
        monkeypatch.setenv(key, "forbidden:model")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return made


def test_done_when_a_saved_template_re_runs_with_new_parameters_and_no_model_call(tools, url, no_model, tmp_path, capsys, monkeypatch):
    assert record(url, tools).status.value == "succeeded"
    monkeypatch.setenv("PLANEXEC_STORE", url)  # where run --template finds the template (and records the run)
    argv = ["plans", "save", "run-1", "deploy", "--param", "service=auth", "--param", "version=2.1.4", "--param", "replicas:=3",
            "--description", "ship a service", "--store", url]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "saved template 'deploy' version 1 from plan v1 of run run-1" in out
    assert '{{version}} = "2.1.4": 4 place(s): goal, backup.instruction, ship.instruction, ship.parameters.version' in out

    run = ["run", "--template", "deploy", "-p", "service=billing", "-p", "version=2.1.5", "-p", "replicas:=2",
           "--tools", "tools.py", "--yes", "--json"]  # fmt: skip
    code = main(run)
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "succeeded"
    assert result["steps"]["ship"]["output"]["value"] == "billing@2.1.5x2"
    assert result["steps"]["backup"]["output"]["value"] == "billing_prod.bak"
    assert result["plan"]["plan_id"].startswith("deploy-v1-") and result["usage"]["model_calls"] == 0
    assert 'template \'deploy\' v1 with service="billing", version="2.1.5", replicas=2' in err
    assert no_model == []  # no planner, no model of any kind

    # the policies still review it: one that forbids the deploy tool stops it
    (tmp_path / "policies.yaml").write_text("forbid: [deploy]\n")
    assert main([*run, "--policies", "policies.yaml"]) == 1
    out, err = capsys.readouterr()
    assert "the plan was not run" in err and "deploy" in err and out == ""
    # and the validation: a value of the wrong type for the tool
    assert main([*run[:7], "-p", "replicas=two", *run[9:]]) == 1
    assert "replicas" in capsys.readouterr().out
    assert no_model == []


def test_run_template_errors(tools, url, capsys, monkeypatch):
    record(url, tools)
    monkeypatch.setenv("PLANEXEC_STORE", url)  # run finds the template in the configured store
    assert main(["plans", "save", "run-1", "deploy", "--param", "service=auth", "--store", url]) == 0
    capsys.readouterr()
    cases = [
        (["run", "--template", "deploy"], "template 'deploy' v1 takes parameters service: missing service"),
        (["run", "--template", "deploy", "-p", "service=a", "-p", "zone=b"], "unknown zone"),
        (["run", "--template", "nope"], "no template 'nope'"),
        (["run", "--template", "deploy@7", "-p", "service=a"], "no template 'deploy' version 7"),
        (["run", "--template", "deploy@x"], "NAME@VERSION"),
        (["run", "GOAL", "--template", "deploy"], "give no GOAL"),
        (["run", "--plan", "p.json", "-p", "a=b"], "use it with --template"),
        (["run", "--template", "deploy", "--mode", "single"], "a template runs as written"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv


def test_plans_commands(tools, url, tmp_path, capsys):
    record(url, tools)
    assert main(["plans", "list", "--store", url]) == 0
    assert "no plan templates" in capsys.readouterr().out
    for params in (["service=auth"], ["service=auth", "version=2.1.4"]):
        assert main(["plans", "save", "run-1", "deploy", *[x for p in params for x in ("--param", p)], "--store", url]) == 0
    capsys.readouterr()

    assert main(["plans", "list", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "deploy" in out and "v2" in out and "service, version" in out
    assert main(["plans", "show", "deploy", "--version", "1", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "template 'deploy' version 1 of 2" in out and "{{service}}" in out and "* v1" in out and "  v2" in out
    assert main(["plans", "show", "deploy", "--json", "--store", url]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["version"] == 2 and [v["version"] for v in shown["versions"]] == [1, 2]
    assert main(["plans", "diff", "deploy", "1", "2", "--store", url]) == 0
    assert "+ parameter version" in capsys.readouterr().out

    assert main(["plans", "export", "deploy", "-o", "deploy.json", "--store", url]) == 0
    assert json.loads((tmp_path / "deploy.json").read_text())["format"] == EXPORT_FORMAT
    assert main(["plans", "import", "deploy.json", "--store", url]) == 0
    assert "as template 'deploy' v3, v4" in capsys.readouterr().out
    (tmp_path / "junk.json").write_text("[1, 2]")
    assert main(["plans", "import", "junk.json", "--store", url]) == 2
    assert "not a planexec template export" in capsys.readouterr().err

    assert main(["plans", "delete", "deploy", "--version", "1", "--store", url]) == 0
    assert main(["plans", "delete", "deploy", "--store", url]) == 0
    assert "deleted 3 version(s)" in capsys.readouterr().out
    assert main(["plans", "show", "deploy", "--store", url]) == 2
    assert "no template 'deploy'" in capsys.readouterr().err
    assert main(["plans", "save", "ghost", "x", "--store", url]) == 2
    assert "no run 'ghost'" in capsys.readouterr().err
    assert main(["plans", "save", "run-1", "x", "--param", "service=zzz", "--store", url]) == 2
    assert 'holds the value of service="zzz"' in capsys.readouterr().err
