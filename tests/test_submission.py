"""A goal handed to the store's queue (`Team.submit`): planned and reviewed here, stored as a run in the state `waiting`,
run by a worker once a person approves it; what a face does instead of running a goal in its own process."""

from __future__ import annotations

import asyncio
import json

import pytest

from planexec import EngineConfig, ReviewOptions, RunStatus, Submission, Team
from planexec.errors import PlanningError, StoreError
from planexec.governance.rules import ForbidTools
from planexec.store import open_store
from planexec.team.stages import Queued
from planexec.testing import ScriptedModel


def add(a: int, b: int) -> int:
    return a + b


CALLED: list[str] = []


def send(to: str) -> str:
    CALLED.append(to)
    return f"sent to {to}"


def _step(sid, a, b, deps=()):
    return {"id": sid, "worker": "tool", "action": "add", "instruction": "add", "parameters": {"a": a, "b": b}, "depends_on": list(deps)}


TWO_STEPS = json.dumps({"steps": [_step("s1", 17, 25), _step("s2", "${s1}", 1, ["s1"])]})


def _team(tmp_path, answers, **kwargs) -> Team:
    return Team(ScriptedModel(answers), tools=[add], engine=EngineConfig(max_replans=0), store=str(tmp_path / "runs.db"), **kwargs)


def _stages(team: Team, goal: str, **kwargs):
    async def collect():
        return [stage async for stage in team.iter(goal, **kwargs)]

    return asyncio.run(collect())


def _work(team: Team):
    return asyncio.run(team.worker(once=True, poll=0.05).serve())


def test_a_submitted_goal_waits_for_a_person_in_the_store_and_a_worker_runs_it_once_approved(tmp_path):
    team = _team(tmp_path, [TWO_STEPS])
    stages = _stages(team, "add twice", mode="plan", run_id="r1", submit=Submission(by="ana"))
    assert [s.kind for s in stages] == ["planned", "waiting_for_person", "queued"]
    queued = stages[-1]
    assert isinstance(queued, Queued) and queued.state == "waiting" and queued.run_id == "r1"
    assert json.loads(json.dumps(queued.to_dict()))["state"] == "waiting"
    summary = team.store.run("r1")
    assert summary.status is RunStatus.WAITING and summary.goal == "add twice"
    assert [e.type for e in team.store.events("r1")] == ["run_started", "plan_drafted", "run_finished"]  # the draft is the run's
    assert _work(team).runs == []  # nobody approved it: no worker takes it
    assert team.store.run("r1").status is RunStatus.WAITING

    team.store.decide_approval("r1", approved=True, by="ana", content_hash=queued.plan.content_hash)
    report = _work(team)
    assert [(r.run_id, r.outcome) for r in report.runs] == [("r1", "succeeded")]
    done = team.store.run("r1")
    assert done.status is RunStatus.SUCCEEDED
    kinds = [e.type for e in team.store.events("r1")]
    assert kinds.count("step_succeeded") == 2 and kinds[-1] == "run_finished"


def test_a_plan_every_policy_approves_is_queued_approved_when_no_person_is_required(tmp_path):
    team = _team(tmp_path, [TWO_STEPS])
    queued = asyncio.run(team.submit("add twice", mode="plan", run_id="r2", submission=Submission(by="ci", person=False)))
    assert queued.state == "queued" and "approved by policy" in queued.reason
    assert [(r.run_id, r.outcome) for r in _work(team).runs] == [("r2", "succeeded")]


def test_a_policy_that_rejects_the_plan_ends_the_run_refused_at_once(tmp_path):
    team = _team(tmp_path, [TWO_STEPS], review=ReviewOptions(policies=(ForbidTools("add"),)))
    stages = _stages(team, "add twice", mode="plan", run_id="r3", submit=Submission(by="ana"))
    assert [s.kind for s in stages] == ["planned", "reviewed", "queued"]
    assert stages[-1].state == "refused" and "add" in stages[-1].reason and "forbidden" in stages[-1].reason
    summary = team.store.run("r3")
    assert summary.status is RunStatus.CANCELLED and summary.reason.startswith("refused: its plan was denied by policy")
    assert _work(team).runs == []  # never taken


def test_a_person_who_denies_the_waiting_plan_ends_it_and_an_edit_waits_for_its_own_approval(tmp_path):
    team = _team(tmp_path, [TWO_STEPS, TWO_STEPS])
    first = asyncio.run(team.submit("add twice", mode="plan", run_id="no"))
    team.store.decide_approval("no", approved=False, by="bo", reason="not now", content_hash=first.plan.content_hash)
    assert team.store.run("no").status is RunStatus.CANCELLED and "not now" in team.store.run("no").reason

    second = asyncio.run(team.submit("add twice", mode="plan", run_id="edited"))
    edit = second.plan.model_copy(update={"version": 2, "revises": 1})
    edit.steps[0].parameters["a"] = 100
    edit = edit.model_validate(edit.model_dump())  # a new content hash for the edited step
    team.store.edit_plan("edited", content_hash=second.plan.content_hash, plan=edit, by="bo", reason="bigger")
    assert team.store.run("edited").status is RunStatus.WAITING  # the edit waits for its own approval
    assert _work(team).runs == []
    team.store.decide_approval("edited", approved=True, by="ana", content_hash=edit.content_hash)
    assert [(r.run_id, r.outcome) for r in _work(team).runs] == [("edited", "succeeded")]
    result = team.store.run("edited")
    assert result.status is RunStatus.SUCCEEDED and result.plan_version == 2


def test_single_mode_is_queued_with_no_plan_to_review_and_the_worker_gives_it_the_agent(tmp_path):
    answer = json.dumps({"answer": "42"})
    team = _team(tmp_path, [answer])
    queued = asyncio.run(team.submit("what is six times seven?", mode="single", run_id="s", submission=Submission(by="ana")))
    assert queued.state == "queued" and queued.mode == "single" and queued.plan.steps[0].worker == "agent"
    report = _work(team)
    assert [(r.run_id, r.outcome) for r in report.runs] == [("s", "succeeded")], report
    assert team.store.run("s").status is RunStatus.SUCCEEDED


def test_a_variant_records_its_models_and_the_worker_works_the_run_on_them(tmp_path):
    team = _team(tmp_path, [TWO_STEPS])
    other = team.variant(model="local:smollm2", worker_model="local:smollm2")
    assert other is team.variant(model="local:smollm2", worker_model="local:smollm2")  # kept
    setup = other.setup()
    assert setup["models"] == {"planner": other.models.planner.name, "worker": other.models.worker.name}
    settings = team.run_settings(_plan(), setup)
    assert settings.registry is other.registry
    assert team.run_settings(_plan(), team.setup()).registry is team.registry


def test_bad_submissions_are_clear_errors_and_store_nothing(tmp_path):
    with pytest.raises(StoreError, match="queue"):
        asyncio.run(Team(ScriptedModel([TWO_STEPS]), tools=[add]).submit("add twice", mode="plan"))
    team = _team(tmp_path, [TWO_STEPS])
    with pytest.raises(ValueError, match="cannot wait in the queue"):
        asyncio.run(team.submit("add twice", mode="stream"))
    bad = _team(tmp_path, ["not a plan"] * 5)
    with pytest.raises(PlanningError):
        asyncio.run(bad.submit("add twice", mode="plan", run_id="never"))
    with open_store(str(tmp_path / "runs.db")) as store:
        assert [r.run_id for r in store.runs()] == []


def _plan():
    from planexec.plan.model import Plan

    return Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [_step("s1", 1, 2)]})


def test_a_faces_own_worker_stopping_hands_its_run_back_and_the_next_worker_finishes_it_running_no_step_twice(tmp_path):
    """The console or the MCP server stops while its worker runs a run: the run is released at its next step boundary
    (the step running then finishes), handed back to the queue, and the next worker goes on from there."""
    import time

    from planexec.testing import sleep_tool

    slow = json.dumps({"steps": [
        {"id": "a", "worker": "tool", "action": "pause", "instruction": "wait", "parameters": {"seconds": 0.6, "value": 1}},
        {"id": "b", "worker": "tool", "action": "pause", "instruction": "wait", "parameters": {"seconds": 0.1, "value": 2},
         "depends_on": ["a"]},
    ]})  # fmt: skip
    team = Team(ScriptedModel([slow]), tools=[sleep_tool("pause")], engine=EngineConfig(max_replans=0), store=str(tmp_path / "runs.db"))
    queued = asyncio.run(team.submit("wait twice", mode="plan", run_id="r", submission=Submission(by="ana", person=False)))
    assert queued.state == "queued"
    here = team.local_worker(poll=0.05, grace=5.0)
    here.start()
    deadline = time.monotonic() + 30
    while not [e for e in team.store.events("r") if e.type == "step_started"]:
        assert time.monotonic() < deadline and here.failed is None, here.failed
        time.sleep(0.02)
    report = here.stop(timeout=30)  # the face stops: step a ends, b never starts here
    assert report is not None and [(r.run_id, r.outcome) for r in report.runs] == [("r", "released")]
    assert team.store.queued_run("r").state.value == "queued" and team.store.run("r").status is RunStatus.CANCELLED
    after = _work(team)
    assert [(r.run_id, r.how, r.outcome) for r in after.runs] == [("r", "resumed", "succeeded")]
    started = [e.step_id for e in team.store.events("r") if e.type == "step_started"]
    assert started == ["a", "b"]  # a ran once, before the stop; b once, after
