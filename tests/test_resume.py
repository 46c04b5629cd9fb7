"""Resuming stopped runs from the store: finished steps never run again; cut-off steps re-run or wait for a person."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from planexec import Engine, Plan, Registry, RunStatus, StepState
from planexec.cli.main import main
from planexec.engine.replay import replay
from planexec.engine.resume import ResumeError, resolve_step
from planexec.store import open_store


def mkplan():
    # a diamond with a tail: a -> (b, c) -> d -> e
    return Plan.model_validate(
        {
            "plan_id": "p",
            "goal": "g",
            "steps": [
                {"id": "a", "action": "safe", "parameters": {"name": "a"}},
                {"id": "b", "action": "safe", "parameters": {"name": "b"}, "depends_on": ["a"]},
                {"id": "c", "action": "charge", "parameters": {"name": "c"}, "depends_on": ["a"]},
                {"id": "d", "action": "safe", "parameters": {"name": "d"}, "depends_on": ["b", "c"]},
                {"id": "e", "action": "safe", "parameters": {"name": "e"}, "depends_on": ["d"]},
            ],
        }
    )


@pytest.fixture
def reg():
    reg = Registry.default()
    reg.calls = []

    @reg.tool(idempotent=True, untrusted_output=False)
    async def safe(name: str) -> str:
        """Safe to run twice."""
        reg.calls.append(name)
        await asyncio.sleep(0.01)
        return name.upper()

    @reg.tool(untrusted_output=False)  # its own computation, not outside text
    async def charge(name: str) -> str:
        """A side effect: not idempotent."""
        reg.calls.append(name)
        await asyncio.sleep(0.01)
        return f"charged {name}"

    return reg


def full_run(reg, store):
    async def go():
        r = Engine(reg, store=store).start(mkplan(), run_id="r1")
        return r, await r.result()

    return asyncio.run(go())


def resume(reg, store, run_id="r1"):
    async def go():
        r = Engine(reg, store=store).resume(run_id)
        return r, await r.result()

    return asyncio.run(go())


def test_a_recorded_run_is_in_the_store_event_by_event(reg, stores):
    store = stores()
    r, result = full_run(reg, store)
    assert result.status is RunStatus.SUCCEEDED
    stored = store.events("r1")
    assert [e.seq for e in stored] == list(range(len(r.history)))
    assert [e.type for e in stored] == [e.type for e in r.history]
    assert store.run("r1").status is RunStatus.SUCCEEDED


def test_resuming_after_a_crash_at_any_event_never_reruns_a_finished_step(reg, stores):
    """Every prefix of a real run's events is a crash we can resume from: try them all."""
    source = stores()
    r, _ = full_run(reg, source)
    history = r.history
    outcomes = set()
    for cut in range(1, len(history)):
        store = stores()
        store.save_plan("r1", mkplan())
        store.append(history[:cut])
        before = replay(history[:cut])
        finished = {sid for sid, rec in before.steps.items() if rec.state is StepState.SUCCEEDED}
        cut_off = set(before.in_flight)
        reg.calls.clear()
        _, result = resume(reg, store)
        outcomes.add(result.status)
        # no finished step ran again
        assert not finished & set(reg.calls), cut
        # the events go on from where they stopped: nothing lost, nothing numbered twice
        stored = store.events("r1")
        assert [e.seq for e in stored] == list(range(len(stored))), cut
        assert stored[cut].type == "run_resumed", cut
        if "c" in cut_off:  # the charge was cut off mid-attempt: a person decides
            assert result.status is RunStatus.NEEDS_DECISION, cut
            assert result.steps["c"].state is StepState.NEEDS_DECISION and "c" not in reg.calls
            assert "planexec resolve" in result.reason
        else:
            assert result.status is RunStatus.SUCCEEDED, (cut, result.reason)
            assert result.answer == "E"
            assert sorted(reg.calls) == sorted(set("abcde") - finished), cut  # each remaining step once
        assert store.run("r1").status is result.status
    assert outcomes == {RunStatus.SUCCEEDED, RunStatus.NEEDS_DECISION}


def test_a_person_resolves_a_held_step_and_the_run_completes(reg, stores):
    source = stores()
    r, _ = full_run(reg, source)
    cut = next(i for i, e in enumerate(r.history) if e.type == "step_started" and e.step_id == "c") + 1
    store = stores()
    store.save_plan("r1", mkplan())
    store.append(r.history[:cut])
    _, held = resume(reg, store)
    assert held.status is RunStatus.NEEDS_DECISION
    # b (independent of c) went on while c waited
    assert held.steps["b"].state is StepState.SUCCEEDED and held.steps["d"].state is StepState.PENDING

    with pytest.raises(ResumeError, match="is succeeded, not waiting"):
        resolve_step(store, "r1", "b", "retry")
    resolve_step(store, "r1", "c", "mark_done", "charged c (checked by hand)", by="ada")
    reg.calls.clear()
    _, result = resume(reg, store)
    assert result.status is RunStatus.SUCCEEDED and result.answer == "E"
    assert reg.calls == ["d", "e"]  # c was marked done, not charged again
    assert result.steps["c"].output.value == "charged c (checked by hand)"
    assert result.steps["c"].output.provenance.worker == "ada"


def test_retry_and_skip_decisions(reg, stores):
    source = stores()
    r, _ = full_run(reg, source)
    cut = next(i for i, e in enumerate(r.history) if e.type == "step_started" and e.step_id == "c") + 1
    for decision, status, calls in (("retry", RunStatus.SUCCEEDED, ["c", "d", "e"]), ("skip", RunStatus.PARTIAL, [])):
        store = stores()
        store.save_plan("r1", mkplan())
        store.append(r.history[:cut])
        resume(reg, store)
        resolve_step(store, "r1", "c", decision)
        reg.calls.clear()
        _, result = resume(reg, store)
        assert result.status is status
        assert [c for c in reg.calls if c != "b"] == calls
        if decision == "skip":
            assert result.steps["c"].state is StepState.SKIPPED and result.steps["d"].state is StepState.SKIPPED


def test_a_finished_run_is_not_resumed_and_an_unknown_one_is_named(reg, stores):
    from planexec.store import RunNotFoundError

    store = stores()
    full_run(reg, store)
    with pytest.raises(ResumeError, match="already ended succeeded"):
        resume(reg, store)
    with pytest.raises(RunNotFoundError, match="nope"):
        resume(reg, store, "nope")
    assert len(store.events("r1")) == len(store.events("r1"))  # nothing was written by the refusals
    with pytest.raises(ResumeError, match="ended succeeded"):
        resolve_step(store, "r1", "c", "retry")


def test_a_cancelled_run_resumes(reg, stores):
    store = stores()

    async def go():
        r = Engine(reg, store=store).start(mkplan(), run_id="r1")
        async for ev in r.events():
            if ev.type == "step_started" and ev.step_id == "b":
                r.cancel("lid closed")
        return await r.result()

    first = asyncio.run(go())
    assert first.status is RunStatus.CANCELLED
    reg.calls.clear()
    _, result = resume(reg, store)
    # b was cut off but is idempotent: it ran again; c (not idempotent) was cut off too, or had not started
    if result.status is RunStatus.NEEDS_DECISION:
        assert result.steps["c"].state is StepState.NEEDS_DECISION
    else:
        assert result.status is RunStatus.SUCCEEDED and "a" not in reg.calls


def test_a_run_stopped_between_a_failure_and_its_revision_replans_on_resume(reg, stores):
    from planexec.planning.replanner import FunctionReplanner

    @reg.tool(untrusted_output=False)  # its own computation, not outside text
    async def broken(name: str) -> str:
        raise RuntimeError("down")

    plan = Plan.model_validate(
        {
            "plan_id": "p",
            "goal": "g",
            "steps": [
                {"id": "a", "action": "safe", "parameters": {"name": "a"}},
                {"id": "b", "action": "broken", "parameters": {"name": "b"}, "depends_on": ["a"], "failure_action": "replan"},
            ],
        }
    )
    replanner = FunctionReplanner(lambda ctx: [{"id": "c", "action": "safe", "parameters": {"name": "c"}, "depends_on": ["a"]}])
    source = stores()
    history = Engine(reg, store=source, replanner=replanner).run_sync(plan, run_id="r1")
    events = source.events("r1")
    cut = next(i for i, e in enumerate(events) if e.type == "replan_started")  # the process died while replanning
    store = stores()
    store.save_plan("r1", plan)
    store.append(events[:cut])
    reg.calls.clear()
    _, result = asyncio.run(_resume_with(reg, store, replanner))
    assert history.status is RunStatus.SUCCEEDED and result.status is RunStatus.SUCCEEDED
    assert reg.calls == ["c"]  # a ran once, before the crash; the revision's step ran after it
    assert [v.version for v in result.versions] == [1, 2]


async def _resume_with(reg, store, replanner):
    r = Engine(reg, store=store, replanner=replanner).resume("r1")
    return r, await r.result()


TOOLS_MODULE = """
import asyncio
from planexec import tool


@tool(idempotent=True)
async def safe(name: str) -> str:
    \"\"\"Safe to run twice.\"\"\"
    return name.upper()


@tool
async def charge(name: str) -> str:
    \"\"\"A side effect: not idempotent.\"\"\"
    await asyncio.sleep(0.01)
    return f"charged {name}"
"""


def test_the_cli_resumes_a_killed_run_with_its_own_tools_and_shows_the_held_step(tmp_path, monkeypatch, capsys):
    """`planexec resume RUN_ID` needs no --tools (the run recorded them) and prints its summary, held step included; so does `show`."""
    from planexec.cli.main import main
    from planexec.store import open_store

    monkeypatch.chdir(tmp_path)
    module = tmp_path / "shop_tools.py"
    module.write_text(TOOLS_MODULE, encoding="utf-8")
    reg = Registry.default()
    reg.load_module(str(module))
    source = open_store(str(tmp_path / "source.db"))

    async def go():
        r = Engine(reg, store=source).start(mkplan(), run_id="r1", setup={"tools": [str(module)]})
        return r, await r.result()

    r, _ = asyncio.run(go())
    cut = next(i for i, e in enumerate(r.history) if e.type == "step_started" and e.step_id == "c") + 1
    db = str(tmp_path / "runs.db")
    store = open_store(db)
    store.save_plan("r1", mkplan())
    store.append(r.history[:cut])  # the process died while c (not idempotent) ran
    capsys.readouterr()

    assert main(["resume", "r1", "--store", db]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert "needs_decision" in out and "planexec resolve r1 c" in out
    assert main(["show", "r1", "--store", db]) == 0
    out, err = capsys.readouterr()
    assert "needs_decision" in out and "Traceback" not in out + err


NAP_TOOLS = """
import asyncio
from pathlib import Path
from planexec import tool


@tool(idempotent=True)
async def nap(name: str) -> str:
    \"\"\"Sleeps until the file `awake` exists (at most 30 s).\"\"\"
    for _ in range(300):
        if Path("awake").exists():
            break
        await asyncio.sleep(0.1)
    return f"{name} rested"
"""


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or sys.platform == "win32", reason="SIGINT to a child process")
def test_planexec_run_of_a_plan_file_records_its_tools_and_resume_needs_no_flags(tmp_path):
    """`planexec run --plan P --tools M`, stopped with Ctrl-C, then `planexec resume RUN_ID` alone: the run knew its tools."""
    (tmp_path / "naps.py").write_text(NAP_TOOLS, encoding="utf-8")
    steps = [{"id": "first", "action": "nap", "parameters": {"name": "a"}}]
    steps.append({"id": "second", "action": "nap", "parameters": {"name": "b"}, "depends_on": ["first"]})
    (tmp_path / "plan.json").write_text(json.dumps({"plan_id": "p", "goal": "rest", "steps": steps}), encoding="utf-8")
    env = {**os.environ, "PLANEXEC_STORE": str(tmp_path / "runs.db")}
    run = [sys.executable, "-m", "planexec", "run", "--plan", "plan.json", "--tools", "naps.py", "--run-id", "r1", "--yes"]
    proc = subprocess.Popen(run, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:  # type: ignore[union-attr]  # a pipe was asked for
            if "started" in line and "first" in line:
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err

    (tmp_path / "awake").touch()
    resumed = subprocess.run(
        [sys.executable, "-m", "planexec", "resume", "r1", "--json"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["status"] == "succeeded"
    assert [result["steps"][s]["output"]["value"] for s in ("first", "second")] == ["a rested", "b rested"]


def _killed_while_charging(folder) -> str:
    """A store (its path) with run r1 of `mkplan`, killed while c (not idempotent) ran, its tools module recorded."""
    module = folder / "shop_tools.py"
    module.write_text(TOOLS_MODULE, encoding="utf-8")
    reg = Registry.default()
    reg.load_module(str(module))

    async def go():
        r = Engine(reg, store=open_store(str(folder / "source.db"))).start(mkplan(), run_id="r1", setup={"tools": [str(module)]})
        return r, await r.result()

    r, _ = asyncio.run(go())
    cut = next(i for i, e in enumerate(r.history) if e.type == "step_started" and e.step_id == "c") + 1
    db = str(folder / "runs.db")
    store = open_store(db)
    store.save_plan("r1", mkplan())
    store.append(r.history[:cut])
    return db


def test_show_of_a_run_waiting_for_a_decision_shows_the_held_step_and_the_command_to_run(tmp_path, monkeypatch, capsys):
    """After `planexec resume` held c, `planexec show` says c waits for a decision (not 'running') and how to decide."""
    monkeypatch.chdir(tmp_path)
    db = _killed_while_charging(tmp_path)
    assert main(["resume", "r1", "--store", db, "--json"]) == 1
    capsys.readouterr()
    assert main(["show", "r1", "--store", db]) == 0
    out = capsys.readouterr().out
    assert re.search(r"│ c\s+│ held", out), out
    assert "c · held · tool.charge" in out and "c · running" not in out
    assert "planexec resolve r1 c --retry|--skip|--mark-done VALUE" in out
    assert main(["resolve", "r1", "c", "--skip", "--store", db]) == 0
    capsys.readouterr()
    assert main(["show", "r1", "--store", db]) == 0
    out = capsys.readouterr().out
    assert "planexec resolve r1" not in out and "continue with: planexec resume r1" in out


def test_a_step_cut_off_on_its_fallback_worker_with_side_effects_is_held_not_run_again(stores):
    """The plan's worker is idempotent, the fallback that took the step over is not: a crash while the fallback ran
    holds the step for a person, as for any step with side effects (it was judged by the plan's worker, and run again)."""
    reg = Registry()
    calls: list[str] = []

    @reg.tool(worker="primary", idempotent=True, untrusted_output=False)
    async def send(name: str) -> str:
        """The primary route: safe to try again, and down."""
        raise RuntimeError("primary down")

    @reg.tool(worker="backup", name="send_b", untrusted_output=False)
    async def send_backup(name: str) -> str:
        """The backup route: a side effect."""
        calls.append(name)
        return f"sent {name}"

    reg.worker("backup").tools["send"] = reg.worker("backup").tools.pop("send_b")
    plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [
        {"id": "a", "action": "send", "worker": "primary", "parameters": {"name": "a"},
         "failure_action": {"kind": "fallback", "worker": "backup"}},
    ]})  # fmt: skip
    source = stores()

    async def first():
        r = Engine(reg, store=source).start(plan, run_id="fb")
        return r, await r.result()

    run, result = asyncio.run(first())
    assert result.ok and calls == ["a"]
    cut = next(i for i, e in enumerate(run.history) if e.type == "step_started" and e.worker == "backup") + 1
    store = stores()
    store.save_plan("fb", plan)
    store.append(run.history[:cut])  # the process died while the backup ran
    calls.clear()

    async def again():
        r = Engine(reg, store=store).resume("fb")
        return await r.result()

    resumed = asyncio.run(again())
    assert resumed.status is RunStatus.NEEDS_DECISION and resumed.steps["a"].state is StepState.NEEDS_DECISION
    assert calls == []  # the side effect did not happen a second time
