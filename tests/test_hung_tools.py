"""A hung tool never holds the process: `run_sync` returns and ``planexec run`` exits on time.

A tool that swallows its cancellation is abandoned by the run (`Attempts.abandon`);
`asyncio.run` then waited for it for ever at shutdown. Every case runs in a
subprocess with a timeout, so a regression fails here instead of hanging the suite.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

TOOLS = '''
import asyncio
import threading

from planexec import tool


@tool
async def stubborn() -> str:
    """Swallows every cancellation."""
    while True:
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            pass


@tool
def blocked() -> str:
    """Blocks its thread for ever."""
    threading.Event().wait()
    return "never"


@tool
async def nap(seconds: float = 0.0) -> str:
    """Sleeps, and stops when cancelled."""
    await asyncio.sleep(seconds)
    return "rested"
'''

HUNG = 20  # seconds a child may take before the test calls it hung


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "hung_tools.py"
    path.write_text(TOOLS)
    return path


def write_plan(folder: Path, *steps: dict[str, object]) -> Path:
    path = folder / "plan.json"
    path.write_text(json.dumps({"plan_id": "p", "goal": "hang", "steps": list(steps)}))
    return path


def cli(folder: Path, plan: Path, tools: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """``planexec run --plan PLAN --tools TOOLS --yes``; (the process, seconds it took)."""
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "planexec", "run", "--plan", str(plan), "--tools", str(tools), "--yes"],
        cwd=folder,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HUNG,
    )
    return proc, time.monotonic() - t0


def test_run_sync_returns_when_a_tool_swallows_its_cancellation(tmp_path: Path, tools: Path) -> None:
    script = textwrap.dedent(
        f"""
        import importlib.util, json, sys, time
        from planexec import Engine, Plan, Registry

        spec = importlib.util.spec_from_file_location("hung_tools", {str(tools)!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        registry = Registry()
        registry.add_tool(module.stubborn)
        plan = Plan.model_validate({{"plan_id": "p", "goal": "hang", "steps": [{{"id": "s", "action": "stubborn"}}]}})
        t0 = time.monotonic()
        result = Engine(registry, default_timeout=0.5, cancel_grace=0.5).run_sync(plan)
        s = result.steps["s"]
        print(json.dumps({{"seconds": time.monotonic() - t0, "status": result.status.value, "state": s.state.value,
                          "rule": s.error.rule, "message": s.error.message}}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=HUNG)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["seconds"] < 4, out  # 0.5 s timeout, 0.5 s grace, at most 0.5 s more at shutdown
    assert (out["status"], out["state"], out["rule"]) == ("aborted", "failed", "timeout"), out
    assert "abandoned" in out["message"]
    assert "ignored their cancellation" in proc.stderr  # the task left behind is named
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("action", ["stubborn", "blocked"])
def test_planexec_run_exits_when_a_tool_hangs(tmp_path: Path, tools: Path, action: str) -> None:
    plan = write_plan(tmp_path, {"id": "s", "action": action, "timeout": 0.5})
    proc, seconds = cli(tmp_path, plan, tools)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # an aborted run (README: exit codes)
    assert "status: aborted" in proc.stdout
    assert seconds < 12  # 0.5 s timeout, then the default 5 s grace before the step is abandoned
    assert "Traceback" not in proc.stdout + proc.stderr


def test_planexec_run_still_succeeds(tmp_path: Path, tools: Path) -> None:
    plan = write_plan(tmp_path, {"id": "a", "action": "nap"}, {"id": "b", "action": "nap", "depends_on": ["a"]})
    proc, _ = cli(tmp_path, plan, tools)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "status: succeeded" in proc.stdout


def interrupt(folder: Path, plan: Path, tools: Path) -> tuple[int, str, float]:
    """Start ``planexec run``, send SIGINT once a step started; (exit code, output, seconds from the signal to the exit)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "planexec", "run", "--plan", str(plan), "--tools", str(tools), "--yes"],
        cwd=folder,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    seen: list[str] = []
    try:
        while not any(": started" in line for line in seen):
            seen.append(lines.get(timeout=HUNG))
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=HUNG)
        seconds = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=5)
    while not lines.empty():
        seen.append(lines.get())
    return proc.returncode, "".join(seen), seconds


@pytest.mark.skipif(sys.platform == "win32" or not hasattr(signal, "SIGINT"), reason="SIGINT to a child process")
@pytest.mark.parametrize("action", ["nap", "stubborn"])
def test_ctrl_c_still_exits_130(tmp_path: Path, tools: Path, action: str) -> None:
    plan = write_plan(tmp_path, {"id": "s", "action": action, "parameters": {"seconds": 30} if action == "nap" else {}})
    code, out, seconds = interrupt(tmp_path, plan, tools)
    assert code == 130, out
    assert "status: cancelled" in out
    assert seconds < 10, out  # a stubborn step is given the default 5 s grace, then left behind
    assert "Traceback" not in out
