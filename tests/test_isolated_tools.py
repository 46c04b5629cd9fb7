"""Isolated tools (`@tool(isolated=True)`): each call in a child process, which a step that stops waiting stops for sure.

The tools are in `isolated_tools_fixture` (a child finds a tool's function
by module and name). Runs that must end on time end well within the
timeouts here; the cases about a whole process exiting run in a subprocess
with a timeout, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import isolated_tools_fixture as fx
from planexec import Engine, Plan, Registry, RunStatus, StepState, ToolContext, tool
from planexec.errors import RegistryError, ToolInputError
from planexec.workers.isolated import ISOLATION, FunctionRef, Isolation

HERE = Path(__file__).resolve().parent
FIXTURE = HERE / "isolated_tools_fixture.py"
TOOLS = [fx.square, fx.whereabouts, fx.stubborn, fx.blocked, fx.exits, fx.segfault, fx.raises, fx.readings, fx.text, fx.later]


def run(steps: list[dict[str, Any]], *, grace: float = 1.0, max_output_bytes: int | None = 32 * 1024 * 1024):
    """Run the steps on a registry with the fixture's tools; (the result, seconds it took)."""
    reg = Registry.default()
    for t in TOOLS:
        reg.add_tool(t)
    plan = Plan.model_validate({"plan_id": "p", "goal": "isolated", "steps": steps})
    token = ISOLATION.set(Isolation(max_output_bytes=max_output_bytes, cancel_grace=grace))
    try:
        t0 = time.perf_counter()
        result = Engine(reg, cancel_grace=grace, max_output_bytes=max_output_bytes).run_sync(plan)
        return result, time.perf_counter() - t0
    finally:
        ISOLATION.reset(token)


def exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def gone(pid: int, within: float = 2.0) -> bool:
    """True once `pid` no longer exists (its process was reaped), waiting at most `within` seconds."""
    deadline = time.monotonic() + within
    while exists(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# --- a normal call ---------------------------------------------------------------------------------


def test_an_isolated_tool_returns_its_value_from_its_own_process(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLANEXEC_ISOLATED_TEST", "seen")
    result, _ = run(
        [
            {"id": "sq", "action": "square", "parameters": {"n": 7}},
            {"id": "where", "action": "whereabouts"},
            {"id": "async", "action": "later", "parameters": {"n": 3}},
        ]
    )
    assert result.status is RunStatus.SUCCEEDED, {s: r.error for s, r in result.steps.items()}
    assert result.steps["sq"].output.value == 49
    assert result.steps["async"].output.value == {"n": 3, "tags": ["a", "b"]}
    where = result.steps["where"].output.value
    assert where["pid"] != os.getpid() and not exists(where["pid"])  # another process, gone once it answered
    assert where["cwd"] == str(tmp_path) and where["value"] == "seen"  # this process's folder and environment, at the call
    out, err = capfd.readouterr()
    assert "isolated chatter" not in out and "isolated chatter" not in err  # its stdout and stderr are its own


def test_isolation_leaves_the_tools_metadata_alone():
    assert isinstance(fx.square.isolated, FunctionRef) and fx.square.isolated.module == "isolated_tools_fixture"
    assert (fx.square.read_only, fx.square.idempotent, fx.square.untrusted_output, fx.square.requires_approval) == (
        True,
        True,
        False,
        False,
    )
    assert fx.square.input_schema()["properties"] == {"n": {"title": "N", "type": "integer"}}
    assert fx.square(3) == 9  # still a function to call directly, here
    plain = tool(fx.square.fn)
    assert plain.isolated is None and plain.input_schema() == fx.square.input_schema()
    registered = Registry().tool(fx.square.fn, name="square_again", isolated=True, read_only=True)  # the registry's decorator too
    assert registered.isolated == fx.square.isolated and registered.read_only


# --- stopped for sure ------------------------------------------------------------------------------


def test_a_tool_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    pid_file = tmp_path / "pid"
    result, elapsed = run(
        [{"id": "hang", "action": "stubborn", "parameters": {"pid_file": str(pid_file)}, "timeout": 1, "failure_action": "skip"}]
    )
    step = result.steps["hang"]
    assert step.state is StepState.FAILED and step.error.rule == "timeout"
    assert elapsed < 1 + 1 + 4  # timeout + grace + slack (measured: ~2.1 s)
    assert gone(int(pid_file.read_text()))  # SIGKILL after the grace, and reaped


def test_the_engines_own_bounds_reach_the_child_without_setting_them_by_hand(tmp_path):
    """The run's cancel_grace and max_output_bytes are what an isolated call gets (not the 5 s / 32 MiB defaults)."""
    reg = Registry.default()
    for t in TOOLS:
        reg.add_tool(t)
    pid_file = tmp_path / "pid"
    plan = Plan.model_validate(
        {
            "plan_id": "p",
            "goal": "bounds",
            "steps": [
                {"id": "hang", "action": "stubborn", "parameters": {"pid_file": str(pid_file)}, "timeout": 1, "failure_action": "skip"}
            ],
        }
    )
    t0 = time.perf_counter()
    result = Engine(reg, cancel_grace=0.5).run_sync(plan)
    elapsed = time.perf_counter() - t0
    assert result.steps["hang"].error.rule == "timeout"
    assert elapsed < 1 + 0.5 + 2.5  # with the default grace it would take 1 + 5 s (measured here: ~1.6 s)
    assert gone(int(pid_file.read_text()))


def test_a_tool_blocked_in_a_c_call_is_stopped_at_its_timeout(tmp_path):
    pid_file = tmp_path / "pid"
    result, elapsed = run(
        [{"id": "nap", "action": "blocked", "parameters": {"pid_file": str(pid_file)}, "timeout": 1, "failure_action": "skip"}], grace=5
    )
    step = result.steps["nap"]
    assert step.state is StepState.FAILED and step.error.rule == "timeout" and "abandoned" not in step.error.message
    assert elapsed < 1 + 3  # SIGTERM ends time.sleep at once: well before the 5 s grace (measured: ~1.05 s)
    assert gone(int(pid_file.read_text()))


# --- a child that dies fails its step, and only its step ---------------------------------------------


def test_a_tool_that_exits_fails_its_step_naming_the_exit_code_and_the_failure_action_applies():
    retry = {"kind": "retry", "max_attempts": 2, "backoff": 0, "then": "skip"}
    result, _ = run(
        [
            {"id": "crash", "action": "exits", "parameters": {"code": 3}, "failure_action": retry},
            {"id": "after", "action": "square", "parameters": {"n": 2}, "depends_on": ["crash"]},
            {"id": "beside", "action": "square", "parameters": {"n": 5}},
        ]
    )
    crash = result.steps["crash"]
    assert crash.state is StepState.FAILED and crash.attempts == 2
    assert crash.error.type == "ToolError" and crash.error.rule == "exception"
    assert (
        crash.error.message == "step 'crash': tool 'exits' died: exited with code 3 before it answered; its last output: 'leaving with 3'"
    )
    assert result.steps["after"].state is StepState.SKIPPED
    assert result.steps["beside"].output.value == 25
    aborted, _ = run(
        [
            {"id": "crash", "action": "exits", "parameters": {"code": 3}},
            {"id": "beside", "action": "square", "parameters": {"n": 5}, "depends_on": ["crash"]},
        ]
    )
    assert aborted.status is RunStatus.ABORTED


def test_a_segfault_names_the_signal():
    result, _ = run([{"id": "seg", "action": "segfault", "failure_action": "skip"}])
    assert result.steps["seg"].error.message.startswith("step 'seg': tool 'segfault' died: killed by signal 11 (SIGSEGV)")


def test_the_tools_own_errors_come_back_as_they_would_from_a_thread():
    result, _ = run(
        [
            {"id": "raise", "action": "raises", "parameters": {"message": "bad input"}, "failure_action": "skip"},
            {"id": "nan", "action": "readings", "failure_action": "skip"},
            {"id": "big", "action": "text", "parameters": {"size": 2000}, "failure_action": "skip"},
        ],
        max_output_bytes=1000,
    )
    errors = {s: r.error for s, r in result.steps.items()}
    assert errors["raise"].message == "step 'raise': tool 'raises' raised ValueError: bad input"
    assert errors["nan"].rule == "tool_output" and errors["nan"].message.startswith("step 'nan' (tool 'readings'): output[1] is nan")
    assert errors["big"].rule == "tool_output"
    assert errors["big"].message == (
        "step 'big' (tool 'text'): output is larger than the limit (max_output_bytes = 1,000 bytes): at least 2,002 bytes of JSON"
    )
    with pytest.raises(ToolInputError, match="parameters.n"):  # refused here, before any process starts
        asyncio.run(fx.square.invoke({"n": "seven"}))


# --- declared wrong: refused when declared ------------------------------------------------------------


def test_what_a_child_could_not_find_is_refused_when_the_tool_is_declared():
    with pytest.raises(
        RegistryError, match=r"^tool '<lambda>' is isolated, so its function must be importable by module path .*: it is a lambda"
    ):
        tool(lambda: 1, isolated=True)

    def local() -> int:
        return 1

    with pytest.raises(
        RegistryError, match=r"^tool 'local' is isolated, .*: test_what_a_child.*<locals>\.local is defined inside another function"
    ):
        tool(local, isolated=True)
    with pytest.raises(RegistryError, match="a ToolContext's dependencies and a StepCall do not cross to another process"):
        tool(_takes_context, isolated=True)
    assert tool(_takes_context).isolated is None


def _takes_context(ctx: ToolContext) -> str:
    return str(ctx.run_id)


# --- the process exits on time, and no child outlives it -------------------------------------------


ABANDONED = """
import json, sys, time
sys.path.insert(0, {here!r})
import isolated_tools_fixture as fx
from planexec import Engine, Plan, Registry
from planexec.workers.isolated import ISOLATION, Isolation

reg = Registry.default()
reg.add_tool(fx.stubborn)
reg.add_tool(fx.square)
ISOLATION.set(Isolation(cancel_grace=60))  # the tool's own SIGKILL would come late: the exit must not wait for it
steps = [
    {{"id": "first", "action": "square", "parameters": {{"n": 2}}}},  # once it answered, the forkserver is up: no cold start below
    {{"id": "hang", "action": "stubborn", "parameters": {{"pid_file": {pid_file!r}}}, "timeout": 2, "depends_on": ["first"], "failure_action": "skip"}},
]
t0 = time.perf_counter()
result = Engine(reg, cancel_grace=1).run_sync(Plan.model_validate({{"plan_id": "p", "goal": "g", "steps": steps}}))
print(json.dumps({{"elapsed": time.perf_counter() - t0, "message": result.steps["hang"].error.message}}), flush=True)
"""


def test_the_process_exits_without_waiting_for_a_child_and_leaves_none_behind(tmp_path):
    pid_file = tmp_path / "pid"
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", ABANDONED.format(here=str(HERE), pid_file=str(pid_file))], capture_output=True, text=True, timeout=30
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["elapsed"] < 2 + 1 + 8  # the run abandoned the step after its grace (measured: ~3.1 s; slack for a loaded machine)
    assert report["message"] == "step 'hang' timed out after 2s and did not stop within 1s; abandoned"
    assert wall < 45  # and the interpreter exited without waiting the tool's 60 s (measured: ~4 s in all)
    assert gone(int(pid_file.read_text()))  # killed on the way out, not left running


def test_planexec_run_stops_an_isolated_tool_and_exits(tmp_path):
    """A tools file given by path: the child loads the same file; ``planexec run`` exits on time, the child gone."""
    pid_file = tmp_path / "pid"
    plan = tmp_path / "plan.json"
    steps = [
        {"id": "sq", "action": "square", "parameters": {"n": 4}},  # once it answered, the forkserver is up: no cold start below
        {
            "id": "nap",
            "action": "blocked",
            "parameters": {"pid_file": str(pid_file)},
            "timeout": 2,
            "depends_on": ["sq"],
            "failure_action": "skip",
        },
    ]
    plan.write_text(json.dumps({"plan_id": "p", "goal": "g", "steps": steps}))
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "planexec", "run", "--plan", str(plan), "--tools", str(FIXTURE), "--json"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr[-3000:]  # one step failed
    out = json.loads(proc.stdout)
    assert out["steps"]["sq"]["state"] == "succeeded"
    assert out["steps"]["nap"]["error"]["rule"] == "timeout"
    assert "isolated chatter" not in proc.stdout and "isolated chatter" not in proc.stderr
    assert wall < 40  # measured: ~4 s
    assert gone(int(pid_file.read_text()))
