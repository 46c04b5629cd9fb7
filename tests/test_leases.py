"""One owner per run: a run is leased to the process that runs it, on SQLite and on PostgreSQL.

A second resume of a live run is refused naming the process that runs it;
a lease whose process died (on this machine: at once; elsewhere: when its
heartbeat stops for longer than the lease) can be taken; a process that
lost its lease never writes into the run again; a run whose process died
is shown ``interrupted``, and the steps it had running as interrupted.
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
from dataclasses import replace
from pathlib import Path

import pytest

from planexec import Engine, Plan, Registry, tool
from planexec.engine.events import StepStarted, utcnow
from planexec.errors import LeaseHeldError, LeaseLostError
from planexec.store import ResumeError, SqliteRunStore, open_store
from planexec.store.leases import Holder


def _other_machine(holder: Holder) -> Holder:
    """The same holder, as a process of another machine would write it (its pid cannot be looked up here)."""
    return replace(holder, machine="another-boot/pid:[1]", host="elsewhere")


# --- the store ---------------------------------------------------------------------------------


def test_a_held_run_is_refused_to_another_holder_naming_the_process(stores):
    store = stores()
    other = open_store(stores.url(store))
    lease = store.hold("run-1")
    assert lease.live and lease.pid == os.getpid()
    with pytest.raises(LeaseHeldError) as caught:
        other.hold("run-1")
    message = str(caught.value)
    assert f"process {os.getpid()}" in message and "run-1" in message and "resumed once that process stops" in message
    assert caught.value.holder.owner == lease.owner
    store.let_go("run-1")
    assert other.lease("run-1") is None
    assert other.hold("run-1").owner != lease.owner  # free again: taken at once
    other.close()


def test_an_expired_lease_of_another_machine_can_be_taken_and_a_live_one_cannot(stores):
    store = stores()
    far = _other_machine(Holder.me())
    store.acquire_lease("run-2", far, ttl=0.8)
    with pytest.raises(LeaseHeldError, match="elsewhere"):
        store.acquire_lease("run-2")  # its pid is not ours to look up: only the expiry tells
    time.sleep(1.0)
    assert store.lease("run-2").live is False
    taken = store.acquire_lease("run-2")
    assert taken.pid == os.getpid() and taken.live
    with pytest.raises(LeaseLostError, match="this process lost run 'run-2'"):
        store.renew_lease("run-2", far)  # the old holder finds out at its next heartbeat


def test_a_lease_of_a_dead_process_of_this_machine_is_taken_at_once(stores):
    store = stores()
    url = stores.url(store)
    code = f"import os; from planexec.store import open_store; s = open_store({url!r}); s.hold('run-3'); os._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    lease = store.lease("run-3")
    assert lease is not None and lease.expires_at.timestamp() > time.time() + 5  # not expired: its process is gone
    assert lease.live is False
    assert store.hold("run-3").pid == os.getpid()


def test_a_recycled_pid_is_not_mistaken_for_the_holder(stores):
    store = stores()
    me = Holder.me()
    store.acquire_lease("run-4", replace(me, started="1"))  # our pid, but a process that started at another time
    assert store.lease("run-4").live is False
    store.acquire_lease("run-5", me)  # the same process: it holds
    assert store.lease("run-5").live is True


def test_the_heartbeat_keeps_a_lease_past_its_ttl_and_closing_the_store_releases_it(stores):
    store = stores()
    store.lease_ttl = 0.9
    other = open_store(stores.url(store))
    store.hold("run-6")
    time.sleep(2.0)  # more than twice the lease: renewed every 0.3 s
    assert other.lease("run-6").live
    with pytest.raises(LeaseHeldError):
        other.hold("run-6")
    store.close()
    assert other.lease("run-6") is None
    other.close()


def test_a_process_that_lost_its_lease_never_writes_the_run_again(stores):
    store = stores()
    store.lease_ttl = 0.8
    lost: list[Exception] = []
    store.hold("run-7", on_lost=lost.append)
    start = StepStarted(run_id="run-7", seq=0, at=utcnow(), step_id="a", worker="tool", action="noop", attempt=1)
    store.append([start])
    store.lease_book._heartbeat.stop()  # this process stops (SIGSTOP, a long GC pause): its heartbeat with it
    time.sleep(1.0)
    other = open_store(stores.url(store))
    other.hold("run-7")  # expired: another process takes the run over
    late = StepStarted(run_id="run-7", seq=1, at=utcnow(), step_id="b", worker="tool", action="noop", attempt=1)
    with pytest.raises(LeaseLostError, match=f"now held by process {os.getpid()}"):
        store.append([late])
    assert other.last_seq("run-7") == 0  # nothing written after it lost the run
    store.lease_book.beat()  # the next heartbeat finds out too, and tells the run
    assert lost and isinstance(lost[0], LeaseLostError)
    other.close()


def test_of_many_processes_taking_one_run_at_once_exactly_one_wins(stores):
    store = stores()
    others = [open_store(stores.url(store)) for _ in range(6)]
    start = threading.Barrier(len(others))
    won: list[int] = []
    refused: list[str] = []

    def take(k: int) -> None:
        start.wait()
        try:
            others[k].hold("race")
            won.append(k)
        except LeaseHeldError as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=take, args=(k,)) for k in range(len(others))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == len(others) - 1
    assert store.lease("race").owner == others[won[0]].lease_book._held["race"].owner
    for other in others:
        other.close()


def test_a_bad_lease_ttl_setting_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PLANEXEC_LEASE_TTL", "soon")
    with pytest.raises(Exception, match="PLANEXEC_LEASE_TTL='soon' is not a number of seconds"):
        SqliteRunStore(tmp_path / "r.db")
    monkeypatch.setenv("PLANEXEC_LEASE_TTL", "0")
    with pytest.raises(Exception, match="between 0.5 and 86400"):
        SqliteRunStore(tmp_path / "r.db")


# --- the engine ---------------------------------------------------------------------------------


def _gated_registry(gate: threading.Event) -> Registry:
    registry = Registry()

    @tool(idempotent=True)
    async def wait_for_gate() -> str:
        """Waits until the test opens the gate."""
        while not gate.is_set():
            await asyncio.sleep(0.01)
        return "done"

    registry.add_tool(wait_for_gate)
    return registry


def _plan() -> Plan:
    return Plan.model_validate({"plan_id": "p", "goal": "wait", "steps": [{"id": "a", "action": "wait_for_gate"}]})


def test_the_engine_holds_a_run_while_it_runs_and_a_second_resume_is_refused(stores):
    store = stores()
    url = stores.url(store)
    gate = threading.Event()
    registry = _gated_registry(gate)

    async def main() -> None:
        run = Engine(registry, store=store).start(_plan(), run_id="live")
        await asyncio.sleep(0.2)
        assert store.lease("live").live and store.run("live").state == "running"
        second = open_store(url)
        with pytest.raises(LeaseHeldError, match=f"process {os.getpid()}"):
            Engine(registry, store=second).resume("live")
        assert second.last_seq("live") == store.last_seq("live")  # the refused resume wrote nothing
        gate.set()
        result = await run.result()
        assert result.ok
        assert store.lease("live") is None  # released once its RunFinished is stored
        with pytest.raises(ResumeError, match="succeeded"):
            Engine(registry, store=second).resume("live")
        assert store.lease("live") is None  # a refused resume gives the lease back
        second.close()

    asyncio.run(main())


# --- the CLI: a real process killed, a resume refused, an interrupted run ---------------------------

TOOLS = textwrap.dedent(
    '''
    import asyncio
    from planexec import tool


    @tool
    async def slow(name: str) -> str:
        """Takes a while; a side effect, so a cut-off call is held, not re-run."""
        await asyncio.sleep(60)
        return name


    @tool(idempotent=True)
    async def quick(name: str) -> str:
        """Done at once."""
        return name
    '''
)


def _cli(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PLANEXEC_STORE": str(tmp_path / "runs.db"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "planexec", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_second_resume_of_a_live_run_is_refused_and_a_killed_run_is_interrupted(tmp_path):
    (tmp_path / "tools.py").write_text(TOOLS)
    plan = {
        "plan_id": "lease",
        "goal": "be killed",
        "steps": [
            {"id": "first", "action": "quick", "parameters": {"name": "a"}},
            {"id": "long", "action": "slow", "parameters": {"name": "b"}, "depends_on": ["first"]},
        ],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    env = {**os.environ, "PLANEXEC_STORE": str(tmp_path / "runs.db")}
    cmd = [sys.executable, "-m", "planexec", "run", "--plan", "plan.json", "--tools", "tools.py", "--yes", "--run-id", "r1"]
    owner = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    store = SqliteRunStore(tmp_path / "runs.db")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(e.type == "step_started" and e.step_id == "long" for e in _events(store, "r1")):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the run never started its long step")
        listed = _cli(tmp_path, "runs")
        assert "running" in listed.stdout and "interrupted" not in listed.stdout
        second = _cli(tmp_path, "resume", "r1", "--tools", "tools.py", "--yes")
        assert second.returncode == 4, second.stdout + second.stderr
        assert f"process {owner.pid}" in second.stderr and "planexec run" in second.stderr
        assert "Traceback" not in second.stderr
        refused = _cli(tmp_path, "resolve", "r1", "long", "--retry")
        assert refused.returncode == 4 and f"process {owner.pid}" in refused.stderr
        before = store.last_seq("r1")
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert store.last_seq("r1") == before  # the refused commands wrote nothing
    assert store.run("r1").state == "interrupted"
    listed = _cli(tmp_path, "runs")
    assert "interrupted" in listed.stdout
    only = _cli(tmp_path, "runs", "--status", "interrupted", "--json")
    assert [r["run_id"] for r in json.loads(only.stdout)] == ["r1"]
    shown = _cli(tmp_path, "show", "r1")
    assert "status interrupted" in shown.stdout and "planexec resume r1" in shown.stdout
    long_line = next(line for line in shown.stdout.splitlines() if line.startswith("long ·"))
    assert "interrupted" in long_line and "running" not in long_line
    # the process is gone: its run is resumed at once (no waiting for the lease to expire); the cut-off side effect is held
    resumed = _cli(tmp_path, "resume", "r1", "--tools", "tools.py", "--yes")
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert store.run("r1").status.value == "needs_decision" and store.lease("r1") is None
    shown = _cli(tmp_path, "show", "r1")
    long_line = next(line for line in shown.stdout.splitlines() if line.startswith("long ·"))
    assert "held" in long_line
    store.close()


def _events(store: SqliteRunStore, run_id: str) -> list:
    try:
        return store.events(run_id)
    except Exception:
        return []
