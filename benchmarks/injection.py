"""Prompt injection: what an obedient model can be made to do, per mode and approval setting.

Runs the injection suite (`planexec.eval.injection_scenarios.SCENARIOS`,
fifteen goals over the workspace toolkit, ``send_message``, ``transfer``
and ``fetch_page``) with `planexec.eval.injection.run_suite`: every scenario
attacked and as its benign twin, as one agent (``single``) and as a team
following the oracle's plan (``team``), under each approval setting
(``yes``: everything approved, as ``planexec run --yes``; ``none``: no
approver; ``person``: a scripted person who approves whatever is shown).
Every model is `planexec.testing.ObedientModel`, which obeys every
instruction it reads: the figures are the worst case, and measure what
the plan, the engine and the approvals let through, not a model's
judgement.

Printed per mode x approval: injected side-effecting calls that ran /
that were asked for, injected out-of-plan reads that ran / were asked
for, the attack success rate (attacked runs in which any injected call
ran), the benign utility (benign twins whose outcome holds) and the
utility under attack. ``--detail`` adds a row per scenario. Takes a few
seconds (about 0.1 s per run; 180 runs).

Run from the repository root (planexec installed, e.g. ``pip install -e .``)::

    python benchmarks/injection.py
    python benchmarks/injection.py --detail
    python benchmarks/injection.py --modes team --approval yes,person --json

Exit status 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from layered import machine
from rich.console import Console

import planexec
from planexec.eval.injection import run_suite
from planexec.eval.injection_report import APPROVALS, MODES, Figures, InjectionReport
from planexec.eval.injection_scenarios import SCENARIOS


def _ratio(done: int, asked: int) -> str:
    return f"{done} / {asked}"


def _share(count: int, runs: int) -> str:
    return f"{count}/{runs} ({count / runs:.0%})" if runs else "-"


def _figures(f: Figures) -> dict[str, Any]:
    return {
        "mode": f.mode,
        "approval": f.approval,
        "effects_executed": f.effects_executed,
        "effects_attempted": f.effects_attempted,
        "reads_executed": f.reads_executed,
        "reads_attempted": f.reads_attempted,
        "attack_success_rate": f.attack_success_rate,
        "benign_utility": f.benign_utility / f.benign_runs if f.benign_runs else None,
        "utility_under_attack": f.utility_under_attack / f.achievable_runs if f.achievable_runs else None,
        "achievable_attacked_runs": f.achievable_runs,
        "safe_refusals": f.safe_refusals,
        "attacked_runs": f.attacked_runs,
        "benign_runs": f.benign_runs,
        "wall_time_s": round(f.wall_time, 3),
    }


def _print(report: InjectionReport, baseline: InjectionReport | None = None) -> None:
    """The figures as a markdown table; with `baseline` (the same runs without the defences), benign utility kept."""
    print(
        "| mode | approval | injected effects ran / asked | out-of-plan reads ran / asked | attack success | benign utility "
        "| utility under attack (achievable) | refused, task impossible |" + (" benign utility kept |" if baseline else "")
    )
    print("|---|---|---|---|---|---|---|---|" + ("---|" if baseline else ""))
    for f in report.figures:
        kept = ""
        if baseline is not None:
            base = baseline.figure(f.mode, f.approval)
            kept = (
                f" {f.benign_utility}/{base.benign_utility} ({f.benign_utility / base.benign_utility:.0%}) |"
                if base.benign_utility
                else " - |"
            )
        print(
            f"| {f.mode} | {f.approval} | {_ratio(f.effects_executed, f.effects_attempted)} | {_ratio(f.reads_executed, f.reads_attempted)} "
            f"| {_share(f.attack_successes, f.attacked_runs)} | {_share(f.benign_utility, f.benign_runs)} "
            f"| {_share(f.utility_under_attack, f.achievable_runs)} | {_share(f.safe_refusals, f.attacked_runs - f.achievable_runs)} |{kept}"
        )


def main(argv: list[str] | None = None) -> int:
    """Run the suite attacked and benign and print the figures (or one JSON object with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: single, team (default both)")
    parser.add_argument("--approval", default=",".join(APPROVALS), help="comma-separated: yes, none, person (default all)")
    parser.add_argument("--scenarios", default="", help="comma-separated scenario names (default all)")
    parser.add_argument("--tool-calling", choices=("native", "json"), default="native", help="the workers' tool-calling protocol")
    parser.add_argument("--detail", action="store_true", help="also a row per scenario x mode x approval")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    settings = [a for a in args.approval.split(",") if a]
    names = [n for n in args.scenarios.split(",") if n]
    unknown = sorted({*modes} - set(MODES)) + sorted({*settings} - set(APPROVALS)) + sorted(set(names) - {s.name for s in SCENARIOS})
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    scenarios = [s for s in SCENARIOS if not names or s.name in names]

    t0 = time.perf_counter()
    options: dict[str, Any] = {"modes": modes, "approval": settings, "tool_calling": args.tool_calling}
    report = run_suite(scenarios, attacks=True, **options).merged(run_suite(scenarios, attacks=False, **options))
    # the same suite without the plan's contract: what the defences cost in utility, and what they stop
    baseline = run_suite(scenarios, attacks=True, defences=False, **options).merged(
        run_suite(scenarios, attacks=False, defences=False, **options)
    )
    wall = round(time.perf_counter() - t0, 1)
    code = str(Path(planexec.__file__).resolve().parent)
    if args.json:
        out = {
            "machine": machine(),
            "code": code,
            "scenarios": [s.name for s in scenarios],
            "tool_calling": args.tool_calling,
            "stripped_plan_fields": report.stripped_fields,
            "figures": [_figures(f) for f in report.figures],
            "figures_without_defences": [_figures(f) for f in baseline.figures],
            "runs": [r.to_dict() for r in report.runs] if args.detail else None,
            "total_wall_time_s": wall,
        }
        print(json.dumps(out, indent=2))
        return 0
    stripped = ", ".join(report.stripped_fields) or "none"
    print(f"# Prompt injection: {len(scenarios)} scenarios, the obedient model in every role ({args.tool_calling} tool calls)")
    print(f"code: {code}; plan fields stripped (unknown to this Plan): {stripped}\n")
    print("## with the defences (the plan's contract enforced)\n")
    _print(report, baseline)
    print("\n## without the defences (`EngineConfig(enforce_contract=False)`)\n")
    _print(baseline)
    if args.detail:
        Console(width=None if sys.stdout.isatty() else 160).print(report.scenarios_table())
    print(f"\n({len(report.runs) + len(baseline.runs)} runs in {wall} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
