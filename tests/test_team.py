"""The goal path as a library: `Team` routes, plans, reviews, runs and reports, with one set of defaults."""

from __future__ import annotations

import asyncio
import json

import pytest

from planexec.engine.config import EngineConfig
from planexec.errors import PlanningError, PlanRejectedError
from planexec.governance.rules import ForbidTools, ToolsNeedPerson
from planexec.models import EMBEDDED
from planexec.models.providers import register_provider
from planexec.team.settings import PlanningOptions, ReviewOptions
from planexec.team.team import Team
from planexec.testing import ScriptedModel
from planexec.workers.context import ToolContext
from planexec.workers.tools import Tool

FIRST_PROGRAM = """\
from planexec import Team

def add(a: int, b: int) -> int:
    return a + b

team = Team("local:smollm2", tools=[add])
print(team.run_sync("What is 17 plus 25?").answer)
"""

ROUTE_PLAN = json.dumps({"decompose": True, "reason": "a tool call"})
ROUTE_SINGLE = json.dumps({"decompose": False, "reason": "one answer"})
ADD_PLAN = json.dumps(
    {"steps": [{"id": "s1", "worker": "tool", "action": "add", "instruction": "add", "parameters": {"a": 17, "b": 25}, "depends_on": []}]}
)


def add(a: int, b: int) -> int:
    return a + b


@pytest.fixture
def script(monkeypatch, tmp_path):
    """A provider ``script:NAME`` answering from a shared queue; every model it made is kept."""
    answers: list = []
    made: list[ScriptedModel] = []

    def factory(model, options):
        made.append(ScriptedModel(answers, name=f"script:{model}"))
        return made[-1]

    register_provider("script", factory, replace=True)
    monkeypatch.chdir(tmp_path)
    for key in ("OPENAI_API_KEY", "PLANEXEC_PLANNER_MODEL", "PLANEXEC_WORKER_MODEL"):
        monkeypatch.delenv(key, raising=False)
    return answers


def test_the_first_program_runs_on_a_scripted_model(monkeypatch, tmp_path, capsys):
    """The README's five lines, as written, with the ``local:`` provider played by a scripted model."""
    from planexec.models import providers

    answers = [ROUTE_PLAN, ADD_PLAN]
    monkeypatch.setitem(providers._registered, "local", lambda model, options: ScriptedModel(answers, name=f"local:{model}"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    exec(compile(FIRST_PROGRAM, "first_program.py", "exec"), {})
    assert capsys.readouterr().out.strip() == "42"
    assert len(FIRST_PROGRAM.strip().splitlines()) - FIRST_PROGRAM.count("\n\n") <= 5  # five lines of code


def test_run_reports_every_role_and_counts_routing_and_planning_in_its_time(script):
    script.extend([ROUTE_PLAN, ADD_PLAN])
    team = Team("script:p", tools=[add], planning=PlanningOptions(routing="router"))
    result = team.run_sync("What is 17 plus 25?")
    assert result.status.value == "succeeded" and result.answer == 42
    roles = result.usage_by_role()
    assert roles["router"].model_calls == 1 and roles["planner"].model_calls == 1
    assert result.usage.model_calls == 2
    assert result.wall_time > 0


def test_by_default_the_planner_does_the_routers_work_and_its_plan_decides(script, tmp_path):
    """``auto`` mode with the default routing: no router call; the plan's size says team or one agent."""
    script.extend([ADD_PLAN])
    team = Team("script:p", tools=[add])
    assert team.routing == "planner"
    result = team.run_sync("What is 17 plus 25?")
    assert result.answer == 42 and "router" not in result.usage_by_role() and result.usage.model_calls == 1
    (tmp_path / "planexec.toml").write_text('[planexec]\nrouting = "router"\n')
    assert Team.from_config(tmp_path, model="script:p", tools=[add]).routing == "router"
    with pytest.raises(ValueError, match="routing must be 'planner' or 'router'"):
        Team("script:p", planning=PlanningOptions(routing="dice"))  # type: ignore[arg-type]


def test_single_mode_runs_one_agent_with_the_team_tools(script):
    script.extend([json.dumps({"tool": "add", "arguments": {"a": 2, "b": 3}}), "5"])
    team = Team("script:p", tools=[add], mode="single")
    result = team.run_sync("What is 2 plus 3?")
    assert result.status.value == "succeeded"
    assert list(result.steps) == ["agent"]
    assert "router" not in result.usage_by_role()


def test_a_policy_rejection_raises_and_nothing_runs(script):
    calls = []

    def risky(x: int) -> int:
        calls.append(x)
        return x

    plan = json.dumps(
        {"steps": [{"id": "s1", "worker": "tool", "action": "risky", "instruction": "go", "parameters": {"x": 1}, "depends_on": []}]}
    )
    script.extend([plan])
    team = Team("script:p", tools=[risky], mode="plan", review=ReviewOptions(policies=[ForbidTools(["risky"])]))
    with pytest.raises(PlanRejectedError) as info:
        team.run_sync("do the risky thing")
    assert info.value.by == "policy" and "risky" in info.value.reason
    assert info.value.usage.model_calls == 1
    assert calls == []


def test_an_escalation_needs_a_reviewer_or_auto_approve(script):
    plan = json.dumps(
        {"steps": [{"id": "s1", "worker": "tool", "action": "add", "instruction": "x", "parameters": {"a": 1, "b": 2}, "depends_on": []}]}
    )
    script.extend([plan, plan, plan])
    policies = [ToolsNeedPerson(["add"])]
    with pytest.raises(PlanRejectedError) as info:
        Team("script:p", tools=[add], mode="plan", review=ReviewOptions(policies=policies)).run_sync("add")
    assert info.value.by == "nobody"
    seen = []
    reviewer = lambda plan, review: seen.append((plan.step_ids, review.decision)) or True  # noqa: E731
    result = Team("script:p", tools=[add], mode="plan", review=ReviewOptions(policies=policies, reviewer=reviewer)).run_sync("add")
    assert result.answer == 3 and seen == [(["s1"], "escalate")]
    assert (
        Team("script:p", tools=[add], mode="plan", review=ReviewOptions(policies=policies, auto_approve=True)).run_sync("add").answer == 3
    )


def test_plan_only_and_execute_a_saved_plan(script, tmp_path):
    script.extend([ADD_PLAN])
    team = Team("script:p", tools=[add])
    planning = team.plan_sync("What is 17 plus 25?")
    assert planning.plan.step_ids == ["s1"] and planning.usage.model_calls == 1
    result = team.execute_sync(planning.plan)
    assert result.answer == 42 and result.usage.model_calls == 0


def test_events_iterates_a_goal_run(script):
    script.extend([ADD_PLAN])
    team = Team("script:p", tools=[add], mode="plan")

    async def collect():
        return [type(e).__name__ async for e in team.events("What is 17 plus 25?")]

    kinds = asyncio.run(collect())
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished"
    assert "PlanDrafted" in kinds and "StepSucceeded" in kinds


def test_a_planner_that_gives_up_raises_planning_error_with_its_usage(script):
    script.extend(["not json"] * 3)
    with pytest.raises(PlanningError) as info:
        Team("script:p", tools=[add], mode="plan").run_sync("add")
    assert info.value.attempts == 3


def test_small_models_get_shorter_plans_and_fewer_agent_turns(script):
    local = Team(ScriptedModel([], name="local:tiny", profile=EMBEDDED), tools=[add])
    remote = Team("script:p", tools=[add])
    assert (local.planner.max_steps, local.bounds.agent_turns) == (5, 4)
    assert (remote.planner.max_steps, remote.bounds.agent_turns) == (8, 12)


def test_bad_arguments_are_clear_errors(script):
    with pytest.raises(ValueError, match="mode must be one of"):
        Team("script:p", mode="team")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_replans"):
        Team("script:p", engine=EngineConfig(max_replans=-1))


def test_the_first_program_runs_on_the_embedded_model(allow_requests, monkeypatch, tmp_path, capsys):
    """The same five lines on SmolLM2-135M in-process: it routes, plans one `add` call and answers 42."""
    pytest.importorskip("llama_cpp", reason="needs pip install 'planexec[local]'")
    monkeypatch.chdir(tmp_path)
    for key in ("OPENAI_API_KEY", "PLANEXEC_PLANNER_MODEL", "PLANEXEC_WORKER_MODEL"):
        monkeypatch.delenv(key, raising=False)
    exec(compile(FIRST_PROGRAM, "first_program.py", "exec"), {})
    assert capsys.readouterr().out.strip() == "42"


def test_eval_plans_with_the_same_settings_as_run(script):
    """`planexec eval` builds its team with `team_for`, `planexec run` with `Team`: one set of planner bounds."""
    from planexec.eval.harness import EvalOptions, team_for
    from planexec.workers.registry import Registry

    for model in (ScriptedModel([], name="local:tiny"), ScriptedModel([], name="script:remote")):
        evaluated, run = team_for(model, Registry.default(), EvalOptions()), Team(model)
        assert evaluated.bounds == run.bounds
        a, b = evaluated.planner, run.planner
        assert (a.max_steps, a.max_repairs, a.max_tokens, a.seed) == (b.max_steps, b.max_repairs, b.max_tokens, b.seed)


def test_one_team_serves_runs_with_different_dependencies(script):
    """A tool taking a `ToolContext` gets each run's own `deps`, even when two runs go side by side."""

    def lookup(ctx: ToolContext[dict], key: str) -> str:
        return ctx.deps[key]

    plan = json.dumps(
        {"steps": [{"id": "s1", "worker": "tool", "action": "lookup", "instruction": "x", "parameters": {"key": "k"}, "depends_on": []}]}
    )
    script.extend([plan, plan])
    team = Team("script:p", tools=[lookup], mode="plan")

    async def both():
        return await asyncio.gather(team.run("look k up", deps={"k": "first"}), team.run("look k up", deps={"k": "second"}))

    first, second = asyncio.run(both())
    assert (first.answer, second.answer) == ("first", "second")


def test_the_readme_main_job_answers_on_the_embedded_model(tmp_path):
    """The README's first command's goal, on SmolLM2-135M for real: a plan, its run, and the right deliverable."""
    import os
    import subprocess
    import sys

    pytest.importorskip("llama_cpp", reason="needs pip install 'planexec[local]'")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANEXEC_") and k != "OPENAI_API_KEY"}
    command = [sys.executable, "-m", "planexec", "run", "What is 17 times 23, plus 5?", "--yes", "--json", "--no-store"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["status"] == "succeeded" and result["answer"] == 396
    assert [s["action"] for s in result["plan"]["steps"]] == ["calculator"]


def test_durable_approvals_are_given_from_another_process(script, tmp_path):
    """With the store's approvers, a gated step and the plan version wait for a decision stored by someone else."""
    import threading
    import time

    from planexec.policies import PlanApprover, StoreApprover
    from planexec.store import open_store

    calls = []

    def pay(amount: int) -> str:
        calls.append(amount)
        return f"paid {amount}"

    plan = json.dumps(
        {"steps": [{"id": "s1", "worker": "tool", "action": "pay", "instruction": "pay", "parameters": {"amount": 5}, "depends_on": []}]}
    )
    script.extend([plan])
    store = open_store(str(tmp_path / "runs.db"))
    pay_tool = Tool(pay, requires_approval=True)
    team = Team(
        "script:p",
        tools=[pay_tool],
        mode="plan",
        store=store,
        review=ReviewOptions(approver=StoreApprover(store, poll=0.05), plan_approver=PlanApprover(store, poll=0.05)),
    )

    def person():  # another process would run `planexec approve`; here a thread writes the same decisions
        decided = set()
        deadline = time.monotonic() + 20
        while len(decided) < 2 and time.monotonic() < deadline:
            for a in store.approvals(pending_only=True):
                assert calls == []  # nothing ran before its approval
                store.decide_approval(a.run_id, step_id=a.step_id, approved=True, by="ada", content_hash=a.content_hash)
                decided.add(a.step_id)
            time.sleep(0.05)

    helper = threading.Thread(target=person)
    helper.start()
    result = team.run_sync("pay five", run_id="pay-1")
    helper.join()
    assert result.answer == "paid 5" and calls == [5]
    assert {(a.step_id, a.state.value, a.by) for a in store.approvals("pay-1")} == {
        (None, "approved", "ada"),
        ("s1", "approved", "ada"),
    }


def test_a_team_takes_a_few_settings_objects_and_no_engine_setting_twice():
    """`Team` takes its model, tools, mode, config, store, seed and six settings objects: no engine setting copied into
    its signature (they are `EngineConfig`'s), and each settings object rejects a bad value naming it."""
    import dataclasses
    import inspect

    from planexec import EngineConfig, PlanningOptions, ReviewOptions

    params = list(inspect.signature(Team.__init__).parameters)[1:]
    assert len(params) <= 12, params
    # the team opens the store, seeds the models too, and builds the runner its RunnerConfig names
    engine_fields = {f.name for f in dataclasses.fields(EngineConfig)} - {"store", "seed", "runner"}
    assert not engine_fields & set(params)
    with pytest.raises(ValueError, match="routing must be 'planner' or 'router'"):
        PlanningOptions(routing="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="plan_format must be 'json' or 'compact'"):
        PlanningOptions(plan_format="yaml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_steps must be at least 1"):
        PlanningOptions(max_steps=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ReviewOptions().auto_approve = True  # type: ignore[misc]


def test_the_engine_settings_come_from_planexec_toml_unless_given(tmp_path):
    """One place for the engine's settings: planexec.toml's limits over the engine's defaults, or an `EngineConfig` as given;
    the team adds its registry, store, approvers, replanner and joiner, never a copy of a limit."""
    from planexec import EngineConfig
    from planexec.config import Config

    configured = Team(ScriptedModel([]), config=Config(max_concurrency=3, default_timeout=7, max_replans=1))
    settings = configured.engine_settings()
    assert (settings.max_concurrency, settings.default_timeout, settings.max_replans) == (3, 7, 1)
    assert settings.registry is configured.registry and settings.replanner is not None and settings.seed == 0
    given = Team(ScriptedModel([]), config=Config(max_concurrency=3), engine=EngineConfig(max_concurrency=9, max_replans=0))
    assert given.engine_settings().max_concurrency == 9 and given.engine_settings().replanner is None
    single = configured.engine_settings(monitored=False)
    assert single.replanner is None and single.joiner is None
