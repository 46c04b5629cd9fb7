"""``planexec plan GOAL`` and ``planexec run GOAL`` with a scripted model provider (no real model)."""

from __future__ import annotations

import json

import pytest

from planexec.cli import main
from planexec.models.providers import register_provider
from planexec.testing import ScriptedModel

PLAN = json.dumps(
    {
        "steps": [
            {"id": "s1", "worker": "tool", "action": "calculator", "instruction": "multiply", "parameters": {"expression": "17 * 23"}, "depends_on": []},
            {"id": "s2", "worker": "tool", "action": "calculator", "instruction": "add", "parameters": {"expression": "4 + 1"}, "depends_on": []},
            {"id": "s3", "worker": "tool", "action": "concat", "instruction": "join", "parameters": {"parts": ["${s1}", "${s2}"], "separator": " and "}, "depends_on": ["s1", "s2"]},
        ]
    }
)
BAD = json.dumps({"steps": [{"id": "s1", "worker": "tool", "action": "teleport", "instruction": "x", "parameters": {}, "depends_on": []}]})


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    """A provider ``script:NAME`` whose model answers from `answers` (set per test)."""
    answers: list = []
    register_provider("script", lambda model, options: ScriptedModel(answers, name=f"script:{model}", token_delay=0.001), replace=True)
    monkeypatch.chdir(tmp_path)
    for key in ("OPENAI_API_KEY", "PLANEXEC_PLANNER_MODEL", "PLANEXEC_WORKER_MODEL"):
        monkeypatch.delenv(key, raising=False)
    return answers


def test_plan_writes_a_validated_plan_file_and_names_the_model(scripted, tmp_path, capsys):
    scripted.extend([BAD, PLAN])
    code = main(["plan", "two sums joined", "--model", "script:planner", "-o", "out.json", "--show-graph"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "planner: script:planner (--model script:planner)" in err
    assert "planned in 2 draft(s), after 1 repair(s)" in out
    assert "s3 tool.concat  (also after s1)" in out  # the text DAG
    saved = json.loads((tmp_path / "out.json").read_text())
    assert [s["id"] for s in saved["steps"]] == ["s1", "s2", "s3"] and saved["goal"] == "two sums joined"


def test_run_goal_plans_executes_and_reports_usage_per_role(scripted, capsys):
    scripted.append(PLAN)
    code = main(["run", "two sums joined", "--model", "script:planner", "--yes"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "391 and 5" in out  # the deliverable
    assert "usage by role" in out and "planner" in out
    assert "plan draft 1 by script:planner" in out


def test_run_goal_as_json_counts_the_planner_in_the_runs_usage(scripted, capsys):
    scripted.append(PLAN)
    assert main(["run", "two sums joined", "--model", "script:planner", "--yes", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "succeeded" and result["answer"] == "391 and 5"
    assert result["planning_usage"]["model_calls"] == 1
    assert result["usage"]["model_calls"] == 1 and result["usage"]["input_tokens"] == result["planning_usage"]["input_tokens"]


def test_run_goal_streams_the_plan_into_the_engine(scripted, capsys):
    scripted.append(PLAN)
    code = main(["run", "two sums joined", "--model", "script:planner", "--yes", "--stream"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "s1: parsed from the planner's stream" in out and "plan complete: 3 steps" in out
    assert out.index("s1: started") < out.index("plan complete")
    assert "391 and 5" in out


def test_a_plan_is_not_run_without_approval_when_no_one_can_be_asked(scripted, capsys, monkeypatch):
    scripted.append(PLAN)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main(["run", "two sums joined", "--model", "script:planner"]) == 1
    assert "approve it with --yes" in capsys.readouterr().err


def test_streaming_needs_yes_and_a_goal_or_plan_but_not_both(scripted, capsys):
    assert main(["run", "g", "--model", "script:p", "--stream"]) == 2
    assert "--stream" in capsys.readouterr().err
    assert main(["run", "g", "--plan", "x.json"]) == 2
    assert main(["run"]) == 2
    assert "give a GOAL" in capsys.readouterr().err


def test_a_planner_that_never_writes_a_valid_plan_exits_1_with_its_problems(scripted, capsys):
    scripted.extend([BAD, BAD, BAD])
    assert main(["plan", "g", "--model", "script:p"]) == 1
    err = capsys.readouterr().err
    assert "no valid plan" in err and "teleport" in err and "3 attempt(s)" in err


def test_an_unknown_provider_is_a_usage_error(scripted, capsys):
    assert main(["plan", "g", "--model", "nowhere:m"]) == 2
    assert "unknown provider 'nowhere'" in capsys.readouterr().err
