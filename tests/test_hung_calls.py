"""Nothing that hangs holds the process: a local model call that never returns, a tool that hangs in an evaluation.

Both run in a subprocess with a timeout, so a regression fails here instead
of hanging the suite. Before: the local model ran on the event loop's
default executor, whose threads the interpreter joins at exit; the
evaluation harness ran each goal with `asyncio.run`, which waits for ever
for a task that swallows its cancellation.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HUNG_LOCAL_MODEL = """
import json, threading, time
from planexec import Engine, Plan, Registry, RoleWorker
from planexec.models.local import LocalModel


class Hung(LocalModel):
    def _generate(self, request):
        threading.Event().wait()  # a native call that never returns


reg = Registry.default()
reg.add_worker(RoleWorker("writer", model=Hung(), description="writes", system_prompt="Write.", tasks=["respond"]))
plan = Plan.model_validate({"plan_id": "p", "goal": "g", "steps": [{"id": "w", "action": "respond", "worker": "writer", "timeout": 1}]})
t0 = time.perf_counter()
result = Engine(reg, cancel_grace=1).run_sync(plan)
print(json.dumps({"elapsed": time.perf_counter() - t0, "error": result.steps["w"].error.rule}), flush=True)
"""


def run_script(code: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=60)
    return proc, time.monotonic() - t0


def test_a_local_model_call_that_never_returns_does_not_hold_the_process(tmp_path):
    proc, wall = run_script(HUNG_LOCAL_MODEL, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["error"] == "timeout" and report["elapsed"] < 1 + 3  # the step timed out (measured: ~1.0 s)
    assert wall < 40  # and the interpreter exited without joining the model's thread (measured: ~2 s in all)


SUITE_TOOLS = '''
import asyncio

from planexec import tool


@tool(read_only=True)
async def stubborn(key: str) -> int:
    """Swallows every cancellation."""
    while True:
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            pass
'''

HUNG_EVALUATION = """
import json, time
from planexec.eval.harness import EvalOptions, run_suite, scripted_models
from planexec.eval.suite import load_suite

t0 = time.perf_counter()
report = run_suite(load_suite("suite.yaml"), ["plan"], scripted_models(), options=EvalOptions(step_timeout=1, replan=False, join=False))
print(json.dumps({"elapsed": time.perf_counter() - t0, "success": report.records[0].success}), flush=True)
"""


def test_an_evaluation_whose_tool_hangs_returns_and_exits(tmp_path):
    (tmp_path / "tools.py").write_text(textwrap.dedent(SUITE_TOOLS))
    goal = {"id": "hang", "goal": "Look up a", "exact": "5", "solution": [{"id": "x", "tool": "stubborn", "args": {"key": "a"}}]}
    suite = {"name": "hung", "description": "a tool that hangs", "tools": "tools.py", "goals": [goal]}
    (tmp_path / "suite.yaml").write_text(json.dumps(suite))
    proc, wall = run_script(HUNG_EVALUATION, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["success"] is False
    assert report["elapsed"] < 1 + 5 + 5  # step timeout + the engine's cancel grace + slack (measured: ~6 s)
    assert wall < 45
