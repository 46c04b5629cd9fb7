"""A plan stored as a run that has not started, and such a run started in a process of its own.

Owns `park`, which stores a reviewed plan as a run and stops it before any
step starts: the team's engine records the run (its plan version, its
`RunStarted` with the tools modules) and asks the store for the approval
of that version's content hash, then the run is cancelled with the reason
`PARKED`. Nothing decides the request: it stays pending for a person
(``planexec approve``, the console, or the MCP client's user when it can
be asked), and `is_planned` tells such a run apart from one a person
cancelled. Also owns `Launcher`, which starts ``planexec resume RUN_ID``
for a planned run, in a session of its own in the project's folder with
its output in ``.planexec/mcp/RUN_ID.log``: the run goes on without the
MCP server, under the approval flow ``planexec run --plan`` has without
``--yes`` (planexec.toml's policies review the plan, a reject denies it,
anything else waits for a person in the store; so do steps and tool calls
that need approval). Imports `team`, the engine's approvals and the store.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planexec import Plan, Planning, RunResult, RunStatus, Team
from planexec.policies import PlanApprover
from planexec.store import RunSummary
from planexec.workers.tools import in_thread

__all__ = ["PARKED", "Launcher", "Started", "is_planned", "park"]

PARKED = "planned through MCP and not started: run_plan starts it, and it runs once a person approves its plan"
_TAIL = 8  # lines of a child's log that say why it ended before taking its run


def is_planned(summary: RunSummary) -> bool:
    """True for a run `park` stored and nothing has started since."""
    return summary.status is RunStatus.CANCELLED and summary.reason == PARKED


class _Parking(PlanApprover):
    """Asks for the approval of the first version in the store, then holds the run until it is stopped: no step starts."""

    def __init__(self, store: Any) -> None:
        super().__init__(store, person=True)
        self.asked = asyncio.Event()

    async def approve_plan(self, run_id: str, plan: Plan, diff: Any) -> bool:
        """Store the request, say so, and wait for the cancellation that ends the run (never approves)."""
        await in_thread(self.store.request_approval, run_id, plan.content_hash)
        self.asked.set()
        await asyncio.Event().wait()
        return False


async def park(team: Team, plan: Plan, *, run_id: str, planning: Planning | None = None) -> RunResult:
    """Store `plan` as the run `run_id` of `team` (which has a store) with its approval pending, and stop it; its result.

    The plan is validated against the team's registry first
    (`PlanValidationError`, nothing stored). A result whose reason is not
    `PARKED` is a run the store stopped (its reason says why).
    """
    gate = _Parking(team.store)
    run = team.start(plan, planning=planning, run_id=run_id, plan_approver=gate)
    asked = asyncio.ensure_future(gate.asked.wait())
    ended = asyncio.ensure_future(run.result())
    try:
        await asyncio.wait({asked, ended}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        asked.cancel()
    if not ended.done():
        run.cancel(PARKED)
    return await ended


@dataclass
class Started:
    """A ``planexec resume`` this server started: its run, its process and its log."""

    run_id: str
    process: subprocess.Popen[bytes]
    log: Path


class Launcher:
    """Starts ``planexec resume RUN_ID`` for planned runs (see the module docstring) and remembers the processes."""

    def __init__(self, folder: Path, store_target: str) -> None:
        self.folder = folder
        self.store_target = store_target
        self.started: dict[str, Started] = {}

    def start(self, run_id: str) -> Started:
        """Start the process that runs `run_id`; it outlives this server."""
        logs = self.folder / ".planexec" / "mcp"
        logs.mkdir(parents=True, exist_ok=True)
        log = logs / f"{run_id}.log"
        command = [sys.executable, "-m", "planexec", "resume", "--store", self.store_target, "--json", "--", run_id]
        with log.open("ab") as out:
            process = subprocess.Popen(command, cwd=self.folder, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        self.started[run_id] = started = Started(run_id=run_id, process=process, log=log)
        return started

    def running(self, run_id: str) -> Started | None:
        """The process this server started for `run_id`, while it runs."""
        started = self.started.get(run_id)
        return started if started is not None and started.process.poll() is None else None

    def ended(self, run_id: str) -> str | None:
        """When the process started for `run_id` has ended: its exit code and last lines; else None."""
        started = self.started.get(run_id)
        if started is None or started.process.poll() is None:
            return None
        text = started.log.read_text(encoding="utf-8", errors="replace") if started.log.exists() else ""
        lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("{", "}", '"'))]
        tail = " | ".join(lines[-_TAIL:]) or "(it wrote nothing)"
        return f"the process started to run it ended (exit {started.process.returncode}): {tail}"

    def close(self) -> None:
        """Reap the processes that ended (the others go on: a run outlives the server)."""
        for started in self.started.values():
            started.process.poll()
