"""Scheduled steps: a step's own time (`not_before`), tools' maintenance windows, waiting on an injected clock,
a run that stops as ``scheduled`` and goes back to the queue until due, and resuming it never early."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from planexec import Engine, Plan, Registry, RunStatus, StepState
from planexec.errors import PlanParseError
from planexec.plan.schedule import due
from planexec.plan.windows import WindowError, parse_window
from planexec.testing import ManualClock, scripted_tool

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)  # a Friday, 07:00 in New York


def mkplan(*steps: dict, windows: dict | None = None) -> Plan:
    data: dict = {"plan_id": "p", "goal": "g", "steps": list(steps)}
    if windows:
        data["windows"] = windows
    return Plan.from_data(data)


def registry(*names: str) -> tuple[Registry, dict]:
    reg = Registry()
    tools = {}
    for name in names:
        tools[name] = tool = scripted_tool(name, default=name)
        reg.add_tool(tool)
    return reg, tools


def sync(fn):
    """Run an async test in its own event loop (the suite has no asyncio plugin)."""

    def test(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    test.__name__ = fn.__name__
    return test


async def wait_for(predicate, *, limit: float = 5.0) -> None:
    for _ in range(int(limit / 0.005)):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


# --- windows and due times: pure ----------------------------------------------------------------


def test_a_window_reads_days_times_and_zone_and_says_when_it_opens() -> None:
    w = parse_window("Sat 02:00-04:00 America/New_York")
    assert w.days == (5,) and w.zone == "America/New_York"
    opens = w.next_open(T0)
    assert opens == datetime(2026, 12, 5, 7, 0, tzinfo=UTC)  # 02:00 EST is 07:00 UTC
    assert w.contains(opens) and w.contains(opens + timedelta(minutes=119)) and not w.contains(opens + timedelta(hours=2))
    inside = opens + timedelta(minutes=30)
    assert w.next_open(inside) == inside  # open: at once
    # crossing midnight, weekdays, lists
    night = parse_window("Mon-Fri 22:00-02:00 UTC")
    assert night.days == (0, 1, 2, 3, 4)
    assert night.contains(datetime(2026, 12, 5, 1, 0, tzinfo=UTC))  # Saturday 01:00: Friday's window is still open
    assert not night.contains(datetime(2026, 12, 6, 1, 0, tzinfo=UTC))  # Sunday 01:00: Saturday has none
    assert parse_window("daily 01:00-05:00 Europe/Berlin").days == tuple(range(7))
    assert parse_window("sat,sun 10:00-11:00 UTC").days == (5, 6)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("Sat 02:00-04:00", "not a window"),
        ("Funday 02:00-04:00 UTC", "'Funday' is not a day"),
        ("Sat 25:00-04:00 UTC", "not a time of day"),
        ("Sat 02:00-02:00 UTC", "same time"),
        ("Sat 02:00-04:00 Mars/Olympus", "not a time zone"),
        ("", "not a window"),
    ],
)
def test_a_bad_window_says_which_part_is_wrong(text: str, says: str) -> None:
    with pytest.raises(WindowError, match=says):
        parse_window(text)


def test_a_plan_with_a_bad_time_or_window_is_refused_naming_the_step_and_field() -> None:
    with pytest.raises(PlanParseError) as info:
        mkplan({"id": "deploy", "action": "deploy", "not_before": "2026-12-05T02:00"}, windows={"deploy": "Sat 2am"})
    text = str(info.value)
    assert "step 'deploy' · not_before" in text and "has no zone" in text
    assert "windows" in text and "tool 'deploy'" in text and "not a window" in text


def test_due_is_the_later_of_the_steps_time_and_its_tools_window() -> None:
    plan = mkplan(
        {"id": "a", "action": "deploy", "not_before": "2026-12-05T08:30:00Z"},
        {"id": "b", "action": "deploy"},
        {"id": "c", "action": "check"},
        {"id": "d", "action": "check", "not_before": "2026-12-12T08:00:00Z"},
        windows={"deploy": "Sat 02:00-04:00 America/New_York"},
    )
    w = plan.parsed_windows
    assert due(plan.step("a"), w, T0) == datetime(2026, 12, 5, 8, 30, tzinfo=UTC)  # inside the window already
    assert due(plan.step("b"), w, T0) == datetime(2026, 12, 5, 7, 0, tzinfo=UTC)
    assert due(plan.step("c"), w, T0) is None  # no time, no window: now
    assert due(plan.step("d"), w, T0) == datetime(2026, 12, 12, 8, 0, tzinfo=UTC)
    late = mkplan(
        {"id": "a", "action": "deploy", "not_before": "2026-12-05T09:30:00Z"}, windows={"deploy": "Sat 02:00-04:00 America/New_York"}
    )
    assert due(late.step("a"), late.parsed_windows, T0) == datetime(2026, 12, 12, 7, 0, tzinfo=UTC)  # after the window: the next one


def test_windows_and_times_keep_their_place_in_the_plans_json_and_hash() -> None:
    plain = mkplan({"id": "a", "action": "echo"})
    timed = mkplan({"id": "a", "action": "echo", "not_before": "2026-12-05T02:00-05:00"}, windows={"echo": "Sat 02:00-04:00 UTC"})
    assert "not_before" not in plain.to_json() and "windows" not in plain.to_json()
    again = Plan.from_json(timed.to_json())
    assert again == timed and again.content_hash == timed.content_hash != plain.content_hash
    moved = mkplan({"id": "a", "action": "echo", "not_before": "2026-12-05T03:00-05:00"}, windows={"echo": "Sat 02:00-04:00 UTC"})
    assert moved.content_hash != timed.content_hash  # moving the time is a change a reviewer approves


# --- the engine waits on its clock ---------------------------------------------------------------


@sync
async def test_a_step_waits_as_scheduled_until_its_time_then_runs_once() -> None:
    reg, tools = registry("build", "deploy", "check")
    clock = ManualClock(T0)
    plan = mkplan(
        {"id": "build", "action": "build"},
        {"id": "deploy", "action": "deploy", "depends_on": ["build"], "not_before": "2026-12-05T07:00:00Z"},
        {"id": "check", "action": "check", "depends_on": ["deploy"]},
    )
    run = Engine(reg, clock=clock).start(plan)
    await wait_for(lambda: run.records["deploy"].state is StepState.SCHEDULED and clock.sleepers == 1)
    assert run.records["build"].state is StepState.SUCCEEDED
    assert run.records["deploy"].due == datetime(2026, 12, 5, 7, 0, tzinfo=UTC)
    clock.advance(hours=18, minutes=59)  # a minute early: still waiting
    await asyncio.sleep(0.02)
    assert not tools["deploy"].calls and run.records["deploy"].state is StepState.SCHEDULED
    clock.advance(minutes=1)
    result = await run.result()
    assert result.status is RunStatus.SUCCEEDED and len(tools["deploy"].calls) == 1
    kinds = [e.type for e in run.history]
    scheduled = next(e for e in run.history if e.type == "step_scheduled")
    assert scheduled.due == datetime(2026, 12, 5, 7, 0, tzinfo=UTC) and "not_before" in scheduled.why
    assert kinds.index("step_scheduled") < next(i for i, e in enumerate(run.history) if e.type == "step_started" and e.step_id == "deploy")


@sync
async def test_a_windowed_tool_waits_for_its_window_and_other_steps_go_on() -> None:
    reg, tools = registry("deploy", "report")
    clock = ManualClock(T0)
    plan = mkplan(
        {"id": "deploy", "action": "deploy"},
        {"id": "report", "action": "report"},
        windows={"deploy": "Sat 02:00-04:00 America/New_York"},
    )
    run = Engine(reg, clock=clock).start(plan)
    await wait_for(lambda: run.records["report"].state is StepState.SUCCEEDED and clock.sleepers == 1)
    ev = next(e for e in run.history if e.type == "step_scheduled")
    assert "deploy runs only in Sat 02:00-04:00 America/New_York" in ev.why
    clock.set(datetime(2026, 12, 5, 7, 0, tzinfo=UTC))
    result = await run.result()
    assert result.status is RunStatus.SUCCEEDED and len(tools["deploy"].calls) == 1


@sync
async def test_a_run_that_can_only_wait_stops_as_scheduled_with_its_due_time() -> None:
    reg, tools = registry("build", "deploy")
    clock = ManualClock(T0)
    plan = mkplan(
        {"id": "build", "action": "build"},
        {"id": "deploy", "action": "deploy", "depends_on": ["build"], "not_before": "2026-12-05T07:00:00Z"},
    )
    run = Engine(reg, clock=clock, park_after=60).start(plan)
    result = await run.result()
    assert result.status is RunStatus.SCHEDULED
    assert not any(e.type == "step_cancelled" for e in run.history)  # it waits: not cancelled
    assert result.due == datetime(2026, 12, 5, 7, 0, tzinfo=UTC)
    assert result.steps["deploy"].state is StepState.SCHEDULED and not tools["deploy"].calls
    assert "wait until 2026-12-05T07:00:00+00:00" in (result.reason or "")


@sync
async def test_a_short_wait_stays_in_the_process() -> None:
    reg, tools = registry("deploy")
    clock = ManualClock(T0)
    plan = mkplan({"id": "deploy", "action": "deploy", "not_before": (T0 + timedelta(seconds=20)).isoformat()})
    run = Engine(reg, clock=clock, park_after=60).start(plan)
    await wait_for(lambda: clock.sleepers == 1)
    clock.advance(20)
    assert (await run.result()).status is RunStatus.SUCCEEDED and len(tools["deploy"].calls) == 1


@sync
async def test_a_cancelled_scheduled_step_is_cancelled_not_run() -> None:
    reg, tools = registry("deploy")
    clock = ManualClock(T0)
    run = Engine(reg, clock=clock).start(mkplan({"id": "deploy", "action": "deploy", "not_before": "2026-12-05T07:00:00Z"}))
    await wait_for(lambda: clock.sleepers == 1)
    run.cancel("stopped by the operator")
    result = await run.result()
    assert result.status is RunStatus.CANCELLED and result.steps["deploy"].state is StepState.CANCELLED and not tools["deploy"].calls


# --- the queue keeps a parked run until it is due ----------------------------------------------------

PARK_TOOLS = """
import os
import time

from planexec import ToolContext, tool

LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.log")


@tool(untrusted_output=False)
def stamp(ctx: ToolContext, name: str) -> str:
    '''Writes the step, its process and the time it ran.'''
    with open(LOG, "a") as f:
        f.write(f"{ctx.run_id} {ctx.step_id} {os.getpid()} {time.time()}\\n")
    return name
"""


def _stamps(folder) -> list[tuple[str, str, int, float]]:
    path = folder / "calls.log"
    if not path.exists():
        return []
    return [(r, s, int(p), float(t)) for r, s, p, t in (line.split() for line in path.read_text().splitlines())]


def test_a_queued_run_that_can_only_wait_goes_back_to_the_queue_and_is_taken_only_when_due(tmp_path) -> None:
    from planexec.fleet.worker import QueueWorker, submit_plan
    from planexec.store import open_store
    from planexec.store.queue import QueueState

    (tmp_path / "tools.py").write_text(PARK_TOOLS)
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
    plan = mkplan(
        {"id": "build", "action": "stamp", "parameters": {"name": "build"}},
        {"id": "deploy", "action": "stamp", "parameters": {"name": "deploy"}, "depends_on": ["build"], "not_before": at.isoformat()},
    )
    store = open_store(tmp_path / "runs.db")
    submit_plan(store, plan, run_id="sched", setup={"tools": [str(tmp_path / "tools.py")]}, approved_by="tester")
    first = asyncio.run(QueueWorker(store, once=True, park_after=1).serve())
    assert [(r.run_id, r.outcome) for r in first.runs] == [("sched", "scheduled")]
    row = store.queued_run("sched")
    assert row.state is QueueState.QUEUED and row.due == at and store.lease("sched") is None  # nobody holds it while it waits
    assert [s for _, s, _, _ in _stamps(tmp_path)] == ["build"]
    assert store.claim_run() is None  # not before it is due
    summary = store.run("sched")
    assert summary.status.value == "scheduled" and "wait until" in (summary.reason or "")
    time.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()) + 0.2)
    second = asyncio.run(QueueWorker(store, once=True, park_after=1).serve())
    assert [(r.run_id, r.how, r.outcome) for r in second.runs] == [("sched", "resumed", "succeeded")]
    stamps = _stamps(tmp_path)
    assert [s for _, s, _, _ in stamps] == ["build", "deploy"]  # each once
    assert stamps[1][3] >= at.timestamp()  # never early
    store.close()


def test_the_compact_language_writes_and_reads_times_and_windows() -> None:
    from planexec.plan import print_compact
    from planexec.plan.compact import parse_compact

    plan = mkplan(
        {"id": "s1", "action": "echo", "parameters": {"value": 1}},
        {"id": "s2", "action": "echo", "parameters": {"value": 2}, "depends_on": ["s1"], "not_before": "2026-12-05T02:00-05:00"},
        windows={"echo": "Sat 02:00-04:00 America/New_York"},
    )
    text = print_compact(plan)
    assert 'not_before="2026-12-05T02:00:00-05:00"' in text and 'windows={"echo": ["Sat 02:00-04:00 America/New_York"]}' in text
    assert parse_compact(text, goal="g", plan_id="p").content_hash == plan.content_hash
    with pytest.raises(PlanParseError, match="has no zone"):
        parse_compact('1. echo(value=1) not_before="2026-12-05T02:00"', goal="g")


def test_a_window_for_a_tool_no_worker_offers_is_a_validation_problem() -> None:
    from planexec.plan.validation import validate_plan

    reg, _ = registry("deploy")
    plan = mkplan({"id": "a", "action": "deploy"}, windows={"deploy_servce": "Sat 02:00-04:00 UTC"})
    problems = validate_plan(plan, reg)
    assert [(p.rule, p.field) for p in problems] == [("unknown_tool", "windows.deploy_servce")]


def test_the_plan_table_shows_when_each_step_may_start() -> None:
    from rich.console import Console

    from planexec.plan import plan_table

    plan = mkplan(
        {"id": "build", "action": "build"},
        {"id": "deploy", "action": "deploy", "depends_on": ["build"], "not_before": "2026-12-05T02:00-05:00"},
        windows={"deploy": "Sat 02:00-04:00 America/New_York"},
    )
    console = Console(width=250, record=True)
    console.print(plan_table(plan))
    text = console.export_text()
    assert "when" in text and "not before 2026-12-05T02:00:00-05:00; deploy in Sat 02:00-04:00 America/New_York" in text
    console = Console(width=250, record=True)
    console.print(plan_table(mkplan({"id": "build", "action": "build"})))
    assert "when" not in console.export_text()  # no column for a plan that schedules nothing


# --- a reviewer moves a step's time when approving ----------------------------------------------------


def test_approve_at_moves_the_steps_time_in_the_waiting_plan_and_approves_it(tmp_path, monkeypatch, capsys) -> None:
    from planexec.cli.main import main
    from planexec.fleet.worker import QueueWorker, submit_plan
    from planexec.store import open_store
    from planexec.store.queue import QueueState

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "runs.db"))
    (tmp_path / "tools.py").write_text(PARK_TOOLS)
    plan = mkplan(
        {"id": "build", "action": "stamp", "parameters": {"name": "build"}},
        {"id": "deploy", "action": "stamp", "parameters": {"name": "deploy"}, "depends_on": ["build"]},
    )
    store = open_store(tmp_path / "runs.db")
    submit_plan(store, plan, run_id="r1", setup={"tools": [str(tmp_path / "tools.py")]})  # waits for a person
    at = (datetime.now(UTC) + timedelta(hours=3)).replace(microsecond=0)

    # bad input: each a clear error naming what is wrong, nothing stored
    for argv, says in [
        (["approve", "r1", "--at", at.isoformat()], "name it with --step"),
        (["approve", "r1", "--step", "deploy", "--at", "tomorrow 2am"], "is not a time"),
        (["approve", "r1", "--step", "deploy", "--at", "2026-12-05T02:00"], "has no zone"),
        (["approve", "r1", "--step", "nope", "--at", at.isoformat()], "has no step 'nope'"),
        (["approve", "r9", "--step", "deploy", "--at", at.isoformat()], "r9"),
    ]:
        assert main(argv) == 2, argv
        assert says in capsys.readouterr().err, argv
    assert len(store.plan_versions("r1")) == 1 and store.queued_run("r1").approval == "pending"

    assert main(["approve", "r1", "--step", "deploy", "--at", at.isoformat(), "--by", "ada", "--reason", "maintenance window"]) == 0
    out = capsys.readouterr().out
    assert f"approved plan v2 of run r1 (by ada) with step deploy moved to {at.isoformat()}" in out
    versions = store.plan_versions("r1")
    assert [v.version for v in versions] == [1, 2] and versions[-1].plan.step("deploy").not_before == at
    assert "edited by ada: step deploy not before" in versions[-1].reason
    row = store.queued_run("r1")
    assert row.content_hash == versions[-1].plan.content_hash and row.approval == "approved" and row.state is QueueState.QUEUED

    # a worker runs what can run now, and hands the run back to the queue until the moved time
    report = asyncio.run(QueueWorker(store, once=True).serve())
    assert [(r.run_id, r.outcome) for r in report.runs] == [("r1", "scheduled")]
    assert [s for _, s, _, _ in _stamps(tmp_path)] == ["build"] and store.queued_run("r1").due == at

    # a second --at finds nothing waiting: the plan is approved
    assert main(["approve", "r1", "--step", "deploy", "--at", at.isoformat()]) == 2
    assert "no plan version of run 'r1' waits for approval" in capsys.readouterr().err
    assert main(["show", "r1"]) == 0
    shown = capsys.readouterr().out
    assert "scheduled" in shown and "not before" in shown and "a worker resumes it then" in shown
    store.close()


# --- a policy requires a window for a tool ---------------------------------------------------------


def _deploy_registry() -> Registry:
    reg, _ = registry("backup", "deploy_service")
    return reg


def test_a_window_policy_refuses_a_plan_that_does_not_keep_the_window(tmp_path) -> None:
    from planexec.errors import PolicyError
    from planexec.policies import PolicyContext, load_policies, review_plan

    rules = tmp_path / "policies.yaml"
    rules.write_text('windows: {"deploy_*": "Sat 02:00-04:00 America/New_York"}\n')
    policies = load_policies([str(rules)])
    context = PolicyContext(registry=_deploy_registry())
    steps = ({"id": "backup", "action": "backup"}, {"id": "deploy", "action": "deploy_service", "depends_on": ["backup"]})

    bare = review_plan(mkplan(*steps), list(policies), context)
    assert bare.decision == "reject"
    (reason,) = bare.reasons("reject")
    assert "step 'deploy' calls 'deploy_service'" in reason and "runs only in Sat 02:00-04:00 America/New_York" in reason
    assert '"windows": {"deploy_service": "Sat 02:00-04:00 America/New_York"}' in reason  # what to add

    wide = review_plan(mkplan(*steps, windows={"deploy_service": "daily 02:00-04:00 America/New_York"}), list(policies), context)
    assert wide.decision == "reject" and "is not inside it" in wide.reasons("reject")[0]
    other_zone = review_plan(mkplan(*steps, windows={"deploy_service": "Sat 02:00-04:00 UTC"}), list(policies), context)
    assert other_zone.decision == "reject"  # 02:00 UTC is Friday 21:00 in New York

    kept = review_plan(mkplan(*steps, windows={"deploy_service": "Sat 02:30-03:30 America/New_York"}), list(policies), context)
    assert kept.decision == "approve", kept.render()
    same = review_plan(mkplan(*steps, windows={"deploy_service": "Sat 07:00-09:00 UTC"}), list(policies), context)
    assert same.decision == "reject"  # the same hours in winter only: in summer 07:00 UTC is 03:00 in New York, 09:00 is 05:00

    for text, says in [
        ("windows: []\n", "expected {TOOL_PATTERN"),
        ('windows: {"deploy_*": "Sat 2am"}\n', "not a window"),
        ('windows: {"deploy_*": "Sat 02:00-04:00 Nowhere/City"}\n', "not a time zone"),
    ]:
        rules.write_text(text)
        with pytest.raises(PolicyError, match=says) as info:
            load_policies([str(rules)])
        assert "policies.yaml" in str(info.value) and "windows" in str(info.value)


@sync
async def test_a_role_calls_a_windowed_tool_only_inside_its_window() -> None:
    from planexec import tool
    from planexec.policies import approve_calls
    from planexec.testing import ScriptedModel, tool_call
    from planexec.workers.worker import RoleWorker

    ran: list[str] = []

    @tool
    def restart(service: str) -> str:
        """Restart a service."""
        ran.append(service)
        return "restarted"

    def make(clock: ManualClock) -> tuple[Engine, Plan]:
        reg = Registry.default()
        reg.add_tool(restart)
        model = ScriptedModel([tool_call("restart", service="api"), "done"])
        reg.add_worker(RoleWorker("ops", model=model, description="runs the fleet", system_prompt="s", tools=[restart]))
        # the step's grant does not name the tool: it does not wait for the window, and the gate holds the line
        plan = mkplan(
            {"id": "fix", "worker": "ops", "action": "respond", "instruction": "restart the api"},
            windows={"restart": "Sat 02:00-04:00 America/New_York"},
        )
        return Engine(reg, clock=clock, call_approver=approve_calls), plan

    engine, plan = make(ManualClock(T0))  # Friday morning: closed
    closed = await engine.start(plan).result()
    (call,) = closed.steps["fix"].calls
    assert (call.tool, call.allowed, call.rule) == ("restart", False, "outside_window") and ran == []
    assert "runs only in Sat 02:00-04:00 America/New_York" in call.reason and "the next opens 2026-12-05T07:00:00+00:00" in call.reason
    engine, plan = make(ManualClock(datetime(2026, 12, 5, 7, 30, tzinfo=UTC)))  # inside the window
    opened = await engine.start(plan).result()
    assert [(c.tool, c.allowed) for c in opened.steps["fix"].calls] == [("restart", True)] and ran == ["api"]


def test_the_console_shows_a_scheduled_step_in_its_panel_graph_and_timeline(tmp_path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from planexec.store import open_store
    from planexec.web import create_app

    reg, _ = registry("build", "deploy")
    store = open_store(tmp_path / "runs.db")
    plan = mkplan(
        {"id": "build", "action": "build"},
        {"id": "deploy", "action": "deploy", "depends_on": ["build"]},
        windows={"deploy": "Sat 02:00-04:00 America/New_York"},
    )
    result = Engine(reg, store=store, clock=ManualClock(T0), park_after=0).run_sync(plan, run_id="w1")
    assert result.status is RunStatus.SCHEDULED
    store.close()
    token = "test-token-0123456789abcdef"
    app = create_app(str(tmp_path / "runs.db"), token=token, worker=False)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get("/runs/w1", headers={"Authorization": f"Bearer {token}"}).text
    assert 'data-due="deploy">waits until 2026-12-05 07:00:00 UTC' in page
    assert "deploy in Sat 02:00-04:00 America/New_York" in page  # the step's "when"
    assert 'class="node state-scheduled"' in page and "scheduled Sat 07:00 UTC" in page  # the graph's node
    assert "⏲ waits until 2026-12-05 07:00:00 UTC" in page  # the timeline's row
    assert "Traceback" not in page


# --- end to end: the deployment example in its window, its worker killed while it waits -------------------

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_the_deploy_example_runs_in_its_window_once_from_the_second_worker_after_the_first_is_killed_while_waiting(tmp_path) -> None:
    """examples/deploy/scheduled.json with its window moved a few seconds ahead: submitted with --yes, the first worker runs the
    tests and the backup and waits for the window holding the run; it is killed (SIGKILL) while it waits; a second worker takes
    the run over at once, waits for the window itself, and the deploy runs once, in the window, from the second worker."""
    import json
    import os
    import subprocess
    import sys

    from planexec.store import open_store

    data = json.loads((ROOT / "examples" / "deploy" / "scheduled.json").read_text())
    # far enough ahead that a loaded machine starts the worker and reaches the deploy before it opens (a few seconds idle)
    opens = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=30)
    closes = opens + timedelta(minutes=10)
    data["windows"] = {"deploy_service": f"daily {opens:%H:%M:%S}-{closes:%H:%M:%S} UTC"}
    (tmp_path / "plan.json").write_text(json.dumps(data))
    state, db = tmp_path / "state", str(tmp_path / "runs.db")
    env = {**os.environ, "DEPLOY_STATE_DIR": str(state), "COLUMNS": "200"}
    tools = str(ROOT / "examples" / "deploy" / "tools.py")
    planexec = [sys.executable, "-m", "planexec"]
    submitted = subprocess.run(
        [*planexec, "submit", "plan.json", "--tools", tools, "--yes", "--run-id", "d1", "--store", db],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr

    def worker(name: str) -> subprocess.Popen:
        with (tmp_path / f"{name}.out").open("wb") as out, (tmp_path / f"{name}.err").open("wb") as err:
            return subprocess.Popen(
                [*planexec, "worker", "--store", db, "--poll", "0.2", "--json"], cwd=tmp_path, env=env, stdout=out, stderr=err
            )

    def events() -> list:
        with open_store(db) as store:
            return store.events("d1")

    def until(check, what: str, limit: float = 150.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.1)
        raise AssertionError(f"{what} did not happen within {limit}s: {(tmp_path / 'first.err').read_text()[-2000:]}")

    first = worker("first")
    try:
        until(lambda: any(e.type == "step_scheduled" and e.step_id == "deploy" for e in events()), "the deploy step waiting")
        assert datetime.now(UTC) < opens, "the machine was too slow to kill the worker before the window opened"
        first.kill()
        first.wait()
    finally:
        if first.poll() is None:
            first.kill()
    second = worker("second")
    try:
        until(lambda: any(e.type == "run_finished" and e.status.value == "succeeded" for e in events()), "the run succeeding")
    finally:
        second.terminate()
        second.wait(timeout=60)
    actions = [json.loads(line) for line in (state / "actions.jsonl").read_text().splitlines()]
    deploys = [a for a in actions if a["action"] == "deploy_service"]
    assert [a["action"] for a in actions] == ["run_tests", "backup_database", "deploy_service"]  # each once
    assert len(deploys) == 1 and deploys[0]["pid"] == second.pid  # from the second worker
    assert datetime.fromisoformat(deploys[0]["at"]) >= opens  # not before its window
    assert actions[0]["pid"] == actions[1]["pid"] == first.pid
    history = events()
    assert any(e.type == "run_resumed" for e in history)
    started = [e for e in history if e.type == "step_started" and e.step_id == "deploy"]
    assert len(started) == 1 and started[0].at >= opens


def test_planexec_run_waits_in_the_foreground_is_stopped_with_ctrl_c_and_resumed_never_early(tmp_path) -> None:
    """The foreground run says until when the step waits and how long that is; Ctrl-C stops it (the step never ran);
    planexec resume waits again for the time, and the step runs once, not before it."""
    import json
    import os
    import signal
    import subprocess
    import sys

    (tmp_path / "tools.py").write_text(PARK_TOOLS)
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=8)
    plan = {
        "plan_id": "later", "goal": "build now, ship later",
        "steps": [
            {"id": "build", "action": "stamp", "parameters": {"name": "build"}},
            {"id": "ship", "action": "stamp", "parameters": {"name": "ship"}, "depends_on": ["build"], "not_before": at.isoformat()},
        ],
    }  # fmt: skip
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    env = {**os.environ, "COLUMNS": "200", "PLANEXEC_STORE": str(tmp_path / "runs.db")}
    command = [sys.executable, "-m", "planexec", "run", "--plan", "plan.json", "--tools", "tools.py", "--yes", "--run-id", "f1"]
    with (tmp_path / "run.out").open("wb") as out:
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while "ship: scheduled until" not in (tmp_path / "run.out").read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    said = (tmp_path / "run.out").read_text()
    assert "ship: scheduled until" in said and f"not_before {at.isoformat()}" in said and " in " in said
    assert [s for _, s, _, _ in _stamps(tmp_path)] == ["build"]  # stopped before its time: it never ran
    resumed = subprocess.run(
        [sys.executable, "-m", "planexec", "resume", "f1"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    stamps = _stamps(tmp_path)
    assert [s for _, s, _, _ in stamps] == ["build", "ship"] and stamps[1][3] >= at.timestamp()


@sync
async def test_a_replan_may_not_start_a_steps_work_sooner_than_the_person_approved() -> None:
    """A step fails before the scheduled deploy; the replanner (it read the run's outputs) writes the deploy again without
    its time: that runs sooner than approved, a widening: the run stops (replan_widens) and nothing deploys. A revision
    that keeps the time (or a later one) goes on and waits for it."""
    from planexec.planning.replanner import FunctionReplanner

    def make(keep_time: bool) -> tuple[Engine, Plan, dict, ManualClock]:
        reg, tools = registry("deploy")
        check = scripted_tool("check", [RuntimeError("staging is down")], default="ok")
        reg.add_tool(check)
        tools["check"] = check
        plan = mkplan(
            {"id": "check", "action": "check", "failure_action": "replan"},
            {"id": "deploy", "action": "deploy", "depends_on": ["check"], "not_before": "2026-12-05T07:00:00Z"},
        )
        again = {"id": "check2", "action": "check"}
        deploy = {"id": "deploy2", "action": "deploy", "depends_on": ["check2"]}
        if keep_time:
            deploy["not_before"] = "2026-12-05T08:00:00Z"
        clock = ManualClock(T0)
        return Engine(reg, clock=clock, replanner=FunctionReplanner(lambda ctx: [again, deploy])), plan, tools, clock

    engine, plan, tools, _ = make(keep_time=False)
    result = await engine.start(plan).result()
    assert result.status is RunStatus.FAILED and result.error is not None and result.error.rule == "replan_widens"
    assert "step 'deploy2' (deploy) may start before 2026-12-05T07:00:00+00:00" in result.error.message and not tools["deploy"].calls

    engine, plan, tools, clock = make(keep_time=True)
    run = engine.start(plan)
    await wait_for(lambda: run.records.get("deploy2") is not None and run.records["deploy2"].state is StepState.SCHEDULED)
    clock.set(datetime(2026, 12, 5, 8, 0, tzinfo=UTC))
    result = await run.result()
    assert result.status is RunStatus.SUCCEEDED and len(tools["deploy"].calls) == 1


def test_a_hosted_planner_may_give_a_step_its_time_and_a_bad_time_is_sent_back_for_repair() -> None:
    import json

    from planexec.planning.planner import Planner
    from planexec.testing import ScriptedModel

    reg = Registry.default()
    good = {"id": "s1", "worker": "tool", "action": "echo", "instruction": "say it", "parameters": {"value": "hi"}, "depends_on": []}
    naive = json.dumps({"steps": [{**good, "not_before": "2026-12-05T02:00"}]})
    fixed = json.dumps({"steps": [{**good, "not_before": "2026-12-05T02:00:00-05:00"}]})
    model = ScriptedModel([naive, fixed])
    planning = asyncio.run(Planner(model, reg).draft("say hi at 2 a.m. New York time on Saturday"))
    schema = json.dumps(model.requests[0].output_schema)
    assert '"not_before"' in schema  # the draft schema offers it
    assert planning.repairs == 1 and "has no zone" in " ".join(planning.drafts[0].problems)
    assert planning.plan.step("s1").not_before == datetime(2026, 12, 5, 7, 0, tzinfo=UTC)
