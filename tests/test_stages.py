"""The goal path as stages (`Team.iter`): routed, planned, waiting for a person, reviewed, started, each event, finished;
`run`, `events` and `start_goal` are uses of it, and every stage has a JSON form a face can send as it is."""

from __future__ import annotations

import asyncio
import json

import pytest

from planexec import EngineConfig, PlanningOptions, ReviewOptions, Team
from planexec.errors import PlanRejectedError
from planexec.events import RunFinished, StepSucceeded
from planexec.governance.rules import ToolsNeedPerson
from planexec.team.stages import EventSeen, Finished, Planned, Reviewed, Routed, Started, WaitingForPerson
from planexec.testing import ScriptedModel


def add(a: int, b: int) -> int:
    return a + b


def _step(sid, a, b, deps=()):
    return {"id": sid, "worker": "tool", "action": "add", "instruction": "add", "parameters": {"a": a, "b": b}, "depends_on": list(deps)}


TWO_STEPS = json.dumps({"steps": [_step("s1", 17, 25), _step("s2", "${s1}", 1, ["s1"])]})
ONE_STEP = json.dumps({"steps": [_step("s1", 17, 25)]})


def _stages(team: Team, goal: str, **kwargs):
    async def collect():
        return [stage async for stage in team.iter(goal, **kwargs)]

    return asyncio.run(collect())


def _team(answers, **kwargs) -> Team:
    return Team(ScriptedModel(answers), tools=[add], engine=EngineConfig(max_replans=0), **kwargs)


def test_a_goal_yields_each_stage_in_order_and_each_has_a_json_form():
    stages = _stages(_team([TWO_STEPS]), "add twice")
    kinds = [s.kind for s in stages]
    assert kinds[:4] == ["routed", "planned", "reviewed", "started"] and kinds[-1] == "finished"
    assert set(kinds[4:-1]) == {"event"}
    routed, planned, reviewed, started, *_, finished = stages
    assert isinstance(routed, Routed) and routed.route.by == "planner"  # no router call: the planner decides
    assert isinstance(planned, Planned) and planned.planning.plan.step_ids == ["s1", "s2"]
    assert isinstance(reviewed, Reviewed) and reviewed.outcome.approved and reviewed.outcome.by == "policy"
    assert isinstance(started, Started) and started.mode == "plan" and started.run.run_id == finished.result.run_id
    assert isinstance(finished, Finished) and finished.result.answer == 43
    events = [s.event for s in stages if isinstance(s, EventSeen)]
    assert isinstance(events[-1], RunFinished) and sum(isinstance(e, StepSucceeded) for e in events) == 2
    for stage in stages:
        data = json.loads(json.dumps(stage.to_dict()))  # JSON as it is: what a web page or an MCP client gets
        assert data["kind"] == stage.kind
    assert stages[1].to_dict()["plan"]["steps"][1]["id"] == "s2" and stages[-1].to_dict()["answer"] == 43


def test_a_reviewer_is_announced_before_it_is_asked_and_a_rejection_ends_the_path():
    asked = []

    def person(plan, review):
        asked.append(plan.plan_id)
        return False

    team = _team([TWO_STEPS], review=ReviewOptions(reviewer=person), mode="plan")
    seen = []

    async def collect():
        async for stage in team.iter("add twice"):
            seen.append(stage)

    with pytest.raises(PlanRejectedError, match="rejected by the reviewer"):
        asyncio.run(collect())
    assert [s.kind for s in seen] == ["planned", "waiting_for_person", "reviewed"]
    waiting = seen[1]
    assert isinstance(waiting, WaitingForPerson) and asked == [waiting.plan.plan_id]
    assert waiting.to_dict()["policies"] == "approve" and not seen[2].outcome.approved


def test_a_policy_escalation_waits_for_the_person_and_says_why():
    team = _team([TWO_STEPS], mode="plan", review=ReviewOptions(policies=[ToolsNeedPerson(["add"])], reviewer=lambda plan, review: True))
    stages = _stages(team, "add twice", events=False)
    assert [s.kind for s in stages] == ["planned", "waiting_for_person", "reviewed", "started", "finished"]
    assert stages[1].to_dict()["policies"] == "escalate" and any("add" in r for r in stages[1].to_dict()["reasons"])
    assert stages[2].outcome.by == "person" and stages[-1].result.status.value == "succeeded"


def test_a_plan_of_one_role_step_is_started_as_one_agent_and_a_tool_step_as_planned(tmp_path):
    tool_step = _stages(_team([ONE_STEP]), "add once", events=False)
    assert [s.kind for s in tool_step] == ["routed", "planned", "reviewed", "started", "finished"]
    assert tool_step[3].mode == "plan"  # a tool call needs no agent: it runs as planned
    writer = json.dumps(
        {"steps": [{"id": "s1", "worker": "writer", "action": "write", "instruction": "say hi", "parameters": {}, "depends_on": []}]}
    )
    from planexec import Toolbox

    team = Team(ScriptedModel([writer, "hi"]), toolbox=Toolbox(roles=True, workspace=tmp_path / "ws"))
    stages = _stages(team, "say hi", events=False)
    assert [s.kind for s in stages] == ["routed", "planned", "started", "finished"]  # nothing to coordinate, nothing to review
    assert stages[2].mode == "single" and "writer" in stages[2].reason and stages[-1].result.answer == "hi"


def test_run_events_and_start_goal_are_uses_of_the_stages():
    result = _team([TWO_STEPS]).run_sync("add twice")
    assert result.answer == 43

    async def events():
        return [e async for e in _team([TWO_STEPS]).events("add twice")]

    seen = asyncio.run(events())
    assert isinstance(seen[-1], RunFinished)
    stages = _stages(_team([TWO_STEPS]), "add twice")
    assert [type(e).__name__ for e in seen] == [type(s.event).__name__ for s in stages if isinstance(s, EventSeen)]

    async def started():
        run = await _team([TWO_STEPS]).start_goal("add twice")
        return (await run.result()).answer

    assert asyncio.run(started()) == 43


def test_single_and_stream_modes_start_at_once():
    single = _stages(Team(ScriptedModel(["hello"]), mode="single"), "greet", events=False)
    assert [s.kind for s in single] == ["started", "finished"] and single[0].mode == "single"
    stream = _stages(
        Team(ScriptedModel([TWO_STEPS]), tools=[add], mode="stream", planning=PlanningOptions(joiner=False)), "add twice", events=False
    )
    assert [s.kind for s in stream] == ["started", "finished"] and stream[0].mode == "stream" and stream[-1].result.answer == 43


def test_a_reviewer_with_nobody_to_ask_answers_wait_and_the_run_waits_for_a_person_in_the_store(tmp_path):
    """``planexec run GOAL`` with no terminal and no --yes: the run starts, nothing of it runs before a person approves its
    plan in the store (from another process, here from this test), and without a plan approver ``wait`` is a refusal."""
    import dataclasses

    from planexec.policies import PlanApprover, decide_review
    from planexec.store import open_store

    def nobody_here(plan, review):
        return dataclasses.replace(decide_review(plan, review, policies_configured=False), decision="wait")

    store = open_store(str(tmp_path / "runs.db"))
    team = _team([TWO_STEPS], store=store, mode="plan", review=ReviewOptions(reviewer=nobody_here))

    async def main():
        seen = []
        stages = team.iter(
            "add twice", run_id="w1", events=False, run_options=lambda plan, outcome: {"plan_approver": PlanApprover(store, poll=0.02)}
        )
        async for stage in stages:
            seen.append(stage)
            if isinstance(stage, Started):
                break
        await stages.aclose()
        run = seen[-1].run
        for _ in range(200):  # the request is stored, and nothing runs
            if _pending(store, "w1"):
                break
            await asyncio.sleep(0.02)
        assert [e.type for e in store.events("w1")].count("step_started") == 0
        [asked] = store.approvals("w1", pending_only=True)
        store.decide_approval("w1", approved=True, by="alice", content_hash=asked.content_hash)
        return seen, await run.result()

    try:
        seen, result = asyncio.run(main())
        assert [s.kind for s in seen] == ["planned", "waiting_for_person", "reviewed", "started"]
        assert seen[2].outcome.decision == "wait" and seen[3].reason == "its plan waits for a person in the store"
        assert result.status.value == "succeeded" and result.answer == 43
        lonely = _team([TWO_STEPS], mode="plan", review=ReviewOptions(reviewer=nobody_here))  # no plan approver: nobody decides
        with pytest.raises(PlanRejectedError, match="nobody"):
            asyncio.run(lonely.run("add twice"))
    finally:
        store.close()


def _pending(store, run_id):
    from planexec.errors import RunNotFoundError

    try:
        return store.approvals(run_id, pending_only=True)
    except RunNotFoundError:  # not stored yet
        return []
