"""ReAct against planexec: tokens, model calls and wall time on the two example evaluation suites.

Both example suites (`examples/eval/parallel.yaml`: independent lookups
combined by arithmetic, in the spirit of LLMCompiler's ParallelQA;
`examples/eval/multihop.yaml`: each lookup needs the answer of the one
before) run in three modes with `planexec.eval.harness.run_suite`:

* ``single``: one ReAct agent (`planexec.team.agent.run_single`): a model call
  per tool call, the whole conversation sent again each turn, then the answer;
* ``plan``: `Planner.draft` writes the whole plan in one call, the engine
  runs its tool steps (independent ones at once), a `ModelJoiner` answers;
* ``stream``: the same, the plan streamed into the engine
  (`Engine.start_streaming`), so steps start while the planner is writing.

The planning modes run once per plan format (``--plan-format``, both by
default): ``json``, the draft schema's JSON, and ``compact``, one line per
step (`planexec.plan.compact`), where the oracle marks its last call
``answer``, so a run whose steps all succeed needs no joiner call. ReAct
runs once. Each pass sets `EvalOptions.plan_format` (the `Team`'s
``plan_format``, as ``plan_format`` in planexec.toml does);
``--plan-format profile`` sets none, so the planner writes its model's
default form, as `planexec run` does with nothing configured.
``--profile`` is what the oracle says it can do: ``hosted`` (the default:
the profile of OpenAI's and Anthropic's models, whose default form is
compact) or ``embedded`` (SmolLM2's: JSON under a grammar).

Every role is played by the oracle (`planexec.eval.oracle.OracleModel`), which
answers from each goal's reference solution: every mode makes exactly the
calls it needs, with no wasted turns and no wrong answers, so the ratios
measure the shape of each method, not a model's mistakes. Tokens are
`planexec.testing.count_tokens` (whitespace-separated words) of every
message sent and every reply. The oracle sits behind a
`planexec.eval.oracle.LatencyModel` that charges each call

    --overhead + --per-input-token x input tokens + --per-output-token x output tokens

seconds (default 0.2 s + 0.0005 s x input + 0.02 s x output: a hosted
model's time to first token, prompt reading at 2,000 tokens/s, writing at
50 tokens/s); streamed calls wait the first two terms, then one output
token at a time. The lookup tools sleep their fixed 50-300 ms
(``PLANEXEC_EVAL_LATENCY`` scales it; ``--tool-latency``).

Printed per suite: each mode's totals (a planning mode per format), and
the ratios ReAct / planexec (``single`` over ``plan``, and over ``stream``,
for each format) for tokens, model calls and wall time, beside the
published anchors: ReWOO (Xu et al., 2023) reports
about 5x fewer tokens than ReAct; LLMCompiler (Kim et al., 2024) up to 3.7x
lower latency than ReAct. Takes about two and a half minutes with the
defaults (``--goals N`` runs the first N goals of each suite).

With ``--model PROVIDER:MODEL`` a real model plays every role instead
(``local:smollm2``, the embedded model; or a provider's), with no latency
model: tokens are the model's own counts, wall time is real, and success is
the model's (the oracle never fails). On SmolLM2 use ``--plan-format json``:
the local model decodes under the draft schema's grammar, and writes the
compact form with none.

Run from the repository root (planexec installed, e.g. ``pip install -e .``)::

    python benchmarks/react_vs_plan.py
    python benchmarks/react_vs_plan.py --goals 3 --json
    python benchmarks/react_vs_plan.py --plan-format compact
    python benchmarks/react_vs_plan.py --plan-format profile             # a hosted model's defaults
    python benchmarks/react_vs_plan.py --model local:smollm2 --plan-format json   # ~20-40 min on 2 CPUs

Exit status 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from layered import machine

from planexec.config import Config
from planexec.eval.harness import EvalOptions, EvalReport, configured_models, run_suite, scripted_models
from planexec.eval.oracle import LatencyModel
from planexec.eval.report import ANCHORS
from planexec.eval.suite import load_suite
from planexec.models.anthropic import AnthropicModel
from planexec.models.profile import EMBEDDED
from planexec.models.settings import ModelSettings

ROOT = Path(__file__).resolve().parent.parent
SUITES = (ROOT / "examples" / "eval" / "parallel.yaml", ROOT / "examples" / "eval" / "multihop.yaml")
MODES = ("single", "plan", "stream")
FORMATS = ("json", "compact")
RATIOS = (("tokens", "tokens"), ("model_calls", "model calls"), ("wall_time", "wall time"))


def _figures(report: EvalReport, label: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in report.summaries:
        out[s.mode if s.mode == "single" else s.mode + label] = {
            "success_rate": s.success_rate,
            "model_calls": s.model_calls,
            "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens,
            "tokens": s.input_tokens + s.output_tokens,
            "wall_time_s": round(s.wall_time, 3),
            "per_goal_wall_time_s": round(s.mean_wall_time, 3),
            "input_tokens_per_call": round(s.input_tokens / s.model_calls, 1) if s.model_calls else None,
            "output_tokens_per_call": round(s.output_tokens / s.model_calls, 1) if s.model_calls else None,
        }
    return out


def _ratios(modes: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """ReAct (``single``) over each planning mode, for tokens, model calls and wall time."""
    react = modes.get("single")
    if react is None:
        return {}
    field = {"wall_time": "wall_time_s"}
    return {
        mode: {name: (react[field.get(name, name)] / f[field.get(name, name)] if f[field.get(name, name)] else None) for name, _ in RATIOS}
        for mode, f in modes.items()
        if mode != "single"
    }


def _print(suite: str, goals: int, figures: dict[str, Any]) -> None:
    print(f"\n## {suite} ({goals} goals)\n")
    print("| mode | success | model calls | input tokens | output tokens | in / call | out / call | wall time | per goal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, f in figures["modes"].items():
        label = "single (ReAct)" if mode == "single" else mode
        print(
            f"| {label} | {f['success_rate']:.0%} | {f['model_calls']} | {f['input_tokens']:,} | {f['output_tokens']:,} "
            f"| {f['input_tokens_per_call']} | {f['output_tokens_per_call']} | {f['wall_time_s']:.2f} s | {f['per_goal_wall_time_s']:.2f} s |"
        )
    r = figures["ratios_react_over"]
    print("\n| ReAct / planexec | " + " | ".join(f"vs {m}" for m in r) + " | published anchor |")
    print("|---|" + "---|" * len(r) + "---|")
    for name, label in RATIOS:
        cells = [f"{r[m][name]:.2f}x" if r[m][name] is not None else "n/a" for m in r]
        print(f"| {label} | {' | '.join(cells)} | {ANCHORS.get(name, '-')} |")


def main(argv: list[str] | None = None) -> int:
    """Run both suites in the three modes and print the ratios (or one JSON object with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overhead", type=float, default=0.2, help="seconds per model call (default 0.2)")
    parser.add_argument("--per-input-token", type=float, default=0.0005, help="seconds per input token (default 0.0005)")
    parser.add_argument("--per-output-token", type=float, default=0.02, help="seconds per output token (default 0.02)")
    parser.add_argument("--tool-latency", type=float, default=1.0, help="scale of the lookups' 50-300 ms (default 1; 0: none)")
    parser.add_argument("--goals", type=int, default=None, metavar="N", help="only the first N goals of each suite")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    parser.add_argument(
        "--plan-format",
        choices=(*FORMATS, "both", "profile"),
        default="both",
        help="what the planner writes: json, compact, both (default), or profile: the model's default form",
    )
    parser.add_argument(
        "--profile", choices=("hosted", "embedded"), default="hosted", help="what the oracle says it can do (default hosted)"
    )
    parser.add_argument(
        "--model", default=None, metavar="PROVIDER:MODEL", help="a real model plays every role (e.g. local:smollm2); default: the oracle"
    )
    args = parser.parse_args(argv)
    formats: tuple[str, ...] = FORMATS if args.plan_format == "both" else (args.plan_format,)
    profile = AnthropicModel.profile if args.profile == "hosted" else EMBEDDED
    os.environ["PLANEXEC_EVAL_LATENCY"] = str(args.tool_latency)

    latency = {"overhead": args.overhead, "per_input_token": args.per_input_token, "per_output_token": args.per_output_token}
    if args.model is None:
        described: str | None = LatencyModel.describe_values(**latency)
        models, model_name, tokens = (
            scripted_models(latency, profile),
            "test:oracle",
            "planexec.testing.count_tokens: whitespace-separated words",
        )
    else:
        settings = ModelSettings(Config(), planner=args.model, seed=0)
        described, model_name, tokens = None, settings.planner.name, "the model's own counts"
        models = configured_models(settings)
    result: dict[str, Any] = {
        "machine": machine(),
        "model": model_name,
        "latency_model": described,
        "tool_latency_scale": args.tool_latency,
        "tokens": tokens,
        "anchors": ANCHORS,
        "plan_formats": list(formats),
        "oracle_profile": profile.describe() if args.model is None else None,
        "suites": {},
    }
    if not args.json:
        player = "the oracle model" if args.model is None else model_name
        print(f"# ReAct (single) against planexec (plan, stream): {player} plays every role")
        timing = f"latency model: {described}" if described else "real model time"
        print(f"{timing}; lookups sleep 50-300 ms x {args.tool_latency:g}; tokens: {tokens}")
        if args.model is None:
            print(f"the oracle's profile: {profile.describe()}")
    t0 = time.perf_counter()
    for path in SUITES:
        suite = load_suite(path)
        goals = [c.goal_id for c in suite.goals][: args.goals] if args.goals else None
        modes: dict[str, Any] = {}
        for n, plan_format in enumerate(formats):
            run = MODES if n == 0 else MODES[1:]  # ReAct writes no plan: once is enough
            report = run_suite(
                suite,
                run,
                models,
                goals=goals,
                model_name=model_name,
                scripted=args.model is None,
                latency=described,
                options=EvalOptions(plan_format=None if plan_format == "profile" else plan_format),  # type: ignore[arg-type]
            )
            label = f"profile: {profile.plan_format}" if plan_format == "profile" else plan_format
            modes |= _figures(report, f" ({label})" if len(formats) > 1 or plan_format == "profile" else "")
        figures = {"modes": modes, "ratios_react_over": _ratios(modes)}
        result["suites"][suite.name] = figures
        if not args.json:
            _print(suite.name, len(goals or suite.goals), figures)
    result["total_wall_time_s"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"\n(ran in {result['total_wall_time_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
