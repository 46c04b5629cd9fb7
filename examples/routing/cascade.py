"""A cascade of two models on each step, offline: which model each attempt ran on, what it cost, and why it moved on.

Runs ``plan.json`` (five analyst steps; each names ``models: ["test:cheap",
"test:strong"]``, the last is declared hard) on the scripted models of
``tools.py`` twice: every step starting on the cheap model (`FirstModel`),
then with the default router (`ByDifficulty`: the hard step starts on the
strong model). Run it from anywhere: ``python examples/routing/cascade.py``.
"""

from __future__ import annotations

from pathlib import Path

from planexec import Engine, Plan, Registry
from planexec.policies import ByDifficulty, FirstModel, FirstOf, ModelRouter

HERE = Path(__file__).resolve().parent


def run(router: ModelRouter) -> None:
    """The plan once, with `router` picking each step's first model; a line per attempt."""
    registry = Registry.default(str(HERE / "tools.py"))
    plan = Plan.from_json((HERE / "plan.json").read_text(encoding="utf-8"))
    result = Engine(registry, model_router=router).run_sync(plan)
    print(f"router {router.name}: {result.status.value}, answer {result.answer}, ${result.usage.cost:.6f}")
    for sid, rec in result.steps.items():
        for a in rec.model_attempts:
            end = "succeeded" if a.error is None else f"{a.error.rule} → {a.then}"
            print(f"  {sid} attempt {a.attempt} on {a.model}: ${a.usage.cost:.6f}, {end}")


if __name__ == "__main__":
    run(FirstModel())
    run(FirstOf([ByDifficulty()]))
