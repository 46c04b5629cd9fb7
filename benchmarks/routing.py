"""Worker models routed by difficulty: always the strong model, always the cheap one, a cascade, and routers.

Every goal of the evaluation suites (`examples/eval/*.yaml`: parallel,
multihop, repeated) becomes a plan of one role step per call of its
reference solution: the role ``analyst`` (a `RoleWorker` with the suite's
tools) is told which tool to call (``{"tool": ..., "arguments": ...}``, the
arguments referencing earlier steps as ``${id}``), and its model calls it
and answers with the result; the last step is the plan's answer, which the
suite's checker judges. Each step requires a non-empty answer
(``not_empty``). Two scripted models play the role
(`planexec.eval.oracle.TierModel`): ``test:cheap`` succeeds on an easy step
with probability ``--easy`` and on a hard one with ``--hard``;
``test:strong`` succeeds with ``--strong``. Whether a model works a given
step is drawn once from a hash of ``--seed``, the model's name and the
step's task, so every strategy meets the same luck. A model that fails
gives up (an empty answer, caught by ``not_empty``), or, for a ``--wrong``
share of its failures, answers a wrong value that nothing but the goal's
checker catches. Prices are per million tokens (``--cheap-price``,
``--strong-price``: input,output), applied by the same `ManagedModel` and
`PriceTable` that price real models; tokens are
`planexec.testing.count_tokens` (words) of every message sent and received.

A step is hard (``--hard-steps``): ``combine`` (default), when it combines
two or more earlier results (the arithmetic over lookups); ``depends``,
when it takes any earlier result (every hop after the first too). The
plans declare each step's true difficulty (`Step.difficulty`), so the
difficulty router is told the truth; the learned router is not told
anything it does not learn.

The strategies, each a real run of the engine per goal:

* ``always-strong``: every step names ``[test:strong]``;
* ``always-cheap``: ``[test:cheap]``;
* ``cascade``: ``[test:cheap, test:strong]``, every step starting on the
  cheap model (`FirstModel`) and moving to the strong one when it fails;
* ``router: difficulty``: the cascade, a step declared hard starting on the
  strong model (`ByDifficulty`, the default router);
* ``router: learned``: the cascade with a `LearnedRouter` over a SQLite
  store of this strategy's own runs (it starts empty and learns as the goals
  go by: its exploration is counted), per worker and declared difficulty.

Printed: one table, success and cost per goal for each strategy, and
whether the cascade met the issue's target (at least 2x lower cost than
always-strong, success within 1 point of it). What this measures: the
engine's cascade and routers on real runs, under the stated success
probabilities and prices; not whether a real small model finds these
steps hard, nor how often a real model's failure is detectable (that is
``--wrong``: a confident wrong answer passes every step check, so a cascade
cannot catch it).

Run from the repository root (planexec installed, e.g. ``pip install -e .``)::

    python benchmarks/routing.py
    python benchmarks/routing.py --hard-steps depends --wrong 0.2
    python benchmarks/routing.py --goals 3 --json

Exit status 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from layered import machine

from planexec import Engine, Plan, RoleWorker
from planexec.engine.cascade import ByDifficulty, FirstModel, FirstOf, ModelRouter
from planexec.eval.oracle import TierModel
from planexec.eval.suite import GoalCase, Suite, load_suite
from planexec.governance.routing import LearnedRouter
from planexec.models.managed import ManagedModel
from planexec.models.pricing import PriceTable
from planexec.store import open_store

ROOT = Path(__file__).resolve().parent.parent
SUITES = tuple(sorted((ROOT / "examples" / "eval").glob("*.yaml")))
CHEAP, STRONG = "test:cheap", "test:strong"
STRATEGIES = ("always-strong", "always-cheap", "cascade", "router: difficulty", "router: learned")


@dataclass
class Tally:
    """One strategy's figures over every goal."""

    goals: int = 0
    ok: int = 0
    cost: float = 0.0
    calls: int = 0
    strong_calls: int = 0
    escalations: int = 0
    failed_steps: int = 0
    wall: float = 0.0
    misses: list[str] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        n = self.goals or 1
        return {
            "goals": self.goals,
            "succeeded": self.ok,
            "success_rate": self.ok / n,
            "cost_per_goal": self.cost / n,
            "model_calls_per_goal": self.calls / n,
            "strong_calls_per_goal": self.strong_calls / n,
            "escalations_per_goal": self.escalations / n,
            "failed_steps": self.failed_steps,
            "wall_time_s": round(self.wall, 2),
            "missed": self.misses,
        }


def hard(case: GoalCase, index: int, rule: str) -> bool:
    """Whether call `index` of a goal's solution is hard under `rule` (see the module docstring)."""
    refs = case.solution[index].references
    return len(refs) >= 2 if rule == "combine" else bool(refs)


def instruction(case: GoalCase, index: int) -> str:
    call = case.solution[index]
    return f"{case.goal_id}/{call.call_id}: call {call.tool} and answer with its result"


def goal_plan(case: GoalCase, models: list[str], rule: str) -> Plan:
    """The goal as one analyst step per solution call, each declaring its true difficulty and naming `models`."""
    steps = [
        {
            "id": call.call_id,
            "worker": "analyst",
            "action": "lookup",
            "instruction": instruction(case, i),
            "parameters": {"tool": call.tool, "arguments": call.args},
            "depends_on": call.references,
            "models": models,
            "difficulty": "hard" if hard(case, i, rule) else "easy",
            "success_criteria": ["not_empty"],
        }
        for i, call in enumerate(case.solution)
    ]
    return Plan.model_validate({"plan_id": case.goal_id, "goal": case.goal, "steps": steps, "answer_step": steps[-1]["id"]})


def models(args: argparse.Namespace, truth: dict[str, str]) -> tuple[ManagedModel, ManagedModel]:
    """The two priced scripted models; `truth` maps a step's instruction to its difficulty (what the task is)."""

    def difficulty(task: str) -> str:
        line = next((ln for ln in task.splitlines() if ln.startswith("Your task")), "")
        return truth.get(line.split(": ", 1)[-1], "easy")

    prices = PriceTable({CHEAP: _price(args.cheap_price), STRONG: _price(args.strong_price)})
    cheap = TierModel(name=CHEAP, success={"easy": args.easy, "hard": args.hard}, difficulty=difficulty, seed=args.seed, wrong=args.wrong)
    strong = TierModel(
        name=STRONG, success={"easy": args.strong, "hard": args.strong}, difficulty=difficulty, seed=args.seed, wrong=args.wrong
    )
    return ManagedModel(cheap, retries=0, prices=prices), ManagedModel(strong, retries=0, prices=prices)


def _price(text: str) -> dict[str, float]:
    given, taken = text.split(",")
    return {"input": float(given), "output": float(taken)}


async def run_strategy(name: str, suites: list[tuple[Suite, list[GoalCase]]], args: argparse.Namespace, truth: dict[str, str]) -> Tally:
    """Every goal of every suite under one strategy, each goal a run of the engine."""
    cheap, strong = models(args, truth)
    chain = {"always-strong": [STRONG], "always-cheap": [CHEAP]}.get(name, [CHEAP, STRONG])
    tally = Tally()
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(str(Path(folder) / "runs.db")) if name == "router: learned" else None
        router: ModelRouter = FirstModel()
        if name == "router: difficulty":
            router = FirstOf([ByDifficulty()])
        elif store is not None:
            router = FirstOf([LearnedRouter(store, threshold=args.threshold, min_attempts=args.min_attempts, max_age=0.0)])
        t0 = time.perf_counter()
        for suite, cases in suites:
            registry = suite.registry()
            analyst = RoleWorker(
                "analyst",
                model=cheap,
                description="calls the tool a step names and answers with its result",
                system_prompt="Call the tool your task names with its arguments, then answer with its result only.",
                tools=list(registry.tools.values()),
                tasks=("lookup",),
                max_turns=3,
            )
            registry.add_worker(analyst)
            registry.add_model(cheap)
            registry.add_model(strong)
            engine = Engine(registry, store=store, model_router=router, seed=args.seed)
            for case in cases:
                result = await engine.run(goal_plan(case, chain, args.hard_steps))
                ok = result.ok and case.checker.check(result.answer, case)[0]
                tally.goals += 1
                tally.ok += ok
                tally.cost += result.usage.cost
                tally.calls += result.usage.model_calls
                for rec in result.steps.values():
                    tally.strong_calls += sum(a.usage.model_calls for a in rec.model_attempts if a.model == STRONG)
                    tally.escalations += sum(a.then == "escalate" for a in rec.model_attempts)
                    tally.failed_steps += rec.state.value != "succeeded"
                if not ok:
                    tally.misses.append(f"{suite.name}/{case.goal_id}")
        tally.wall = time.perf_counter() - t0
        if store is not None:
            store.close()
    return tally


def main(argv: list[str] | None = None) -> int:
    """Run every strategy over the suites and print one table (or one JSON object with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--easy", type=float, default=0.9, help="the cheap model's success on an easy step (default 0.9)")
    parser.add_argument("--hard", type=float, default=0.0, help="the cheap model's success on a hard step (default 0)")
    parser.add_argument("--strong", type=float, default=1.0, help="the strong model's success on any step (default 1)")
    parser.add_argument("--wrong", type=float, default=0.0, help="the share of failures that answer wrong instead of giving up (default 0)")
    parser.add_argument("--cheap-price", default="0.15,0.60", metavar="IN,OUT", help="US dollars per 1M tokens (default 0.15,0.60)")
    parser.add_argument("--strong-price", default="2.50,10.00", metavar="IN,OUT", help="US dollars per 1M tokens (default 2.50,10.00)")
    parser.add_argument("--hard-steps", choices=("combine", "depends"), default="combine", help="which steps are hard (default combine)")
    parser.add_argument("--threshold", type=float, default=0.5, help="the learned router's success rate to keep a model (default 0.5)")
    parser.add_argument("--min-attempts", type=int, default=5, help="attempts before the learned router judges a model (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="the draws of which steps each model fails (default 0)")
    parser.add_argument("--goals", type=int, default=None, metavar="N", help="only the first N goals of each suite")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when the cascade misses the target (CI: cost and success are seeded, not timed)"
    )
    args = parser.parse_args(argv)
    os.environ["PLANEXEC_EVAL_LATENCY"] = "0"  # the lookups' sleeps measure nothing here

    suites = [(s, s.goals[: args.goals] if args.goals else s.goals) for s in map(load_suite, SUITES)]
    truth = {
        instruction(case, i): "hard" if hard(case, i, args.hard_steps) else "easy"
        for _, cases in suites
        for case in cases
        for i in range(len(case.solution))
    }
    steps = len(truth)
    hard_share = sum(d == "hard" for d in truth.values()) / steps
    tallies = {name: asyncio.run(run_strategy(name, suites, args, truth)) for name in STRATEGIES}
    rows = {name: t.row() for name, t in tallies.items()}
    base = rows["always-strong"]
    for row in rows.values():
        row["cost_vs_always_strong"] = base["cost_per_goal"] / row["cost_per_goal"] if row["cost_per_goal"] else None
    cascade = rows["cascade"]
    ratio = cascade["cost_vs_always_strong"] or 0.0
    gap = (base["success_rate"] - cascade["success_rate"]) * 100
    met = ratio >= 2 and gap <= 1
    result = {
        "machine": machine(),
        "suites": [s.name for s, _ in suites],
        "goals": tallies["cascade"].goals,
        "steps": steps,
        "hard_steps": args.hard_steps,
        "hard_share": hard_share,
        "settings": {k: v for k, v in vars(args).items() if k not in ("json", "check")},
        "strategies": rows,
        "target": {"cost_ratio": ratio, "success_gap_points": gap, "met": met},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 1 if args.check and not met else 0
    names = ", ".join(s.name for s, _ in suites)
    print(
        f"# Worker models routed by difficulty: {result['goals']} goals ({names}), {steps} steps, {hard_share:.0%} hard ({args.hard_steps})"
    )
    print(
        f"cheap: {args.easy:.0%} of easy steps, {args.hard:.0%} of hard ones, ${args.cheap_price.replace(',', ' / $')} per 1M tokens in/out; "
        f"strong: {args.strong:.0%}, ${args.strong_price.replace(',', ' / $')}; failures answering wrong: {args.wrong:.0%}; seed {args.seed}\n"
    )
    print(
        "| strategy | success | cost per goal | always-strong's cost ÷ this | model calls per goal | strong-model calls per goal | escalations per goal | failed steps |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, row in rows.items():
        times = f"{row['cost_vs_always_strong']:.2f}x" if row["cost_vs_always_strong"] else "n/a"
        print(
            f"| {name} | {row['succeeded']}/{row['goals']} ({row['success_rate']:.1%}) | ${row['cost_per_goal']:.6f} | {times} "
            f"| {row['model_calls_per_goal']:.2f} | {row['strong_calls_per_goal']:.2f} | {row['escalations_per_goal']:.2f} | {row['failed_steps']} |"
        )
    print(
        f"\ncascade: {ratio:.2f}x lower cost than always-strong, success {cascade['success_rate']:.1%} against "
        f"{base['success_rate']:.1%} (target: at least 2x, within 1 point): {'met' if met else 'NOT met'}"
    )
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
