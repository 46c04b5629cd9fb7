"""Engine overhead on plans where data flows: every step takes its parents' outputs as ``${id}`` arguments.

The plan is the layered DAG of `engine_overhead.py` (`--width` steps a
layer, default 20; each step after the first layer depends on 1-3 random
steps of the layer before), and every step passes the outputs of all its
dependencies to its tool as references (``{"inputs": ["${s000_003}",
"${s000_017}"]}``); the tool returns a short string, so each value flows on.
The tool is a pure function, declared idempotent (so a recorded step need
not wait for its start to be stored: `engine.recording`); ``--side-effects``
declares it as a tool with side effects is.
This is the shape where a cost that grows with a step's ancestry (its
provenance, its events, its stored rows) shows: a plan of no-op steps that
pass nothing never sees it.

For each size (`--steps`, default 500, 2,000, 8,000 and 20,000), in a
fresh child process each, it prints microseconds a step (wall / steps, the
median of `--repeats`):

* ``bare``: the same DAG and function under graphlib + asyncio (one task a
  step, a semaphore, a timeout, outputs passed by id): the floor;
* ``records``: the floor plus only what an engine that records its work
  must build a step, with planexec's own classes (`records_run`): the
  references resolved, the arguments checked against the tool's schema, the
  output with its provenance, and a start and an end event kept in the
  run's history. No engine that keeps these can run a step faster here;
* ``LangGraph`` (with ``--langgraph``, when it is installed): the same DAG
  as a `StateGraph`, one node a step, a waiting edge from its parents;
* ``memory``: `Engine.start(plan, validate=False)` to its `RunResult`;
* ``sqlite``: the same run recorded into a new SQLite store (`record_run`
  with the `DurableRunner`, as ``planexec run`` does), with what the run
  added to the store, a step (database and WAL files, less a new store's);

then planexec against the floor (``x bare``), against the floor with the
records (``x rec``: the engine's own bookkeeping) and against LangGraph
(``LG / mem``: how many times faster), the slope: each size's figure over
the smallest size's, and the
targets of issue 24 (memory at most 40 us a step and flat within 25% from
the smallest size to the largest; SQLite at most 2x memory; store bytes a
step flat and at most 2 KB).

    python benchmarks/dataflow.py                          # the table (~2 min)
    python benchmarks/dataflow.py --steps 500,4000 --check 1.5 --no-sqlite
        # CI: exit 1 when us/step at the largest size exceeds 1.5x that at the smallest
    python benchmarks/dataflow.py --steps 500,4000 --no-sqlite --check 1.5 --check-records 2.6
        # and when planexec costs more than 2.6x the floor with the records at any size

``--check R`` makes the run a test of the slope (in one process, so both
sizes see the same machine): exit 1 when the largest size's in-memory
figure is more than R times the smallest's. ``--check-records R`` makes it
a test of the engine's own cost: exit 1 when, at any size, the in-memory
figure is more than R times the floor with the records measured beside it
(a ratio of two figures taken in turns in one process, so a slow or busy
machine moves both). Without them the exit status is 0 even when a target
is missed (a measurement, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import graphlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from engine_overhead import bare_run
from layered import LayeredStep, build_plan, layered_dag, machine, median

from planexec import Engine, Plan, Registry
from planexec.engine.events import StepStarted, StepSucceeded, utcnow
from planexec.engine.history import History
from planexec.plan.references import resolve_references
from planexec.usage import Usage
from planexec.workers.io import Output, Provenance, Source

TARGET_US_PER_STEP = 40.0
TARGET_FLAT = 1.25  # the largest size's us/step over the smallest's
TARGET_SQLITE_RATIO = 2.0
TARGET_STORE_BYTES = 2048


def make_registry(*, idempotent: bool = True) -> Registry:
    """A registry with one tool that takes its inputs and returns a short string: a pure function, declared
    idempotent and read-only as such a tool is (`idempotent=False`: as a tool with side effects is)."""
    registry = Registry()

    @registry.tool(idempotent=idempotent, read_only=idempotent)
    async def relay(inputs: list[Any] | None = None) -> str:
        """Take the parents' outputs; return a short value of its own."""
        return f"from {len(inputs or ())}"

    return registry


def parameters(step: LayeredStep) -> dict[str, Any]:
    """Every dependency's output, as a reference: the data flows along every edge."""
    return {"inputs": [f"${{{dep}}}" for dep in step.depends_on]}


def referencing_plan(steps: int, width: int, seed: int = 0) -> tuple[list[list[LayeredStep]], Plan]:
    """The layered DAG of about `steps` steps and its plan, each step referencing all its parents."""
    dag = layered_dag(max(1, steps // width), width, seed=seed)
    return dag, build_plan(dag, "relay", parameters)


def _merge(current: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    current.update(update)  # in place: a reducer that copied would make the peer quadratic, not its design
    return current


class State(TypedDict):
    """The LangGraph state: every step's output by id, in one channel."""

    out: Annotated[dict[str, Any], _merge]


def _langgraph(dag: list[list[LayeredStep]], fn: Any, width: int) -> float:
    """The same DAG as a LangGraph `StateGraph` (one node a step, a waiting edge from its parents, the outputs in one
    channel merged in place), run with `ainvoke` in memory: what a peer framework costs for the same job."""
    from langgraph.graph import START, StateGraph

    graph = StateGraph(State)
    for row in dag:
        for s in row:

            async def node(state: State, sid: str = s.step_id, deps: tuple[str, ...] = s.depends_on) -> dict[str, Any]:
                return {"out": {sid: await fn(inputs=[state["out"][d] for d in deps])}}

            graph.add_node(s.step_id, node)
            graph.add_edge(list(s.depends_on) if s.depends_on else START, s.step_id)
    compiled = graph.compile()

    async def go() -> float:
        t0 = time.perf_counter()
        await compiled.ainvoke({"out": {}}, {"recursion_limit": len(dag) + 10, "max_concurrency": width})
        return time.perf_counter() - t0

    return asyncio.run(go())


async def records_run(plan: Plan, registry: Registry, limit: int) -> float:
    """`bare_run` plus only the records a recording engine must build a step, with planexec's own classes: the
    references resolved, the arguments checked (and given as the function's keywords), the output with its
    provenance (its tool's source, its inputs), a `StepStarted` and a `StepSucceeded` kept in a `History`. No
    scheduler state, limits, deadlines, records of steps, approvals or checks: what is left is the engine's own work."""
    tool = registry.tools["relay"]
    steps = {s.step_id: s for s in plan.steps}
    graph = {s.step_id: tuple(s.dependencies) for s in plan.steps}
    sorter = graphlib.TopologicalSorter(graph)
    sorter.prepare()
    slots = asyncio.Semaphore(limit)
    finished = asyncio.Event()
    loop = asyncio.get_running_loop()
    history = History("records")
    tasks: dict[str, asyncio.Task[None]] = {}
    outputs: dict[str, Output] = {}
    zero = Usage()

    def launch() -> None:
        for sid in sorter.get_ready():
            history.emit(StepStarted, at=utcnow(), step_id=sid, worker="tool", action="relay", attempt=1, model=None)
            tasks[sid] = loop.create_task(run(sid))
        if not sorter.is_active():
            finished.set()

    async def run(sid: str) -> None:
        async with slots, asyncio.timeout(300.0):
            params = resolve_references(steps[sid].parameters, {d: outputs[d].value for d in graph[sid]}, {})
            value = await tool.fn(**tool.keywords(tool.check_arguments(params, step_id=sid)))
        source = Source(kind="tool", step_id=sid, tool="relay", untrusted=False)
        prov = Provenance(
            run_id="records", plan_id=plan.plan_id, plan_version=1, step_id=sid, worker="tool", action="relay",
            tools=["relay"], sources=[source], inputs=list(graph[sid]),
        )  # fmt: skip
        out = outputs[sid] = Output(value=value, provenance=prov)
        history.emit(StepSucceeded, at=utcnow(), step_id=sid, attempt=1, wall_time=0.0, usage=zero, output=out, model=None)
        sorter.done(sid)
        launch()

    t0 = time.perf_counter()
    launch()
    await finished.wait()
    return time.perf_counter() - t0


def _memory(registry: Registry, plan: Plan, width: int) -> float:
    async def go() -> float:
        engine = Engine(registry, max_concurrency=width, seed=0)
        t0 = time.perf_counter()
        result = await engine.start(plan, validate=False).result()
        wall = time.perf_counter() - t0
        if not result.ok:
            raise SystemExit(f"run {result.status.value}: {result.reason}")
        return wall

    return asyncio.run(go())


def _sqlite(registry: Registry, plan: Plan, width: int, folder: Path) -> tuple[float, int]:
    from planexec.engine.recording import DurableRunner, record_run
    from planexec.engine.runner import LocalRunner
    from planexec.store import SqliteRunStore

    path = folder / f"runs-{time.monotonic_ns()}.db"
    store = SqliteRunStore(path)

    async def go() -> float:
        engine = Engine(registry, runner=DurableRunner(LocalRunner(registry)), max_concurrency=width, seed=0)
        t0 = time.perf_counter()
        run = engine.start(plan, validate=False)
        record_run(run, store)
        result = await run.result()
        wall = time.perf_counter() - t0
        if not result.ok:
            raise SystemExit(f"run {result.status.value}: {result.reason}")
        return wall

    try:
        wall = asyncio.run(go())
    finally:
        store.close()
    size = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    return wall, size


def child(steps: int, width: int, repeats: int, sqlite: bool, langgraph: bool = False, side_effects: bool = False) -> dict[str, Any]:
    """Every figure of one size, measured in this process."""
    registry = make_registry(idempotent=not side_effects)
    dag, plan = referencing_plan(steps, width)
    n = len(plan.steps)
    graph = {s.step_id: s.depends_on for row in dag for s in row}
    fn = registry.tools["relay"].fn
    bare, floor, memory, durable, sizes, peer = [], [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="planexec-dataflow-") as folder:
        for _ in range(repeats):
            gc.collect()
            bare.append(asyncio.run(bare_run(graph, fn, width, with_inputs=True))[0])
            gc.collect()
            floor.append(asyncio.run(records_run(plan, registry, width)))
            if langgraph:
                gc.collect()
                peer.append(_langgraph(dag, fn, width))
            gc.collect()
            memory.append(_memory(registry, plan, width))
            if sqlite:
                gc.collect()
                wall, size = _sqlite(registry, plan, width, Path(folder))
                durable.append(wall)
                sizes.append(size)
    row: dict[str, Any] = {
        "steps": n,
        "bare_us": round(median(bare) / n * 1e6, 1),
        "records_us": round(median(floor) / n * 1e6, 1),
        "memory_us": round(median(memory) / n * 1e6, 1),
    }
    if langgraph:
        row["langgraph_us"] = round(median(peer) / n * 1e6, 1)
    if sqlite:
        empty = _empty_store()
        row["sqlite_us"] = round(median(durable) / n * 1e6, 1)
        row["store_bytes_per_step"] = round((median(sizes) - empty) / n)  # what the run added
        row["store_bytes"] = round(median(sizes))
        row["empty_store_bytes"] = empty
    return row


def _empty_store() -> int:
    """The bytes of a new store with no run: what every store costs before its first step."""
    from planexec.store import SqliteRunStore

    with tempfile.TemporaryDirectory(prefix="planexec-dataflow-") as folder:
        path = Path(folder) / "empty.db"
        SqliteRunStore(path).close()
        return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def report(rows: list[dict[str, Any]], sqlite: bool) -> str:
    """The table, the slope against the smallest size, and the targets."""
    peer = "langgraph_us" in rows[0]
    lines = [
        f"{'steps':>7} {'bare us':>8} {'records us':>11}"
        + (f" {'LangGraph us':>13}" if peer else "")
        + f" {'memory us':>10} {'x bare':>7} {'x rec':>6}"
        + (f" {'LG / mem':>9}" if peer else "")
        + f" {'slope':>6}"
        + (f" {'sqlite us':>10} {'x mem':>6} {'B/step':>7}" if sqlite else "")
    ]
    first = rows[0]
    for r in rows:
        line = f"{r['steps']:>7,} {r['bare_us']:>8.1f} {r['records_us']:>11.1f}" + (f" {r['langgraph_us']:>13.1f}" if peer else "")
        line += f" {r['memory_us']:>10.1f} {r['memory_us'] / r['bare_us']:>7.2f} {r['memory_us'] / r['records_us']:>6.2f}"
        line += f" {r['langgraph_us'] / r['memory_us']:>9.2f}" if peer else ""
        line += f" {r['memory_us'] / first['memory_us']:>6.2f}"
        if sqlite:
            line += f" {r['sqlite_us']:>10.1f} {r['sqlite_us'] / r['memory_us']:>6.2f} {r['store_bytes_per_step']:>7,}"
        lines.append(line)
    if sqlite:
        lines.append(
            f"(B/step: what a run adds to the store, a new store being {rows[0]['empty_store_bytes']:,} bytes before its first run)"
        )
    last = rows[-1]
    worst = max(r["memory_us"] for r in rows)
    flat = last["memory_us"] / first["memory_us"]
    least = min(r["records_us"] for r in rows)
    lines.append(
        f"target: memory <= {TARGET_US_PER_STEP:.0f} us/step at every size: {'MET' if worst <= TARGET_US_PER_STEP else 'MISSED'} (worst {worst:.1f};"
        f" the floor with the records alone is {least:.1f} here{', over the target' if least > TARGET_US_PER_STEP else ''})"
    )
    lines.append(
        f"target: flat, {last['steps']:,} over {first['steps']:,} steps <= {TARGET_FLAT}x: {'MET' if flat <= TARGET_FLAT else 'MISSED'} ({flat:.2f}x)"
    )
    if sqlite:
        ratio = max(r["sqlite_us"] / r["memory_us"] for r in rows)
        most = max(r["store_bytes_per_step"] for r in rows)
        growth = last["store_bytes_per_step"] / first["store_bytes_per_step"]
        lines.append(
            f"target: SQLite <= {TARGET_SQLITE_RATIO}x memory: {'MET' if ratio <= TARGET_SQLITE_RATIO else 'MISSED'} (worst {ratio:.2f}x)"
        )
        lines.append(
            f"target: store <= {TARGET_STORE_BYTES:,} B/step and flat: "
            f"{'MET' if most <= TARGET_STORE_BYTES and growth <= TARGET_FLAT else 'MISSED'} (worst {most:,} B, {growth:.2f}x)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure each size (in a child process, or all in this one with --check) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="500,2000,8000,20000", help="comma-separated plan sizes (default 500,2000,8000,20000)")
    parser.add_argument("--width", type=int, default=20, help="steps per layer (default 20)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each figure; the median is reported (default 3)")
    parser.add_argument("--no-sqlite", action="store_true", help="in memory only")
    parser.add_argument("--langgraph", action="store_true", help="also the same DAG on LangGraph (when it is installed)")
    parser.add_argument("--side-effects", action="store_true", help="the tool declared as one with side effects (not idempotent)")
    parser.add_argument("--check", type=float, help="exit 1 when the largest size's us/step exceeds this many times the smallest's")
    parser.add_argument(
        "--check-records", type=float, help="exit 1 when, at any size, memory us/step exceeds this many times the floor with the records"
    )
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sqlite = not args.no_sqlite
    sizes = [int(s) for s in args.steps.split(",") if s]
    if args.child:
        print(json.dumps(child(args.child, args.width, args.repeats, sqlite, args.langgraph, args.side_effects)))
        return 0
    rows = []
    for steps in sizes:
        if args.check is not None or args.check_records is not None:  # one process: both sizes on the same machine state
            rows.append(child(steps, args.width, args.repeats, sqlite, args.langgraph, args.side_effects))
            continue
        argv_child = [sys.executable, __file__, "--child", str(steps), "--width", str(args.width), "--repeats", str(args.repeats)]
        argv_child += (["--no-sqlite"] if not sqlite else []) + (["--langgraph"] if args.langgraph else [])
        argv_child += ["--side-effects"] if args.side_effects else []
        out = subprocess.run(argv_child, capture_output=True, text=True, check=False, env=os.environ)
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            return 1
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if args.json:
        print(json.dumps({"machine": machine(), "rows": rows}, indent=2))
    else:
        print(report(rows, sqlite))
    failed = False
    if args.check is not None:
        slope = rows[-1]["memory_us"] / rows[0]["memory_us"]
        failed = slope > args.check
        print(
            f"check {'FAILED' if failed else 'passed'}: {rows[-1]['steps']:,} steps cost {slope:.2f}x a step"
            f" what {rows[0]['steps']:,} do (limit {args.check}x)"
        )
    if args.check_records is not None:
        worst = max(rows, key=lambda r: r["memory_us"] / r["records_us"])
        ratio = worst["memory_us"] / worst["records_us"]
        over = ratio > args.check_records
        failed = failed or over
        print(
            f"check {'FAILED' if over else 'passed'}: at {worst['steps']:,} steps planexec costs {ratio:.2f}x the floor"
            f" with the records ({worst['memory_us']:.1f} against {worst['records_us']:.1f} us a step; limit {args.check_records}x)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
