"""The console's run page on large runs: time to build it, a step, at several sizes (look at the slope).

For each size (`--steps`, default 500, 2,000 and 8,000) a child process
records one run of the data-flow plan of `dataflow.py` (20 steps a layer,
each taking its parents' outputs; its tool's output is untrusted, so every
step has untrusted origins upstream) into a new SQLite store, then builds
its page the way the console does (`web.views.run_detail`: every step's
panel, with its inputs as resolved and where its output came from) and
prints milliseconds a step, the median of `--repeats`, and the slope
against the smallest size. A page whose panels walked each step's whole
ancestry was quadratic (a 2,000-step run took 21 s); a flat slope says
each panel does work of its own size. `--check R` exits 1 when the
largest size's figure is more than R times the smallest's.

    python benchmarks/console_page.py
    python benchmarks/console_page.py --steps 500,4000 --check 1.5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from layered import median


def child(steps: int, repeats: int) -> dict[str, Any]:
    """Record one run of about `steps` steps and time its page, in this process."""
    import dataflow

    from planexec import Engine
    from planexec.engine.recording import DurableRunner, record_run
    from planexec.engine.runner import LocalRunner
    from planexec.store import SqliteRunStore
    from planexec.web.views import run_detail

    registry = dataflow.make_registry()
    _, plan = dataflow.referencing_plan(steps, 20)
    with tempfile.TemporaryDirectory(prefix="planexec-console-") as folder:
        store = SqliteRunStore(Path(folder) / "runs.db")

        async def go() -> None:
            engine = Engine(registry, runner=DurableRunner(LocalRunner(registry)), max_concurrency=20)
            run = engine.start(plan, validate=False, run_id="big")
            record_run(run, store)
            result = await run.result()
            if not result.ok:
                raise SystemExit(f"run {result.status.value}: {result.reason}")

        asyncio.run(go())
        walls = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            detail = run_detail(store, "big")
            walls.append(time.perf_counter() - t0)
        store.close()
    n = len(detail.steps)
    return {"steps": n, "ms_per_step": round(median(walls) / n * 1e3, 3), "page_s": round(median(walls), 2)}


def main(argv: list[str] | None = None) -> int:
    """Measure each size in a child process and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="500,2000,8000", help="comma-separated run sizes (default 500,2000,8000)")
    parser.add_argument("--repeats", type=int, default=3, help="page builds a size; the median is reported (default 3)")
    parser.add_argument("--check", type=float, help="exit 1 when the largest size's ms/step exceeds this many times the smallest's")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.repeats)))
        return 0
    rows = []
    for steps in [int(s) for s in args.steps.split(",") if s]:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(steps), "--repeats", str(args.repeats)], capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            return 1
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first = rows[0]
    print(f"{'steps':>7} {'page s':>8} {'ms/step':>8} {'slope':>6}")
    for r in rows:
        print(f"{r['steps']:>7,} {r['page_s']:>8.2f} {r['ms_per_step']:>8.3f} {r['ms_per_step'] / first['ms_per_step']:>6.2f}")
    slope = rows[-1]["ms_per_step"] / first["ms_per_step"]
    if args.check is not None:
        verdict = "passed" if slope <= args.check else "FAILED"
        print(f"check {verdict}: {rows[-1]['steps']:,} steps cost {slope:.2f}x a step what {first['steps']:,} do (limit {args.check}x)")
        return 0 if slope <= args.check else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
