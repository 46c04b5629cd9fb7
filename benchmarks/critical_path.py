"""How close the engine gets to the critical path of a DAG of sleeping steps.

What it measures, on `--layers` x `--width` steps (default 20 x 10 = 200),
each step after the first layer depending on 1-3 random steps of the layer
before, each sleeping a seeded random 20-80 ms (the built-in ``sleep`` tool):

* the critical-path lower bound: the longest path of sleep durations through
  the DAG; no scheduler can finish sooner;
* the engine (dependency-driven, concurrency limit = the step count): wall
  time, wall / lower bound (target at most 1.02), the dispatch latency of
  each step (its start minus the end of its last dependency), and where the
  wall time beyond the bound went along the critical path: before its first
  step started, between its steps, inside them beyond their sleep (tool
  argument checks, timer lateness, a busy loop), after its last step;
* the engine with ``max_concurrency=1`` (sequential): wall time against the
  sum of the sleeps, and the engine's speed-up over it;
* a superstep scheduler simulated beside the engine: each layer runs with
  `asyncio.gather` on the same tool and the next layer waits for the whole
  layer (a barrier), as in Pregel/BSP-style executors. Its wall time is the
  sum of each layer's slowest step, so a step waits for unrelated slow steps;
  the dispatch latency column shows that wait;
* the asyncio floor: the critical path's sleeps awaited back to back with
  bare `asyncio.sleep`, no engine. The event loop wakes a timer up to about
  a millisecond late (epoll's timeout is in whole milliseconds), so this is
  the best any asyncio scheduler can reach; the engine's ratio minus this
  one is the engine's own share.

Each mode is repeated `--repeats` times in a fresh event loop; the median is
reported. Expect about (repeats x (sum of sleeps + 2 x lower bound)) seconds:
some 35 s with the defaults, most of it the sequential mode.

Run from the repository root (planexec installed, e.g. ``pip install -e .``)::

    python benchmarks/critical_path.py                   # the table
    python benchmarks/critical_path.py --json            # one JSON object
    python benchmarks/critical_path.py --modes engine,superstep --repeats 5
    python benchmarks/critical_path.py --layers 40 --width 20 --min-ms 5 --max-ms 20

Exit status 0 even when the target is missed; 1 when a run does not succeed.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import sys
import time
from typing import Any

from layered import LayeredStep, add_dag_arguments, build_plan, layered_dag, machine, median, print_result, spread

from planexec import Engine, Registry, check_plan
from planexec.workers.builtins import register as register_builtins

TARGET_RATIO = 1.02  # at most (issue 13, part 5; it was under 1.05)
MODES = ("engine", "sequential", "superstep", "floor")


def sleep_registry() -> Registry:
    """A registry with planexec's built-ins (the ``sleep`` tool among them), whether or not entry points are installed."""
    registry = Registry()
    register_builtins(registry)
    return registry


def durations(dag: list[list[LayeredStep]], min_ms: int, max_ms: int, seed: int) -> dict[str, float]:
    """Seconds each step sleeps: whole milliseconds drawn uniformly in [min_ms, max_ms], seeded apart from the DAG's shape."""
    rng = random.Random(f"durations-{seed}")
    return {s.step_id: rng.randint(min_ms, max_ms) / 1000 for row in dag for s in row}


def critical_path(dag: list[list[LayeredStep]], seconds: dict[str, float]) -> tuple[float, list[str]]:
    """The longest path of durations through the DAG (the lower bound on any schedule's wall time) and its steps."""
    finish: dict[str, float] = {}
    via: dict[str, str | None] = {}
    for row in dag:  # layers are a topological order
        for s in row:
            before = max(s.depends_on, key=lambda d: finish[d], default=None)
            finish[s.step_id] = seconds[s.step_id] + (finish[before] if before else 0.0)
            via[s.step_id] = before
    end: str | None = max(finish, key=lambda sid: finish[sid])
    path = []
    while end is not None:
        path.append(end)
        end = via[end]
    return max(finish.values()), path[::-1]


def superstep_bound(dag: list[list[LayeredStep]], seconds: dict[str, float]) -> float:
    """The best a layer-barrier scheduler can do: the sum over layers of the layer's slowest step."""
    return sum(max(seconds[s.step_id] for s in row) for row in dag)


def dispatch_latencies(dag: list[list[LayeredStep]], started: dict[str, float], finished: dict[str, float]) -> list[float]:
    """For every step with dependencies: its start minus the end of its last dependency, in seconds."""
    return [started[s.step_id] - max(finished[d] for d in s.depends_on) for row in dag for s in row if s.depends_on]


async def _engine_once(
    registry: Registry, plan: Any, limit: int, dag: list[list[LayeredStep]], path: list[str], seconds: dict[str, float]
) -> tuple[float, list[float], dict[str, float]]:
    engine = Engine(registry, max_concurrency=limit, seed=0)
    # StepRecord times are UTC datetimes (microsecond resolution): take the run's ends on the same clock
    w0, t0 = time.time(), time.perf_counter()
    result = await engine.start(plan, validate=False).result()
    wall, w1 = time.perf_counter() - t0, time.time()
    if not result.ok:
        raise SystemExit(f"engine run {result.status.value}: {result.reason}")
    started = {sid: r.started_at.timestamp() for sid, r in result.steps.items()}  # type: ignore[union-attr]
    finished = {sid: r.finished_at.timestamp() for sid, r in result.steps.items()}  # type: ignore[union-attr]
    # where the wall time beyond the lower bound went, along the critical path
    excess = {
        "start_ms": (started[path[0]] - w0) * 1e3,
        "dispatch_ms": sum(started[b] - finished[a] for a, b in itertools.pairwise(path)) * 1e3,
        "in_steps_ms": sum(finished[s] - started[s] - seconds[s] for s in path) * 1e3,
        "finish_ms": (w1 - finished[path[-1]]) * 1e3,
    }
    return wall, dispatch_latencies(dag, started, finished), excess


def run_engine(
    registry: Registry, plan: Any, limit: int, dag: list[list[LayeredStep]], path: list[str], seconds: dict[str, float]
) -> tuple[float, list[float], dict[str, float]]:
    """One engine execution in a fresh event loop: wall seconds, dispatch latencies, and the excess over the
    bound along the critical path (start, dispatch, inside steps beyond their sleep, finish; milliseconds)."""
    return asyncio.run(_engine_once(registry, plan, limit, dag, path, seconds))


async def _superstep_once(registry: Registry, dag: list[list[LayeredStep]], seconds: dict[str, float]) -> tuple[float, list[float]]:
    tool = registry.tools["sleep"]
    started: dict[str, float] = {}
    finished: dict[str, float] = {}

    async def one(step_id: str) -> None:
        started[step_id] = time.perf_counter()
        await tool.invoke({"seconds": seconds[step_id]})
        finished[step_id] = time.perf_counter()

    t0 = time.perf_counter()
    for row in dag:
        # the barrier: no step of the next layer starts before every step of this one ended
        await asyncio.gather(*(one(s.step_id) for s in row))
    return time.perf_counter() - t0, dispatch_latencies(dag, started, finished)


def run_superstep(registry: Registry, dag: list[list[LayeredStep]], seconds: dict[str, float]) -> tuple[float, list[float]]:
    """One superstep execution (layer by layer, asyncio.gather per layer) in a fresh event loop."""
    return asyncio.run(_superstep_once(registry, dag, seconds))


async def _floor_once(path_seconds: list[float]) -> float:
    t0 = time.perf_counter()
    for d in path_seconds:
        await asyncio.sleep(d)
    return time.perf_counter() - t0


def run_floor(path_seconds: list[float]) -> float:
    """The critical path's sleeps awaited one after another with bare `asyncio.sleep`, in a fresh event loop:
    what the event loop's timers alone add to the lower bound, with no engine at all."""
    return asyncio.run(_floor_once(path_seconds))


def _summary(walls: list[float], latencies: list[list[float]]) -> dict[str, Any]:
    flat = sorted(x for run in latencies for x in run)
    return {
        "wall_s": spread(walls),
        "dispatch_latency_ms": {
            "median": median(flat) * 1e3,
            "p95": flat[int(0.95 * (len(flat) - 1))] * 1e3,
            "max": flat[-1] * 1e3,
        }
        if flat
        else None,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dag_arguments(p, layers=20, width=10, repeats=3)
    p.add_argument("--min-ms", type=int, default=20, help="shortest sleep in ms (default 20)")
    p.add_argument("--max-ms", type=int, default=80, help="longest sleep in ms (default 80)")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated subset of {','.join(MODES)} (default all)")
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        p.error(f"unknown mode(s): {', '.join(sorted(unknown))}; choose from {', '.join(MODES)}")
    if not 0 < args.min_ms <= args.max_ms:
        p.error("need 0 < --min-ms <= --max-ms")
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every figure, as the JSON object `--json` prints."""
    registry = sleep_registry()
    dag = layered_dag(args.layers, args.width, min_deps=args.min_deps, max_deps=args.max_deps, seed=args.seed)
    seconds = durations(dag, args.min_ms, args.max_ms, args.seed)
    plan = check_plan(build_plan(dag, "sleep", lambda s: {"seconds": seconds[s.step_id]}), registry)
    n = len(plan.steps)
    bound, path = critical_path(dag, seconds)
    total = sum(seconds.values())
    barrier = superstep_bound(dag, seconds)

    warm = layered_dag(2, 2)  # a warm-up run, kept out of the figures
    run_engine(registry, build_plan(warm, "noop"), 4, warm, [warm[0][0].step_id], {s.step_id: 0.0 for row in warm for s in row})

    r: dict[str, Any] = {
        "benchmark": "critical_path",
        "machine": machine(),
        "config": {
            "layers": args.layers,
            "width": args.width,
            "steps": n,
            "min_deps": args.min_deps,
            "max_deps": args.max_deps,
            "min_ms": args.min_ms,
            "max_ms": args.max_ms,
            "seed": args.seed,
            "repeats": args.repeats,
        },
        "critical_path_s": bound,
        "critical_path_steps": len(path),
        "sum_of_sleeps_s": total,
        "superstep_bound_s": barrier,
    }
    if "engine" in args.modes:
        runs = [run_engine(registry, plan, n, dag, path, seconds) for _ in range(args.repeats)]
        s = r["engine"] = _summary([w for w, _, _ in runs], [lat for _, lat, _ in runs])
        s["max_concurrency"] = n
        s["excess_over_bound_ms"] = {k: median([x[k] for _, _, x in runs]) for k in runs[0][2]}
        s["ratio_to_critical_path"] = s["wall_s"]["median"] / bound
        r["target"] = {
            "ratio_below": TARGET_RATIO,
            "measured_ratio": s["ratio_to_critical_path"],
            "met": s["ratio_to_critical_path"] <= TARGET_RATIO,
        }
    if "sequential" in args.modes:
        runs = [run_engine(registry, plan, 1, dag, path, seconds) for _ in range(args.repeats)]
        s = r["sequential"] = _summary([w for w, _, _ in runs], [lat for _, lat, _ in runs])
        s["max_concurrency"] = 1
        s["ratio_to_sum_of_sleeps"] = s["wall_s"]["median"] / total
        if "engine" in r:
            s["engine_speedup"] = s["wall_s"]["median"] / r["engine"]["wall_s"]["median"]
    if "superstep" in args.modes:
        runs = [run_superstep(registry, dag, seconds) for _ in range(args.repeats)]
        s = r["superstep"] = _summary([w for w, _ in runs], [lat for _, lat in runs])
        s["ratio_to_critical_path"] = s["wall_s"]["median"] / bound
        s["ratio_to_superstep_bound"] = s["wall_s"]["median"] / barrier
        if "engine" in r:
            s["engine_speedup"] = s["wall_s"]["median"] / r["engine"]["wall_s"]["median"]
    if "floor" in args.modes:
        walls = [run_floor([seconds[sid] for sid in path]) for _ in range(args.repeats)]
        r["floor"] = {"wall_s": spread(walls), "ratio_to_critical_path": median(walls) / bound}
    return r


def report(r: dict[str, Any]) -> str:
    """The human-readable table."""
    c, m = r["config"], r["machine"]
    bound = r["critical_path_s"]
    lines = [
        f"critical path: {c['layers']} layers x {c['width']} steps = {c['steps']} sleep steps of {c['min_ms']}-{c['max_ms']} ms "
        f"({c['min_deps']}-{c['max_deps']} deps per step, seed {c['seed']})",
        f"median of {c['repeats']} run{'s' if c['repeats'] != 1 else ''}; Python {m['python']}, {m['cpus']} CPUs, {m['date']}",
        "",
        f"critical-path lower bound   {bound:8.3f} s  (longest path: {r['critical_path_steps']} steps)",
        f"superstep bound             {r['superstep_bound_s']:8.3f} s  (sum over layers of the slowest step)",
        f"sum of sleeps               {r['sum_of_sleeps_s']:8.3f} s  (sequential bound)",
        "",
        f"{'mode':<30}{'wall s':>9}{'min s':>9}{'max s':>9}{'/ crit. path':>13}{'dispatch latency ms (median/p95/max)':>38}",
    ]
    rows = (
        ("engine (dependency-driven)", "engine"),
        ("engine, max_concurrency=1", "sequential"),
        ("superstep (gather per layer)", "superstep"),
    )
    for label, key in rows:
        if key not in r:
            continue
        s = r[key]
        w = s["wall_s"]
        lat = s["dispatch_latency_ms"]
        lat_text = f"{lat['median']:.2f} / {lat['p95']:.2f} / {lat['max']:.2f}" if lat else "-"
        lines.append(f"{label:<30}{w['median']:9.3f}{w['min']:9.3f}{w['max']:9.3f}{w['median'] / bound:13.3f}{lat_text:>38}")
    lines.append("")
    if "engine" in r:
        x = r["engine"]["excess_over_bound_ms"]
        lines.append(
            f"engine excess over the bound, along the critical path (ms, median): start {x['start_ms']:.1f}, "
            f"dispatch {x['dispatch_ms']:.1f}, inside steps beyond their sleep {x['in_steps_ms']:.1f}, finish {x['finish_ms']:.1f}"
        )
    if "sequential" in r:
        s = r["sequential"]
        text = f"sequential: wall / sum of sleeps = {s['ratio_to_sum_of_sleeps']:.3f}"
        if "engine_speedup" in s:
            text += f"; the engine is {s['engine_speedup']:.2f}x faster than sequential"
        lines.append(text)
    if "superstep" in r:
        s = r["superstep"]
        text = f"superstep: wall / superstep bound = {s['ratio_to_superstep_bound']:.3f}, wall / critical path = {s['ratio_to_critical_path']:.3f}"
        if "engine_speedup" in s:
            text += f"; superstep wall / engine wall = {s['engine_speedup']:.2f}"
            lost = 1 - 1 / s["engine_speedup"]
            if lost > 0:
                text += f" (the barrier costs {lost:.0%} of the superstep's wall time)"
        lines.append(text)
    if "floor" in r:
        f = r["floor"]
        lines.append(
            f"asyncio floor: the critical path's {r['critical_path_steps']} sleeps awaited back to back with bare asyncio.sleep: "
            f"{f['wall_s']['median']:.3f} s, {f['ratio_to_critical_path']:.3f} x the bound (event-loop timer lateness, no engine)"
        )
    if "target" in r:
        t = r["target"]
        verdict = "MET" if t["met"] else "MISSED"
        lines.append(f"target: engine wall / critical path at most {t['ratio_below']}: {verdict} at {t['measured_ratio']:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table, or JSON with `--json`."""
    args = parse_args(argv)
    print_result(measure(args), report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
