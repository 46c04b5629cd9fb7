"""Scale: one recorded run of 10,000 and of 100,000 no-op steps, each in a fresh process.

For each size (`--steps`, default 10,000 and 100,000), a child process
builds the layered DAG of `engine_overhead.py` (`--width` steps a layer,
default 100), runs it on the engine recorded into a new SQLite store
(`record_run` with the `DurableRunner`, as ``planexec run`` does), and
reports:

* wall seconds of the run (from `Engine.start` to its `RunResult`) and
  steps per second;
* the child's peak resident memory (``ru_maxrss``: the whole process,
  plan and store included), and that per step;
* the store's size after the run: the database file and its ``-wal``
  file, as they are left on disk.

The target the issue sets: a 100,000-step run under 500 MB peak memory,
and no WAL left behind at the end of a run.

With ``--chained`` the plan is one chain instead, each step taking its
parent's output as a reference (``{"inputs": ["${parent}"]}``, the tool of
`dataflow.py`, whose output is untrusted text): the shape where a value's
provenance would grow with its depth. Issue 24's targets: 100,000 chained
steps on SQLite in at most 500 MB and 30 s. The tool is a pure function,
declared idempotent as such a tool is, so each step's events may share a
commit with the next steps' (`engine.recording`'s group window); with
``--side-effects`` it is declared as a tool with side effects is, and each
step waits for its start to be stored before it runs (one commit a step).

    python benchmarks/scale.py                       # 10,000 and 100,000 steps (~2 min)
    python benchmarks/scale.py --steps 10000 --json
    python benchmarks/scale.py --chained --steps 10000,100000
    python benchmarks/scale.py --chained --side-effects --steps 100000

Exit status 0 even when a target is missed (a measurement, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_PEAK_MB = 500.0
TARGET_CHAINED_S = 30.0


def child(steps: int, width: int, folder: str, chained: bool = False, side_effects: bool = False) -> dict[str, Any]:
    """Run one recorded run of `steps` no-op steps (a chain passing each output on, with `chained`) in this process and measure it."""
    sys.path.insert(0, str(Path(__file__).parent))
    from engine_overhead import make_registry
    from layered import build_plan, layered_dag

    from planexec import Engine
    from planexec.engine.recording import DurableRunner, record_run
    from planexec.engine.runner import LocalRunner
    from planexec.store import SqliteRunStore

    if chained:
        import dataflow

        registry, width = dataflow.make_registry(idempotent=not side_effects), 1
        plan = build_plan(layered_dag(steps, 1), "relay", dataflow.parameters)
    else:
        registry = make_registry()
        plan = build_plan(layered_dag(max(1, steps // width), width), "noop_async")
    path = Path(folder) / "runs.db"
    store = SqliteRunStore(path)

    async def go() -> tuple[float, str]:
        engine = Engine(registry, runner=DurableRunner(LocalRunner(registry)), max_concurrency=width, seed=0)
        t0 = time.perf_counter()
        run = engine.start(plan, validate=False)
        record_run(run, store)
        result = await run.result()
        if not result.ok:
            raise SystemExit(f"run {result.status.value}: {result.reason}")
        return time.perf_counter() - t0, run.run_id

    wall, _ = asyncio.run(go())
    store.close()
    wal = Path(f"{path}-wal")
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "steps": len(plan.steps),
        "wall_s": round(wall, 3),
        "steps_per_s": round(len(plan.steps) / wall),
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "peak_kb_per_step": round(peak_kb / len(plan.steps), 2),
        "store_mb": round(path.stat().st_size / 2**20, 1),
        "wal_mb": round(wal.stat().st_size / 2**20, 1) if wal.exists() else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    """Measure each size in a child process and print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="10000,100000", help="comma-separated run sizes")
    parser.add_argument("--width", type=int, default=100, help="steps per layer of the DAG")
    parser.add_argument("--chained", action="store_true", help="one chain, each step taking its parent's output")
    parser.add_argument("--side-effects", action="store_true", help="with --chained: the tool declared as one with side effects")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.width, args.folder, args.chained, args.side_effects)))
        return 0
    rows = []
    for steps in [int(s) for s in args.steps.split(",") if s]:
        with tempfile.TemporaryDirectory(prefix="planexec-scale-") as folder:
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(steps), "--width", str(args.width), "--folder", folder]
                + (["--chained"] if args.chained else [])
                + (["--side-effects"] if args.side_effects else []),
                capture_output=True, text=True, check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                return 1
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if args.json:
        print(json.dumps({"runs": rows, "target_peak_mb": TARGET_PEAK_MB}, indent=2))
        return 0
    print(f"{'steps':>8} {'wall s':>8} {'steps/s':>8} {'peak MB':>8} {'KB/step':>8} {'store MB':>9} {'WAL MB':>7}")
    for r in rows:
        print(
            f"{r['steps']:>8,} {r['wall_s']:>8.2f} {r['steps_per_s']:>8,} {r['peak_rss_mb']:>8.1f} "
            f"{r['peak_kb_per_step']:>8.2f} {r['store_mb']:>9.1f} {r['wal_mb']:>7.1f}"
        )
    big = max(rows, key=lambda r: r["steps"])
    verdict = "MET" if big["peak_rss_mb"] < TARGET_PEAK_MB else "MISSED"
    print(f"target: {big['steps']:,} steps under {TARGET_PEAK_MB:.0f} MB peak: {verdict} at {big['peak_rss_mb']:.0f} MB")
    print(f"target: no WAL left after the run: {'MET' if big['wal_mb'] == 0 else 'MISSED'} ({big['wal_mb']} MB)")
    if args.chained:
        met = "MET" if big["wall_s"] <= TARGET_CHAINED_S else "MISSED"
        print(f"target: {big['steps']:,} chained steps in {TARGET_CHAINED_S:.0f} s: {met} at {big['wall_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
