"""The run store: the same tests against SQLite and a real PostgreSQL (see the `postgres_url` fixture)."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import sqlite3
import threading
import time
import uuid
from pathlib import Path

import pytest

from planexec import Engine, Plan, Registry
from planexec.engine.events import (
    PlanRevised,
    RunFinished,
    RunStarted,
    StepReady,
    StepStarted,
    StepSucceeded,
    utcnow,
)
from planexec.engine.recording import DurableRunner, record_run
from planexec.engine.results import RunStatus, StepState
from planexec.engine.runner import LocalRunner
from planexec.errors import (
    ApprovalError,
    EventConflictError,
    RunNotFoundError,
    StoreError,
    TemplateNotFoundError,
)
from planexec.plan.diff import diff_plans
from planexec.planning.replanner import FunctionReplanner
from planexec.store import (
    SCHEMA_VERSION,
    ApprovalState,
    PostgresRunStore,
    RunStore,
    SqliteRunStore,
    open_store,
    replay,
)
from planexec.store.audit import verify_run
from planexec.store.schema import MIGRATIONS, SQLITE_APPLICATION_ID, migrate
from planexec.usage import Usage
from planexec.workers.io import Output, Provenance

# --- the two backends -----------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def target(request, tmp_path):
    """Where a fresh store lives: a new SQLite file, or a new schema on the session's PostgreSQL."""
    if request.param == "sqlite":
        return str(tmp_path / "store" / "runs.db")
    url = request.getfixturevalue("postgres_url")
    return f"{url}?schema=t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(target):
    """A fresh store on each backend, closed afterwards."""
    s = open_store(target)
    yield s
    s.close()


def started(run_id="r1", seq=0, goal="the goal", steps=("a", "b")):
    return RunStarted(
        run_id=run_id, seq=seq, at=utcnow(), plan_id="p", plan_version=1, content_hash="sha256:1", goal=goal, step_ids=list(steps)
    )


def output(value, run_id="r1", step_id="a"):
    prov = Provenance(run_id=run_id, plan_id="p", plan_version=1, step_id=step_id, worker="tool", action="t", attempt=1, tools=["t"])
    return Output(value=value, provenance=prov)


def step_events(run_id="r1", start=1, step_id="a", value=1, usage=None):
    return [
        StepReady(run_id=run_id, seq=start, at=utcnow(), step_id=step_id),
        StepStarted(run_id=run_id, seq=start + 1, at=utcnow(), step_id=step_id, worker="tool", action="t", attempt=1),
        StepSucceeded(
            run_id=run_id,
            seq=start + 2,
            at=utcnow(),
            step_id=step_id,
            attempt=1,
            wall_time=0.5,
            usage=usage or Usage(),
            output=output(value, run_id, step_id),
        ),
    ]


def finished(run_id="r1", seq=7, status=RunStatus.SUCCEEDED, usage=None):
    return RunFinished(
        run_id=run_id, seq=seq, at=utcnow(), status=status, answer={"x": 1}, wall_time=1.25, usage=usage or Usage(model_calls=3, cost=0.5)
    )


def mkplan(*steps, version=1, plan_id="p"):
    data = [{"id": s, "action": "noop", "worker": "tool", **({"depends_on": [steps[i - 1]]} if i else {})} for i, s in enumerate(steps)]
    return Plan.from_data({"plan_id": plan_id, "goal": "the goal", "steps": data, "version": version})


def test_both_backends_are_run_stores(store):
    assert isinstance(store, RunStore)
    assert "password" not in store.location


# --- the event log ----------------------------------------------------------------------


def test_events_round_trip_and_the_snapshot_follows(store):
    evs = [started(), *step_events(start=1), *step_events(start=4, step_id="b", value=[1, 2])]
    assert store.append(evs) == 7
    assert [e.to_dict() for e in store.events("r1")] == [e.to_dict() for e in evs]
    assert store.last_seq("r1") == 6
    run = store.run("r1")
    assert (run.goal, run.status, run.plan_id, run.step_count, run.finished_at) == ("the goal", RunStatus.RUNNING, "p", 2, None)
    store.append([finished()])
    run = store.run("r1")
    assert run.status is RunStatus.SUCCEEDED and run.finished and run.wall_time == 1.25
    assert run.usage == Usage(model_calls=3, cost=0.5) and run.cost == 0.5
    assert run.finished_at >= run.started_at


def test_reading_after_a_seq_and_with_a_limit(store):
    store.append([started(), *step_events(start=1), *step_events(start=4, step_id="b")])
    assert [e.seq for e in store.events("r1", after_seq=3)] == [4, 5, 6]
    assert [e.seq for e in store.events("r1", after_seq=0, limit=2)] == [1, 2]
    assert store.events("r1", after_seq=6) == []


def test_appending_again_is_idempotent(store):
    evs = [started(), *step_events(start=1)]
    store.append(evs[:2])
    assert store.append(evs) == 2  # the first two were there: only the rest are new
    assert store.append(evs) == 0
    assert [e.seq for e in store.events("r1")] == [0, 1, 2, 3]


def test_a_different_event_at_a_stored_seq_is_a_conflict_and_changes_nothing(store):
    store.append([started(), *step_events(start=1)])
    other = StepReady(run_id="r1", seq=2, at=utcnow(), step_id="zzz")
    with pytest.raises(EventConflictError) as info:
        store.append([other, finished(seq=4)])
    assert (info.value.run_id, info.value.seq) == ("r1", 2) and "r1" in str(info.value)
    assert store.last_seq("r1") == 3 and store.run("r1").status is RunStatus.RUNNING


def test_a_gap_in_the_sequence_is_refused(store):
    store.append([started()])
    with pytest.raises(EventConflictError, match="gap"):
        store.append(step_events(start=2))
    assert store.last_seq("r1") == 0


def test_one_batch_may_hold_several_runs(store):
    assert store.append([started("r1"), started("r2", goal="other"), *step_events("r2", start=1)]) == 5
    assert store.last_seq("r1") == 0 and store.last_seq("r2") == 3
    assert {r.run_id for r in store.runs()} == {"r1", "r2"}


def test_a_failed_batch_of_several_runs_changes_nothing(store):
    store.append([started("r1")])
    with pytest.raises(EventConflictError):
        store.append([started("r2"), started("r1", goal="not the same")])
    with pytest.raises(RunNotFoundError):
        store.run("r2")


def test_unknown_runs_are_named(store):
    for call in (
        lambda: store.run("nope"),
        lambda: store.events("nope"),
        lambda: store.plan_versions("nope"),
        lambda: store.approvals("nope"),
    ):
        with pytest.raises(RunNotFoundError, match="'nope'") as info:
            call()
        assert info.value.run_id == "nope"
    assert store.last_seq("nope") == -1


def test_runs_newest_first_filtered_and_limited(store):
    for i in range(4):
        store.append([started(f"r{i}")])
        time.sleep(0.002)
    store.append([finished("r1", seq=1, status=RunStatus.ABORTED)])
    assert [r.run_id for r in store.runs()] == ["r3", "r2", "r1", "r0"]
    assert [r.run_id for r in store.runs(limit=2)] == ["r3", "r2"]
    assert [r.run_id for r in store.runs(status="aborted")] == ["r1"]
    assert [r.run_id for r in store.runs(status=RunStatus.RUNNING)] == ["r3", "r2", "r0"]


def test_usage_adds_up_while_running_and_the_total_comes_with_the_end(store):
    store.append([started(), *step_events(start=1, usage=Usage(input_tokens=10, output_tokens=5, model_calls=1, cost=0.25))])
    store.append(step_events(start=4, step_id="b", usage=Usage(model_calls=1, cost=0.5)))
    assert store.run("r1").usage == Usage(input_tokens=10, output_tokens=5, model_calls=2, cost=0.75)
    store.append([finished(usage=Usage(model_calls=3, cost=1.0))])
    assert store.run("r1").usage == Usage(model_calls=3, cost=1.0)


def test_a_resumed_run_is_running_again(store):
    from planexec.engine.events import RunResumed

    store.append([started(), *step_events(start=1), finished(seq=4, status=RunStatus.CANCELLED)])
    assert store.run("r1").status is RunStatus.CANCELLED and replay(store.events("r1")).status is RunStatus.CANCELLED
    store.append([RunResumed(run_id="r1", seq=5, at=utcnow(), plan_version=1, kept=["a"], rerun=[], held=[])])
    run = store.run("r1")
    assert (run.status, run.finished_at, run.wall_time) == (RunStatus.RUNNING, None, None)
    view = replay(store.events("r1"))
    assert view.status is RunStatus.RUNNING and view.finished_at is None and view.steps["a"].state is StepState.SUCCEEDED


def test_a_sub_run_names_its_parent(store):
    store.append([started("top")])
    store.append([started("top/s1")], parent=("top", "s1"))
    sub = store.run("top/s1")
    assert (sub.parent_run_id, sub.parent_step_id) == ("top", "s1")
    assert store.run("top").parent_run_id is None


# --- plan versions ------------------------------------------------------------------------


def test_plan_versions_from_the_first_plan_and_revisions(store):
    v1 = mkplan("a", "b")
    v2 = mkplan("a", "c", version=2)
    store.save_plan("r1", v1)
    store.save_plan("r1", v1)  # again: a no-op
    revised = PlanRevised(run_id="r1", seq=1, at=utcnow(), version=2, revises=1, content_hash=v2.content_hash, reason="b failed",
                          diff=diff_plans(v1, v2), step_ids=v2.step_ids, usage=Usage(model_calls=1), plan=v2)  # fmt: skip
    store.append([started(), revised])
    versions = store.plan_versions("r1")
    assert [(v.version, v.reason) for v in versions] == [(1, "the first plan"), (2, "b failed")]
    assert versions[0].plan == v1 and versions[1].plan.step_ids == ["a", "c"]
    assert versions[1].diff.added == ["c"] and versions[1].diff.removed == ["b"] and versions[1].usage.model_calls == 1
    run = store.run("r1")
    assert (run.plan_version, run.content_hash, run.step_count) == (2, v2.content_hash, 2)
    with pytest.raises(StoreError, match="different plan version 1"):
        store.save_plan("r1", mkplan("x"))


def _every_field_plan() -> Plan:
    """A plan with every kind of criterion, failure action, resources, a rollback plan: defaults and not."""
    return Plan.from_data(
        {
            "plan_id": "full", "goal": "every field", "risk_level": "high", "answer_step": "b", "version": 3, "revises": 2,
            "estimated_duration": "PT5M",
            "rollback_plan": {"goal": "undo", "steps": [{"id": "u", "action": "t"}]},
            "steps": [
                {"id": "a", "action": "t", "worker": "tool", "parameters": {"x": 1, "y": [None, ""]},
                 "success_criteria": ["not_empty", "all_good", {"kind": "regex", "pattern": "^o"},
                                      {"kind": "json_schema", "schema": {"type": "object"}}, {"kind": "critic", "criteria": ""}],
                 "failure_action": {"kind": "retry", "max_attempts": 3, "then": "skip"}, "timeout": 2.5,
                 "resources": {"num_cpus": 1}, "requires_approval": True},
                {"id": "b", "action": "t", "depends_on": ["a"], "instruction": "use ${a}", "failure_action": "replan",
                 "accepts_failed_inputs": True, "output_schema": {"type": "string"},
                 "capabilities": [{"tool": "t", "arguments": {"x": {"values": [1]}}, "approved": True}]},
            ],
        }
    )  # fmt: skip


def test_a_plan_version_with_every_field_reads_back_the_same_and_verifies(store):
    plan = _every_field_plan()
    store.save_plan("r1", plan)
    store.save_plan("r1", plan)  # again: a no-op
    (version,) = store.plan_versions("r1")
    assert version.plan == plan and version.plan.content_hash == plan.content_hash
    with pytest.raises(StoreError, match="different plan version 3"):
        store.save_plan("r1", plan.model_copy(update={"goal": "another goal"}))
    assert verify_run(store, "r1").ok


# --- approvals ------------------------------------------------------------------------------


def test_approvals_are_requested_decided_and_listed(store):
    store.append([started()])
    plan_request = store.request_approval("r1", "sha256:plan")
    step_request = store.request_approval("r1", "sha256:step-b", step_id="b")
    assert store.request_approval("r1", "sha256:step-b", step_id="b") == step_request  # asked again after a restart
    assert plan_request.step_id is None and step_request.state is ApprovalState.PENDING
    assert [a.approval_id for a in store.approvals(pending_only=True)] == [plan_request.approval_id, step_request.approval_id]
    decided = store.decide_approval("r1", step_id="b", approved=True, by="alice", reason="looks fine")
    assert (decided.state, decided.by, decided.reason) == (ApprovalState.APPROVED, "alice", "looks fine")
    assert decided.decided_at is not None and decided.content_hash == "sha256:step-b"
    denied = store.decide_approval("r1", approved=False, by="bob")
    assert denied.state is ApprovalState.DENIED and denied.step_id is None
    assert store.approvals("r1", pending_only=True) == []
    assert len(store.approvals("r1")) == 2


def test_approval_errors_name_the_run_and_step_and_change_nothing(store):
    store.append([started()])
    with pytest.raises(RunNotFoundError, match="'ghost'"):
        store.request_approval("ghost", "sha256:x")
    with pytest.raises(RunNotFoundError):
        store.decide_approval("ghost", step_id="a", approved=True, by="me")
    with pytest.raises(ApprovalError, match="step 'a' of run 'r1' is not pending approval: no approval was asked for") as info:
        store.decide_approval("r1", step_id="a", approved=True, by="me")
    assert (info.value.run_id, info.value.step_id) == ("r1", "a")
    store.request_approval("r1", "sha256:a", step_id="a")
    store.decide_approval("r1", step_id="a", approved=False, by="carol")
    with pytest.raises(ApprovalError, match="already denied by carol"):
        store.decide_approval("r1", step_id="a", approved=True, by="mallory")
    assert store.approvals("r1")[0].by == "carol"


def test_a_later_request_for_a_changed_step_is_the_one_decided(store):
    store.append([started()])
    store.request_approval("r1", "sha256:old", step_id="a")
    store.request_approval("r1", "sha256:new", step_id="a")
    assert store.decide_approval("r1", step_id="a", approved=True, by="me").content_hash == "sha256:new"
    assert store.decide_approval("r1", step_id="a", approved=True, by="me", content_hash="sha256:old").content_hash == "sha256:old"


# --- templates -------------------------------------------------------------------------------


def test_templates_are_versioned_listed_and_deleted(store):
    plan = mkplan("a", "b")
    t1 = store.save_template("deploy", plan, params=["service", "version"], description="ship it", source_run_id="r1")
    t2 = store.save_template("deploy", {"plan_id": "p", "goal": "g", "steps": []})
    store.save_template("backup", plan)
    assert (t1.version, t2.version, t1.params, t1.source_run_id) == (1, 2, ["service", "version"], "r1")
    assert Plan.from_data(t1.plan) == plan
    assert store.template("deploy").version == 2 and store.template("deploy", 1).description == "ship it"
    assert [(t.name, t.version) for t in store.templates()] == [("backup", 1), ("deploy", 1), ("deploy", 2)]
    assert [t.version for t in store.templates("deploy")] == [1, 2]
    assert store.delete_template("deploy", 2) == 1
    assert store.template("deploy").version == 1
    assert store.save_template("deploy", plan).version == 2  # the next after the highest left
    assert store.delete_template("deploy") == 2
    with pytest.raises(TemplateNotFoundError, match="no template 'deploy'"):
        store.template("deploy")
    with pytest.raises(TemplateNotFoundError, match="'backup' version 7"):
        store.delete_template("backup", 7)
    with pytest.raises(ValueError, match="template name"):
        store.save_template("no spaces please", plan)


# --- recording live runs ------------------------------------------------------------------------


def _registry(store_target=None, seen=None):
    reg = Registry()

    @reg.tool(untrusted_output=False)  # its own computation, not outside text
    async def work(value: int = 0) -> int:
        """Add one; with a store target, first check (from a second handle) that this step's start is stored."""
        if store_target is not None:
            from planexec.engine.attempt import CURRENT_STEP

            run, step_id = CURRENT_STEP.get()
            other = open_store(store_target)
            try:
                stored = [e for e in other.events(run.run_id) if e.type == "step_started" and e.step_id == step_id]
            finally:
                other.close()
            seen.append((step_id, bool(stored)))
        await asyncio.sleep(0)
        return value + 1

    return reg


def _plan(n=4):
    steps = [{"id": f"s{i}", "action": "work", "worker": "tool", "parameters": {"value": f"${{s{i - 1}}}" if i else 0}} for i in range(n)]
    steps.append({"id": "side", "action": "work", "worker": "tool"})
    return Plan.from_data({"plan_id": "chain", "goal": "count", "steps": steps})


@pytest.mark.parametrize("gated", [False, True], ids=["subscriber", "durable-runner"])
def test_a_recorded_run_is_stored_whole_and_each_start_before_its_step_runs(store, target, gated):
    seen: list[tuple[str, bool]] = []
    reg = _registry(target, seen)
    plan = _plan()

    async def go():
        engine = Engine(reg, runner=DurableRunner(LocalRunner(reg)) if gated else None)
        run = engine.start(plan, run_id="rec")
        recorder = record_run(run, store)
        result = await run.result()
        return run, recorder, result

    run, recorder, result = asyncio.run(go())
    assert result.ok and recorder.error is None
    assert sorted(seen) == sorted((s, True) for s in plan.step_ids)
    stored = store.events("rec")
    assert [e.to_dict() for e in stored] == [e.to_dict() for e in run.history]
    assert store.plan_versions("rec")[0].plan == plan
    summary = store.run("rec")
    assert summary.status is RunStatus.SUCCEEDED and summary.step_count == 5
    view = replay(stored, plan)
    assert view.status is RunStatus.SUCCEEDED and view.in_flight == []
    assert view.steps["s3"].output.value == 4 and all(r.state is StepState.SUCCEEDED for r in view.steps.values())
    if gated:
        assert recorder.flushes < len(run.history)  # steps that started together shared a commit


def test_a_replanned_run_records_both_versions(store):
    reg = Registry()

    @reg.tool(untrusted_output=False)  # its own computation, not outside text
    def flaky(fail: bool = False) -> str:
        """Fail when told to."""
        if fail:
            raise RuntimeError("boom")
        return "ok"

    plan = Plan.from_data({"plan_id": "p", "goal": "g", "steps": [
        {"id": "a", "action": "flaky", "worker": "tool"},
        {"id": "b", "action": "flaky", "worker": "tool", "parameters": {"fail": True}, "depends_on": ["a"], "failure_action": "replan"},
    ]})  # fmt: skip
    replanner = FunctionReplanner(lambda ctx: [{"id": "c", "action": "flaky", "worker": "tool", "depends_on": ["a"]}])

    async def go():
        run = Engine(reg, replanner=replanner).start(plan, run_id="re")
        record_run(run, store)
        return await run.result()

    result = asyncio.run(go())
    assert result.ok
    versions = store.plan_versions("re")
    assert [v.version for v in versions] == [1, 2] and versions[1].diff.added == ["c"]
    view = replay(store.events("re"))
    assert set(view.steps) == {"a", "c"} and view.superseded["b"].state is StepState.FAILED
    assert store.run("re").plan_version == 2


@pytest.mark.parametrize("gated", [False, True], ids=["subscriber", "durable-runner"])
def test_a_store_that_fails_cancels_the_run(store, gated):
    class Failing:
        def __init__(self, inner, after):
            self.inner, self.after, self.calls = inner, after, 0

        def append(self, events, **kw):
            self.calls += 1
            if self.calls > self.after:
                raise StoreError("disk full")
            return self.inner.append(events, **kw)

        def save_plan(self, *a, **kw):
            return self.inner.save_plan(*a, **kw)

    reg = _registry()

    async def go():
        run = Engine(reg, runner=DurableRunner(LocalRunner(reg)) if gated else None).start(_plan(8), run_id="f")
        recorder = record_run(run, Failing(store, after=3))
        return recorder, await run.result()

    recorder, result = asyncio.run(go())
    assert result.status is RunStatus.CANCELLED and "the run store failed: disk full" in result.reason
    assert isinstance(recorder.error, StoreError)


def test_a_reader_follows_while_a_writer_appends(store, target):
    store.append([started()])
    seen: list[int] = []
    done = threading.Event()

    def read():
        reader = open_store(target)
        try:
            after = -1
            while not done.is_set() or after < 3 * 200:
                for e in reader.events("r1", after_seq=after):
                    seen.append(e.seq)
                    after = e.seq
                time.sleep(0.001)
                if after >= 3 * 200:
                    break
        finally:
            reader.close()

    thread = threading.Thread(target=read)
    thread.start()
    for i in range(200):
        store.append(step_events(start=1 + 3 * i, step_id=f"s{i}"))
    done.set()
    thread.join(timeout=30)
    assert seen == list(range(3 * 200 + 1))


# --- opening: schema versions, foreign and damaged stores -----------------------------------------


def _raw(target):
    """A raw connection to the store's database (in its schema, for PostgreSQL) and its placeholder."""
    if "://" not in target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        return sqlite3.connect(target, isolation_level=None), "?"
    import psycopg

    from planexec.store.postgres import split_schema

    dsn, schema = split_schema(target)
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    conn.execute(f'SET search_path TO "{schema}"')
    return conn, "%s"


def test_an_older_schema_is_migrated_on_open_keeping_its_runs(target):
    conn, ph = _raw(target)
    cur = conn.cursor()
    dialect = "sqlite" if ph == "?" else "postgres"
    if dialect == "sqlite":
        cur.execute(f"PRAGMA application_id = {SQLITE_APPLICATION_ID}")
    assert migrate(cur, dialect, 0, "2026-01-01T00:00:00.000000Z", target=1, placeholder=ph) == [1]
    ev = started("old")
    cur.execute(
        f"INSERT INTO runs (run_id, status, started_at, goal) VALUES ({ph}, {ph}, {ph}, {ph})",
        ("old", "running", "2026-01-01T00:00:00.000000Z", "g"),
    )
    cur.execute(f"INSERT INTO events (run_id, seq, type, body) VALUES ({ph}, {ph}, {ph}, {ph})", ("old", 0, ev.type, ev.to_json()))
    conn.close()
    with open_store(target) as s:
        assert s.run("old").goal == "g" and s.events("old")[0].to_dict() == ev.to_dict()
        assert s.request_approval("old", "sha256:x").state is ApprovalState.PENDING  # migration 2's table
        s.append(step_events("old", start=1))
    conn, _ = _raw(target)
    versions = [v for (v,) in conn.cursor().execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()]
    conn.close()
    assert versions == [m.version for m in MIGRATIONS] and versions[-1] == SCHEMA_VERSION


def test_a_store_from_a_newer_planexec_is_refused_and_left_alone(target):
    open_store(target).close()
    conn, ph = _raw(target)
    conn.cursor().execute(f"INSERT INTO schema_migrations (version, name, applied_at) VALUES ({ph}, {ph}, {ph})", (99, "future", "x"))
    conn.close()
    before = _fingerprint(target)
    with pytest.raises(StoreError, match="schema version 99, newer than this planexec knows"):
        open_store(target)
    assert _fingerprint(target) == before


def test_a_foreign_database_is_refused_and_left_alone(target):
    conn, _ = _raw(target)
    conn.cursor().execute("CREATE TABLE users (name TEXT)")
    conn.close()
    before = _fingerprint(target)
    with pytest.raises(StoreError, match="is not a planexec run store: it holds other tables \\(users\\)"):
        open_store(target)
    assert _fingerprint(target) == before


def _fingerprint(target):
    if "://" not in target:
        return hashlib.sha256(Path(target).read_bytes()).hexdigest(), sorted(p.name for p in Path(target).parent.iterdir())
    conn, _ = _raw(target)
    rows = (
        conn.cursor()
        .execute("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1")
        .fetchall()
    )
    conn.close()
    return rows


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"this is not a database at all, just some text\n" * 10, "not an SQLite database"),
        (b"SQLite format 3\x00" + b"\x10\x00", "header is cut short"),
        (
            b"SQLite format 3\x00" + b"\x10\x00\x01\x01\x00\x40\x20\x20" + b"\x00" * 76 + b"\xff" * 4000,
            "damaged or not a planexec run store",
        ),
    ],
    ids=["text", "truncated", "garbage-after-header"],
)
def test_a_corrupt_sqlite_file_gets_a_clear_error_and_is_not_modified(tmp_path, content, problem):
    path = tmp_path / "runs.db"
    path.write_bytes(content)
    with pytest.raises(StoreError, match=problem) as info:
        SqliteRunStore(path)
    assert str(path) in str(info.value) and info.value.location == str(path)
    assert path.read_bytes() == content and sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]


def test_the_sqlite_database_of_another_application_is_refused(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id = 1234")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="another application \\(application_id 0x4d2\\)"):
        SqliteRunStore(path)
    assert path.read_bytes() == before


def test_the_sqlite_store_uses_wal_and_refuses_edits_of_the_log(tmp_path):
    path = tmp_path / "runs.db"
    with SqliteRunStore(path) as s:
        s.append([started()])
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA application_id").fetchone()[0] == SQLITE_APPLICATION_ID
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE events SET body = '{}'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM events")
    conn.close()


def test_a_store_is_not_created_when_only_reading(tmp_path):
    with pytest.raises(StoreError, match="no run store at"):
        open_store(tmp_path / "nothing" / "runs.db", create=False)
    assert not (tmp_path / "nothing").exists()


def test_store_targets_pick_the_backend(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///rel/runs.db") as s:
        assert isinstance(s, SqliteRunStore) and s.path == Path("rel/runs.db")
    with open_store(f"sqlite:///{tmp_path}/abs.db") as s:
        assert s.path == tmp_path / "abs.db"
    with pytest.raises(StoreError, match="unknown run store 'mysql://h/db'"):
        open_store("mysql://h/db")
    with pytest.raises(StoreError, match="sqlite:///relative/path"):
        open_store("sqlite://runs.db")


def test_a_closed_store_says_so(tmp_path):
    s = SqliteRunStore(tmp_path / "runs.db")
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.runs()


# --- PostgreSQL that cannot be reached -------------------------------------------------------------


def _closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_postgres_fails_fast_naming_the_host():
    port = _closed_port()
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=f"cannot connect to the PostgreSQL run store at 127.0.0.1:{port}") as info:
        PostgresRunStore(f"postgresql://someone:secret@127.0.0.1:{port}/db")
    assert time.monotonic() - t0 < 5
    assert "secret" not in str(info.value)


def test_a_postgres_that_never_answers_times_out():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never says a word
    port = listener.getsockname()[1]
    try:
        t0 = time.monotonic()
        with pytest.raises(StoreError, match=f"127.0.0.1:{port}"):
            open_store(f"postgresql://u@127.0.0.1:{port}/db?connect_timeout=2")
        assert time.monotonic() - t0 < 10
    finally:
        listener.close()


# --- backends by URL scheme, through the entry point group planexec.stores ----------------------------


def _backend_for_tests(spec: str, *, create: bool = True):
    """A plugin's backend: a SQLite store in the file the URL's path names (``memo://NAME`` -> NAME.db here)."""
    from planexec.store import SqliteRunStore

    return SqliteRunStore(Path(spec.partition("://")[2] + ".db"), create=create)


def test_store_backends_come_from_entry_points_by_scheme_and_a_bad_one_is_a_clear_error(tmp_path, monkeypatch):
    from importlib.metadata import EntryPoint

    from planexec.store import location

    monkeypatch.chdir(tmp_path)
    installed = dict(location._backends())
    assert {"sqlite", "postgresql", "postgres"} <= set(installed)  # the built-ins register as any plugin does
    fake = {
        **installed,
        "memo": EntryPoint("memo", f"{__name__}:_backend_for_tests", "planexec.stores"),
        "broken": EntryPoint("broken", "planexec_no_such_module:open", "planexec.stores"),
    }
    monkeypatch.setattr(location, "_backends", lambda: fake)
    with open_store("memo://runs") as store:
        assert store.runs() == [] and (tmp_path / "runs.db").exists()
    with pytest.raises(StoreError, match=r"backend 'broken' \(planexec_no_such_module:open\) could not be loaded: ModuleNotFoundError"):
        open_store("broken://x")
    with pytest.raises(StoreError, match=r"unknown run store 'mysql://db'.*memo://.*postgresql://.*sqlite://"):
        open_store("mysql://db")
    with open_store("sqlite:///plain.db") as store:  # relative to the folder the command runs in
        assert (tmp_path / "plain.db").exists() and store.runs() == []
