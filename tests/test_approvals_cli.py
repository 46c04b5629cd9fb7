"""Durable approvals from the command line: ``planexec approvals``, ``planexec approve``, and the approvers of run and resume.

The Done-when runs real processes: a ``planexec run`` whose gated step
waits while the independent steps finish, is killed with SIGKILL while it
waits, is resumed (and waits again on the same request), and completes
once a second process approves.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from planexec import Engine, Plan, Registry, RunStatus, StepState
from planexec.cli.approvals import ReviewingPlanApprover, step_approver
from planexec.cli.main import main
from planexec.cli.review_terminal import ReviewTerminal
from planexec.engine.approval import PlanApprover, StoreApprover
from planexec.governance.policies import PolicyContext, policy
from planexec.planning.replanner import FunctionReplanner
from planexec.store import RunNotFoundError, SqliteRunStore, open_store, verify_run

TOOLS = textwrap.dedent(
    '''
    """Tools for the approval tests: `ship` is a side effect counted in $SHIP_LOG."""
    import os
    import time

    from planexec import tool


    @tool(idempotent=True)
    def build(name: str) -> str:
        """Idempotent work."""
        return f"built {name}"


    @tool
    def ship(name: str) -> str:
        """A side effect: one line in $SHIP_LOG each time it runs."""
        with open(os.environ["SHIP_LOG"], "a") as f:
            f.write(f"{os.getpid()} {name}\\n")
        return f"shipped {name}"
    '''
)

PLAN = {
    "plan_id": "release",
    "goal": "ship the app",
    "steps": [
        {"id": "compile", "action": "build", "parameters": {"name": "app"}},
        {"id": "docs", "action": "build", "parameters": {"name": "docs"}},
        {"id": "ship", "action": "ship", "parameters": {"name": "app"}, "depends_on": ["compile"], "requires_approval": True,
         "instruction": "ship the app to production"},
        {"id": "announce", "action": "build", "parameters": {"name": "news"}, "depends_on": ["ship"]},
    ],
}  # fmt: skip

WAIT = 60.0  # generous: a loaded machine may take seconds to start a Python process


@pytest.fixture(params=["sqlite", "postgres"])
def project(request, tmp_path, monkeypatch):
    """A folder with tools.py and plan.json; SHIP_LOG points into it, PLANEXEC_STORE to a fresh SQLite or PostgreSQL store."""
    (tmp_path / "tools.py").write_text(TOOLS)
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    monkeypatch.chdir(tmp_path)
    if request.param == "sqlite":
        monkeypatch.setenv("PLANEXEC_STORE", str(tmp_path / "runs.db"))
    else:
        monkeypatch.setenv("PLANEXEC_STORE", f"{request.getfixturevalue('postgres_url')}?schema=cli_{uuid.uuid4().hex[:12]}")
    monkeypatch.setenv("SHIP_LOG", str(tmp_path / "ship.log"))
    return tmp_path


def planexec(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """``python -m planexec ARGS`` as another process: stdin not a terminal, output to pipes."""
    return subprocess.Popen(
        [sys.executable, "-m", "planexec", *args], cwd=cwd, env=dict(os.environ),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout: float = WAIT) -> tuple[str, str]:
    """Its output once it exits; kill it and fail when it does not."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{proc.args} did not exit within {timeout:g}s:\n{out[-2000:]}\n{err[-2000:]}")


def wait_until(what: str, check, proc: subprocess.Popen[str] | None = None) -> None:
    """Poll `check` until it is true; fail (naming `what`) after WAIT seconds or when `proc` ends first."""
    deadline = time.monotonic() + WAIT
    while not check():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the process ended (exit {proc.returncode}) before {what}:\n{out[-2000:]}\n{err[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def events(store: SqliteRunStore, run_id: str) -> list:
    try:
        return store.events(run_id)
    except RunNotFoundError:  # not stored yet
        return []


def waiting_on_ship(store: SqliteRunStore, run_id: str, *, after: int = -1) -> bool:
    """The run asked for ship's approval (after event `after`), the request is pending, and the independent steps succeeded."""
    evs = [e for e in events(store, run_id) if e.seq > after]
    asked = any(e.type == "approval_requested" and e.step_id == "ship" for e in evs)
    done = {e.step_id for e in events(store, run_id) if e.type == "step_succeeded"}
    pending = asked and any(a.step_id == "ship" for a in store.approvals(run_id, pending_only=True))
    return pending and {"compile", "docs"} <= done


def shipped(project: Path) -> list[str]:
    log = project / "ship.log"
    return log.read_text().splitlines() if log.exists() else []


# --- the Done-when: real processes -------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_done_when_a_gated_step_waits_for_a_second_process_survives_a_restart_and_completes_once_approved(project):
    store = open_store(os.environ["PLANEXEC_STORE"])
    first = planexec("run", "--plan", "plan.json", "--tools", "tools.py", "--run-id", "r1", "--json", cwd=project)
    try:
        wait_until("the first process waits for ship's approval", lambda: waiting_on_ship(store, "r1"), first)
        assert shipped(project) == [] and "announce" not in {e.step_id for e in store.events("r1") if e.type == "step_started"}
    finally:
        first.send_signal(signal.SIGKILL)  # while it waits: no cleanup, no flush
        _, err = first.communicate(timeout=WAIT)
    assert first.returncode == -signal.SIGKILL
    assert "step ship of run r1 waits for approval: planexec approve r1 --step ship" in err
    (request,) = store.approvals("r1", pending_only=True)

    resumed = planexec("resume", "r1", "--tools", "tools.py", "--json", cwd=project)
    try:
        stopped_at = store.last_seq("r1")
        wait_until("the resumed process waits again", lambda: waiting_on_ship(store, "r1", after=stopped_at), resumed)
        assert store.approvals("r1", pending_only=True) == [request]  # the same request, found again
        assert shipped(project) == []
        approve = subprocess.run(
            [sys.executable, "-m", "planexec", "approve", "r1", "--step", "ship", "--by", "ada"],
            check=False, cwd=project, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=WAIT,
        )  # fmt: skip
        assert approve.returncode == 0, approve.stderr
        assert "approved step ship of run r1 (by ada)" in approve.stdout
        out, err = finish(resumed)
    finally:
        if resumed.poll() is None:
            resumed.kill()
    assert resumed.returncode == 0, err
    result = json.loads(out)
    assert result["status"] == "succeeded" and result["steps"]["announce"]["state"] == "succeeded"
    assert len(shipped(project)) == 1  # ship ran exactly once
    (ship,) = [a for a in store.approvals("r1") if a.step_id == "ship"]
    assert (ship.state.value, ship.by, ship.approval_id) == ("approved", "ada", request.approval_id)
    (plan_approval,) = [a for a in store.approvals("r1") if a.step_id is None]
    assert plan_approval.state.value == "approved" and plan_approval.by == "policy"  # the plan file, reviewed by the policies
    succeeded = [e.step_id for e in store.events("r1") if e.type == "step_succeeded"]
    assert sorted(succeeded) == ["announce", "compile", "docs", "ship"]  # no finished step ran again


def test_a_denied_step_is_not_run_and_the_run_ends(project):
    store = open_store(os.environ["PLANEXEC_STORE"])
    run = planexec("run", "--plan", "plan.json", "--tools", "tools.py", "--run-id", "r1", "--json", cwd=project)
    try:
        wait_until("the run waits for ship's approval", lambda: waiting_on_ship(store, "r1"), run)
        assert main(["approve", "r1", "--step", "ship", "--deny", "--reason", "not on a Friday", "--by", "ada"]) == 0
        out, _ = finish(run)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1
    result = json.loads(out)
    assert result["steps"]["ship"]["error"]["rule"] == "approval_denied"
    assert result["steps"]["announce"]["state"] != "succeeded"
    assert shipped(project) == []
    (ship,) = [a for a in store.approvals("r1") if a.step_id == "ship"]
    assert (ship.state.value, ship.by, ship.reason) == ("denied", "ada", "not on a Friday")


def test_yes_records_its_decisions_by_yes(project, capsys):
    assert main(["run", "--plan", "plan.json", "--tools", "tools.py", "--run-id", "r1", "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "succeeded"
    store = open_store(os.environ["PLANEXEC_STORE"])
    assert {(a.step_id, a.state.value, a.by) for a in store.approvals("r1")} == {(None, "approved", "--yes"), ("ship", "approved", "--yes")}
    assert len(shipped(project)) == 1


def test_without_a_store_a_gated_step_is_denied_as_before(project, capsys):
    assert main(["run", "--plan", "plan.json", "--tools", "tools.py", "--no-store", "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["steps"]["ship"]["error"]["rule"] == "approval_denied" and shipped(project) == []
    assert not (project / "runs.db").exists()
    if "://" in os.environ["PLANEXEC_STORE"]:  # on PostgreSQL the store exists: no run went into it
        assert open_store(os.environ["PLANEXEC_STORE"]).runs() == []


# --- the commands and their errors ----------------------------------------------------------


@pytest.fixture
def reg():
    reg = Registry.default()

    @reg.tool(idempotent=True)
    def build(name: str) -> str:
        return f"built {name}"

    @reg.tool(read_only=True)
    def check(name: str) -> str:
        return f"checked {name}"

    @reg.tool
    def ship(name: str) -> str:
        return f"shipped {name}"

    @reg.tool
    def broken(name: str) -> str:
        raise RuntimeError("smoke test failed")

    return reg


def stop_while_waiting(engine: Engine, plan: Plan, run_id: str, store: SqliteRunStore) -> None:
    """Start the run and cancel it once something of it waits for approval (as a closed laptop would)."""

    async def go():
        run = engine.start(plan, run_id=run_id)
        while not store_has_pending(store, run_id):
            await asyncio.sleep(0.01)
        run.cancel("stopped for the test")
        return await run.result()

    assert asyncio.run(go()).status is RunStatus.CANCELLED


def store_has_pending(store: SqliteRunStore, run_id: str) -> bool:
    try:
        return bool(store.approvals(run_id, pending_only=True))
    except RunNotFoundError:
        return False


def test_approvals_lists_what_waits_and_approve_decides_it(reg, project, capsys):
    store = open_store(os.environ["PLANEXEC_STORE"])
    stop_while_waiting(Engine(reg, store=store, approver=StoreApprover(store, poll=0.01)), Plan.model_validate(PLAN), "r1", store)
    two = Plan.model_validate({**PLAN, "steps": PLAN["steps"][:2]})
    stop_while_waiting(Engine(reg, store=store, plan_approver=PlanApprover(store, poll=0.01)), two, "r2", store)

    assert main(["approvals"]) == 0
    out = capsys.readouterr().out
    assert "step ship" in out and "tool.ship: ship the app to production" in out
    assert "plan v1" in out and "2 steps: compile, docs" in out
    assert main(["approvals", "--run", "r2", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["run_id"], listed["kind"], listed["plan_version"], listed["steps"], listed["state"]) == ("r2", "plan", 1, 2, "pending")

    assert main(["approve", "r1", "--step", "ship", "--by", "ada"]) == 0
    assert "approved step ship of run r1 (by ada)" in capsys.readouterr().out
    assert main(["approve", "r2", "--deny", "--reason", "too big", "--by", "bob"]) == 0  # no --step: the plan's pending version
    assert "denied plan v1 of run r2 (by bob): too big" in capsys.readouterr().out
    assert main(["approvals", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["approvals"]) == 0
    assert "no pending approvals in" in capsys.readouterr().out
    assert main(["approvals", "--all", "--json"]) == 0
    decided = {(a["run_id"], a["step_id"], a["state"], a["by"], a["reason"]) for a in json.loads(capsys.readouterr().out)}
    assert decided == {("r1", "ship", "approved", "ada", None), ("r2", None, "denied", "bob", "too big")}


def test_approve_errors_name_the_problem_and_change_nothing(reg, project, capsys):
    store = open_store(os.environ["PLANEXEC_STORE"])
    stop_while_waiting(Engine(reg, store=store, approver=StoreApprover(store, poll=0.01)), Plan.model_validate(PLAN), "r1", store)
    before = store.approvals("r1")
    cases = [
        (["approve", "nope", "--step", "ship"], "no run 'nope'"),
        (["approve", "r1", "--step", "docs"], "step 'docs' of run 'r1' is not pending approval: no approval was asked for"),
        (["approve", "r1", "--step", "ghost"], "run 'r1' has no step 'ghost' (its steps: announce, compile, docs, ship)"),
        (["approve", "r1"], "the plan of run 'r1' is not pending approval"),
        (["approvals", "--run", "nope"], "no run 'nope'"),
        (["approve", "r1", "--step", "ship", "--store", str(project / "missing.db")], "no run store at"),
        (["approvals", "--store", str(project / "plan.json")], "is not a planexec run store"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert words in err, (argv, err)
    assert store.approvals("r1") == before  # nothing changed
    assert not (project / "missing.db").exists()
    assert main(["approve", "r1", "--step", "ship"]) == 0
    capsys.readouterr()
    assert main(["approve", "r1", "--step", "ship"]) == 2  # decided already
    assert "it was already approved by" in capsys.readouterr().err


# --- plan versions: the reviewed one, and revisions ----------------------------------------------


REPLANNED = {
    "plan_id": "p",
    "goal": "g",
    "steps": [
        {"id": "a", "action": "build", "parameters": {"name": "a"}},
        {"id": "b", "action": "broken", "parameters": {"name": "b"}, "depends_on": ["a"], "failure_action": "replan"},
    ],
}
REVISION = [{"id": "c", "action": "ship", "parameters": {"name": "c"}, "depends_on": ["a"]}]  # a tool v1 did not grant
# changes nothing, so --yes may approve it (a revision that acts waits for a person: see test_attacker_contract.py)
REBUILD = [{"id": "c", "action": "check", "parameters": {"name": "c"}, "depends_on": ["a"]}]


def replanning_engine(reg: Registry, store: SqliteRunStore, plan_approver: PlanApprover, revision=REVISION) -> Engine:
    return Engine(reg, store=store, replanner=FunctionReplanner(lambda ctx: revision), plan_approver=plan_approver)


def test_the_reviewed_version_is_approved_by_its_reviewer_and_a_revision_by_yes_after_the_policies(reg, tmp_path):
    store = SqliteRunStore(tmp_path / "runs.db")
    seen = []

    @policy
    def watch(plan, context):
        seen.append((plan.version, context.previous.version if context.previous else None, context.changed_steps(plan)))
        return "escalate", "a person looks at new steps"

    plan = Plan.model_validate(REPLANNED)
    approver = ReviewingPlanApprover(
        store, reviewed=plan.content_hash, reviewed_by="ada", policies=[watch], context=PolicyContext(registry=reg), yes=True
    )
    result = replanning_engine(reg, store, approver, REBUILD).run_sync(plan, run_id="r1")
    assert result.status is RunStatus.SUCCEEDED and result.plan.version == 2
    assert seen == [(2, 1, ["c"])]  # the reviewed v1 is not reviewed again; v2 against v1: only the new step
    decided = [(a.by, a.reason) for a in store.approvals("r1") if a.step_id is None]
    assert decided == [("ada", None), ("--yes", "escalation approved by --yes: watch: a person looks at new steps")]


def test_a_revision_a_policy_rejects_is_denied_by_the_policy(reg, tmp_path):
    store = SqliteRunStore(tmp_path / "runs.db")
    no_c = policy(lambda plan: ("reject", "no step c") if "c" in plan.step_ids else "approve", name="no_c")
    plan = Plan.model_validate(REPLANNED)
    approver = ReviewingPlanApprover(store, reviewed=plan.content_hash, policies=[no_c], yes=True)
    result = replanning_engine(reg, store, approver, REBUILD).run_sync(plan, run_id="r1")
    assert result.status is RunStatus.FAILED and result.error.rule == "plan_rejected"
    revision = [a for a in store.approvals("r1") if a.step_id is None][-1]
    assert (revision.state.value, revision.by, revision.reason) == ("denied", "policy", "rejected by policy: no_c: no step c")


def test_a_revision_that_grants_a_new_tool_is_not_approved_by_yes(reg, tmp_path):
    store = SqliteRunStore(tmp_path / "runs.db")
    plan = Plan.model_validate(REPLANNED)
    approver = ReviewingPlanApprover(store, reviewed=plan.content_hash, yes=True)
    result = replanning_engine(reg, store, approver).run_sync(plan, run_id="r1")
    assert result.status is RunStatus.FAILED and result.error.rule == "replan_widens"
    assert "step 'c': ship(" in result.reason and "no person is here to approve it" in result.reason
    assert [a.step_id for a in store.approvals("r1")] == [None]  # v1 only: the widening revision never reached --yes


def test_a_person_at_the_terminal_sees_the_diff_and_decides_a_revision(reg, tmp_path, capsys):
    from rich.console import Console

    store = SqliteRunStore(tmp_path / "runs.db")
    answers = iter(["maybe", "r", "c looks wrong"])
    terminal = ReviewTerminal(Console(stderr=True), ask=lambda prompt: next(answers))
    plan = Plan.model_validate(REPLANNED)
    approver = ReviewingPlanApprover(store, reviewed=plan.content_hash, terminal=terminal)
    result = replanning_engine(reg, store, approver).run_sync(plan, run_id="r1")
    assert result.status is RunStatus.FAILED and result.error.rule == "plan_rejected"
    err = capsys.readouterr().err
    assert "plan v2 revises v1; changes:" in err and "+ c" in err and "answer a (approve) or r (reject)" in err
    revision = [a for a in store.approvals("r1") if a.step_id is None][-1]
    assert (revision.state.value, revision.reason) == ("denied", "c looks wrong")


def test_a_revision_with_no_one_to_ask_waits_for_planexec_approve(reg, project, capsys):
    store = open_store(os.environ["PLANEXEC_STORE"])
    plan = Plan.model_validate(REPLANNED)
    approver = ReviewingPlanApprover(store, reviewed=plan.content_hash, poll=0.01)

    async def go():
        run = replanning_engine(reg, store, approver).start(plan, run_id="r1")
        while not store_has_pending(store, "r1"):
            await asyncio.sleep(0.01)
        assert main(["approvals", "--json"]) == 0
        seen = capsys.readouterr()
        assert main(["approve", "r1", "--by", "ada"]) == 0
        return json.loads(seen.out), seen.err, await asyncio.wait_for(run.result(), WAIT)

    listed, err, result = asyncio.run(go())
    assert result.status is RunStatus.SUCCEEDED and result.steps["c"].state is StepState.SUCCEEDED
    (pending,) = listed
    assert (pending["kind"], pending["plan_version"]) == ("plan", 2)
    assert "replanned because:" in pending["details"]
    err += capsys.readouterr().err
    assert "plan v2 of run r1 waits for approval: planexec approve r1" in err and "+ c" in err
    assert [a.by for a in store.approvals("r1") if a.step_id is None] == ["person", "ada"]


def test_a_version_decided_here_is_never_pending_for_planexec_approve(reg, project, capsys, monkeypatch):
    """The reviewed v1 is asked for and approved at once: a ``planexec approve`` right after the request finds nothing of it pending.

    Were it stored pending and decided a moment later, that approve (meant
    for v2, which waits for it) would approve v1 instead, and v2 would wait
    for nobody: the interleaving is injected right after the request is stored.
    """
    store = open_store(os.environ["PLANEXEC_STORE"])
    plan = Plan.model_validate(REPLANNED)
    approver = ReviewingPlanApprover(store, reviewed=plan.content_hash, poll=0.01)
    in_window: list[int] = []
    request_approval = store.request_approval

    def then_another_process_approves(run_id, content_hash, **kwargs):
        stored = request_approval(run_id, content_hash, **kwargs)
        if content_hash == plan.content_hash and not in_window:
            in_window.append(main(["approve", run_id, "--by", "eve"]))
        return stored

    monkeypatch.setattr(store, "request_approval", then_another_process_approves)

    def v2_pending() -> bool:
        return any(a.content_hash != plan.content_hash for a in store.approvals("r1", pending_only=True))

    async def go():
        run = replanning_engine(reg, store, approver).start(plan, run_id="r1")
        while not (store_has_pending(store, "r1") and v2_pending()):
            await asyncio.sleep(0.01)
        assert main(["approve", "r1", "--by", "ada"]) == 0
        return await asyncio.wait_for(run.result(), WAIT)

    result = asyncio.run(go())
    assert in_window == [2]  # v1 was never pending: nothing for eve to approve
    assert "is not pending approval" in capsys.readouterr().err
    assert result.status is RunStatus.SUCCEEDED and result.plan.version == 2
    assert [a.by for a in store.approvals("r1") if a.step_id is None] == ["person", "ada"]
    report = verify_run(store, "r1")  # asked and decided in one transaction: both records chained
    assert report.ok, report.problems


def test_step_approver_with_a_store_keeps_every_decision(tmp_path):
    store = SqliteRunStore(tmp_path / "runs.db")
    assert isinstance(step_approver(store, yes=True, interactive=False, display=None), StoreApprover)
    assert step_approver(store, yes=True, interactive=False, display=None).by == "--yes"
    waiting = step_approver(store, yes=False, interactive=False, display=None, store_option="x.db")
    assert waiting.ask is None and waiting.on_wait is not None
    no_store = step_approver(None, yes=False, interactive=False, display=None)
    assert not isinstance(no_store, StoreApprover) and no_store(Plan.model_validate(PLAN).step("ship")) is False
