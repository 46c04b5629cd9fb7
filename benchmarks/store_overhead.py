"""Run store overhead: the 10,000-step no-op DAG in memory, recorded into SQLite, and into PostgreSQL.

What it measures, on `--layers` x `--width` steps (default 100 x 100 =
10,000; the DAG of `engine_overhead.py`, an async no-op tool on worker
``tool``), each timing from `Engine.start(plan, validate=False)` to the
`RunResult`, in a fresh event loop:

* ``memory``: no store (the baseline);
* ``sqlite``: `record_run(run, SqliteRunStore(...))` on a new file in a
  temporary folder: every event appended as it happens, one transaction
  per event-loop turn, and at once for each `StepStarted` (durable before
  the step's tool is called) and the other events resume needs;
* ``postgres``: the same into a `PostgresRunStore`, on the server given by
  `--postgres URL`, else on a throwaway local cluster (`TempPostgres`:
  Debian's ``postgresql`` package, on loopback; fsync off, so the figure
  is the store's round trips, not the disk).

The kinds take turns: each round runs one of each, so a machine that slows
down for a while slows them all. For each: wall seconds (median, min, max), events per second (events /
wall), microseconds per step, the slowdown against ``memory`` (wall, and
process CPU time: steadier on a shared machine; it counts this process's
threads, not the PostgreSQL server's), and how many transactions the
recorder committed. After each recorded run the
store is read back and checked: every event stored, in order. The last
line compares the SQLite slowdown to the target: at most 1.5x.

    python benchmarks/store_overhead.py                    # the table (~1-2 min)
    python benchmarks/store_overhead.py --json
    python benchmarks/store_overhead.py --stores memory,sqlite --repeats 5
    python benchmarks/store_overhead.py --postgres postgresql://user@host/db

Exit status 0 even when the target is missed (a measurement, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine_overhead import make_registry
from layered import (
    add_dag_arguments,
    build_plan,
    layered_dag,
    machine,
    print_result,
    spread,
)

from planexec import Engine, Plan, Registry
from planexec.engine.recording import DurableRunner, record_run
from planexec.engine.runner import LocalRunner
from planexec.store import PostgresRunStore, SqliteRunStore
from planexec.store.pgserver import PostgresUnavailable, TempPostgres

TARGET_SLOWDOWN = 1.5  # at most (issue 13, part 5; it was under 2)


class CountingStore:
    """Wraps a store to count the recorder's transactions (appends)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.appends = 0

    def append(self, events: Any, **kw: Any) -> int:
        self.appends += 1
        return self.store.append(events, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def _execute(registry: Registry, plan: Plan, store: Any, gated: bool) -> tuple[float, float, int, str]:
    runner = DurableRunner(LocalRunner(registry)) if gated else None
    engine = Engine(registry, runner=runner, max_concurrency=len(plan.steps), seed=0)
    c0, t0 = time.process_time(), time.perf_counter()
    run = engine.start(plan, validate=False)
    if store is not None:
        record_run(run, store)
    result = await run.result()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if not result.ok:
        raise SystemExit(f"run {result.status.value}: {result.reason}")
    return wall, cpu, len(run.history), run.run_id


def run_once(kind: str, registry: Registry, plan: Plan, folder: Path, pg_url: str | None, i: int) -> tuple[float, float, int, int | None]:
    """One run with one kind of store, checked: (wall s, cpu s, events, transactions or None)."""
    store = None
    backend, _, mode = kind.partition("-")
    if backend == "sqlite":
        store = CountingStore(SqliteRunStore(folder / f"{kind}-{i}.db"))
    elif backend == "postgres":
        store = CountingStore(PostgresRunStore(pg_url or "", schema=f"bench_{mode or 'gated'}_{i}_{time.time_ns()}"))
    gc.collect()
    try:
        wall, cpu, events, run_id = asyncio.run(_execute(registry, plan, store, gated=mode != "sync"))
        if store is None:
            return wall, cpu, events, None
        stored = store.events(run_id)
        if [e.seq for e in stored] != list(range(events)):
            raise SystemExit(f"{kind}: {len(stored)} of {events} events stored, or out of order")
        return wall, cpu, events, store.appends
    finally:
        if store is not None:
            store.close()


def time_stores(kinds: list[str], registry: Registry, plan: Plan, repeats: int, folder: Path, pg_url: str | None) -> dict[str, Any]:
    """Repeated runs of each kind of store, interleaved (one of each per round, so a machine that slows down
    slows them all): wall, events/s, µs/step, transactions; each recorded run checked."""
    runs: dict[str, list[tuple[float, float, int, int | None]]] = {kind: [] for kind in kinds}
    for i in range(repeats):
        for kind in kinds:
            runs[kind].append(run_once(kind, registry, plan, folder, pg_url, i))
    n = len(plan.steps)
    out: dict[str, Any] = {}
    for kind, done in runs.items():
        walls = [w for w, _, _, _ in done]
        figures: dict[str, Any] = {
            "wall_s": spread(walls),
            "cpu_s": spread([c for _, c, _, _ in done]),
            "events_per_s": spread([e / w for w, _, e, _ in done]),
            "us_per_step": spread([w / n * 1e6 for w in walls]),
            "events": done[-1][2],
        }
        appends = [float(a) for _, _, _, a in done if a is not None]
        if appends:
            figures["transactions"] = spread(appends)
        out[kind] = figures
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_dag_arguments(p, layers=100, width=100, repeats=3)
    p.add_argument(
        "--stores",
        default="memory,sqlite,sqlite-sync,postgres,postgres-sync",
        help="which to time, comma-separated (default: memory,sqlite,sqlite-sync,postgres,postgres-sync)",
    )
    p.add_argument("--postgres", metavar="URL", help="a PostgreSQL server to use (default: a throwaway local cluster)")
    return p.parse_args(argv)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every figure, as the JSON object `--json` prints."""
    registry = make_registry()
    plan = build_plan(layered_dag(args.layers, args.width, min_deps=args.min_deps, max_deps=args.max_deps, seed=args.seed), "noop_async")
    warm = build_plan(layered_dag(2, 4, seed=args.seed), "noop_async")
    kinds = [k.strip() for k in args.stores.split(",") if k.strip()]
    result: dict[str, Any] = {
        "benchmark": "store_overhead",
        "machine": machine(),
        "config": {"layers": args.layers, "width": args.width, "steps": len(plan.steps), "seed": args.seed, "repeats": args.repeats},
        "stores": {},
    }
    server: TempPostgres | None = None
    pg_url = args.postgres
    with tempfile.TemporaryDirectory(prefix="planexec-bench-") as tmp:
        folder = Path(tmp)
        try:
            if any(k.startswith("postgres") for k in kinds) and pg_url is None:
                try:
                    server = TempPostgres().start()
                    pg_url = server.url
                except PostgresUnavailable as exc:
                    result["postgres_skipped"] = str(exc)
                    kinds = [k for k in kinds if not k.startswith("postgres")]
            for kind in kinds:
                # warm-up: pydantic's serializers and the backend's first statements, kept out of the figures
                (folder / f"warm-{kind}").mkdir()
                run_once(kind, registry, warm, folder / f"warm-{kind}", pg_url, 0)
            result["stores"] = time_stores(kinds, registry, plan, args.repeats, folder, pg_url)
        finally:
            if server is not None:
                server.stop()
    base = result["stores"].get("memory")
    if base is not None:
        for figures in result["stores"].values():
            figures["slowdown"] = figures["wall_s"]["median"] / base["wall_s"]["median"]
            figures["cpu_slowdown"] = figures["cpu_s"]["median"] / base["cpu_s"]["median"]
        if "sqlite" in result["stores"]:
            slow = result["stores"]["sqlite"]["slowdown"]
            result["target"] = {"sqlite_slowdown_below": TARGET_SLOWDOWN, "measured": slow, "met": slow <= TARGET_SLOWDOWN}
    return result


def report(r: dict[str, Any]) -> str:
    """The human-readable table."""
    c, m = r["config"], r["machine"]
    lines = [
        (
            f"store overhead: {c['layers']} x {c['width']} = {c['steps']:,} no-op steps; median of {c['repeats']}; "
            f"Python {m['python']}, {m['cpus']} CPUs, {m['date']}"
        ),
        "",
        f"{'store':<15}{'wall s':>9}{'min s':>9}{'max s':>9}{'events':>9}{'events/s':>11}{'us/step':>10}{'commits':>9}{'slowdown':>10}{'cpu s':>8}{'cpu x':>7}",
    ]
    for kind, f in r["stores"].items():
        w = f["wall_s"]
        commits = f"{f['transactions']['median']:9,.0f}" if "transactions" in f else f"{'-':>9}"
        slow = f"{f['slowdown']:9.2f}x" if "slowdown" in f else f"{'-':>10}"
        lines.append(
            f"{kind:<15}{w['median']:9.3f}{w['min']:9.3f}{w['max']:9.3f}{f['events']:9,}{f['events_per_s']['median']:11,.0f}"
            f"{f['us_per_step']['median']:10.1f}{commits}{slow}{f['cpu_s']['median']:8.3f}"
            + (f"{f['cpu_slowdown']:6.2f}x" if "cpu_slowdown" in f else "")
        )
    if "postgres_skipped" in r:
        lines.append(f"postgres: skipped ({r['postgres_skipped']})")
    if "target" in r:
        t = r["target"]
        lines += [
            "",
            f"target: SQLite store at most {t['sqlite_slowdown_below']:.1f}x the in-memory run: {'MET' if t['met'] else 'MISSED'} at {t['measured']:.2f}x",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table, or JSON with `--json`."""
    args = parse_args(argv)
    print_result(measure(args), report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
