"""``planexec plan GOAL`` and ``planexec run GOAL`` with a scripted model provider (no real model)."""

from __future__ import annotations

import json

import pytest

from planexec.cli.main import main
from planexec.models.providers import register_provider
from planexec.testing import ScriptedModel, tool_call

PLAN = json.dumps(
    {
        "steps": [
            {
                "id": "s1",
                "worker": "tool",
                "action": "calculator",
                "instruction": "multiply",
                "parameters": {"expression": "17 * 23"},
                "depends_on": [],
            },
            {
                "id": "s2",
                "worker": "tool",
                "action": "calculator",
                "instruction": "add",
                "parameters": {"expression": "4 + 1"},
                "depends_on": [],
            },
            {
                "id": "s3",
                "worker": "tool",
                "action": "concat",
                "instruction": "join",
                "parameters": {"parts": ["${s1}", "${s2}"], "separator": " and "},
                "depends_on": ["s1", "s2"],
            },
        ]
    }
)
ONE_STEP = json.dumps(
    {
        "steps": [
            {
                "id": "s1",
                "worker": "tool",
                "action": "calculator",
                "instruction": "multiply",
                "parameters": {"expression": "17 * 23"},
                "depends_on": [],
            }
        ]
    }
)
ROUTE_PLAN = json.dumps({"decompose": True, "reason": "two sums, then a join"})
ROUTE_SINGLE = json.dumps({"decompose": False, "reason": "one multiplication"})
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
    scripted.extend([ROUTE_PLAN, PLAN])  # --routing router: the router's call, then the planner
    code = main(["run", "two sums joined", "--model", "script:planner", "--yes", "--routing", "router"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "mode: plan (router: two sums, then a join)" in err
    assert "391 and 5" in out  # the deliverable
    assert "usage by role" in out and "planner" in out and "router" in out
    assert "plan draft 1 by script:planner" in out


def test_by_default_the_planner_routes_a_goal_with_no_router_call(scripted, capsys):
    scripted.append(PLAN)  # --mode auto (the default): the planner's one call; its plan of three steps goes to the team
    code = main(["run", "two sums joined", "--model", "script:planner", "--yes", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "mode: plan (planner: planned first: a plan of one step is worked directly, several by the team)" in err
    result = json.loads(out)
    assert result["answer"] == "391 and 5" and list(result["steps"]) == ["s1", "s2", "s3"]
    assert result["overhead"] == {} and result["usage"]["model_calls"] == 1  # the planner's call only
    with pytest.raises(SystemExit):
        main(["run", "g", "--routing", "coin"])  # argparse names the choices
    assert "invalid choice: 'coin'" in capsys.readouterr().err


def test_run_goal_as_json_counts_the_planner_in_the_runs_usage(scripted, capsys):
    scripted.append(PLAN)
    assert main(["run", "two sums joined", "--model", "script:planner", "--yes", "--json", "--mode", "plan"]) == 0
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
    assert main(["run", "two sums joined", "--model", "script:planner", "--mode", "plan", "--no-store"]) == 1
    assert "approve it with --yes" in capsys.readouterr().err


def test_a_recorded_plan_waits_for_approval_from_another_process(scripted, capsys, monkeypatch, tmp_path):
    import threading
    import time

    from planexec.store import RunNotFoundError, open_store

    scripted.append(PLAN)
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    codes = []
    runner = threading.Thread(
        target=lambda: codes.append(
            main(["run", "two sums joined", "--model", "script:planner", "--mode", "plan", "--run-id", "r9", "--json"])
        )
    )
    runner.start()
    other = open_store(str(tmp_path / "planexec-runs.db"))  # the autouse store; another connection, as another process
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            pending = other.approvals("r9", pending_only=True)
        except RunNotFoundError:
            pending = []
        if pending:
            break
        time.sleep(0.05)
    assert pending and pending[0].step_id is None  # the plan itself waits, not a step
    assert not [e for e in other.events("r9") if e.type == "step_started"]  # nothing ran before approval
    other.decide_approval("r9", approved=True, by="ada")
    runner.join(60)
    assert codes == [0]
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "succeeded" and out["answer"] == "391 and 5"
    (approval,) = other.approvals("r9")
    assert (approval.by, approval.content_hash) == ("ada", out["plan"]["content_hash"])


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


# --- --mode single | plan | auto ----------------------------------------------------


def test_mode_single_runs_one_agent_with_the_teams_tools_and_no_planner(scripted, capsys):
    scripted.extend([tool_call("calculator", expression="17 * 23"), "17 times 23 is 391."])
    code = main(["run", "multiply 17 by 23", "--model", "script:planner", "--mode", "single", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "mode: single (--mode single)" in err and "planning with" not in err
    result = json.loads(out)
    assert result["status"] == "succeeded" and result["answer"] == "17 times 23 is 391."
    assert list(result["steps"]) == ["agent"] and result["steps"]["agent"]["usage"]["model_calls"] == 2
    assert result["usage"]["model_calls"] == 2 and result["planning_usage"]["model_calls"] == 0 and result["overhead"] == {}


def test_mode_auto_goes_to_a_single_agent_when_the_router_says_so(scripted, capsys):
    scripted.extend([ROUTE_SINGLE, tool_call("calculator", expression="17 * 23"), "391"])
    code = main(["run", "multiply 17 by 23", "--model", "script:planner", "--routing", "router"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "mode: single (router: one multiplication)" in err and "planning with" not in err
    assert "agent: started (attempt 1, worker agent, action respond)" in out  # the run's own events
    table = out[out.index("usage by role") :]
    assert "router" in table and "agent" in table and "planner" not in table
    assert out.rstrip().endswith("391")  # the deliverable


def test_mode_auto_runs_a_one_step_plan_directly_as_a_single_agent(scripted, capsys):
    research = json.dumps(
        {
            "steps": [
                {"id": "s1", "worker": "researcher", "action": "research", "instruction": "compute it", "parameters": {}, "depends_on": []}
            ]
        }
    )
    scripted.extend([research, tool_call("calculator", expression="17 * 23"), "It is 391."])
    code = main(["run", "multiply 17 by 23", "--model", "script:planner", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "mode: plan (planner: planned first" in err
    assert (
        "mode: single (the plan has one step, so one agent works the goal directly, "
        "with the tools of researcher: read_file, list_files, search_files, calculator)"
    ) in err
    result = json.loads(out)
    assert result["answer"] == "It is 391." and list(result["steps"]) == ["agent"]
    # everything that was spent is counted: the plan that was not run, the agent's two turns; no router call was made
    assert result["overhead"] == {} and result["planning_usage"]["model_calls"] == 1
    assert result["usage"]["model_calls"] == 3


def test_mode_auto_runs_a_one_step_tool_call_as_planned(scripted, capsys):
    scripted.append(ONE_STEP)  # one calculator call: already direct, no model needed to make it
    code = main(["run", "multiply 17 by 23", "--model", "script:planner", "--yes", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "mode: plan (its one step calls calculator directly: no agent needed)" in err
    result = json.loads(out)
    assert list(result["steps"]) == ["s1"] and result["answer"] == 391
    assert result["overhead"] == {} and result["usage"]["model_calls"] == 1  # the planner's call, no router's


def test_a_one_step_plan_for_a_role_runs_directly_with_that_roles_tools(scripted, capsys):
    writer_plan = json.dumps(
        {"steps": [{"id": "s1", "worker": "writer", "action": "write", "instruction": "a poem", "parameters": {}, "depends_on": []}]}
    )
    scripts = {"planner": [writer_plan], "worker": ["The sea is wide, the sea is deep."]}
    made: dict[str, ScriptedModel] = {}

    def factory(model, options):
        made[model] = ScriptedModel(scripts[model], name=f"script:{model}")
        return made[model]

    register_provider("script", factory, replace=True)
    argv = ["run", "Write a short poem about the sea", "--model", "script:planner", "--worker-model", "script:worker", "--json"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "one agent works the goal directly, with the tools of writer: none" in err
    assert json.loads(out)["answer"] == "The sea is wide, the sea is deep."
    # the writer has no tools, so neither has the agent: it answers in plain text, the goal as its task
    (request,) = made["worker"].requests
    assert request.tools == [] and request.output_schema is None
    assert request.messages[-1].content == "Write a short poem about the sea"


def test_mode_plan_runs_even_a_one_step_plan_on_the_team(scripted, capsys):
    scripted.append(ONE_STEP)
    code = main(["run", "multiply 17 by 23", "--model", "script:planner", "--mode", "plan", "--yes", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "mode: plan (--mode plan)" in err
    result = json.loads(out)
    assert list(result["steps"]) == ["s1"] and result["steps"]["s1"]["worker"] == "tool" and result["answer"] == 391


def test_stream_implies_plan_mode_and_cannot_run_a_single_agent(scripted, capsys):
    assert main(["run", "g", "--model", "script:p", "--stream", "--yes", "--mode", "single"]) == 2
    assert "--mode single" in capsys.readouterr().err
    assert main(["run", "--plan", "x.json", "--mode", "single"]) == 2
    assert "a plan file runs as written" in capsys.readouterr().err


FAILING = json.dumps(
    {
        "steps": [
            {
                "id": "s1",
                "worker": "tool",
                "action": "calculator",
                "instruction": "multiply",
                "parameters": {"expression": "17 * 23"},
                "depends_on": [],
            },
            {
                "id": "s2",
                "worker": "tool",
                "action": "calculator",
                "instruction": "divide",
                "parameters": {"expression": "1 / 0"},
                "depends_on": [],
                "failure_action": "replan",
            },
            {
                "id": "s3",
                "worker": "tool",
                "action": "concat",
                "instruction": "join",
                "parameters": {"parts": ["${s1}", "${s2}"], "separator": " and "},
                "depends_on": ["s1", "s2"],
            },
        ]
    }
)
REVISED = json.dumps(
    {
        "steps": [
            {
                "id": "s4",
                "worker": "tool",
                "action": "calculator",
                "instruction": "add",
                "parameters": {"expression": "4 + 1"},
                "depends_on": [],
            },
            {
                "id": "s5",
                "worker": "tool",
                "action": "concat",
                "instruction": "join",
                "parameters": {"parts": ["${s1}", "${s4}"], "separator": " and "},
                "depends_on": ["s1", "s4"],
            },
        ]
    }
)


def test_run_goal_replans_a_failed_step_and_shows_the_new_version(scripted, capsys):
    scripted.extend([FAILING, REVISED])
    code = main(["run", "two sums joined", "--model", "script:planner", "--yes", "--mode", "plan"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "replanning v1 (failure_action): step 's2' failed" in out
    assert "plan v2 replaces v1" in out and "+ s4" in out and "- s2" in out
    assert "391 and 5" in out


def test_run_goal_with_no_replans_allowed_ends_asking_for_one(scripted, capsys):
    scripted.append(FAILING)
    code = main(["run", "two sums joined", "--model", "script:planner", "--yes", "--mode", "plan", "--max-replans", "0"])
    out, _err = capsys.readouterr()
    assert code != 0
    assert "replan_requested" in out


def test_run_goal_with_the_joiner_finishes_with_its_answer(scripted, capsys):
    scripted.extend([PLAN, json.dumps({"action": "finish", "answer": "17*23 is 391; 4+1 is 5"})])
    code = main(["run", "two sums joined", "--model", "script:planner", "--yes", "--mode", "plan", "--joiner"])
    out, err = capsys.readouterr()
    assert code == 0, err + out
    assert "joiner: finish" in out and "17*23 is 391; 4+1 is 5" in out
    assert "joiner" in out.split("usage by role")[1]


ROLE_PLAN = json.dumps(
    {
        "steps": [
            {
                "id": "s1",
                "worker": "tool",
                "action": "calculator",
                "instruction": "multiply",
                "parameters": {"expression": "6 * 7"},
                "depends_on": [],
            },
            {
                "id": "s2",
                "worker": "writer",
                "action": "write",
                "instruction": "say the number ${s1} in a sentence",
                "parameters": {},
                "depends_on": ["s1"],
            },
        ]
    }
)


def test_a_plan_the_planner_wrote_validates_and_runs_with_the_plan_commands(scripted, monkeypatch, capsys):
    """plan -o, then validate and run --plan: the plan commands use goal mode's team (roles and toolkit)."""
    scripted.extend([ROLE_PLAN])
    assert main(["plan", "six sevens in words", "--model", "script:planner", "-o", "plan.json"]) == 0
    scripted[:] = ["The answer is 42."]  # what the writer's model (made when the run starts) will say
    capsys.readouterr()
    assert main(["validate", "plan.json"]) == 0
    assert "ok: plan" in capsys.readouterr().out
    monkeypatch.setenv("PLANEXEC_WORKER_MODEL", "script:worker")
    code = main(["run", "--plan", "plan.json", "--yes", "--no-store", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert result["steps"]["s1"]["output"]["value"] == 42 and result["answer"] == "The answer is 42."


def test_a_run_reports_the_time_of_routing_and_planning_too(scripted, capsys):
    """The summary's wall time starts with the command, not with the first step."""
    import time

    class Slow(ScriptedModel):
        async def complete(self, request):
            time.sleep(0.3)  # a planner that takes its time
            return await super().complete(request)

    register_provider("slow", lambda model, options: Slow([PLAN], name=f"slow:{model}"), replace=True)
    code = main(["run", "sums", "--model", "slow:planner", "--mode", "plan", "--yes", "--no-store", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert result["wall_time"] >= 0.3 > sum(s["wall_time"] for s in result["steps"].values())
