"""Tools, a role and two scripted models for the routing example (``examples/routing``), all offline.

`register(registry)` adds two lookups over a tiny atlas and a density, the role
``analyst`` (it calls the tool its step names and answers with the result)
and two models of different sizes that play it, `planexec.eval.TierModel`s:
``test:cheap`` works 90% of easy steps and no hard one at $0.15 / $0.60 per
million tokens in / out; ``test:strong`` works every step at $2.50 /
$10.00. Which steps the cheap model fails is drawn once from a seed, the
same on every run. A step that names ``models: ["test:cheap", "test:strong"]``
is a cascade over them. ``planexec run --plan examples/routing/plan.json
--tools examples/routing/tools.py`` runs it; ``cascade.py`` beside it too,
and prints what each attempt cost.
"""

from __future__ import annotations

from planexec import Registry, RoleWorker, tool
from planexec.eval import TierModel

CITIES = {"Avalon": {"population": 84200, "area": 120}, "Brightwater": {"population": 100300, "area": 236}}


@tool(idempotent=True, read_only=True, untrusted_output=False)
def population(city: str) -> int:
    """The number of people living in a city."""
    return CITIES[city]["population"]


@tool(idempotent=True, read_only=True, untrusted_output=False)
def area(city: str) -> int:
    """The area of a city in square kilometres."""
    return CITIES[city]["area"]


@tool(idempotent=True, read_only=True, untrusted_output=False)
def density(people: list[int], areas: list[int]) -> float:
    """People per square kilometre over several cities together."""
    return round(sum(people) / sum(areas), 1)


def difficulty(task: str) -> str:
    """How hard a task is for the scripted models: the one that combines earlier results (density) is hard."""
    return "hard" if '"tool": "density"' in task else "easy"


def register(registry: Registry) -> None:
    """The lookups, the analyst and the two models a step may name."""
    cheap = TierModel(name="test:cheap", success={"easy": 0.9, "hard": 0.0}, difficulty=difficulty, price={"input": 0.15, "output": 0.60})
    strong = TierModel(name="test:strong", success={"easy": 1.0, "hard": 1.0}, difficulty=difficulty, price={"input": 2.5, "output": 10.0})
    tools = [population, area, density]
    for t in tools:
        registry.add_tool(t)
    registry.add_worker(
        RoleWorker(
            "analyst",
            model=cheap,
            description="Calls the tool its step names with the step's arguments and answers with the result.",
            system_prompt="Call the tool your task names with its arguments, then answer with its result only.",
            tools=tools,
            tasks=("lookup",),
            max_turns=3,
        )
    )
    registry.add_model(cheap)
    registry.add_model(strong)
