"""Attacks on scheduled steps and maintenance windows (issue 27): each test failed before the fix it names."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from planexec import Engine, Registry, RunStatus, StepState
from planexec.testing import ManualClock
from planexec.workers.tools import Tool
from test_schedule import mkplan, sync, wait_for

OPEN = datetime(2026, 12, 5, 7, 0, tzinfo=UTC)  # Saturday 02:00 in New York: the window below opens
WINDOW = {"deploy": "Sat 02:00-04:00 America/New_York"}


# --- the engine: every attempt starts inside the window ---------------------------------------------


@sync
async def test_a_retry_after_the_window_closed_waits_for_the_next_window() -> None:
    """Found: the time was checked once, before the first attempt; a retry (after a backoff) ran outside the window."""
    clock = ManualClock(OPEN + timedelta(minutes=119))  # a minute before the window closes
    calls: list[datetime] = []

    async def deploy(args=None):
        calls.append(clock.now())
        if len(calls) == 1:
            clock.advance(minutes=5)  # the first attempt takes five minutes, then fails: the window has closed
            raise RuntimeError("flaky")
        return "deployed"

    reg = Registry()
    reg.add_tool(Tool(deploy, name="deploy"))
    plan = mkplan({"id": "d", "action": "deploy", "failure_action": {"kind": "retry", "backoff": 0.01, "max_attempts": 2}}, windows=WINDOW)
    run = Engine(reg, clock=clock).start(plan)
    await wait_for(lambda: run.records["d"].state is StepState.SCHEDULED and clock.sleepers == 1)
    await asyncio.sleep(0.05)
    assert len(calls) == 1  # the retry waits
    assert run.records["d"].due == OPEN + timedelta(days=7)
    clock.set(OPEN + timedelta(days=7))
    result = await run.result()
    assert result.status is RunStatus.SUCCEEDED and calls[1] == OPEN + timedelta(days=7)
    assert result.steps["d"].attempts == 2


@sync
async def test_a_step_that_waited_for_a_slot_past_its_window_waits_for_the_next_window() -> None:
    """Found: a step in its window that waited for a slot (max_concurrency) started when the slot freed, after the window closed."""
    clock = ManualClock(OPEN + timedelta(minutes=119))
    release = asyncio.Event()
    calls: list[datetime] = []

    async def long(args=None):
        await release.wait()
        return 1

    async def deploy(args=None):
        calls.append(clock.now())
        return 2

    reg = Registry()
    reg.add_tool(Tool(long, name="long"))
    reg.add_tool(Tool(deploy, name="deploy"))
    plan = mkplan({"id": "l", "action": "long"}, {"id": "d", "action": "deploy"}, windows=WINDOW)
    run = Engine(reg, clock=clock, max_concurrency=1).start(plan)
    await wait_for(lambda: run.records["l"].state is StepState.RUNNING and run.records["d"].state is StepState.READY)
    clock.advance(minutes=5)  # the window closes while the deploy waits for the slot
    release.set()
    await wait_for(lambda: run.records["d"].state is StepState.SCHEDULED and clock.sleepers == 1)
    assert not calls and run.records["d"].due == OPEN + timedelta(days=7)
    clock.set(OPEN + timedelta(days=7, minutes=1))
    result = await run.result()
    assert result.status is RunStatus.SUCCEEDED and calls == [OPEN + timedelta(days=7, minutes=1)]


# --- windows and times: pure --------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["Sun 02:00-03:00 America/New_York", "Sun 02:30-03:15 America/New_York"])
def test_a_window_in_the_hour_a_clock_change_skips_still_opens_that_night(text: str) -> None:
    """Found: on 2026-03-08 New York skips 02:00-03:00; a window in that hour opened and closed at the same instant (or closed
    before it opened), so it never opened and a weekly deploy slipped a week. Now it opens an hour later, for its length."""
    from planexec.plan.windows import parse_window

    w = parse_window(text)
    saturday = datetime(2026, 3, 7, 12, tzinfo=UTC)
    opens = w.next_open(saturday)
    assert opens.date() == datetime(2026, 3, 8).date()  # that night, not a week later
    assert w.contains(opens) and w.contains(opens + w.length - timedelta(seconds=1))
    assert not w.contains(opens + w.length)


def test_within_asks_for_one_opening_not_two_that_touch_its_ends() -> None:
    """Found: `within` checked only that the first and last second were open, each in any opening of the other:
    daily 00:30-23:30 passed as inside daily 23:00-01:00 (open at 00:30 from the night before, at 23:29 from that night)."""
    from planexec.plan.windows import parse_window

    assert not parse_window("daily 00:30-23:30 UTC").within(parse_window("daily 23:00-01:00 UTC"))
    assert parse_window("daily 23:30-00:30 UTC").within(parse_window("daily 23:00-01:00 UTC"))


def test_within_holds_on_every_day_of_the_year_not_in_two_sample_weeks() -> None:
    """Found: New York and London change their clocks on different Sundays; a winter and a summer week agree, but in the
    weeks between (March, October/November) Sat 02:00 New York is 06:00 in London, outside its 07:00-09:00 window."""
    from planexec.plan.windows import parse_window
    from planexec.policies import PolicyContext, RequireWindows

    ny, london = parse_window("Sat 02:00-04:00 America/New_York"), parse_window("Sat 07:00-09:00 Europe/London")
    assert not ny.within(london)
    assert ny.within(parse_window("Sat 01:00-05:00 America/New_York"))
    plan = mkplan({"id": "d", "action": "deploy"}, windows={"deploy": "Sat 02:00-04:00 America/New_York"})
    reg = Registry()
    reg.add_tool(Tool(lambda: None, name="deploy"))
    verdict = RequireWindows({"deploy": "Sat 07:00-09:00 Europe/London"}).review(plan, PolicyContext(registry=reg))
    assert verdict.decision == "reject" and "is not inside it" in verdict.render()


@pytest.mark.parametrize("when", ["9999-12-31T23:59:59Z", "9999-12-31T23:00-05:00", "0001-01-01T00:00+05:00"])
def test_a_time_at_the_ends_of_the_calendar_is_refused_when_the_plan_is_read(when: str) -> None:
    """Found: not_before in year 9999 with a window for its tool crashed the engine (OverflowError searching the window:
    the run ended 'aborted', internal error); a time that cannot be read in UTC could crash any view that converts it."""
    from planexec.errors import PlanParseError

    with pytest.raises(PlanParseError, match="out of range"):
        mkplan({"id": "d", "action": "deploy", "not_before": when}, windows=WINDOW)
    mkplan({"id": "d", "action": "deploy", "not_before": "0001-01-02T00:00Z"})  # long past: it runs at once
    mkplan({"id": "d", "action": "deploy", "not_before": "9998-12-31T23:59:59.999999Z"})


# --- planexec approve --at --------------------------------------------------------------------------------


def test_approve_at_refuses_a_time_that_has_passed_or_that_the_plan_cannot_hold(tmp_path, monkeypatch, capsys) -> None:
    """Found: --at 2001-01-01T00:00Z was approved ("it waits as scheduled until then") and the step started at once (a typo
    in the year deploys now); --at 9999-12-31T00:00Z ended in a traceback. Now: a usage error, and the plan's problem."""
    from planexec.cli.main import main
    from planexec.fleet.worker import submit_plan
    from planexec.store import open_store

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "runs.db"))
    (tmp_path / "tools.py").write_text(
        "from planexec import tool\n\n@tool(untrusted_output=False)\ndef stamp(name: str) -> str:\n    return name\n"
    )
    plan = mkplan({"id": "deploy", "action": "stamp", "parameters": {"name": "deploy"}})
    store = open_store(tmp_path / "runs.db")
    submit_plan(store, plan, run_id="r1", setup={"tools": [str(tmp_path / "tools.py")]})  # waits for a person
    assert main(["approve", "r1", "--step", "deploy", "--at", "2001-01-01T00:00Z"]) == 2
    assert "has passed" in capsys.readouterr().err
    assert main(["approve", "r1", "--step", "deploy", "--at", "9999-12-31T00:00Z"]) == 1
    assert "out of range" in capsys.readouterr().out
    assert len(store.plan_versions("r1")) == 1 and store.queued_run("r1").approval == "pending"  # nothing stored
    store.close()


# --- a replan may not drop a person's time ------------------------------------------------------------


def test_a_replan_that_renames_the_step_and_moves_its_grant_to_another_role_keeps_the_time() -> None:
    """Found: the same work was found only by the step's id or its action; a revision that renamed the deploy step and gave
    its grant (deploy_service) to another role dropped the time without a person (and a grant to an existing tool is not a
    widening). Now a step that names a tool the timed step named is the same work."""
    from planexec.plan.schedule import earlier_times

    grant = [{"tool": "deploy_service"}]
    old = mkplan(
        {"id": "test", "action": "tester"},
        {"id": "deploy", "action": "ops", "capabilities": grant, "depends_on": ["test"], "not_before": "2026-12-05T02:00-05:00"},
    )
    dodge = mkplan({"id": "test", "action": "tester"}, {"id": "release", "action": "sre", "capabilities": grant, "depends_on": ["test"]})
    (line,) = earlier_times(old, dodge, ["release"])
    assert "step 'release' (sre) may start before 2026-12-05T02:00:00-05:00" in line
    kept = mkplan(
        {"id": "test", "action": "tester"},
        {"id": "release", "action": "sre", "capabilities": grant, "depends_on": ["test"], "not_before": "2026-12-05T03:00-05:00"},
    )
    assert earlier_times(old, kept, ["release"]) == []  # a later time is kept
    other = mkplan({"id": "test", "action": "tester"}, {"id": "report", "action": "writer", "depends_on": ["test"]})
    assert earlier_times(old, other, ["report"]) == []  # other work: no time to keep


# --- the queue: a due time is a hint, the plan is the rule ----------------------------------------------

STAMP_TOOLS = """
import os, time
from planexec import ToolContext, tool

LOG = os.path.join(os.path.dirname(__file__), "calls.log")


@tool(untrusted_output=False)
def stamp(ctx: ToolContext, name: str) -> str:
    '''Writes the step and the time it ran.'''
    with open(LOG, "a") as f:
        f.write(f"{ctx.step_id} {time.time()}\\n")
    return name
"""


def test_a_due_time_edited_in_the_queue_lets_a_worker_take_the_run_early_but_never_runs_the_step_early(tmp_path) -> None:
    """Attack (verified, no fix needed): run_queue.due_at is outside the audit chain; a person with write access to the store
    sets it to 0. A worker takes the run at once, the engine reads the time from the (audited) plan, and the run goes back
    to the queue with its true due time; the step never runs."""
    from planexec.fleet.worker import QueueWorker, submit_plan
    from planexec.store import open_store
    from planexec.store.queue import QueueState

    (tmp_path / "tools.py").write_text(STAMP_TOOLS)
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    plan = mkplan(
        {"id": "build", "action": "stamp", "parameters": {"name": "build"}},
        {"id": "deploy", "action": "stamp", "parameters": {"name": "deploy"}, "depends_on": ["build"], "not_before": at.isoformat()},
    )
    store = open_store(tmp_path / "runs.db")
    submit_plan(store, plan, run_id="t1", setup={"tools": [str(tmp_path / "tools.py")]}, approved_by="tester")
    first = asyncio.run(QueueWorker(store, once=True, park_after=1).serve())
    assert [r.outcome for r in first.runs] == ["scheduled"] and store.queued_run("t1").due == at
    import sqlite3

    with sqlite3.connect(tmp_path / "runs.db") as db:  # the tampering
        db.execute("UPDATE run_queue SET due_at = 0 WHERE run_id = 't1'")
    second = asyncio.run(QueueWorker(store, once=True, park_after=1).serve())
    assert [(r.how, r.outcome) for r in second.runs] == [("resumed", "scheduled")]  # taken early: it only waits again
    row = store.queued_run("t1")
    assert row.state is QueueState.QUEUED and row.due == at
    assert [line.split()[0] for line in (tmp_path / "calls.log").read_text().splitlines()] == ["build"]  # no deploy
    store.close()


# --- two windowed tools whose windows never meet ------------------------------------------------------------


def test_a_step_whose_tools_windows_never_meet_is_refused_and_the_engine_never_starts_it() -> None:
    """Found: a step naming two windowed tools (its action, a grant) whose windows never overlap was accepted; the engine
    scheduled it 'until' an opening of one window, found the other closed there, and waited again, week after week, for
    ever (no spin, never outside a window, but never done and never said). Now validation names the step and the windows;
    the engine, given such a plan anyway, still never starts it."""
    from planexec.plan.validation import validate_plan

    windows = {"migrate": "Sat 02:00-03:00 UTC", "deploy": "Sun 02:00-03:00 UTC"}
    step = {"id": "m", "action": "migrate", "capabilities": [{"tool": "deploy"}]}
    plan = mkplan(step, windows=windows)
    (problem,) = validate_plan(plan)
    assert problem.rule == "window_never_open" and problem.step_id == "m" and "never open at once" in problem.message
    assert validate_plan(mkplan(step, windows={**windows, "deploy": "Sat 02:30-04:00 UTC"})) == []  # they meet: fine

    async def engine() -> None:
        clock = ManualClock(OPEN)
        calls: list[datetime] = []

        async def migrate(args=None):
            calls.append(clock.now())

        reg = Registry()
        reg.add_tool(Tool(migrate, name="migrate"))
        reg.add_tool(Tool(lambda: None, name="deploy"))
        run = Engine(reg, clock=clock).start(plan, validate=False)
        for _ in range(6):  # six weeks: each opening of one window finds the other closed
            await wait_for(lambda: clock.sleepers == 1)
            clock.advance(days=7)
            await asyncio.sleep(0.01)
        assert not calls and run.records["m"].state is StepState.SCHEDULED
        run.cancel()
        await run.result()

    asyncio.run(engine())


# --- views of a run stopped as scheduled ---------------------------------------------------------------------


def test_a_run_stopped_as_scheduled_is_not_finished_for_the_console_or_planexec_show(tmp_path, monkeypatch, capsys) -> None:
    """Found: `RunSummary.finished` was True for a run stopped as scheduled, so the console stopped following it (its
    page said finished and closed the live stream: the deploy a worker ran hours later never showed) and planexec show
    printed 'answer: none' as for an ended run. A scheduled run goes on, as a queued one does."""
    from planexec.cli.main import main
    from planexec.store import open_store

    reg = Registry()
    reg.add_tool(Tool(lambda: "built", name="build"))
    reg.add_tool(Tool(lambda: "deployed", name="deploy"))
    store = open_store(tmp_path / "runs.db")
    plan = mkplan({"id": "build", "action": "build"}, {"id": "deploy", "action": "deploy", "depends_on": ["build"]}, windows=WINDOW)
    result = Engine(reg, store=store, clock=ManualClock(OPEN - timedelta(hours=19)), park_after=0).run_sync(plan, run_id="w1")
    assert result.status is RunStatus.SCHEDULED
    assert not store.run("w1").finished
    store.close()
    monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "runs.db"))
    assert main(["show", "w1"]) == 0
    shown = capsys.readouterr().out
    assert "scheduled" in shown and "answer:" not in shown

    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from planexec.web import create_app

    token = "test-token-0123456789abcdef"
    app = create_app(str(tmp_path / "runs.db"), token=token, worker=False)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        page = client.get("/runs/w1", headers={"Authorization": f"Bearer {token}"}).text
    assert '"finished": false' in page.replace("&#34;", '"') or '"finished":false' in page.replace("&#34;", '"')


def test_a_manual_clock_set_to_a_time_without_a_zone_says_so() -> None:
    """Found: ManualClock(start) refused a naive time, but set() let it through to a TypeError about comparing datetimes."""
    clock = ManualClock(OPEN)
    with pytest.raises(ValueError, match="carries its zone"):
        clock.set(datetime(2026, 12, 6))
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-1)
    assert clock.now() == OPEN


def test_a_worker_stopped_while_a_step_waits_hands_the_run_back_and_the_next_worker_waits_again(tmp_path) -> None:
    """Attack (verified, no fix needed): a worker that sleeps through a short wait itself is stopped (SIGTERM: `stop`)
    while the step is scheduled. The run is released (cancelled between steps: the step never started) and queued for at
    once; the next worker resumes it, finds the time still ahead, and parks it with its due time. Nothing ran early."""
    from planexec.engine.config import EngineConfig
    from planexec.fleet.worker import QueueWorker, submit_plan
    from planexec.store import open_store
    from planexec.store.queue import QueueState

    (tmp_path / "tools.py").write_text(STAMP_TOOLS)
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
    at = clock.now() + timedelta(minutes=10)
    plan = mkplan(
        {"id": "build", "action": "stamp", "parameters": {"name": "build"}},
        {"id": "deploy", "action": "stamp", "parameters": {"name": "deploy"}, "depends_on": ["build"], "not_before": at.isoformat()},
    )
    store = open_store(tmp_path / "runs.db")
    submit_plan(store, plan, run_id="s1", setup={"tools": [str(tmp_path / "tools.py")]}, approved_by="tester")

    async def first() -> list:
        worker = QueueWorker(store, engine=EngineConfig(clock=clock), park_after=3600, poll=0.05, grace=5)
        serving = asyncio.ensure_future(worker.serve())
        await wait_for(lambda: clock.sleepers == 1)  # the deploy sleeps in this worker
        worker.stop(why="SIGTERM")
        return (await serving).runs

    runs = asyncio.run(first())
    assert [r.outcome for r in runs] == ["released"]
    row = store.queued_run("s1")
    assert row.state is QueueState.QUEUED and row.due is None  # handed back: claimable at once
    second = asyncio.run(QueueWorker(store, engine=EngineConfig(clock=clock), park_after=1, once=True).serve())
    assert [(r.how, r.outcome) for r in second.runs] == [("resumed", "scheduled")]
    assert store.queued_run("s1").due == at
    assert [line.split()[0] for line in (tmp_path / "calls.log").read_text().splitlines()] == ["build"]
    store.close()
