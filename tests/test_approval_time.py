"""Time waiting for a person does not count against a step's timeout; a tool that hangs still times out.

A worker's call that needs a person's approval (a side-effecting tool the plan did not pre-approve) waits as long
as the person takes: approvals are documented as having no deadline. The step's clock stops while the approver
decides and starts again, with the time that was left, when it answers.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from planexec import Engine, EngineConfig, Plan, Registry, RoleWorker, tool
from planexec.engine.deadline import Deadline, DeadlineClock, paused
from planexec.testing import ScriptedModel, tool_call

STEP_TIMEOUT = 0.5
PERSON_TAKES = 1.5  # three times the step's timeout


@tool(requires_approval=True)
def book_hotel(hotel: str) -> str:
    """Book a hotel room (a side effect: a person approves each call)."""
    return f"booked {hotel}"


@tool(read_only=True)
async def wait_forever(seconds: float) -> str:
    """A tool that hangs."""
    await asyncio.sleep(seconds)
    return "done"


def slow_person(request) -> bool:
    """A person at a prompt who takes their time, then approves (a sync approver runs off the event loop)."""
    time.sleep(PERSON_TAKES)
    return True


def _run(answers, tools, approver=slow_person):
    registry = Registry()
    registry.add_worker(RoleWorker("coder", model=ScriptedModel(answers), description="d", system_prompt="s", tools=tools))
    step = {"id": "s", "worker": "coder", "action": "respond", "instruction": "book the hotel", "timeout": STEP_TIMEOUT}
    plan = Plan.from_data({"plan_id": "trip", "goal": "book a hotel", "steps": [step]})
    return Engine(registry, config=EngineConfig(call_approver=approver)).run_sync(plan)


def test_a_step_whose_call_waits_longer_than_its_timeout_for_a_person_succeeds():
    started = time.perf_counter()
    result = _run([tool_call("book_hotel", hotel="Bellevue"), "Booked the Bellevue."], [book_hotel])
    assert time.perf_counter() - started >= PERSON_TAKES  # the person did take longer than the step may
    record = result.steps["s"]
    assert record.state.value == "succeeded", record.error
    assert record.output.value == "Booked the Bellevue." and record.calls[0].ran and record.calls[0].decided_by == "slow_person"


def test_a_tool_that_hangs_still_times_out_and_so_does_one_that_hangs_after_an_approval():
    hangs = _run([tool_call("wait_forever", seconds=30), "never"], [wait_forever])
    assert hangs.steps["s"].error is not None and hangs.steps["s"].error.rule == "timeout"
    assert hangs.steps["s"].wall_time < 5
    started = time.perf_counter()
    after = _run([tool_call("book_hotel", hotel="Bellevue"), tool_call("wait_forever", seconds=30), "never"], [book_hotel, wait_forever])
    assert after.steps["s"].error is not None and after.steps["s"].error.rule == "timeout"
    assert PERSON_TAKES <= time.perf_counter() - started < PERSON_TAKES + 5  # the clock started again after the answer


@pytest.mark.parametrize("nested", [False, True])
def test_a_paused_deadline_fires_with_the_time_that_was_left(nested):
    async def main() -> tuple[float, float]:
        clock = DeadlineClock()
        started = asyncio.get_running_loop().time()
        deadline = Deadline(0.2, clock)
        try:
            await asyncio.sleep(0.1)
            with paused(deadline):
                if nested:
                    with paused(deadline):
                        await asyncio.sleep(0.3)
                else:
                    await asyncio.sleep(0.3)  # past the deadline's time, but paused: it does not fire
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            assert deadline.expired()
            return asyncio.get_running_loop().time() - started, deadline.paused
        finally:
            deadline.disarm()
        raise AssertionError("the deadline never fired")

    took, was_paused = asyncio.run(main())
    assert 0.3 <= was_paused < 0.45 and 0.5 <= took < 0.8
