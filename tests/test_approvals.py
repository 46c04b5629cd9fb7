"""Durable approvals (per step and per plan version, frozen by content hash) and rollback after an abort."""

from __future__ import annotations

import asyncio

import pytest

from planexec import Engine, Plan, Registry, RunStatus, StepState
from planexec.engine.approval import PlanApprover, StoreApprover, step_hash
from planexec.planning.replanner import FunctionReplanner
from planexec.store import RunNotFoundError, open_store


@pytest.fixture
def reg():
    reg = Registry.default()
    reg.calls = []

    @reg.tool(idempotent=True, untrusted_output=False)
    async def work(name: str, seconds: float = 0.0) -> str:
        reg.calls.append(name)
        await asyncio.sleep(seconds)
        return name

    @reg.tool(untrusted_output=False)  # its own computation, not outside text
    async def deploy(name: str) -> str:
        reg.calls.append(name)
        return f"deployed {name}"

    @reg.tool(untrusted_output=False)  # its own computation, not outside text
    async def undeploy(name: str) -> str:
        reg.calls.append(f"undo {name}")
        return f"undeployed {name}"

    @reg.tool(untrusted_output=False)  # its own computation, not outside text
    async def broken(name: str) -> str:
        raise RuntimeError("smoke test failed")

    return reg


GATED = {
    "plan_id": "p",
    "goal": "ship",
    "steps": [
        {"id": "build", "action": "work", "parameters": {"name": "build"}},
        {"id": "docs", "action": "work", "parameters": {"name": "docs", "seconds": 0.05}},
        {"id": "ship", "action": "deploy", "parameters": {"name": "ship"}, "depends_on": ["build"], "requires_approval": True},
        {"id": "announce", "action": "work", "parameters": {"name": "announce"}, "depends_on": ["ship"]},
    ],
}


async def _approve_when_pending(url, run_id, step_id, *, approved=True):
    """Another process's view: a separate connection polls for the request and decides it."""
    other = open_store(url)
    while True:
        try:
            pending = [a for a in other.approvals(run_id, pending_only=True) if a.step_id == step_id]
        except RunNotFoundError:  # the run is not stored yet
            pending = []
        if pending:
            other.decide_approval(run_id, step_id=step_id, approved=approved, by="ada", reason=None if approved else "not today")
            return pending[0]
        await asyncio.sleep(0.02)


def test_a_step_waits_for_approval_from_another_connection_while_the_rest_goes_on(reg, stores):
    store = stores()

    async def go():
        engine = Engine(reg, store=store, approver=StoreApprover(store, poll=0.02))
        run = engine.start(Plan.model_validate(GATED), run_id="r1")
        while run.records["docs"].state is not StepState.SUCCEEDED:  # the rest of the DAG goes on meanwhile
            await asyncio.sleep(0.01)
        assert "ship" not in reg.calls and run.records["ship"].state is StepState.READY
        request = await _approve_when_pending(stores.url(store), "r1", "ship")
        return request, await run.result()

    request, result = asyncio.run(go())
    assert result.status is RunStatus.SUCCEEDED
    assert reg.calls[-2:] == ["ship", "announce"]
    assert request.content_hash == step_hash(Plan.model_validate(GATED).step("ship"))
    (decided,) = [a for a in store.approvals("r1") if a.step_id == "ship"]
    assert decided.state.value == "approved" and decided.by == "ada"
    kinds = [e.type for e in store.events("r1") if getattr(e, "step_id", None) == "ship"]
    assert kinds[:3] == ["step_ready", "approval_requested", "approval_decided"]


def test_a_pending_approval_survives_a_restart(reg, stores):
    store = stores()

    async def first():
        run = Engine(reg, store=store, approver=StoreApprover(store, poll=0.02)).start(Plan.model_validate(GATED), run_id="r1")
        while run.records["docs"].state is not StepState.SUCCEEDED or not store.approvals("r1", pending_only=True):
            await asyncio.sleep(0.02)
        run.cancel("the laptop lid closed")
        return await run.result()

    assert asyncio.run(first()).status is RunStatus.CANCELLED
    (_pending,) = store.approvals("r1", pending_only=True)
    store.decide_approval("r1", step_id="ship", approved=True, by="ada")  # decided while no process ran
    reg.calls.clear()

    async def second():
        run = Engine(reg, store=open_store(stores.url(store)), approver=StoreApprover(store, poll=0.02)).resume("r1")
        return await run.result()

    result = asyncio.run(second())
    assert result.status is RunStatus.SUCCEEDED
    assert reg.calls == ["ship", "announce"]  # build and docs had finished; ship ran once, approved
    assert len(store.approvals("r1")) == 1  # the same request, not a new one


def test_a_denied_step_fails_with_its_failure_action(reg, stores):
    store = stores()

    async def go():
        run = Engine(reg, store=store, approver=StoreApprover(store, poll=0.02)).start(Plan.model_validate(GATED), run_id="r1")
        await _approve_when_pending(stores.url(store), "r1", "ship", approved=False)
        return await run.result()

    result = asyncio.run(go())
    assert result.status is RunStatus.ABORTED and result.steps["ship"].error.rule == "approval_denied"
    assert "ship" not in reg.calls


def test_a_plan_runs_only_once_its_exact_version_is_approved(reg, stores):
    store = stores()
    plan = Plan.model_validate({**GATED, "steps": GATED["steps"][:2]})
    asked = []

    def yes(p, diff):
        asked.append((p.content_hash, diff))
        return True

    result = Engine(reg, store=store, plan_approver=PlanApprover(store, ask=yes, by="--yes")).run_sync(plan, run_id="r1")
    assert result.status is RunStatus.SUCCEEDED and asked == [(plan.content_hash, None)]
    (approval,) = store.approvals("r1")
    assert (approval.step_id, approval.content_hash, approval.by) == (None, plan.content_hash, "--yes")

    reg.calls.clear()
    no = Engine(reg, store=store, plan_approver=PlanApprover(store, ask=lambda p, d: False)).run_sync(plan, run_id="r2")
    assert no.status is RunStatus.FAILED and no.error.rule == "plan_rejected" and reg.calls == []
    assert all(rec.state is not StepState.SUCCEEDED for rec in no.steps.values())


def test_a_revision_needs_its_own_approval_and_sees_the_diff(reg, stores):
    store = stores()
    plan = Plan.model_validate(
        {
            "plan_id": "p",
            "goal": "g",
            "steps": [
                {"id": "a", "action": "work", "parameters": {"name": "a"}},
                {"id": "b", "action": "broken", "parameters": {"name": "b"}, "depends_on": ["a"], "failure_action": "replan"},
            ],
        }
    )
    replanner = FunctionReplanner(lambda ctx: [{"id": "c", "action": "work", "parameters": {"name": "c"}, "depends_on": ["a"]}])
    seen = []

    def ask(p, diff):
        seen.append((p.version, diff.added if diff else None))
        return diff is None  # the first version yes, the revision no

    result = Engine(reg, store=store, replanner=replanner, plan_approver=PlanApprover(store, ask=ask)).run_sync(plan, run_id="r1")
    assert seen == [(1, None), (2, ["c"])]
    assert result.status is RunStatus.FAILED and result.error.rule == "plan_rejected" and "revision v2" in result.error.message
    assert "c" not in reg.calls and reg.calls == ["a"]


def test_an_abort_after_a_side_effect_runs_the_rollback_plan(reg):
    plan = Plan.model_validate(
        {
            "plan_id": "p",
            "goal": "release",
            "steps": [
                {"id": "deploy", "action": "deploy", "parameters": {"name": "v2"}},
                {"id": "smoke", "action": "broken", "parameters": {"name": "v2"}, "depends_on": ["deploy"]},
            ],
            "rollback_plan": {"goal": "put v1 back", "steps": [{"id": "undo", "action": "undeploy", "parameters": {"name": "v2"}}]},
        }
    )

    async def go():
        run = Engine(reg).start(plan)
        return run, await run.result()

    run, result = asyncio.run(go())
    assert result.status is RunStatus.ABORTED
    assert reg.calls == ["v2", "undo v2"]
    assert result.rollback is not None and result.rollback.status is RunStatus.SUCCEEDED
    assert result.rollback.answer == "undeployed v2" and result.rollback.run_id == f"{result.run_id}/rollback"
    kinds = [e.type for e in run.history]
    assert kinds.index("rollback_started") < kinds.index("rollback_finished") < kinds.index("run_finished")
    started = next(e for e in run.history if e.type == "rollback_started")
    assert started.after == ["deploy"] and started.step_ids == ["undo"]


def test_no_rollback_when_nothing_with_side_effects_ran(reg):
    plan = Plan.model_validate(
        {
            "plan_id": "p",
            "goal": "g",
            "steps": [
                {"id": "a", "action": "work", "parameters": {"name": "a"}},
                {"id": "b", "action": "broken", "parameters": {"name": "b"}, "depends_on": ["a"]},
            ],
            "rollback_plan": {"steps": [{"id": "undo", "action": "undeploy", "parameters": {"name": "x"}}]},
        }
    )
    result = Engine(reg).run_sync(plan)
    assert result.status is RunStatus.ABORTED and result.rollback is None and reg.calls == ["a"]


def test_an_abort_after_a_fallback_worker_with_side_effects_succeeded_runs_the_rollback_plan():
    """The plan's worker is idempotent, the fallback that did the step is not: its success is a side effect, and an
    abort after it rolls back (it was judged by the plan's worker, and nothing was rolled back)."""
    reg = Registry()
    calls: list[str] = []

    @reg.tool(worker="primary", idempotent=True, untrusted_output=False)
    async def publish(name: str) -> str:
        """The primary route: safe to try again, and down."""
        raise RuntimeError("primary down")

    @reg.tool(worker="backup", name="publish_b", untrusted_output=False)
    async def publish_backup(name: str) -> str:
        """The backup route: a side effect."""
        calls.append(name)
        return f"published {name}"

    reg.worker("backup").tools["publish"] = reg.worker("backup").tools.pop("publish_b")

    @reg.tool(untrusted_output=False)
    async def unpublish(name: str) -> str:
        """Undo a publication."""
        calls.append(f"undo {name}")
        return f"unpublished {name}"

    @reg.tool(untrusted_output=False)
    async def check(name: str) -> str:
        """A check that fails."""
        raise RuntimeError(f"{name} looks wrong")

    plan = Plan.model_validate({"plan_id": "p", "goal": "publish", "steps": [
        {"id": "pub", "action": "publish", "worker": "primary", "parameters": {"name": "v2"},
         "failure_action": {"kind": "fallback", "worker": "backup"}},
        {"id": "verify", "action": "check", "parameters": {"name": "v2"}, "depends_on": ["pub"]},
    ], "rollback_plan": {"steps": [{"id": "undo", "action": "unpublish", "parameters": {"name": "v2"}}]}})  # fmt: skip
    result = Engine(reg).run_sync(plan)
    assert result.status is RunStatus.ABORTED and calls == ["v2", "undo v2"]
    assert result.rollback is not None and result.rollback.status is RunStatus.SUCCEEDED
