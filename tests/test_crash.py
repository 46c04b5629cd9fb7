"""Crash safety: a real ``planexec run`` killed with SIGKILL at random points, resumed until done.

No finished step may run again and no event may be lost. Steps that were
cut off re-run when their tool is idempotent; the others wait for a
decision, which the test gives (``planexec resolve --retry``), as a person would.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from planexec.errors import RunNotFoundError
from planexec.store import SqliteRunStore

KILLS = 50

TOOLS = textwrap.dedent(
    '''
    """Tools that log every start and end to $CRASH_LOG (one JSON line each, flushed)."""
    import asyncio
    import json
    import os

    from planexec import tool


    def _mark(step: str, phase: str) -> None:
        with open(os.environ["CRASH_LOG"], "a") as f:
            f.write(json.dumps({"step": step, "pid": os.getpid(), "phase": phase}) + "\\n")
            f.flush()
            os.fsync(f.fileno())


    @tool(idempotent=True)
    async def work(name: str, seconds: float) -> str:
        """Idempotent work: running it again does no harm."""
        _mark(name, "start")
        await asyncio.sleep(seconds)
        _mark(name, "end")
        return name


    @tool
    async def pay(name: str, seconds: float) -> str:
        """A side effect that must not happen twice unless a person says so."""
        _mark(name, "start")
        await asyncio.sleep(seconds)
        _mark(name, "end")
        return f"paid {name}"
    '''
)


def _plan(rng: random.Random) -> dict:
    """Eight layers of three steps, each after one step of the layer before; every fourth step pays."""
    steps = []
    for layer in range(8):
        for k in range(3):
            sid = f"l{layer}s{k}"
            action = "pay" if (layer * 3 + k) % 4 == 3 else "work"
            step = {"id": sid, "action": action, "parameters": {"name": sid, "seconds": round(rng.uniform(0.1, 0.4), 3)}}
            if layer:
                step["depends_on"] = [f"l{layer - 1}s{rng.randrange(3)}"]
            steps.append(step)
    return {"plan_id": "crash", "goal": "survive kill -9", "steps": steps}


def _log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_kill_9_at_random_points_loses_no_event_and_reruns_no_finished_step(tmp_path):
    rng = random.Random(20261122)
    (tmp_path / "crashtools.py").write_text(TOOLS)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(_plan(rng)))
    db = tmp_path / "runs.db"
    common = ["--tools", str(tmp_path / "crashtools.py"), "--yes", "--json"]
    store = SqliteRunStore(db)
    kills = runs = 0
    retried: set[tuple[str, str]] = set()  # (run, step) a person said to retry
    while kills < KILLS:
        run_id = f"crash-{runs}"
        runs += 1
        log = tmp_path / f"{run_id}.effects"
        env = {**os.environ, "PLANEXEC_STORE": str(db), "CRASH_LOG": str(log)}
        processes: list[tuple[int, int]] = []  # (pid, the last stored seq when it ended)
        for _ in range(200):
            try:
                started = bool(store.events(run_id))
            except RunNotFoundError:
                started = False
            if started:
                cmd = [sys.executable, "-m", "planexec", "resume", run_id, *common]
            else:
                cmd = [sys.executable, "-m", "planexec", "run", "--plan", str(plan_file), "--run-id", run_id, *common]
            proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                _, err = proc.communicate(timeout=rng.uniform(0.5, 3.0))
                killed = False
            except subprocess.TimeoutExpired:
                proc.kill()  # SIGKILL: no cleanup, no flush, no atexit
                proc.communicate()
                killed, err = True, b""
                kills += 1
            try:
                last = store.last_seq(run_id)
            except RunNotFoundError:
                last = -1
            processes.append((proc.pid, last))
            if not killed:
                assert proc.returncode in (0, 1), err.decode()[-2000:]
            summary = store.run(run_id) if last >= 0 else None
            if summary is not None and summary.status.value == "needs_decision":
                view_steps = [e for e in store.events(run_id) if e.type == "run_resumed"][-1].held
                for sid in view_steps:
                    done = subprocess.run(
                        [sys.executable, "-m", "planexec", "resolve", run_id, sid, "--retry"], cwd=tmp_path, env=env, capture_output=True
                    )
                    assert done.returncode == 0, done.stderr.decode()[-3000:]
                    retried.add((run_id, sid))
            if summary is not None and summary.status.value == "succeeded":
                break
        else:
            pytest.fail(f"run {run_id} did not finish in 200 processes")
        _check_run(store, run_id, processes, _log(log), retried)
    assert kills >= KILLS


def _check_run(store: SqliteRunStore, run_id: str, processes: list[tuple[int, int]], effects: list[dict], retried: set) -> None:
    events = store.events(run_id)
    # no event lost: one gapless sequence, one start, one end, every step succeeded once
    assert [e.seq for e in events] == list(range(len(events)))
    assert events[0].type == "run_started" and events[-1].type == "run_finished"
    assert events[-1].status.value == "succeeded"
    succeeded = {}
    for e in events:
        if e.type == "step_succeeded":
            assert e.step_id not in succeeded, f"{run_id}: step {e.step_id} succeeded twice"
            succeeded[e.step_id] = e.seq
    plan = store.plan_versions(run_id)[-1].plan
    assert set(succeeded) == set(plan.step_ids)
    # no finished step ran again: after the process that stored its success, no process started it
    order = {pid: i for i, (pid, _) in enumerate(processes)}
    for sid, seq in succeeded.items():
        finisher = next(i for i, (_, last) in enumerate(processes) if last >= seq)
        later = [fx for fx in effects if fx["step"] == sid and fx["phase"] == "start" and order.get(fx["pid"], -1) > finisher]
        assert not later, f"{run_id}: step {sid} finished in process {finisher} and ran again in {later}"
    # a side effect that is not idempotent ran once, unless a person said to retry it
    for step in plan.steps:
        if step.action == "pay":
            starts = [fx for fx in effects if fx["step"] == step.step_id and fx["phase"] == "start" and fx["pid"] in order]
            if (run_id, step.step_id) not in retried:
                assert len(starts) == 1, f"{run_id}: {step.step_id} paid {len(starts)} times"


CONCURRENT_ROUNDS = 24


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_concurrent_resumes_under_kill_9_never_run_a_step_in_two_processes(tmp_path):
    """Several ``planexec resume`` of one run at once, killed at random: one process holds the run, the others are refused.

    Every tool call's start and end are logged, and so is each process's
    death (after it is reaped): a step started by one process while another
    live process was still running it would be a step run twice at once.
    """
    rng = random.Random(20261124)
    (tmp_path / "crashtools.py").write_text(TOOLS)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(_plan(rng)))
    db = tmp_path / "runs.db"
    common = ["--tools", str(tmp_path / "crashtools.py"), "--yes", "--json"]
    store = SqliteRunStore(db)
    log = tmp_path / "effects"
    env = {**os.environ, "PLANEXEC_STORE": str(db), "CRASH_LOG": str(log)}
    kills = refused = launched = finished_runs = 0
    retried: set[tuple[str, str]] = set()
    run_no = 0
    run_id = "conc-0"
    rounds = 0
    # the rounds it takes, more on a loaded machine (up to twice as many): a resume must meet a live run at least once
    while rounds < CONCURRENT_ROUNDS or (rounds < 2 * CONCURRENT_ROUNDS and not (refused and kills)):
        rounds += 1
        try:
            started = bool(store.events(run_id))
        except RunNotFoundError:
            started = False
        if started:
            cmds = [[sys.executable, "-m", "planexec", "resume", run_id, *common] for _ in range(rng.choice((2, 3)))]
        else:
            cmds = [[sys.executable, "-m", "planexec", "run", "--plan", str(plan_file), "--run-id", run_id, *common]]
        procs = [subprocess.Popen(c, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in cmds]
        launched += len(procs)
        time.sleep(rng.uniform(0.8, 3.0))
        for proc in procs:
            if proc.poll() is None and rng.random() < 0.9:
                proc.kill()
                kills += 1
        for proc in procs:
            try:
                _, err = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            _mark_exit(log, proc.pid)  # after it is reaped: none of its writes can come later
            if proc.returncode == 4:
                refused += 1
                assert b"is being run by process" in err, err.decode()[-2000:]
            elif proc.returncode == 2:  # came after another resume had finished the run
                assert b"already ended succeeded" in err, err.decode()[-2000:]
            elif proc.returncode >= 0:
                assert proc.returncode in (0, 1), err.decode()[-2000:]
        try:
            summary = store.run(run_id)
        except RunNotFoundError:  # its only process was killed before it recorded the run: the next round starts it again
            continue
        if summary.status.value == "needs_decision":
            for sid in [e for e in store.events(run_id) if e.type == "run_resumed"][-1].held:
                done = subprocess.run(
                    [sys.executable, "-m", "planexec", "resolve", run_id, sid, "--retry"], cwd=tmp_path, env=env, capture_output=True
                )
                assert done.returncode == 0, done.stderr.decode()[-3000:]
                retried.add((run_id, sid))
        if summary.status.value == "succeeded":
            finished_runs += 1
            run_no += 1
            run_id = f"conc-{run_no}"
    overlaps = _overlaps(_log(log))
    print(f"\n{rounds} rounds: {launched} processes, {kills} SIGKILLs, {refused} resumes refused, "
          f"{finished_runs} runs finished, {len(overlaps)} steps run by two processes at once")  # fmt: skip
    assert not overlaps, overlaps
    assert refused > 0 and kills > 0  # the attack happened: concurrent resumes met a live run, and processes died
    for n in range(finished_runs):
        events = store.events(f"conc-{n}")
        assert [e.seq for e in events] == list(range(len(events)))
        succeeded = [e.step_id for e in events if e.type == "step_succeeded"]
        assert len(succeeded) == len(set(succeeded)) == 24
    store.close()


def _mark_exit(path: Path, pid: int) -> None:
    with open(path, "a") as f:
        f.write(json.dumps({"step": None, "pid": pid, "phase": "exit"}) + "\n")


def _overlaps(effects: list[dict]) -> list[tuple[str, int, int]]:
    """(step, pid, pid) for each start of a step while another process that had started it was still alive and not done."""
    running: dict[str, set[int]] = {}
    found = []
    for fx in effects:
        if fx["phase"] == "exit":
            for pids in running.values():
                pids.discard(fx["pid"])
            continue
        pids = running.setdefault(fx["step"], set())
        if fx["phase"] == "start":
            found += [(fx["step"], other, fx["pid"]) for other in pids if other != fx["pid"]]
            pids.add(fx["pid"])
        else:
            pids.discard(fx["pid"])
    return found
