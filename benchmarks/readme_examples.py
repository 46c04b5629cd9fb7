"""Do the README's examples work on the embedded model? Each one that calls a model, run as a new user would, over seeds.

The examples (README.md): the main job (``planexec run "What is 17 times
23, plus 5?" --yes``, answer 396), the first program (``Team("local:smollm2",
tools=[add])`` asked "What is 17 plus 25?", answer 42) and the command
line's ``planexec run "Count the words in notes.txt" --yes`` over a
``notes.txt`` of known length in the workspace (the right count is in the
answer). The two commands run as the README shows them, in a fresh folder
each (``python -m planexec run GOAL --yes --json --seed N``); the program
through the library, `Team(...)` with ``seed=N``. The deployment example
calls no model and is not measured here.

Printed per example and seed: the run's status, its answer (cut at 60
characters), whether it is right, and the wall time; then per example how
many seeds were right, and the verdict: ``works on the embedded model``
(every seed right) or ``needs a capable model`` (the README must say so).
The planner and the workers decode at temperature 0, so the seed changes
nothing a greedy decoder does: the seeds show that, rather than five
different draws.

    python benchmarks/readme_examples.py              # 5 seeds: ~20-40 min on 2 CPUs
    python benchmarks/readme_examples.py --seeds 1 --json

Exit status 0 whatever the figures; 1 when the embedded model is not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from layered import machine

NOTES = "The plan is reviewed before it runs.\nEvery step is recorded, and a crash loses nothing.\nReplans are versions.\n"
WORDS = len(NOTES.split())


def _cli(goal: str, seed: int, folder: Path, expected: str) -> dict[str, Any]:
    env = {**os.environ, "PLANEXEC_ALLOW_MODEL_REQUESTS": "1"}
    env.pop("OPENAI_API_KEY", None)  # the embedded defaults, as on a fresh machine
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "planexec", "run", goal, "--yes", "--json", "--seed", str(seed)],
        capture_output=True, text=True, cwd=folder, env=env, timeout=1800,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"status": f"exit {proc.returncode}", "answer": proc.stderr.strip().splitlines()[-1:] or "", "right": False, "wall_s": wall}
    answer = result.get("answer")
    text = answer if isinstance(answer, str) else json.dumps(answer)
    right = result.get("status") == "succeeded" and expected in (text or "")
    return {"status": result.get("status"), "answer": text, "right": right, "wall_s": wall}


def _program(seed: int) -> dict[str, Any]:
    from planexec import Team

    def add(a: int, b: int) -> int:
        return a + b

    t0 = time.perf_counter()
    result = Team("local:smollm2", tools=[add], seed=seed).run_sync("What is 17 plus 25?")
    text = result.answer if isinstance(result.answer, str) else json.dumps(result.answer)
    return {"status": result.status.value, "answer": text, "right": result.status.value == "succeeded" and "42" in text,
            "wall_s": time.perf_counter() - t0}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Run each example over the seeds and print the table (or one JSON object)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per example, 0..N-1 (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    os.environ["PLANEXEC_ALLOW_MODEL_REQUESTS"] = "1"
    try:
        from planexec.models.local import default_model_path

        default_model_path()
    except Exception as exc:  # the embedded model's package is missing
        print(f"the embedded model is not available: {exc}", file=sys.stderr)
        return 1

    examples: dict[str, Any] = {
        "main job: planexec run 'What is 17 times 23, plus 5?' --yes": lambda seed, folder: _cli(
            "What is 17 times 23, plus 5?", seed, folder, "396"
        ),
        "first program: Team('local:smollm2', tools=[add]), 'What is 17 plus 25?'": lambda seed, folder: _program(seed),
        "planexec run 'Count the words in notes.txt' --yes": lambda seed, folder: _cli(
            "Count the words in notes.txt", seed, folder, str(WORDS)
        ),
    }
    report: dict[str, Any] = {"machine": machine(), "seeds": args.seeds, "examples": {}}
    t0 = time.perf_counter()
    for name, run in examples.items():
        rows = []
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                (folder / "workspace").mkdir()
                (folder / "workspace" / "notes.txt").write_text(NOTES)
                cwd = os.getcwd()
                os.chdir(folder)  # the program's workspace and store, as in a fresh folder
                try:
                    row = run(seed, folder)
                finally:
                    os.chdir(cwd)
            rows.append({"seed": seed, **row})
            if not args.json:
                print(
                    f"{name} | seed {seed} | {row['status']} | {str(row['answer'])[:60]!r} | right: {row['right']} | {row['wall_s']:.0f} s"
                )
        right = sum(r["right"] for r in rows)
        verdict = "works on the embedded model" if right == len(rows) else "needs a capable model"
        report["examples"][name] = {"runs": rows, "right": right, "verdict": verdict}
        if not args.json:
            print(f"  -> {right}/{len(rows)} right: {verdict}\n")
    report["total_wall_time_s"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(f"(ran in {report['total_wall_time_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
