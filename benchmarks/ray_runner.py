"""The Ray runner: what a step pays to run on the cluster, and what a second node buys CPU-bound steps (issue 16).

Starts throwaway Ray clusters on loopback (`planexec.scale.cluster`, token
auth on, the dashboard off) and measures, each in a child process that
drives runs (Ray joins one cluster per process):

* per-step overhead: `--steps` no-op steps (default 200) as a chain (each
  after the one before: the latency a step pays) and as a fan-out (all
  ready at once: the throughput), with the local runner (a sync no-op in a
  thread, an async one on the event loop) and with the Ray runner on two
  nodes of one CPU (the sync no-op as a task, the async one on the nodes'
  async actors); wall microseconds a step, median of `--repeats`;
* CPU-bound steps: `--cpu-steps` independent steps (default 8) of about
  `--seconds` (default 1) of pure-Python work each, calibrated here, with
  the local runner (threads: one at a time under the GIL), the local runner
  with ``isolated=True`` tools (a process a call), and the Ray runner on one
  node of one CPU, on two nodes of one CPU each, and on one node of two CPUs;
  wall seconds, median of `--cpu-repeats`.

What it can and cannot show on a machine of 2 cores: the "two nodes" are two
Raylets on the same 2 cores, so the second node adds the second core and
nothing else; "one node of two CPUs" is the control that says so (the same
cores, one node). The figure shows that spreading works (half the steps land
on each node, so the wall time halves against one node of one CPU) and what
the spreading costs; it cannot show what a second machine would add (its
own cores, memory and network), nor network latency: everything is on
loopback. Other work on the machine moves the figures; the medians and the
ratios are steadier than any one run.

    python benchmarks/ray_runner.py                 # ~3-4 min: three clusters, both tables
    python benchmarks/ray_runner.py --only overhead --repeats 7
    python benchmarks/ray_runner.py --json

Exit status 0 even when a figure looks wrong (a measurement, not a test).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from planexec import Engine, Plan, Registry
from planexec.scale import RayRunner
from planexec.scale.cluster import RayNode, TempRayCluster

ROOT = Path(__file__).resolve().parent.parent

WORK = textwrap.dedent(
    """
    def work(n: int) -> int:
        total = 0
        for i in range(n):
            total += i * i % 7
        return total
    """
)

TOOLS = (
    textwrap.dedent(
        '''
    """The benchmark's tools: no-ops, and pure-Python work that holds the GIL (it says how long it ran on a CPU, and where)."""
    import sys
    import time

    from planexec import tool


    def where() -> str:
        ray = sys.modules.get("ray")
        return ray.util.get_node_ip_address() if ray is not None and ray.is_initialized() else "here"


    @tool(idempotent=True, untrusted_output=False)
    def nothing() -> None:
        return None


    @tool(idempotent=True, untrusted_output=False)
    async def anothing() -> None:
        return None
    '''
    )
    + WORK
    + textwrap.dedent(
        """

    def measured(n: int) -> dict:
        t0 = time.thread_time()
        work(n)
        return {"cpu": time.thread_time() - t0, "where": where()}


    @tool(idempotent=True, untrusted_output=False)
    def burn(n: int) -> dict:
        return measured(n)


    @tool(idempotent=True, untrusted_output=False, isolated=True)
    def burn_isolated(n: int) -> dict:
        return measured(n)
    """
    )
)


# --- the children: one driver each ---------------------------------------------------------------


def _engine(registry: Registry, runner: RayRunner | None, width: int) -> Engine:
    return Engine(registry, runner=runner, max_concurrency=max(width, 1), default_timeout=None, seed=0)


def _plan(action: str, n: int, *, chain: bool, parameters: dict[str, Any] | None = None) -> Plan:
    steps = []
    for i in range(n):
        step: dict[str, Any] = {"id": f"s{i}", "action": action, "parameters": dict(parameters or {})}
        if chain and i:
            step["depends_on"] = [f"s{i - 1}"]
        steps.append(step)
    return Plan.model_validate({"plan_id": "bench", "goal": "measure", "steps": steps})


def _runner(kind: str, registry: Registry, address: str | None) -> RayRunner | None:
    if kind == "local":
        return None
    runner = RayRunner(registry, address=address)
    runner.connect()
    return runner


def _timed(engine: Engine, plan: Plan) -> float:
    return _run(engine, plan)[0]


def _run(engine: Engine, plan: Plan) -> tuple[float, list[Any]]:
    """(wall seconds, the steps' outputs)."""
    t0 = time.perf_counter()
    result = engine.run_sync(plan)
    wall = time.perf_counter() - t0
    if result.status.value != "succeeded":
        failed = {sid: rec.error for sid, rec in result.steps.items() if rec.error}
        raise SystemExit(f"the benchmark's run did not succeed: {failed}")
    return wall, [rec.output.value for rec in result.steps.values() if rec.output is not None]


def child_overhead(tools: str, kind: str, address: str | None, steps: int, repeats: int) -> dict[str, Any]:
    """µs a step for no-op chains and fan-outs, sync and async, on one runner."""
    registry = Registry.default(tools)
    runner = _runner(kind, registry, address)
    out: dict[str, Any] = {}
    for action in ("nothing", "anothing"):
        engine = _engine(registry, runner, steps)
        _timed(engine, _plan(action, 8, chain=False))  # warm-up: workers and actors started, modules imported
        for shape in ("chain", "fanout"):
            plan = _plan(action, steps, chain=shape == "chain")
            walls = [_timed(engine, plan) for _ in range(repeats)]
            out[f"{action}-{shape}"] = [w / steps * 1e6 for w in walls]
    return out


def child_cpu(tools: str, kind: str, address: str | None, steps: int, n: int, repeats: int, action: str) -> dict[str, Any]:
    """Per run of `steps` independent CPU-bound steps on one runner: wall seconds, the steps' CPU seconds, where they ran."""
    registry = Registry.default(tools)
    runner = _runner(kind, registry, address)
    engine = _engine(registry, runner, steps)
    _timed(engine, _plan(action, steps, chain=False, parameters={"n": 1000}))  # warm-up
    plan = _plan(action, steps, chain=False, parameters={"n": n})
    out: dict[str, Any] = {"walls": [], "cpu": [], "where": [], "load": []}
    for _ in range(repeats):
        wall, outputs = _run(engine, plan)
        out["walls"].append(wall)
        out["cpu"].append(sum(o["cpu"] for o in outputs))
        out["where"].append(sorted({o["where"] for o in outputs}))
        out["load"].append(os.getloadavg()[0])  # the machine's own load: other work shares these cores
    return out


# --- the parent: clusters and children ------------------------------------------------------------


def _child(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", *args], env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"a measurement failed: {' '.join(args)}\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _calibrate(seconds: float) -> int:
    """The work size that takes about `seconds` here (pure Python, one thread)."""
    namespace: dict[str, Any] = {}
    exec(WORK, namespace)  # the tools' own function, timed here
    work = namespace["work"]
    n = 200_000
    while True:
        t0 = time.perf_counter()
        work(n)
        took = time.perf_counter() - t0
        if took > 0.2:
            return int(n * seconds / took)
        n *= 2


def _cluster(cpus: list[int]) -> TempRayCluster:
    nodes = [RayNode(f"127.0.0.{2 + i}", num_cpus=c) for i, c in enumerate(cpus)]
    return TempRayCluster(nodes, pythonpath=str(ROOT / "src"))


def main() -> None:
    """Measure and print the tables (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="no-op steps a run (default 200)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each no-op plan (default 5)")
    parser.add_argument("--cpu-steps", type=int, default=8, help="CPU-bound steps (default 8)")
    parser.add_argument("--seconds", type=float, default=1.0, help="seconds of work a CPU-bound step (default 1)")
    parser.add_argument("--cpu-repeats", type=int, default=3, help="runs of the CPU-bound plan (default 3)")
    parser.add_argument("--only", choices=("overhead", "cpu"), help="one of the two tables")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the tables")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        which, *rest = args.child
        if which == "overhead":
            tools, kind, address, steps, repeats = rest
            print(json.dumps(child_overhead(tools, kind, address or None, int(steps), int(repeats))))
        else:
            tools, kind, address, steps, n, repeats, action = rest
            print(json.dumps(child_cpu(tools, kind, address or None, int(steps), int(n), int(repeats), action)))
        return

    folder = Path(tempfile.mkdtemp(prefix="pxbench-"))
    tools = str(folder / "benchtools.py")
    Path(tools).write_text(TOOLS)
    try:
        report: dict[str, Any] = {
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "config": vars(args) | {"child": None},
        }
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}
        n = _calibrate(args.seconds)
        report["config"]["work_n"] = n
        overhead: dict[str, Any] = {}
        cpu: dict[str, Any] = {}
        if args.only != "overhead":
            for name, action in (("local, threads", "burn"), ("local, isolated processes", "burn_isolated")):
                cpu[name] = _child(["cpu", tools, "local", "", str(args.cpu_steps), str(n), str(args.cpu_repeats), action], env)
        with _cluster([1, 1]) as two:
            if args.only != "cpu":
                overhead["local"] = _child(["overhead", tools, "local", "", str(args.steps), str(args.repeats)], env)
                overhead["ray, 2 nodes"] = _child(["overhead", tools, "ray", two.address, str(args.steps), str(args.repeats)], two.env)
            if args.only != "overhead":
                cpu["ray, 2 nodes x 1 CPU"] = _child(
                    ["cpu", tools, "ray", two.address, str(args.cpu_steps), str(n), str(args.cpu_repeats), "burn"], two.env
                )
        if args.only != "overhead":
            for name, cpus in (("ray, 1 node x 1 CPU", [1]), ("ray, 1 node x 2 CPUs", [2])):
                with _cluster(cpus) as one:
                    cpu[name] = _child(
                        ["cpu", tools, "ray", one.address, str(args.cpu_steps), str(n), str(args.cpu_repeats), "burn"], one.env
                    )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report["overhead_us_per_step"] = overhead
    report["cpu_bound_wall_s"] = cpu
    if args.json:
        print(json.dumps(report, indent=2))
        return
    _print(report, args)


def _med(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f}"


def _print(report: dict[str, Any], args: argparse.Namespace) -> None:
    machine = report["machine"]
    print(f"{machine['cpus']} CPUs, Python {machine['python']}, {machine['platform']}\n")
    overhead = report["overhead_us_per_step"]
    if overhead:
        print(f"### Per-step overhead: {args.steps} no-op steps, µs a step (median of {args.repeats})\n")
        print("| runner | sync chain | sync fan-out | async chain | async fan-out |")
        print("|---|---|---|---|---|")
        for name, row in overhead.items():
            cells = [_med(row[k]) for k in ("nothing-chain", "nothing-fanout", "anothing-chain", "anothing-fanout")]
            print(f"| {name} | {' | '.join(cells)} |")
        print()
    cpu = report["cpu_bound_wall_s"]
    if cpu:
        base = statistics.median(cpu["ray, 1 node x 1 CPU"]["walls"]) if "ray, 1 node x 1 CPU" in cpu else None
        print(
            f"### {args.cpu_steps} CPU-bound steps of ~{args.seconds:g} s (n={report['config']['work_n']:,}), wall s (median of {args.cpu_repeats})\n"
        )
        print("| runner | wall s | steps' CPU s | CPU / wall | nodes used | against Ray on 1 node x 1 CPU | load (1 min) |")
        print("|---|---|---|---|---|---|---|")
        for name, row in cpu.items():
            wall, used = statistics.median(row["walls"]), statistics.median(row["cpu"])
            ratio = f"{base / wall:.2f}x" if base else ""
            nodes = ", ".join(row["where"][-1])
            print(f"| {name} | {wall:.2f} | {used:.2f} | {used / wall:.2f} | {nodes} | {ratio} | {statistics.median(row['load']):.1f} |")


if __name__ == "__main__":
    main()
