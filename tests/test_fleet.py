"""Several engines, one store: runs queued with ``planexec submit`` (or `submit_plan`), drained by ``planexec worker`` processes.

Real worker processes on a real PostgreSQL (the `postgres_url` fixture) and
on SQLite. The tools append ``run step pid`` to a file opened with
O_APPEND, so each test can count how many times each step really ran and
in which process. Checked: two workers drain 20 runs with no step run
twice and both working; a worker killed with SIGKILL mid-run has its runs
taken over (the idempotent step cut off runs again, the side effect cut off
is held for a person, never run twice); a worker stopped with SIGTERM
finishes its running step, hands its run back and exits, and another
worker resumes it at once; an unapproved or denied plan is never run; bad
input is a clear error; and the claim's rules at the store (one claimer
per run under concurrency, takeover only after the lease expires on
another machine, a capped number of takeovers).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from planexec import Plan
from planexec.config import RunnerConfig
from planexec.engine.events import RunFinished, RunResumed
from planexec.errors import StoreError
from planexec.fleet.worker import RELEASED, QueueWorker, submit_plan
from planexec.scale import RayRunner
from planexec.store import open_store
from planexec.store.leases import Holder
from planexec.store.queue import QUEUED_REASON, QueueState
from planexec.workers.registry import Registry

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="signals and O_APPEND semantics of POSIX")

TOOLS = textwrap.dedent(
    '''
    import asyncio
    import os

    from planexec import ToolContext, tool

    LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.log")


    def _note(ctx):
        fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{ctx.run_id} {ctx.step_id} {os.getpid()}\\n".encode())
        finally:
            os.close(fd)


    @tool(idempotent=True)
    async def look(ctx: ToolContext, name: str, seconds: float = 0.02) -> str:
        """Reads something: running it twice does no harm."""
        await asyncio.sleep(seconds)
        _note(ctx)
        return name


    @tool
    async def work(ctx: ToolContext, name: str, seconds: float = 0.02) -> str:
        """Changes something: a side effect, never run twice."""
        await asyncio.sleep(seconds)
        _note(ctx)
        return name
    '''
)


def _plan(slow: str | None = None, seconds: float = 0.02, *, plan_id: str = "fleet") -> Plan:
    """look a -> work b -> look c; `slow` names the step that takes long."""
    steps = [("a", "look"), ("b", "work"), ("c", "look")]
    return Plan.model_validate(
        {
            "plan_id": plan_id,
            "goal": "three steps, one side effect",
            "steps": [
                {
                    "id": sid,
                    "action": action,
                    "parameters": {"name": sid, "seconds": seconds if sid == slow else 0.02},
                    **({"depends_on": [prev]} if prev else {}),
                }
                for (sid, action), prev in zip(steps, [None, "a", "b"])
            ],
        }
    )


def _slow_look(seconds: float) -> Plan:
    """look a -> look b (slow, idempotent) -> work c."""
    return Plan.model_validate(
        {
            "plan_id": "slow-look",
            "goal": "a slow read, then a side effect",
            "steps": [
                {"id": "a", "action": "look", "parameters": {"name": "a"}},
                {"id": "b", "action": "look", "parameters": {"name": "b", "seconds": seconds}, "depends_on": ["a"]},
                {"id": "c", "action": "work", "parameters": {"name": "c"}, "depends_on": ["b"]},
            ],
        }
    )


@pytest.fixture(params=["postgres", "sqlite"])
def store_url(request, tmp_path):
    """A new, empty store's URL: a schema of its own on the test PostgreSQL, or a SQLite file."""
    if request.param == "postgres":
        url = f"{request.getfixturevalue('postgres_url')}?schema=f_{uuid.uuid4().hex[:12]}"
    else:
        url = str(tmp_path / "fleet.db")
    open_store(url).close()
    return url


@pytest.fixture
def pg_url(postgres_url):
    url = f"{postgres_url}?schema=f_{uuid.uuid4().hex[:12]}"
    open_store(url).close()
    return url


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "tools.py").write_text(TOOLS)
    return tmp_path


def _submit(url: str, folder: Path, plans: list[Plan], *, prefix: str = "r", approved: bool = True) -> list[str]:
    ids = []
    with open_store(url) as store:
        for i, plan in enumerate(plans):
            run_id = f"{prefix}{i:02d}"
            submit_plan(store, plan, run_id=run_id, setup={"tools": [str(folder / "tools.py")]}, approved_by="tester" if approved else None)
            ids.append(run_id)
    return ids


class Worker:
    """A ``planexec worker`` process, its output in files of the test's folder."""

    def __init__(self, folder: Path, url: str, *args: str, name: str, ttl: float | None = None) -> None:
        env = {**os.environ, "COLUMNS": "200"}
        if ttl is not None:
            env["PLANEXEC_LEASE_TTL"] = str(ttl)
        self.out, self.err = folder / f"{name}.out", folder / f"{name}.err"
        command = [sys.executable, "-m", "planexec", "worker", "--store", url, "--json", "--poll", "0.2", *args]
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(command, cwd=folder, env=env, stdout=out, stderr=err)
        self.pid = self.process.pid

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"worker {self.pid} did not stop within {timeout}s: {self.err.read_text()[-3000:]}")

    def report(self) -> dict:
        return json.loads(self.out.read_text())

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def _calls(folder: Path) -> list[tuple[str, str, int]]:
    path = folder / "calls.log"
    if not path.exists():
        return []
    return [(run, step, int(pid)) for run, step, pid in (line.split() for line in path.read_text().splitlines())]


def _until(check, timeout: float = 60.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    pytest.fail(f"{what} did not happen within {timeout}s")


def _started(url: str, run_id: str, step_id: str) -> bool:
    with open_store(url) as store:
        return any(e.type == "step_started" and e.step_id == step_id for e in store.events(run_id))


# --- workers draining a queue ------------------------------------------------------------------------


def test_two_workers_drain_20_queued_runs_running_every_step_exactly_once(store_url, folder):
    ids = _submit(store_url, folder, [_plan() for _ in range(20)])
    workers = [Worker(folder, store_url, "--concurrency", "2", "--idle-exit", "2", name=f"w{i}") for i in range(2)]
    for w in workers:
        assert w.wait() == 0, w.err.read_text()
    with open_store(store_url) as store:
        assert {store.run(r).status.value for r in ids} == {"succeeded"}
        queued = store.queued_runs(list(QueueState), limit=None)
        assert {q.state for q in queued} == {QueueState.DONE} and all(q.claims == 1 and q.takeovers == 0 for q in queued)
    calls = _calls(folder)
    assert Counter((run, step) for run, step, _ in calls) == {(r, s): 1 for r in ids for s in "abc"}
    pids = {w.pid for w in workers}
    assert {pid for _, _, pid in calls} == pids  # both took runs, and nothing else ran them
    reports = [w.report() for w in workers]
    taken = [r["run_id"] for report in reports for r in report["runs"]]
    assert sorted(taken) == ids and all(r["outcome"] == "succeeded" for report in reports for r in report["runs"])
    assert all(report["stopped"].startswith("idle") for report in reports)
    assert all("Traceback" not in w.err.read_text() for w in workers)


def test_a_killed_workers_runs_are_taken_over_idempotent_steps_rerun_side_effects_held(pg_url, folder):
    # the two oldest runs are cut off mid-step: one in an idempotent read, one in a side effect
    ids = _submit(pg_url, folder, [_slow_look(3), _plan(slow="b", seconds=60)], prefix="k")
    rest = _submit(pg_url, folder, [_plan() for _ in range(8)], prefix="n")
    doomed = Worker(folder, pg_url, "--concurrency", "2", name="doomed", ttl=2)
    try:
        _until(lambda: all(_started(pg_url, r, "b") for r in ids), what="the doomed worker starting both slow steps")
    finally:
        doomed.kill()  # SIGKILL: no cleanup, its leases stay behind
    survivor = Worker(folder, pg_url, "--concurrency", "2", "--idle-exit", "3", name="survivor", ttl=2)
    assert survivor.wait() == 0, survivor.err.read_text()
    with open_store(pg_url) as store:
        assert store.run("k00").status.value == "succeeded"  # the read cut off ran again, then the side effect once
        assert store.run("k01").status.value == "needs_decision" and store.lease("k01") is None
        assert {store.run(r).status.value for r in rest} == {"succeeded"}
        for run_id in ids:
            q = store.queued_run(run_id)
            assert q.state is QueueState.DONE and q.claims == 2 and q.takeovers == 1
        resumed = {r: [e for e in store.events(r) if isinstance(e, RunResumed)] for r in ids}
        assert [len(found) for found in resumed.values()] == [2, 2]  # from the queue, then after the kill
        assert resumed["k00"][-1].rerun == ["b"] and resumed["k01"][-1].held == ["b"]
    calls = Counter((run, step) for run, step, _ in _calls(folder))
    # a side effect never ran twice: the cut-off one not at all (it is held for a person), every other once
    assert calls[("k01", "b")] == 0 and calls[("k00", "c")] == 1
    assert all(calls[(run, "b")] == 1 for run in rest)
    report = survivor.report()
    taken_over = {r["run_id"]: r for r in report["runs"] if r["takeover"]}
    assert set(taken_over) == set(ids)
    assert taken_over["k00"]["outcome"] == "succeeded" and taken_over["k01"]["outcome"] == "needs_decision"
    assert "planexec resolve" in taken_over["k01"]["reason"]  # the held step is reported with what to do
    assert "took over run k01" in survivor.err.read_text()


def test_sigterm_finishes_the_running_step_hands_the_run_back_and_another_worker_resumes_it_at_once(pg_url, folder):
    (run_id,) = _submit(pg_url, folder, [_plan(slow="b", seconds=1.5)], prefix="t")
    first = Worker(folder, pg_url, name="first")
    _until(lambda: _started(pg_url, run_id, "b"), what="the first worker starting the slow step")
    second = Worker(folder, pg_url, "--idle-exit", "3", name="second")
    time.sleep(0.3)
    first.process.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    assert first.wait(timeout=30) == 0, first.err.read_text()
    assert time.monotonic() - t0 < 10  # it waited for its step, not for its run or its lease
    assert second.wait() == 0, second.err.read_text()
    report = first.report()
    assert report["stopped"] == "SIGTERM" and [(r["run_id"], r["outcome"]) for r in report["runs"]] == [(run_id, "released")]
    assert "taking no more runs" in first.err.read_text()
    with open_store(pg_url) as store:
        assert store.run(run_id).status.value == "succeeded"
        events = store.events(run_id)
        released = [e for e in events if isinstance(e, RunFinished) and e.reason == RELEASED]
        resumed = [e for e in events if isinstance(e, RunResumed)]
        assert len(released) == 1 and len(resumed) == 2
        assert resumed[-1].kept == ["a", "b"] and resumed[-1].held == [] and resumed[-1].rerun == []
        assert (resumed[-1].at - released[0].at).total_seconds() < 3  # taken at once, not after a lease expired (30 s)
        q = store.queued_run(run_id)
        assert q.state is QueueState.DONE and q.claims == 2 and q.takeovers == 0
    steps = [(step, pid) for run, step, pid in _calls(folder)]
    assert steps == [("a", first.pid), ("b", first.pid), ("c", second.pid)]  # the step in flight finished, nothing ran twice


def test_an_unapproved_plan_is_never_taken_a_denied_one_is_refused_and_an_approval_lets_it_run(folder):
    url = str(folder / "runs.db")
    env = {**os.environ, "PLANEXEC_STORE": url, "COLUMNS": "200"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "planexec", *args]
        return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    (folder / "plan.json").write_text(_plan().model_dump_json(by_alias=True))
    yes = cli("submit", "plan.json", "--tools", "tools.py", "--yes", "--run-id", "yes")
    assert yes.returncode == 0 and "queued run yes" in yes.stdout, yes.stderr
    for run_id in ("later", "never"):
        waiting = cli("submit", "plan.json", "--tools", "tools.py", "--run-id", run_id)
        assert waiting.returncode == 0 and f"planexec approve {run_id}" in waiting.stdout, waiting.stderr
    assert cli("submit", "plan.json", "--tools", "tools.py", "--yes", "--run-id", "yes").returncode == 4  # taken id
    assert cli("approve", "never", "--deny", "--reason", "not this one").returncode == 0
    listed = cli("queue")
    assert "later" in listed.stdout and "pending" in listed.stdout and "never" not in listed.stdout  # refused when denied
    with open_store(url) as store:
        never_run = store.run("never")  # the denial ended it at once, in its own chain: no worker needed to see it
        assert never_run.status.value == "cancelled" and never_run.reason.startswith("refused: its plan was denied by")
        assert store.run("later").status.value == "waiting" and store.run("yes").status.value == "waiting"

    worker = cli("worker", "--idle-exit", "0.5")
    assert worker.returncode == 0 and "Traceback" not in worker.stderr, worker.stderr
    with open_store(url) as store:
        assert store.run("yes").status.value == "succeeded"
        later, never = store.queued_run("later"), store.queued_run("never")
        assert later.state is QueueState.QUEUED and later.claims == 0 and later.approval == "pending"
        assert never.state is QueueState.REFUSED and never.claims == 0 and "denied by" in never.reason and "not this one" in never.reason
        assert store.run("later").reason == QUEUED_REASON and len(store.events("later")) == 2  # never started
    assert {run for run, _, _ in _calls(folder)} == {"yes"}

    assert cli("approve", "later").returncode == 0
    once = cli("worker", "--once", "--json")
    assert once.returncode == 0, once.stderr
    assert [(r["run_id"], r["outcome"]) for r in json.loads(once.stdout)["runs"]] == [("later", "succeeded")]
    listed = json.loads(cli("queue", "--all", "--json").stdout)
    assert {r["run_id"]: r["state"] for r in listed} == {"yes": "done", "later": "done", "never": "refused"}


def test_bad_input_is_a_clear_error(folder):
    env = {**os.environ, "PLANEXEC_STORE": str(folder / "runs.db")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "planexec", *args]
        return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    missing = cli("worker", "--store", str(folder / "nowhere.db"), "--idle-exit", "0")
    assert missing.returncode == 2 and "no run store at" in missing.stderr and not (folder / "nowhere.db").exists()
    unknown = cli("worker", "--store", "ftp://example/x", "--idle-exit", "0")
    assert unknown.returncode == 2 and "unknown run store" in unknown.stderr
    for bad in (["--concurrency", "0"], ["--concurrency", "two"], ["--idle-exit", "-1"]):
        refused = cli("worker", *bad)
        assert refused.returncode == 2 and bad[0] in refused.stderr, refused.stderr
    (folder / "plan.json").write_text(json.dumps({"plan_id": "p", "goal": "g", "steps": [{"id": "a", "action": "nope"}]}))
    invalid = cli("submit", "plan.json", "--tools", "tools.py", "--yes")
    assert invalid.returncode == 1 and "nope" in (invalid.stdout + invalid.stderr)
    assert cli("submit").returncode == 2
    for result in (missing, unknown, invalid):
        assert "Traceback" not in result.stderr
    with open_store(folder / "x.db") as store, pytest.raises(ValueError, match="at least one run"):
        QueueWorker(store, concurrency=0)


# --- the claim, at the store -------------------------------------------------------------------------


def test_concurrent_claims_never_take_one_run_twice(store_url, folder):
    ids = set(_submit(store_url, folder, [_plan() for _ in range(30)]))
    taken: list[list[str]] = [[], [], []]

    def claimer(mine: list[str]) -> None:
        with open_store(store_url) as store:
            while (claim := store.claim_run()) is not None:
                mine.append(claim.run_id)
                assert store.settle_queued(claim.run_id, claim.owner, QueueState.DONE)
                store.let_go(claim.run_id)

    threads = [threading.Thread(target=claimer, args=(mine,)) for mine in taken]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    everything = [run_id for mine in taken for run_id in mine]
    assert sorted(everything) == sorted(ids)  # each run claimed exactly once


def _expire(store, run_id: str, owner: str, ttl: float) -> None:
    """The worker holding `owner` stops beating: its lease now lasts `ttl` seconds more (its process lives on)."""
    store.lease_book._held.pop(run_id, None)
    store.renew_lease(run_id, Holder(owner, "host", 1, "", "", "planexec worker"), ttl=ttl)


def test_a_run_left_by_a_live_worker_is_taken_once_its_lease_expires_and_not_for_ever(pg_url, folder):
    (run_id,) = _submit(pg_url, folder, [_plan()])
    with open_store(pg_url) as store:
        claim = store.claim_run()
        assert claim is not None and claim.fresh and not claim.takeover
        _expire(store, run_id, claim.owner, 0.5)
        assert store.claim_run() is None  # its lease still binds
        time.sleep(0.7)
        again = store.claim_run()
        assert again is not None and again.run_id == run_id and again.takeover and again.fresh  # nothing of it ran yet
        assert not store.settle_queued(run_id, claim.owner, QueueState.DONE)  # the first worker's token no longer counts
        for _ in range(2):  # taken over again and again: capped
            _expire(store, run_id, again.owner, 0.1)
            time.sleep(0.3)
            again = store.claim_run()
            assert again is not None
        assert again.run.takeovers == 3
        _expire(store, run_id, again.owner, 0.1)
        time.sleep(0.3)
        assert store.claim_run() is None
        refused = store.queued_run(run_id)
        assert refused.state is QueueState.REFUSED and "taken over 3 times" in refused.reason


def test_one_beat_renews_every_held_lease_in_one_transaction_and_reports_only_the_lost_one(stores):
    store = stores()
    lost: list[str] = []
    for i in range(250):
        store.hold(f"h{i:03d}", on_lost=lambda exc, i=i: lost.append(f"h{i:03d}"))
    before = {run_id: lease.expires_at for run_id, lease in store.leases().items()}
    other = open_store(stores.url(store))
    store.renew_lease("h007", store.lease_book._held["h007"], ttl=0.1)  # as if this process had stopped beating: another takes it
    time.sleep(0.3)
    other.acquire_lease("h007")
    store.lease_book.beat()
    after = store.leases()
    assert lost == ["h007"] and "h007" not in store.holding()
    assert all(after[r].expires_at > before[r] for r in before if r != "h007")
    other.close()


def test_a_worker_in_python_drains_the_queue_and_releases_a_run_when_stopped(folder):
    store = open_store(folder / "runs.db")
    tools = str(folder / "tools.py")
    for i in range(3):
        submit_plan(store, _plan(), run_id=f"p{i}", setup={"tools": [tools]}, approved_by="tester")
    report = asyncio.run(QueueWorker(store, concurrency=2, idle_exit=0).serve())
    assert sorted((r.run_id, r.outcome) for r in report.runs) == [(f"p{i}", "succeeded") for i in range(3)]
    assert report.stopped.startswith("idle") and _reads_back(report.to_json())

    submit_plan(store, _plan(slow="b", seconds=0.5), run_id="s", setup={"tools": [tools]}, approved_by="tester")

    async def stop_midway() -> object:
        worker = QueueWorker(store, poll=0.05)
        serving = asyncio.ensure_future(worker.serve())
        while not any(e.type == "step_started" and e.step_id == "b" for e in store.events("s")):
            await asyncio.sleep(0.02)
        worker.stop()
        return await serving

    stopped = asyncio.run(stop_midway())
    assert [(r.run_id, r.outcome) for r in stopped.runs] == [("s", "released")]
    assert store.queued_run("s").state is QueueState.QUEUED and store.lease("s") is None
    assert asyncio.run(QueueWorker(store, once=True).serve()).runs[0].outcome == "succeeded"
    assert Counter(step for run, step, _ in _calls(folder) if run == "s") == {"a": 1, "b": 1, "c": 1}
    store.close()


def test_a_worker_whose_store_keeps_failing_stops_saying_why(folder, monkeypatch):
    store = open_store(folder / "runs.db")

    def down(**_: object) -> None:
        raise StoreError("lost the connection to the PostgreSQL run store at db:5432: the connection is lost")

    monkeypatch.setattr(store, "claim_run", down)
    notes: list[str] = []
    report = asyncio.run(QueueWorker(store, poll=0.01, give_up_after=0.3, on_note=notes.append).serve())
    assert report.store_failed is not None and "the connection is lost" in report.store_failed
    assert report.stopped.startswith("the store failed for 0.3s") and any("cannot claim a run" in n for n in notes)
    store.close()


def _reads_back(text: str) -> bool:
    """The report's JSON form reads back as what it says."""
    data = json.loads(text)
    return set(data) == {"worker", "store", "runs", "stopped", "store_failed"} and all("outcome" in r for r in data["runs"])


def test_a_worker_runs_each_run_where_it_was_started_unless_told_otherwise(tmp_path):
    """A run started on a Ray cluster goes on there when a worker takes it (as `planexec resume` does); the worker's own
    runner settings (``--runner``, planexec.toml) win; one runner serves every run of a registry and place."""
    store = open_store(str(tmp_path / "runs.db"))
    try:
        registry = Registry.default()
        cluster = {"runner": {"kind": "ray", "address": "127.0.0.2:6379", "namespace": "jobs", "spread": True}}
        worker = QueueWorker(store)
        runner = worker._runner(registry, cluster)
        assert isinstance(runner, RayRunner) and runner.address == "127.0.0.2:6379" and runner.namespace == "jobs"
        assert worker._runner(registry, cluster) is runner  # not a new cluster connection per run
        assert worker._runner(registry, {"tools": []}) is None  # a run started locally stays local
        local = QueueWorker(store, runner=RunnerConfig(kind="local"))
        assert local._runner(registry, cluster) is None  # the worker's --runner local wins
    finally:
        store.close()
