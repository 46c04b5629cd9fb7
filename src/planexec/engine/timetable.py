"""Scheduled steps of one run: waiting for a step's time, and stopping the run when all it can do is wait.

Owns `Timetable`, a run's collaborator (like `attempt.Attempts`): `holds`
says whether a step may have to wait for its time (its `not_before`, or a
window of a tool it names: `plan.schedule`), `wait` keeps a ready step
``scheduled`` until then (a `StepScheduled` event with the time and why,
then the engine's `Clock` sleeps; the run waits so before each attempt, and
`on_time` is asked again once an attempt has its slots: a retry, or a step
that waited for a slot, never starts after its window closed), and `park` stops the run as
``scheduled`` when every step it has handed out waits for its time and the
first is more than the engine's `park_after` seconds away: a worker of the
store's queue resumes it when due, and no process needs to stay up meanwhile.
Parked steps stay ``scheduled`` in the record (not cancelled); resuming
the run schedules them again from their plan, so a step never starts early,
whoever resumes it and however late. Imports `engine.config`,
`engine.events`, `engine.results`, `engine.state` and `plan`.
"""

from __future__ import annotations

from datetime import datetime

from planexec.engine.config import Host
from planexec.engine.events import StepScheduled
from planexec.engine.results import RunStatus, StepState
from planexec.engine.state import RunControl, RunState, update_record
from planexec.plan.model import Step
from planexec.plan.schedule import due, windowed_tools

__all__ = ["Timetable"]


class Timetable:
    """When a run's steps may start, and waiting for it (see the module docstring)."""

    def __init__(self, state: RunState, run: RunControl, host: Host) -> None:
        self._state = state
        self._run = run
        self._host = host

    def holds(self, step: Step) -> bool:
        """True when `step` has a time of its own or names a windowed tool: it may have to wait (cheap: no clock read)."""
        if step.not_before is not None:
            return True
        windows = self._state.plan.windows
        return bool(windows) and bool(windowed_tools(step, windows or {}))

    async def wait(self, step: Step) -> bool:
        """Wait until `step` may start; True then, False when the run stopped meanwhile (parked, cancelled)."""
        state, clock = self._state, self._host.config.clock
        sid = step.step_id
        while True:
            when = due(step, state.plan.parsed_windows, clock.now())
            if when is None:
                if state.scheduled.pop(sid, None) is not None:
                    update_record(state.records[sid], state=StepState.READY)  # its time came: ready (it may wait for a slot)
                return state.status is RunStatus.RUNNING
            if state.scheduled.get(sid) != when:
                state.scheduled[sid] = when
                update_record(state.records[sid], state=StepState.SCHEDULED, due=when)
                self._run._emit(StepScheduled, step_id=sid, due=when, why=self._why(step, when))
                if self.park():
                    return False
            await clock.sleep_until(when)

    def on_time(self, step: Step) -> bool:
        """True when `step` may start now (its time has come and its tools' windows are open)."""
        return due(step, self._state.plan.parsed_windows, self._host.config.clock.now()) is None

    def park(self) -> bool:
        """Stop the run as ``scheduled`` when each step it handed out waits for a time beyond `park_after`; True when it did."""
        state, config = self._state, self._host.config
        if config.park_after is None or not state.scheduled or state.status is not RunStatus.RUNNING or state.draining is not None:
            return False
        if state.pending is not None or state.open:
            return False  # a replan is owed, or steps are still arriving: the run has more to do than wait
        out = state.sched.running()
        if not out or any(sid not in state.scheduled for sid in out):
            return False  # a step runs, or waits for a slot or a person
        first = min(state.scheduled[sid] for sid in out)
        if (first - config.clock.now()).total_seconds() <= config.park_after:
            return False
        state.due = first
        names = ", ".join(sorted(out))
        self._run._end(
            RunStatus.SCHEDULED,
            f"scheduled: step(s) {names} wait until {first.isoformat()}; a worker of the run queue resumes the run then",
        )
        return True

    def _why(self, step: Step, when: datetime) -> str:
        """Which rule set the time: the step's own `not_before`, or a tool's window."""
        if step.not_before is not None and step.not_before >= when:
            return f"not_before {step.not_before.isoformat()}"
        windows = self._state.plan.windows or {}
        tools = windowed_tools(step, windows)
        return "; ".join(f"{tool} runs only in {' or '.join(windows[tool])}" for tool in tools) or "its time"
