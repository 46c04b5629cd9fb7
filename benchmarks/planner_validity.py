"""How often the embedded local model writes a valid plan, and what a plan costs in tokens and time.

The planner (`planexec.planning.planner.Planner`, ``max_repairs=2``) drafts a plan
with the embedded SmolLM2-135M (`planexec.models.LocalModel`, seed 0,
temperature 0: the same drafts on every run) for each of 20 goals of five
kinds (single lookup, parallel lookups combined, multi-hop, arithmetic,
text assembly) over a catalog of six tools defined here: ``lookup(key)``,
``search(query)``, ``add(a, b)``, ``multiply(a, b)``, ``concat(parts,
separator)`` and ``write_note(text)``.

For each goal: valid on the first draft, valid after 1 or 2 repairs, or
failed (`PlanningError`; a `ModelError` such as a prompt grown past the
context window is counted apart, as an error); the prompt and output
tokens of every draft together; the wall time of `Planner.draft`; the
plan's steps; and whether the valid plan then runs (the tools are instant
and deterministic, so a failed run is the plan's fault: a text passed where
a number is expected, say), and whether it has at least the actions the goal
needs (two lookups and a concat to join two looked-up values: a valid plan
may do too little). The totals: valid first try, valid after
repair, failed, out of the goals; mean and median tokens per plan; mean
wall time; and which validation rules the rejected drafts broke.

Both draft shapes of `planexec.planning.draft_schema` are measured (``--modes``):
``positional=True`` (step ids s1, s2, ... fixed by the grammar, every draft
a DAG) and ``positional=False`` (the open shape). The report says which one
``Planner(LocalModel(), ...)`` picks by default.

Every call spends most of its time reading the planner prompt (~640
tokens with this catalog) before its first token; the model then writes at
some 5-40 tokens/s. A draft takes 7-15 s on an idle 2-CPU machine and
30-60 s when the CPUs are shared: the full run (20 goals x 2 modes) takes
5-30 minutes, ``--quick`` (5 goals, one of each kind) 2-10.

Run from the repository root (planexec installed, e.g. ``pip install -e .``)::

    python benchmarks/planner_validity.py --quick        # 5 goals, both modes
    python benchmarks/planner_validity.py                # 20 goals, both modes
    python benchmarks/planner_validity.py --modes true --json

Exit status 0 whatever the validity rate; 1 when the local model is not available.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from layered import machine, print_result

from planexec import Engine, Registry
from planexec.errors import ModelError, PlanningError, Problem
from planexec.models import LocalModel
from planexec.models.local import default_model_path
from planexec.planning.planner import Planner

# (kind, goal, the actions a plan for it needs at least): four of each kind; --quick takes the first of each kind
GOALS: list[tuple[str, str, dict[str, int]]] = [
    ("single lookup", "Look up the value stored under the key 'capital_of_france'.", {"lookup": 1}),
    ("single lookup", "Find the current price of gold with a web search.", {"search": 1}),
    ("single lookup", "Look up the key 'user_42_email'.", {"lookup": 1}),
    ("single lookup", "Search for the author of the novel Dune.", {"search": 1}),
    ("parallel+combine", "Look up the keys 'city_a' and 'city_b' and join the two values with ' and '.", {"lookup": 2, "concat": 1}),
    (
        "parallel+combine",
        "Search for the population of Norway and the population of Sweden, then put both results into one text.",
        {"search": 2, "concat": 1},
    ),
    (
        "parallel+combine",
        "Look up the keys 'first_name', 'last_name' and 'title', and join the three values with spaces.",
        {"lookup": 3, "concat": 1},
    ),
    (
        "parallel+combine",
        "Search for the weather in Paris, in London and in Rome, and combine the three results into one text.",
        {"search": 3, "concat": 1},
    ),
    (
        "multi-hop",
        "Look up the key 'manager_of_alice', then look up the value stored under the key that the first lookup returned.",
        {"lookup": 2},
    ),
    ("multi-hop", "Search for the director of the film Alien, then search for the films made by that director.", {"search": 2}),
    ("multi-hop", "Look up the key 'config_path', then search for the text it returns.", {"lookup": 1, "search": 1}),
    (
        "multi-hop",
        "Search for the capital of Australia, then search for the population of that city, then write a note with the result.",
        {"search": 2, "write_note": 1},
    ),
    ("arithmetic", "Add 17 and 25.", {"add": 1}),
    ("arithmetic", "Multiply 12 by 7, then add 5 to the result.", {"multiply": 1, "add": 1}),
    ("arithmetic", "Compute (3 + 4) * (5 + 6).", {"add": 2, "multiply": 1}),
    ("arithmetic", "Add 2.5 and 4, then multiply the sum by 10.", {"add": 1, "multiply": 1}),
    ("text assembly", "Write a note that says 'Meeting moved to 3pm'.", {"write_note": 1}),
    ("text assembly", "Join the words 'alpha', 'beta' and 'gamma' with commas.", {"concat": 1}),
    (
        "text assembly",
        "Search for the release year of Python 3.0, then write a note that contains the search result.",
        {"search": 1, "write_note": 1},
    ),
    (
        "text assembly",
        "Look up the keys 'greeting' and 'name', join the two values with a space, and save the result as a note.",
        {"lookup": 2, "concat": 1, "write_note": 1},
    ),
]
QUICK = [0, 4, 8, 12, 16]
MODES = ("true", "false")


def build_registry() -> Registry:
    """The catalog the planner reads: six instant, deterministic tools on the ``tool`` worker."""
    registry = Registry()

    @registry.tool
    async def lookup(key: str) -> str:
        """Look up the value stored under a key in the key-value store."""
        return f"value of {key}"

    @registry.tool
    async def search(query: str) -> str:
        """Search the web and return the best result as text."""
        return f"top result for {query}"

    @registry.tool
    async def add(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    @registry.tool
    async def multiply(a: float, b: float) -> float:
        """Multiply two numbers."""
        return a * b

    @registry.tool
    async def concat(parts: list[str], separator: str = " ") -> str:
        """Join texts with a separator."""
        return separator.join(parts)

    @registry.tool
    async def write_note(text: str) -> str:
        """Save a note and return its id."""
        return f"note-{len(text)}"

    return registry


class RecordingModel:
    """The model, with the finish reason of every reply kept (``"length"``: cut at max_tokens or the context window)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.finish_reasons: list[str | None] = []

    def __getattr__(self, name: str) -> Any:  # its capabilities, as the planner asks for them
        return getattr(self.inner, name)

    async def complete(self, request: Any) -> Any:
        """The inner model's reply, its finish reason noted."""
        response = await self.inner.complete(request)
        self.finish_reasons.append(response.finish_reason)
        return response


class RecordingPlanner(Planner):
    """A `Planner` that keeps the problems it found in every draft (`Planner.check` reads each one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[list[Problem]] = []

    def check(self, text: str, goal: str, plan_id: str) -> Any:
        """`Planner.check`, its problems kept in `seen`."""
        plan, problems = super().check(text, goal, plan_id)
        self.seen.append(list(problems))
        return plan, problems


@dataclass
class GoalResult:
    """What planning one goal gave."""

    index: int
    kind: str
    goal: str
    outcome: str  # "first try", "repaired", "failed", "error"
    attempts: int
    input_tokens: int
    output_tokens: int
    wall_s: float
    steps: int = 0
    actions: list[str] = field(default_factory=list)
    ran: str = ""
    covers: bool = False  # the plan has at least the actions the goal needs (a valid plan may still do too little)
    problems: list[list[str]] = field(default_factory=list)  # rules broken, per rejected draft
    cut: int = 0  # drafts that ended for length (max_tokens or the context window), not at the end of the JSON
    detail: str = ""
    text: str = ""

    @property
    def repairs(self) -> int:
        """Drafts sent back for repair."""
        return self.attempts - 1


async def plan_one(
    model: LocalModel, registry: Registry, index: int, kind: str, goal: str, args: argparse.Namespace, positional: bool
) -> GoalResult:
    """Draft one goal (with repair), then run the plan if it is valid."""
    recorder = RecordingModel(model)
    planner = RecordingPlanner(
        recorder, registry, max_steps=args.max_steps, max_repairs=args.max_repairs, max_tokens=args.max_tokens, positional=positional
    )
    t0 = time.perf_counter()
    try:
        planning = await planner.draft(goal)
    except PlanningError as exc:
        return GoalResult(
            index,
            kind,
            goal,
            "failed",
            exc.attempts,
            exc.usage.input_tokens,
            exc.usage.output_tokens,
            time.perf_counter() - t0,
            problems=[[p.rule for p in ps] for ps in planner.seen if ps],
            cut=recorder.finish_reasons.count("length"),
            detail="; ".join(p.render() for p in exc.problems)[:300],
            text=exc.last_text,
        )
    except ModelError as exc:
        return GoalResult(
            index,
            kind,
            goal,
            "error",
            len(planner.seen) + 1,
            0,
            0,
            time.perf_counter() - t0,
            problems=[[p.rule for p in ps] for ps in planner.seen if ps],
            cut=recorder.finish_reasons.count("length"),
            detail=f"{type(exc).__name__}: {exc}"[:300],
        )
    wall = time.perf_counter() - t0
    plan = planning.plan
    result = await Engine(registry, seed=0, default_timeout=10).run(plan)
    ran = result.status.value if result.ok else f"{result.status.value}: {(result.reason or '')[:120]}"
    return GoalResult(
        index,
        kind,
        goal,
        "first try" if planning.repairs == 0 else "repaired",
        len(planning.drafts),
        planning.usage.input_tokens,
        planning.usage.output_tokens,
        wall,
        steps=len(plan.steps),
        actions=[s.action for s in plan.steps],
        ran=ran,
        covers=not (Counter(GOALS[index - 1][2]) - Counter(s.action for s in plan.steps)),
        problems=[[p.rule for p in ps] for ps in planner.seen if ps],
        cut=recorder.finish_reasons.count("length"),
        text=planning.drafts[-1].text,
    )


def _mean(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summarise(results: list[GoalResult]) -> dict[str, Any]:
    """The totals of one mode."""
    n = len(results)
    by = Counter(r.outcome for r in results)
    total = [r.input_tokens + r.output_tokens for r in results if r.outcome != "error"]
    out = [r.output_tokens for r in results if r.outcome != "error"]
    valid = [r for r in results if r.outcome in ("first try", "repaired")]
    rules = Counter(rule for r in results for ps in r.problems for rule in set(ps))
    return {
        "goals": n,
        "valid_first_try": by["first try"],
        "valid_after_repair": by["repaired"],
        "repairs_of_repaired": [r.repairs for r in results if r.outcome == "repaired"],
        "failed": by["failed"],
        "errors": by["error"],
        "valid_plans_that_ran": sum(1 for r in valid if r.ran == "succeeded"),
        "valid_plans_that_cover_the_goal": sum(1 for r in valid if r.covers),
        "tokens_per_plan": {"mean": _mean(total), "median": _median(total)},
        "output_tokens_per_plan": {"mean": _mean(out), "median": _median(out)},
        "tokens_per_valid_plan": {
            "mean": _mean([r.input_tokens + r.output_tokens for r in valid]),
            "median": _median([r.input_tokens + r.output_tokens for r in valid]),
        },
        "drafts": sum(r.attempts for r in results),
        "drafts_cut_for_length": sum(r.cut for r in results),
        "wall_s": {
            "mean": _mean([r.wall_s for r in results]),
            "median": _median([r.wall_s for r in results]),
            "total": sum(r.wall_s for r in results),
        },
        "output_tokens_per_s": sum(r.output_tokens for r in results) / max(1e-9, sum(r.wall_s for r in results)),
        "rejected_draft_rules": dict(rules.most_common()),
        "steps_of_valid_plans": dict(sorted(Counter(r.steps for r in valid).items())),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"only {len(QUICK)} goals, one of each kind (a smoke check)")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated positional settings to measure: true, false (default both)")
    p.add_argument("--max-steps", type=int, default=6, help="the planner's max_steps (default 6)")
    p.add_argument("--max-repairs", type=int, default=2, help="the planner's max_repairs (default 2)")
    p.add_argument("--max-tokens", type=int, default=512, help="the planner's max_tokens per draft (default 512)")
    p.add_argument("--goals", default="", help="comma-separated goal numbers (1-20) instead of all or --quick")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = p.parse_args(argv)
    args.modes = [m.strip().lower() for m in args.modes.split(",") if m.strip()]
    if not args.modes or set(args.modes) - set(MODES):
        p.error("--modes takes true and/or false")
    if args.goals:
        args.indices = [int(g) - 1 for g in args.goals.split(",")]
        if any(not 0 <= i < len(GOALS) for i in args.indices):
            p.error(f"goal numbers run from 1 to {len(GOALS)}")
    else:
        args.indices = QUICK if args.quick else list(range(len(GOALS)))
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every figure, as the JSON object `--json` prints."""
    registry = build_registry()
    model = LocalModel()
    default_model_path()  # raises ModelError naming the package to install, before any goal, when the weights are missing
    default_positional = Planner(model, registry).positional
    r: dict[str, Any] = {
        "benchmark": "planner_validity",
        "machine": machine(),
        "config": {
            "model": model.name,
            "goals": [i + 1 for i in args.indices],
            "max_steps": args.max_steps,
            "max_repairs": args.max_repairs,
            "max_tokens": args.max_tokens,
            "n_ctx": model.n_ctx,
            "planner_default_positional": default_positional,
        },
        "modes": {},
    }
    for mode in args.modes:
        positional = mode == "true"

        async def go(positional: bool = positional) -> list[GoalResult]:
            out = []
            for i in args.indices:
                kind, goal, _ = GOALS[i]
                out.append(await plan_one(model, registry, i + 1, kind, goal, args, positional))
                print(f"  [positional={positional}] goal {i + 1}: {out[-1].outcome} ({out[-1].wall_s:.0f} s)", file=sys.stderr, flush=True)
            return out

        results = asyncio.run(go())
        r["modes"][f"positional={positional}"] = {"summary": summarise(results), "goals": [asdict(x) for x in results]}
    return r


def _num(x: float | None, fmt: str = ".0f") -> str:
    return format(x, fmt) if x is not None else "-"


def report(r: dict[str, Any]) -> str:
    """The human-readable tables."""
    c, m = r["config"], r["machine"]
    lines = [
        f"planner validity: {c['model']} (n_ctx {c['n_ctx']}), {len(c['goals'])} goals, max_steps {c['max_steps']}, "
        f"max_repairs {c['max_repairs']}, max_tokens {c['max_tokens']}; Python {m['python']}, {m['cpus']} CPUs, {m['date']}",
        f"Planner(LocalModel(), ...).positional by default: {c['planner_default_positional']}",
    ]
    for name, mode in r["modes"].items():
        s = mode["summary"]
        n = s["goals"]
        lines += [
            "",
            f"{name}",
            f"  {'#':>2} {'kind':<17}{'outcome':<13}{'drafts':>6}{'in tok':>8}{'out tok':>8}{'wall s':>8}{'steps':>6}  actions / run / covers the goal; or the last problem",
        ]
        for g in mode["goals"]:
            outcome = g["outcome"] if g["outcome"] != "repaired" else f"repaired x{g['attempts'] - 1}"
            tail = f"{','.join(g['actions'])} / {g['ran']} / {'yes' if g['covers'] else 'NO'}" if g["actions"] else g["detail"][:110]
            if g["cut"]:
                tail = f"[{g['cut']} cut for length] {tail}"
            lines.append(
                f"  {g['index']:>2} {g['kind']:<17}{outcome:<13}{g['attempts']:>6}{g['input_tokens']:>8}{g['output_tokens']:>8}"
                f"{g['wall_s']:>8.1f}{g['steps'] or '-':>6}  {tail}"
            )
        t, o, w = s["tokens_per_plan"], s["output_tokens_per_plan"], s["wall_s"]
        repairs = Counter(s["repairs_of_repaired"])
        lines += [
            f"  valid first try {s['valid_first_try']}/{n}; valid after repair {s['valid_after_repair']}/{n}"
            + (" (" + ", ".join(f"{k} repair{'s' if k > 1 else ''}: {v}" for k, v in sorted(repairs.items())) + ")" if repairs else "")
            + f"; failed {s['failed']}/{n}"
            + (f"; model errors {s['errors']}/{n}" if s["errors"] else ""),
            f"  of the valid plans: {s['valid_plans_that_ran']}/{s['valid_first_try'] + s['valid_after_repair']} ran to success, "
            f"{s['valid_plans_that_cover_the_goal']}/{s['valid_first_try'] + s['valid_after_repair']} have every action the goal needs "
            f"(validity is not adequacy); steps of valid plans: {s['steps_of_valid_plans']}",
            f"  tokens per plan (every draft, prompt + output): mean {_num(t['mean'])}, median {_num(t['median'])}; "
            f"output only: mean {_num(o['mean'])}, median {_num(o['median'])}; {s['drafts']} drafts in all",
            f"  wall time per goal: mean {_num(w['mean'], '.1f')} s, median {_num(w['median'], '.1f')} s, total {w['total']:.0f} s; "
            f"{s['output_tokens_per_s']:.1f} output tokens/s overall (prompt reading included)",
            f"  rules broken by rejected drafts (drafts per rule): {s['rejected_draft_rules'] or 'none'}; "
            f"drafts cut for length (finish_reason 'length': max_tokens or n_ctx reached): {s['drafts_cut_for_length']}",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the tables, or JSON with `--json`."""
    args = parse_args(argv)
    try:
        result = measure(args)
    except ModelError as exc:
        print(f"the local model is not available: {exc}", file=sys.stderr)
        return 1
    print_result(result, report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
