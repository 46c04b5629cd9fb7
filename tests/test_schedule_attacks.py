"""Attacks on scheduled steps and maintenance windows (issue 27): each test failed before the fix it names."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from planexec import Engine, Plan, Registry, RunStatus, StepState
from planexec.testing import ManualClock
from planexec.workers.tools import Tool

OPEN = datetime(2026, 12, 5, 7, 0, tzinfo=UTC)  # Saturday 02:00 in New York: the window below opens
WINDOW = {"deploy": "Sat 02:00-04:00 America/New_York"}


def mkplan(*steps: dict, windows: dict | None = None) -> Plan:
    data: dict = {"plan_id": "p", "goal": "g", "steps": list(steps)}
    if windows:
        data["windows"] = windows
    return Plan.from_data(data)


def sync(fn):
    """Run an async test in its own event loop (the suite has no asyncio plugin)."""

    def test(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    test.__name__ = fn.__name__
    return test


async def wait_for(predicate, *, limit: float = 5.0) -> None:
    for _ in range(int(limit / 0.005)):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


# --- the engine: every attempt starts inside the window ---------------------------------------------


@sync
async def test_a_retry_after_the_window_closed_waits_for_the_next_window() -> None:
    """Found: the time was checked once, before the first attempt; a retry (after a backoff) ran outside the window."""
    clock = ManualClock(OPEN + timedelta(minutes=119))  # a minute before the window closes
    calls: list[datetime] = []

    async def deploy(args=None):
        calls.append(clock.now())
        if len(calls) == 1:
            clock.advance(minutes=5)  # the first attempt takes five minutes, then fails: the window has closed
            raise RuntimeError("flaky")
        return "deployed"

    reg = Registry()
    reg.add_tool(Tool(deploy, name="deploy"))
    plan = mkplan({"id": "d", "action": "deploy", "failure_action": {"kind": "retry", "backoff": 0.01, "max_attempts": 2}}, windows=WINDOW)
    run = Engine(reg, clock=clock).start(plan)
    await wait_for(lambda: run.records["d"].state is StepState.SCHEDULED and clock.sleepers == 1)
    await asyncio.sleep(0.05)
    assert len(calls) == 1  # the retry waits
    assert run.records["d"].due == OPEN + timedelta(days=7)
    clock.set(OPEN + timedelta(days=7))
    result = await run.result()
    assert result.status is RunStatus.SUCCEEDED and calls[1] == OPEN + timedelta(days=7)
    assert result.steps["d"].attempts == 2


@sync
async def test_a_step_that_waited_for_a_slot_past_its_window_waits_for_the_next_window() -> None:
    """Found: a step in its window that waited for a slot (max_concurrency) started when the slot freed, after the window closed."""
    clock = ManualClock(OPEN + timedelta(minutes=119))
    release = asyncio.Event()
    calls: list[datetime] = []

    async def long(args=None):
        await release.wait()
        return 1

    async def deploy(args=None):
        calls.append(clock.now())
        return 2

    reg = Registry()
    reg.add_tool(Tool(long, name="long"))
    reg.add_tool(Tool(deploy, name="deploy"))
    plan = mkplan({"id": "l", "action": "long"}, {"id": "d", "action": "deploy"}, windows=WINDOW)
    run = Engine(reg, clock=clock, max_concurrency=1).start(plan)
    await wait_for(lambda: run.records["l"].state is StepState.RUNNING and run.records["d"].state is StepState.READY)
    clock.advance(minutes=5)  # the window closes while the deploy waits for the slot
    release.set()
    await wait_for(lambda: run.records["d"].state is StepState.SCHEDULED and clock.sleepers == 1)
    assert not calls and run.records["d"].due == OPEN + timedelta(days=7)
    clock.set(OPEN + timedelta(days=7, minutes=1))
    result = await run.result()
    assert result.status is RunStatus.SUCCEEDED and calls == [OPEN + timedelta(days=7, minutes=1)]
