"""Plan reuse (agentic plan caching): cold planning against plans reused from learned templates, on repeated goals.

`examples/eval/repeated.yaml` holds eight goals of eight shapes to learn
from (ids ``learn-*``) and sixteen goals that differ from them only in their
values. For each model setup, in a fresh SQLite store:

1. **warm-up**: each ``learn-*`` goal is planned from scratch and run; every
   run that succeeds becomes a template (`planexec.library.learning.learn_template`:
   the goal's values are its parameters);
2. **cold**: each repeated goal planned from scratch (``Team(planning=PlanningOptions(reuse=False))``);
3. **reuse, rules**: ``PlanningOptions(reuse=["rules"])``: a goal that fits a template's
   goal gets its plan filled in, no model call (the default ``reuse=True``
   does the same when a rule fits);
4. **reuse, model**: ``PlanningOptions(reuse=["model"])``: the rules are off, so the
   workers' model is shown the goal and the three closest templates and
   answers a template and its values (one short call).

Every run is ``Team.run(goal, mode="plan")`` with the evaluation harness's
settings (up to 2 replans, the model joiner unless the model's grammar cannot
take it or ``--no-joiner`` says none, every plan approved), recorded in the store; its wall time runs from
the start of planning to the result; its usage counts every model call
(planner, template choice, joiner, replans). Dollars are the tokens at
``--price``'s rates (the oracle itself is free). Success is the suite's
checker (`planexec.eval.harness.score`).

Setups (``--models``):

* ``oracle``: `planexec.eval.oracle.OracleModel` plays every role from each
  goal's reference solution, behind the latency model of
  ``react_vs_plan.py`` (``--overhead`` + ``--per-input-token`` x input +
  ``--per-output-token`` x output seconds per call); the lookups sleep
  their 50-300 ms;
* ``local``: the embedded SmolLM2-135M (``local:smollm2``) really plans,
  chooses and joins, on this machine's CPUs. Templates are learned from its
  own successful warm-up runs; ``--learn-with oracle`` learns them from the
  oracle's plans instead (a strong planner having run the goals before).

Printed per setup: the warm-up (templates learned), each mode's totals and
the ratios reuse / cold, with the targets of issue 13 (cost <= 50% and wall
<= 70% of cold planning, success >= 95% of cold's) and the anchor (Agentic
Plan Caching, 2025: -50% cost, -27% latency at 96.6% of the performance).
A setup that learned no template runs cold planning only: there is nothing
to reuse.

Run from the repository root (planexec installed)::

    python benchmarks/plan_reuse.py                        # the oracle: ~1 min
    python benchmarks/plan_reuse.py --models local         # SmolLM2: 15-30 min on 2 busy CPUs
    python benchmarks/plan_reuse.py --models local --learn-with oracle --json

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from layered import machine

from planexec.config import Config
from planexec.engine.config import EngineConfig
from planexec.errors import ModelError, PlanningError
from planexec.eval.harness import score, scripted_models
from planexec.eval.oracle import LatencyModel
from planexec.eval.suite import GoalCase, Suite, load_suite
from planexec.library.learning import learn_template
from planexec.models.base import Model
from planexec.models.pricing import PriceTable
from planexec.models.settings import ModelSettings
from planexec.planning.joiner import joiner_note
from planexec.store import open_store
from planexec.store.base import RunStore
from planexec.team.settings import PlanningOptions, ReviewOptions, Toolbox
from planexec.team.team import Team
from planexec.usage import Usage
from planexec.workers.registry import Registry

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "examples" / "eval" / "repeated.yaml"
MODES = {"cold": False, "reuse (rules)": ["rules"], "reuse (model)": ["model"]}
TARGETS = {"cost": 0.50, "wall": 0.70, "success": 0.95}
ANCHOR = "Agentic Plan Caching (2025): -50% cost, -27% latency, 96.6% of the performance"
RUN_TIMEOUT = 900.0


def _always(model: Model) -> Callable[[GoalCase], Model]:
    """The same model for every goal (the embedded one, loaded once)."""
    return lambda case: model


def _team(model: Model, registry: Registry, store: RunStore, reuse: Any, joiner: bool) -> Team:
    """A team with the evaluation harness's settings (`eval.harness.team_for`), recording into `store`; `joiner` False: none."""
    return Team(
        model,
        seed=0,
        store=store,
        toolbox=Toolbox(registry=registry),
        engine=EngineConfig(max_replans=2, default_timeout=300.0),
        planning=PlanningOptions(joiner=joiner and joiner_note(model) is None, reuse=reuse),
        review=ReviewOptions(auto_approve=True),
    )


def _run(case: GoalCase, model: Model, registry: Registry, store: RunStore, reuse: Any, joiner: bool) -> dict[str, Any]:
    """Run one goal in a fresh event loop; its figures (never raises for what the run did)."""

    async def go() -> dict[str, Any]:
        team = _team(model, registry, store, reuse, joiner)
        t0 = time.perf_counter()
        try:
            async with asyncio.timeout(RUN_TIMEOUT):
                result = await team.run(case.goal, mode="plan")
        except (PlanningError, ModelError, TimeoutError) as exc:
            used = getattr(exc, "usage", None)
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return {
                "success": False,
                "reason": why,
                "usage": used if isinstance(used, Usage) else Usage(),
                "wall": time.perf_counter() - t0,
            }
        ok, stage, reason = score(case, result)
        reused = next((e.setup.get("reuse") for e in store.events(result.run_id) if getattr(e, "type", "") == "run_started"), None)
        return {
            "success": ok,
            "reason": f"{stage}: {reason}" if stage else "",
            "usage": result.usage,
            "wall": result.wall_time,
            "run_id": result.run_id,
            "reuse": reused,
        }

    figures = asyncio.run(go())
    figures["goal_id"] = case.goal_id
    return figures


def _summary(records: list[dict[str, Any]], price: Callable[[Usage], float]) -> dict[str, Any]:
    usage = sum((r["usage"] for r in records), Usage())
    wall = sum(r["wall"] for r in records)
    reused = sum(1 for r in records if (r.get("reuse") or {}).get("fallback") is None and (r.get("reuse") or {}).get("template"))
    return {
        "goals": len(records),
        "successes": sum(r["success"] for r in records),
        "success_rate": sum(r["success"] for r in records) / len(records) if records else 0.0,
        "model_calls": usage.model_calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "tokens": usage.input_tokens + usage.output_tokens,
        "dollars": price(usage),
        "wall_time_s": wall,
        "per_goal_wall_time_s": wall / len(records) if records else 0.0,
        "plans_reused": reused,
    }


def _ratios(mode: dict[str, Any], cold: dict[str, Any]) -> dict[str, Any]:
    def ratio(a: float, b: float) -> float | None:
        return a / b if b else None

    out = {
        "tokens": ratio(mode["tokens"], cold["tokens"]),
        "dollars": ratio(mode["dollars"], cold["dollars"]),
        "model_calls": ratio(mode["model_calls"], cold["model_calls"]),
        "wall": ratio(mode["wall_time_s"], cold["wall_time_s"]),
        "success": ratio(mode["success_rate"], cold["success_rate"]),
    }
    cost = out["dollars"] if out["dollars"] is not None else out["tokens"]
    out["met"] = {
        "cost": cost is not None and cost <= TARGETS["cost"],
        "wall": out["wall"] is not None and out["wall"] <= TARGETS["wall"],
        "success": (out["success"] is not None and out["success"] >= TARGETS["success"]) or mode["success_rate"] >= cold["success_rate"],
    }
    return out


def _setup(
    name: str,
    suite: Suite,
    model_for: Callable[[GoalCase], Model],
    learner_for: Callable[[GoalCase], Model],
    price: Callable[[Usage], float],
    *,
    joiner: bool,
    detail: bool,
    quiet: bool,
) -> dict[str, Any]:
    """Warm up, then run the repeated goals cold and with reuse; the figures of one setup."""
    registry = suite.registry()
    learn = [c for c in suite.goals if c.goal_id.startswith("learn-")]
    repeats = [c for c in suite.goals if not c.goal_id.startswith("learn-")]
    with tempfile.TemporaryDirectory() as folder, open_store(os.path.join(folder, "runs.db")) as store:
        warm, learned = [], []
        for case in learn:
            record = _run(case, learner_for(case), registry, store, False, joiner)
            saved = learn_template(store, record["run_id"], registry=registry) if record["success"] else None
            warm.append(record)
            if saved is not None:
                learned.append(f"{saved.template.name} ({', '.join(saved.template.params) or 'no parameters'})")
            if not quiet:
                print(
                    f"  warm-up {case.goal_id}: {'ok' if record['success'] else 'failed'}, {'learned' if saved else 'no template'}",
                    file=sys.stderr,
                )
        modes: dict[str, Any] = {}
        records: dict[str, list[dict[str, Any]]] = {}
        for mode, reuse in MODES.items() if learned else [("cold", False)]:  # no template: reuse is cold planning
            records[mode] = []
            for case in repeats:
                record = _run(case, model_for(case), registry, store, reuse, joiner)
                records[mode].append(record)
                if not quiet:
                    print(f"  {mode} {case.goal_id}: {'ok' if record['success'] else record['reason'][:100]}", file=sys.stderr)
            modes[mode] = _summary(records[mode], price)
    out: dict[str, Any] = {
        "warm_up": {**_summary(warm, price), "templates_learned": learned},
        "modes": modes,
        "ratios_over_cold": {m: _ratios(modes[m], modes["cold"]) for m in modes if m != "cold"},
    }
    if detail:
        out["records"] = {
            m: [
                {
                    "goal": r["goal_id"],
                    "success": r["success"],
                    "reason": r["reason"],
                    "tokens": r["usage"].input_tokens + r["usage"].output_tokens,
                    "calls": r["usage"].model_calls,
                    "wall_s": round(r["wall"], 3),
                    "reuse": r.get("reuse"),
                }
                for r in rs
            ]
            for m, rs in records.items()
        }
    return out


def _print(name: str, about: str, figures: dict[str, Any], price_name: str) -> None:
    w = figures["warm_up"]
    print(f"\n## {name}: {about}\n")
    print(f"warm-up: {w['successes']}/{w['goals']} learn-* goals succeeded; {len(w['templates_learned'])} templates learned")
    if not w["templates_learned"]:
        print("no template learned, so reuse has nothing to reuse: every plan is planned cold (the reuse modes were not run)")
    print("\n| mode | success | plans reused | model calls | input tokens | output tokens | $ at " + price_name + " | wall | per goal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, f in figures["modes"].items():
        print(
            f"| {mode} | {f['successes']}/{f['goals']} | {f['plans_reused']}/{f['goals']} | {f['model_calls']} | {f['input_tokens']:,} "
            f"| {f['output_tokens']:,} | {f['dollars']:.5f} | {f['wall_time_s']:.2f} s | {f['per_goal_wall_time_s']:.2f} s |"
        )
    print("\n| reuse / cold | tokens | $ | model calls | wall | success | cost <= 50% | wall <= 70% | success >= 95% |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, r in figures["ratios_over_cold"].items():
        cells = [f"{r[k]:.2f}" if r[k] is not None else "n/a" for k in ("tokens", "dollars", "model_calls", "wall", "success")]
        met = ["met" if r["met"][k] else "**not met**" for k in ("cost", "wall", "success")]
        print(f"| {mode} | {' | '.join(cells)} | {' | '.join(met)} |")
    for mode, rs in figures.get("records", {}).items():
        print(f"\n{mode}:")
        for r in rs:
            how = r["reuse"]
            said = "" if how is None else (f"template {how['template']} v{how['version']}" if not how.get("fallback") else how["fallback"])
            print(
                f"  {r['goal']}: {'ok' if r['success'] else 'FAILED ' + r['reason'][:80]}; {r['tokens']} tokens, {r['calls']} calls, {r['wall_s']} s; {said}"
            )


def main(argv: list[str] | None = None) -> int:
    """Run the setups and print the tables (or one JSON object with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="oracle", help="setups to run, comma-separated: oracle, local (default oracle)")
    parser.add_argument(
        "--learn-with", choices=("model", "oracle"), default="model", help="who plans the warm-up goals (default: the model)"
    )
    parser.add_argument("--price", default="openai:gpt-4o-mini", help="the rates dollars are counted at (default openai:gpt-4o-mini)")
    parser.add_argument("--overhead", type=float, default=0.2, help="the oracle's seconds per call (default 0.2)")
    parser.add_argument("--per-input-token", type=float, default=0.0005, help="the oracle's seconds per input token (default 0.0005)")
    parser.add_argument("--per-output-token", type=float, default=0.02, help="the oracle's seconds per output token (default 0.02)")
    parser.add_argument("--tool-latency", type=float, default=1.0, help="scale of the lookups' 50-300 ms (default 1; 0: none)")
    parser.add_argument(
        "--no-joiner",
        action="store_true",
        help="no model joiner: the answer is the plan's last step's output (default: the harness's joiner)",
    )
    parser.add_argument("--detail", action="store_true", help="a line per goal and mode: where its plan came from")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    args = parser.parse_args(argv)
    os.environ["PLANEXEC_EVAL_LATENCY"] = str(args.tool_latency)
    setups = [s.strip() for s in args.models.split(",") if s.strip()]
    unknown = [s for s in setups if s not in ("oracle", "local")]
    if unknown or not setups:
        parser.error(f"unknown setup(s) {', '.join(unknown) or '(none)'}; choose from oracle, local")
    rates = PriceTable.default().lookup(args.price)
    if rates is None:
        parser.error(f"no price known for {args.price!r}")

    def price(usage: Usage) -> float:
        return rates.of_usage(usage)

    latency = {"overhead": args.overhead, "per_input_token": args.per_input_token, "per_output_token": args.per_output_token}
    oracle = scripted_models(latency)
    suite = load_suite(SUITE)
    result: dict[str, Any] = {
        "machine": machine(),
        "suite": str(SUITE.relative_to(ROOT)),
        "latency_model": LatencyModel.describe_values(**latency),
        "tool_latency_scale": args.tool_latency,
        "price": args.price,
        "joiner": not args.no_joiner,
        "targets": TARGETS,
        "anchor": ANCHOR,
        "setups": {},
    }
    if not args.json:
        print("# Plan reuse: cold planning against reused templates on repeated goals")
        print(f"suite {result['suite']}; dollars at {args.price} rates; targets: cost <= 50%, wall <= 70%, success >= 95% of cold")
        print("no model joiner: the answer is the plan's last step's output" if args.no_joiner else "the model joiner answers")
    t0 = time.perf_counter()
    for setup in setups:
        if setup == "oracle":
            about = f"the oracle, {result['latency_model']}; lookups 50-300 ms x {args.tool_latency:g}"
            figures = _setup(setup, suite, oracle, oracle, price, joiner=not args.no_joiner, detail=args.detail, quiet=args.json)
        else:
            local = ModelSettings(Config(), planner="local:smollm2", seed=0).model("local:smollm2")
            own = _always(local)
            learner = oracle if args.learn_with == "oracle" else own
            about = f"the embedded {local.name}, templates learned from {'the oracle' if args.learn_with == 'oracle' else 'its own runs'}"
            figures = _setup(setup, suite, own, learner, price, joiner=not args.no_joiner, detail=args.detail, quiet=args.json)
        figures["about"] = about
        result["setups"][setup] = figures
        if not args.json:
            _print(setup, about, figures, args.price)
    result["total_wall_time_s"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(result, indent=2, default=lambda o: o.model_dump(mode="json") if hasattr(o, "model_dump") else str(o)))
    else:
        print(f"\n(ran in {result['total_wall_time_s']} s; anchor: {ANCHOR})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
