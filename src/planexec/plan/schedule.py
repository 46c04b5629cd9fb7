"""When a step may start: its own time (`Step.not_before`) and the windows (`plan.windows`) of the tools it names.

Owns `windowed_tools` (the tools of a step a window can hold: its action,
or the tools its grants name), `due` (the earliest time a step may start at
or after a given moment; None when it may start then), `never_together`
(the tools of a step whose windows never open at once: validation refuses
it) and `earlier_times` (what a revision's steps would run sooner than the
version it revises allowed: a replan may not drop a person's time). Pure:
no clock is read here; the engine passes the time in. Imports `plan.model`
and `plan.windows`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from planexec.plan.model import Plan, Step
from planexec.plan.windows import Window

__all__ = ["due", "earlier_times", "never_together", "windowed_tools"]


def windowed_tools(step: Step, windows: Mapping[str, Any]) -> list[str]:
    """The tools of `windows` that `step` calls: its action (a tool step, or a role's action of that name), or one its grants name."""
    if not windows:
        return []
    named = [step.action]
    if step.capabilities:
        named += [g.tool for g in step.capabilities]
    return [t for t in dict.fromkeys(named) if t in windows]


def due(step: Step, windows: Mapping[str, list[Window]], at: datetime) -> datetime | None:
    """When `step` may start, at or after `at`: its `not_before`, then moved into a window of every windowed tool it names.

    None when it may start at `at`. A step naming two windowed tools waits
    until both are open (searched a week ahead of each candidate; windows
    that never overlap give the first opening of the first window, and the
    caller finds it closed again: `due` is asked each time the step may go;
    validation refuses such a step, `never_together`).
    """
    t = at
    if step.not_before is not None and step.not_before > t:
        t = step.not_before
    t = _together(windowed_tools(step, windows), windows, t)  # each round moves t to the next opening of a closed window
    return None if t <= at else t


def never_together(step: Step, windows: Mapping[str, list[Window]]) -> list[str]:
    """The windowed tools `step` names when their windows are never open at once (in a year from 2024): it could never
    start; empty when they meet (or it names fewer than two)."""
    tools = windowed_tools(step, windows)
    if len(tools) < 2:
        return []
    t, end = datetime(2024, 1, 1, tzinfo=UTC), datetime(2025, 1, 8, tzinfo=UTC)
    bare = {tool: windows[tool] for tool in tools}
    while t < end:
        if all(any(w.contains(t) for w in bare[tool]) for tool in tools):
            return []
        nxt = _together(tools, bare, t)
        t = nxt if nxt > t else t + timedelta(minutes=1)
    return tools


def _together(tools: list[str], windows: Mapping[str, list[Window]], at: datetime) -> datetime:
    """`due`'s search without a step's own time: the next moment at or after `at` when its rounds stop."""
    t = at
    for _ in range(16):
        moved = False
        for tool in tools:
            opening = min(w.next_open(t) for w in windows[tool])
            if opening > t:
                t, moved = opening, True
        if not moved:
            break
    return t


def earlier_times(old: Plan, new: Plan, steps: Iterable[str]) -> list[str]:
    """The `steps` of `new` (a revision's added or changed ones) that may start sooner than `old` let the same work start.

    The same work is a step of `old` with a `not_before` that has the same
    id, or names a tool (or role) the new step names too: its action or a
    tool its grants name (so renaming the step, or moving the grant to
    another role, keeps the time). Its `not_before` stands unless the revision
    keeps it or a later one. (A revision keeps the plan's windows:
    `revised_plan` copies them.) One line per step, for a person to approve.
    """
    waiting = [s for s in old.steps if s.not_before is not None]
    if not waiting:
        return []
    out = []
    for sid in steps:
        step = next((s for s in new.steps if s.step_id == sid), None)
        if step is None:
            continue
        names = _named(step)
        before = [s.not_before for s in waiting if (s.step_id == sid or names & _named(s)) and s.not_before is not None]
        if not before:
            continue
        bound = max(before)
        if step.not_before is None or step.not_before < bound:
            was = step.not_before.isoformat() if step.not_before is not None else "none"
            out.append(f"step {sid!r} ({step.action}) may start before {bound.isoformat()}, the time v{old.version} gave it (now: {was})")
    return out


def _named(step: Step) -> set[str]:
    """The tools (or role) a step names: its action and the tools its grants name."""
    return {step.action, *(g.tool for g in step.capabilities or ())}
