"""Engine overhead per step, measured on a wide-and-deep DAG of no-op tool steps.

What it measures, on `--layers` x `--width` steps (default 100 x 100 = 10,000),
each step after the first layer depending on 1-3 random steps of the layer
before (seeded, so every run builds the same DAG):

* plan construction (`Plan.from_data` on planner-shaped JSON data) and
  validation (`check_plan` against the registry), timed separately;
* execution with an async no-op tool on worker ``tool``: wall time from
  `Engine.start(plan, validate=False)` to the `RunResult`, steps per second,
  and microseconds per step (wall / steps; the tool does nothing, so that is
  all engine overhead), with the process CPU time per step (steadier than
  wall time when other work shares the machine) and the time the garbage
  collector took inside the run;
* a reference floor: the same DAG and no-op function under a minimal asyncio
  scheduler (graphlib, one task per step, a semaphore, asyncio.timeout), so
  the gap to it is what planexec's records, events and checks cost;
* the same with a sync no-op tool (the engine runs it in a thread);
* `Engine.run_sync(plan)` end to end (validation, execution, event-loop
  setup and teardown), the call most users make;
* peak memory: tracemalloc's peak during one extra (slower, traced) execution,
  and the process's peak RSS.

Each timing is repeated `--repeats` times, each in a fresh event loop and
after a full garbage collection (as `store_overhead.py` does), so no run
pays for collecting what the runs before it left: without it the bare
reference took 9.5 or 15 us/step depending on whether a full collection
owed by the engine's runs fell inside it. The median is reported with min
and max. The last line compares the async median to the target (issue 13): engine
overhead at most 40 us per step.

Run from the repository root (planexec installed, e.g. ``pip install -e .``)::

    python benchmarks/engine_overhead.py                 # the table
    python benchmarks/engine_overhead.py --json          # one JSON object
    python benchmarks/engine_overhead.py --layers 20 --width 50 --repeats 3
    python benchmarks/engine_overhead.py --profile 30    # plus cProfile's top 30
    python benchmarks/engine_overhead.py --references --layers 50 --width 40
        # each step also consumes ${its first dependency}: reference checks and resolution

Exit status 0 even when the target is missed (it is a measurement, not a
test); 1 when a run does not succeed.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import graphlib
import io
import pstats
import resource
import sys
import time
import tracemalloc
from typing import Any

from layered import LayeredStep, add_dag_arguments, build_plan, layered_dag, machine, plan_data, print_result, spread

from planexec import Engine, Plan, Registry, check_plan

TARGET_US_PER_STEP = 40.0  # at most (issue 13, part 5; it was under 100)


def make_registry() -> Registry:
    """A registry holding only the two no-op tools (no entry points, so nothing else is loaded)."""
    registry = Registry()

    @registry.tool
    async def noop_async(value: Any = None) -> None:
        """Do nothing (with `value`, when --references passes one), in the event loop."""
        return None

    @registry.tool
    def noop_sync(value: Any = None) -> None:
        """Do nothing (with `value`, when --references passes one), in a thread."""
        return None

    return registry


class GcClock:
    """Seconds the cyclic garbage collector spent while armed (a gc callback; costs nothing between collections)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._t0 = 0.0
        self.armed = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.armed:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0
            self.collections += 1


async def _execute(engine: Engine, plan: Plan, clock: GcClock) -> tuple[float, float, float]:
    """One execution of a validated plan: wall seconds seen from outside, the process's CPU seconds
    (all threads) over the same span, and the engine's own wall_time."""
    clock.armed = True
    c0, t0 = time.process_time(), time.perf_counter()
    result = await engine.start(plan, validate=False).result()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    clock.armed = False
    if not result.ok:
        failed = {sid: r.state.value for sid, r in result.steps.items() if r.state.value != "succeeded"}
        raise SystemExit(f"run {result.status.value}: {result.reason}; {len(failed)} steps not succeeded")
    return wall, cpu, result.wall_time


def execute(registry: Registry, plan: Plan, max_concurrency: int, clock: GcClock) -> tuple[float, float, float]:
    """`_execute` in a fresh event loop. Returns floats only: a `RunResult` as the loop's result
    would be repr'd by asyncio.run's teardown (see run_sync in the README), which is not what we time."""
    engine = Engine(registry, max_concurrency=max_concurrency, seed=0)
    return asyncio.run(_execute(engine, plan, clock))


def time_build(data: dict[str, Any], registry: Registry, repeats: int) -> tuple[list[float], list[float], Plan]:
    """Seconds for `Plan.from_data` (on planner-shaped data built beforehand) and for `check_plan`, repeated;
    and the last plan built."""
    builds, checks = [], []
    plan = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        plan = Plan.from_data(data)
        t1 = time.perf_counter()
        check_plan(plan, registry)
        t2 = time.perf_counter()
        builds.append(t1 - t0)
        checks.append(t2 - t1)
    assert plan is not None
    return builds, checks, plan


def time_execution(registry: Registry, plan: Plan, max_concurrency: int, repeats: int) -> dict[str, Any]:
    """Repeated executions: wall, CPU, steps/s, us/step and GC seconds, each as median/min/max."""
    walls, cpus, engine_walls, gcs = [], [], [], []
    clock = GcClock()
    gc.callbacks.append(clock)
    try:
        for _ in range(repeats):
            clock.seconds = 0.0
            gc.collect()  # each run from the same start: none collects what an earlier one left
            wall, cpu, engine_wall = execute(registry, plan, max_concurrency, clock)
            walls.append(wall)
            cpus.append(cpu)
            engine_walls.append(engine_wall)
            gcs.append(clock.seconds)
    finally:
        gc.callbacks.remove(clock)
    n = len(plan.steps)
    return {
        "wall_s": spread(walls),
        "engine_wall_time_s": spread(engine_walls),
        "steps_per_s": spread([n / w for w in walls]),
        "us_per_step": spread([w / n * 1e6 for w in walls]),
        "cpu_s": spread(cpus),
        "cpu_us_per_step": spread([c / n * 1e6 for c in cpus]),
        "gc_s": spread(gcs),
    }


async def bare_run(graph: dict[str, tuple[str, ...]], fn: Any, limit: int, *, with_inputs: bool = False) -> tuple[float, float]:
    # the least any asyncio engine does per step: a task once its dependencies end, a concurrency slot,
    # a timeout, the call, and the bookkeeping that releases its dependents; no records, events or checks
    sorter = graphlib.TopologicalSorter(graph)
    sorter.prepare()
    slots = asyncio.Semaphore(limit)
    finished = asyncio.Event()
    loop = asyncio.get_running_loop()
    tasks: dict[str, asyncio.Task[None]] = {}
    outputs: dict[str, Any] = {}

    def launch() -> None:
        for step_id in sorter.get_ready():
            tasks[step_id] = loop.create_task(run(step_id))
        if not sorter.is_active():
            finished.set()

    async def run(step_id: str) -> None:
        async with slots, asyncio.timeout(300.0):
            # with_inputs: each call gets its dependencies' outputs (`inputs=[...]`), as data flowing between steps
            outputs[step_id] = await (fn(inputs=[outputs[d] for d in graph[step_id]]) if with_inputs else fn())
        sorter.done(step_id)
        launch()

    c0, t0 = time.process_time(), time.perf_counter()
    launch()
    await finished.wait()
    return time.perf_counter() - t0, time.process_time() - c0


def time_bare(dag: list[list[LayeredStep]], registry: Registry, limit: int, repeats: int) -> dict[str, Any]:
    """The same DAG and async no-op function scheduled by a minimal asyncio loop (graphlib, one task per step,
    a semaphore, asyncio.timeout): a reference floor for what the engine's own bookkeeping costs."""
    graph = {s.step_id: s.depends_on for row in dag for s in row}
    fn = registry.tools["noop_async"].fn
    runs = []
    for _ in range(repeats):
        gc.collect()
        runs.append(asyncio.run(bare_run(graph, fn, limit)))
    n = len(graph)
    return {
        "wall_s": spread([w for w, _ in runs]),
        "us_per_step": spread([w / n * 1e6 for w, _ in runs]),
        "cpu_us_per_step": spread([c / n * 1e6 for _, c in runs]),
    }


def time_run_sync(registry: Registry, plan: Plan, max_concurrency: int, repeats: int) -> dict[str, Any]:
    """`Engine.run_sync(plan)` end to end: validation, execution, asyncio.run setup and teardown."""
    walls, engine_walls = [], []
    for _ in range(repeats):
        engine = Engine(registry, max_concurrency=max_concurrency, seed=0)
        gc.collect()
        t0 = time.perf_counter()
        result = engine.run_sync(plan)
        walls.append(time.perf_counter() - t0)
        engine_walls.append(result.wall_time)
        if not result.ok:
            raise SystemExit(f"run_sync: run {result.status.value}: {result.reason}")
        del result
    n = len(plan.steps)
    return {
        "wall_s": spread(walls),
        "engine_wall_time_s": spread(engine_walls),
        "us_per_step": spread([w / n * 1e6 for w in walls]),
    }


def traced_peak(registry: Registry, plan: Plan, max_concurrency: int) -> dict[str, float]:
    """tracemalloc's peak (and what stays allocated) across one execution, above what existed before it."""
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        execute(registry, plan, max_concurrency, GcClock())
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return {"peak_bytes": peak - base, "retained_bytes": max(0, current - base)}


def profile(registry: Registry, plan: Plan, max_concurrency: int, top: int) -> str:
    """cProfile of one async execution: the `top` functions by own time, then by cumulative time."""
    engine = Engine(registry, max_concurrency=max_concurrency, seed=0)
    prof = cProfile.Profile()

    async def main() -> None:
        prof.enable()
        result = await engine.start(plan, validate=False).result()
        prof.disable()
        assert result.ok

    asyncio.run(main())
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dag_arguments(p, layers=100, width=100, repeats=5)
    p.add_argument("--max-concurrency", type=int, default=None, help="engine limit (default: the step count, so it never throttles)")
    p.add_argument(
        "--references",
        action="store_true",
        help="each step also passes ${first dependency} as a parameter (exercises reference checks and resolution)",
    )
    p.add_argument("--skip-bare", action="store_true", help="do not time the bare-asyncio reference scheduler")
    p.add_argument("--skip-sync", action="store_true", help="do not time the sync (threaded) no-op tool")
    p.add_argument("--skip-run-sync", action="store_true", help="do not time Engine.run_sync end to end")
    p.add_argument("--skip-memory", action="store_true", help="do not make the extra tracemalloc run")
    p.add_argument("--profile", type=int, metavar="N", default=0, help="also print cProfile's top N functions of one async execution")
    return p.parse_args(argv)


def _reference_first_dependency(step: LayeredStep) -> dict[str, Any]:
    # what planner output usually looks like: the step consumes an upstream output by reference
    return {"value": "${" + step.depends_on[0] + "}"} if step.depends_on else {}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every figure, as the JSON object `--json` prints."""
    registry = make_registry()
    dag = layered_dag(args.layers, args.width, min_deps=args.min_deps, max_deps=args.max_deps, seed=args.seed)
    n = args.layers * args.width
    limit = args.max_concurrency or n
    edges = sum(len(s.depends_on) for row in dag for s in row)

    # warm-up: pydantic builds some validators and serializers on first use; keep that out of the figures
    warm = build_plan(layered_dag(2, 4, seed=args.seed), "noop_async")
    execute(registry, warm, 16, GcClock())

    params = _reference_first_dependency if args.references else None
    builds, checks, plan_async = time_build(plan_data(dag, "noop_async", params), registry, args.repeats)
    result: dict[str, Any] = {
        "benchmark": "engine_overhead",
        "machine": machine(),
        "config": {
            "layers": args.layers,
            "width": args.width,
            "steps": n,
            "edges": edges,
            "min_deps": args.min_deps,
            "max_deps": args.max_deps,
            "seed": args.seed,
            "repeats": args.repeats,
            "max_concurrency": limit,
            "references": args.references,
        },
        "plan_construction_s": spread(builds),
        "plan_validation_s": spread(checks),
        "async_tool": time_execution(registry, plan_async, limit, args.repeats),
    }
    if not args.skip_bare:
        result["bare_asyncio"] = time_bare(dag, registry, limit, args.repeats)
    if not args.skip_sync:
        plan_sync = build_plan(dag, "noop_sync", params)
        result["sync_tool"] = time_execution(registry, plan_sync, limit, args.repeats)
    if not args.skip_run_sync:
        result["run_sync_async_tool"] = time_run_sync(registry, plan_async, limit, args.repeats)
    if not args.skip_memory:
        mem = traced_peak(registry, plan_async, limit)
        mem["bytes_per_step"] = mem["peak_bytes"] / n
        result["memory_async_tool"] = mem
    # ru_maxrss is KiB on Linux, bytes on macOS
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result["max_rss_bytes"] = rss if sys.platform == "darwin" else rss * 1024
    us = result["async_tool"]["us_per_step"]["median"]
    result["target"] = {"us_per_step_below": TARGET_US_PER_STEP, "measured_us_per_step": us, "met": us <= TARGET_US_PER_STEP}
    if args.profile:
        result["profile"] = profile(registry, plan_async, limit, args.profile)
    return result


def _row(label: str, runs: dict[str, Any], steps: int) -> str:
    wall = runs["wall_s"]
    us = runs["us_per_step"]
    sps = steps / wall["median"]
    cpu = f"{runs['cpu_us_per_step']['median']:10.1f}" if "cpu_us_per_step" in runs else f"{'-':>10}"
    gc_ms = f"{runs['gc_s']['median'] * 1e3:9.0f}" if "gc_s" in runs else f"{'-':>9}"
    return f"{label:<37}{wall['median']:9.3f}{wall['min']:9.3f}{wall['max']:9.3f}{sps:11,.0f}{us['median']:10.1f}{cpu}{gc_ms}"


def report(r: dict[str, Any]) -> str:
    """The human-readable table."""
    c, m = r["config"], r["machine"]
    n = c["steps"]
    lines = [
        f"engine overhead: {c['layers']} layers x {c['width']} steps = {n:,} no-op steps, {c['edges']:,} edges "
        f"({c['min_deps']}-{c['max_deps']} deps per step, seed {c['seed']}), max_concurrency={c['max_concurrency']:,}"
        + (", each step referencing its first dependency" if c["references"] else ""),
        f"median of {c['repeats']} run{'s' if c['repeats'] != 1 else ''}; Python {m['python']}, {m['cpus']} CPUs, pydantic {m['pydantic']}, {m['date']}",
        "",
        f"{'plan phase':<37}{'median ms':>10}{'min ms':>9}{'max ms':>9}{'us/step':>10}",
    ]
    for label, key in (("construction (Plan.from_data)", "plan_construction_s"), ("validation (check_plan)", "plan_validation_s")):
        s = r[key]
        lines.append(f"{label:<37}{s['median'] * 1e3:10.1f}{s['min'] * 1e3:9.1f}{s['max'] * 1e3:9.1f}{s['median'] / n * 1e6:10.1f}")
    lines += ["", f"{'execution':<37}{'wall s':>9}{'min s':>9}{'max s':>9}{'steps/s':>11}{'us/step':>10}{'cpu us':>10}{'gc ms':>9}"]
    lines.append(_row("async no-op tool", r["async_tool"], n))
    if "bare_asyncio" in r:
        lines.append(_row("bare asyncio reference (no planexec)", r["bare_asyncio"], n))
    if "sync_tool" in r:
        lines.append(_row("sync no-op tool (thread per call)", r["sync_tool"], n))
    if "run_sync_async_tool" in r:
        lines.append(_row("run_sync end to end (async tool)", r["run_sync_async_tool"], n))
        rs = r["run_sync_async_tool"]
        lines.append(
            f"  (run_sync = validation + execution + asyncio.run teardown; the engine's own wall_time there: "
            f"{rs['engine_wall_time_s']['median']:.3f} s)"
        )
    lines.append("  (us/step = wall / steps; cpu us = process CPU time / steps, all threads, steadier on a busy machine;")
    lines.append("   gc ms = time inside the cyclic garbage collector during the run, included in wall)")
    lines.append("")
    if "memory_async_tool" in r:
        mem = r["memory_async_tool"]
        lines.append(
            f"memory (async tool, tracemalloc): peak {mem['peak_bytes'] / 2**20:.1f} MiB during execution "
            f"({mem['bytes_per_step'] / 1024:.1f} KiB/step), {mem['retained_bytes'] / 2**20:.1f} MiB held after it"
        )
    lines.append(f"memory (process): peak RSS {r['max_rss_bytes'] / 2**20:.1f} MiB")
    t = r["target"]
    verdict = "MET" if t["met"] else "MISSED"
    lines.append(
        f"target: engine overhead at most {t['us_per_step_below']:.0f} us/step (async no-op, median): {verdict} "
        f"at {t['measured_us_per_step']:.1f} us/step ({t['measured_us_per_step'] / t['us_per_step_below']:.2f}x the target)"
    )
    if "profile" in r:
        lines += ["", "cProfile of one async execution:", r["profile"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table, or JSON with `--json`."""
    args = parse_args(argv)
    print_result(measure(args), report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
