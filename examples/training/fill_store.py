"""Fill a run store with the kinds of run that training data is made of, offline, on scripted models.

    python examples/training/fill_store.py demo.db
    planexec export training training-data --store demo.db --holdout 0.25

Four goals run through `Team` on a scripted planner (`planexec.testing.ScriptedModel`), each leaving what a real
planner leaves in the store:

* "What is 17 plus 25?": the planner's first draft names a tool that does not exist; it is sent back and repaired;
* "Add twenty and twenty-two": a person edits the plan in review before it runs;
* "Read the meter and add one": the meter is down on the first read, the step asks for a replan, the new version runs;
* "Read the meter twice": the meter is down again and the run aborts (the default filter leaves it out).

With a real planner, the same runs come from `planexec run GOAL` (or the console, or a worker): every run records what
its planner was asked and wrote.
"""

from __future__ import annotations

import asyncio
import json
import sys

from planexec import Plan, ReviewOptions, Team, Tool
from planexec.governance.review import ReviewOutcome
from planexec.models.providers import register_provider
from planexec.store import open_store
from planexec.team.settings import PlanningOptions
from planexec.testing import ScriptedModel

_meter_reads: list[str] = []


def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


def read_meter(meter: str) -> int:
    """Read a meter (the service is down on every other read)."""
    _meter_reads.append(meter)
    if len(_meter_reads) % 2 == 1:
        raise RuntimeError("the meter service is down")
    return 7


TOOLS = [Tool(add, untrusted_output=False, read_only=True), Tool(read_meter, untrusted_output=False, read_only=True)]


def step(sid: str, action: str, parameters: dict, after: tuple[str, ...] = (), **more: object) -> dict:
    return {"id": sid, "worker": "tool", "action": action, "instruction": f"{action} {json.dumps(parameters)}",
            "parameters": parameters, "depends_on": list(after), **more}  # fmt: skip


def plan(*steps: dict) -> str:
    return json.dumps({"steps": list(steps), "answer_step": steps[-1]["id"]})


def edit(proposed: Plan, review: object) -> ReviewOutcome:
    """The person: the planner added the wrong numbers; they change them and approve."""
    first = proposed.steps[0].model_copy(update={"parameters": {"a": 20, "b": 22}})
    return ReviewOutcome(
        decision="approve", by="person", reason="20 and 22", plan=proposed.model_copy(update={"steps": [first]}), edited=True
    )


def main(store_path: str) -> int:
    store = open_store(store_path)
    goals = [
        ("What is 17 plus 25?", [plan(step("s1", "multiply", {"a": 17, "b": 25})), plan(step("s1", "add", {"a": 17, "b": 25}))], None),
        ("Add twenty and twenty-two", [plan(step("s1", "add", {"a": 2, "b": 22}))], edit),
        (
            "Read the meter and add one",
            [
                plan(
                    step("s1", "read_meter", {"meter": "m1"}, failure_action="replan"), step("s2", "add", {"a": "${s1}", "b": 1}, ("s1",))
                ),
                plan(step("s3", "read_meter", {"meter": "m1"}), step("s4", "add", {"a": "${s3}", "b": 1}, ("s3",))),
            ],
            None,
        ),
        ("Read the meter twice", [plan(step("s1", "read_meter", {"meter": "m2"}))], None),
    ]
    for goal, answers, reviewer in goals:
        register_provider("script", lambda model, options, answers=answers: ScriptedModel(answers, name=f"script:{model}"), replace=True)
        team = Team(
            "script:planner", tools=TOOLS, mode="plan", store=store, planning=PlanningOptions(routing="planner", reuse=False),
            review=ReviewOptions(auto_approve=True, reviewer=reviewer),
        )  # fmt: skip
        result = asyncio.run(team.run(goal))
        print(f"{result.status.value:<9} {goal!r}: {result.answer!r} ({result.run_id})")
    store.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/training/fill_store.py STORE.db")
    sys.exit(main(sys.argv[1]))
