"""Fleet: several ``planexec worker`` processes draining one store's queue, and what a run costs the store.

Four measurements, on a throwaway local PostgreSQL (or ``--store URL``) and
on SQLite for comparison:

* **drain**: `--runs` runs of `--steps` no-op steps (a layered DAG,
  `--width` steps a layer) are queued with `submit_plan`, then `--workers`
  (e.g. ``1,2,4``) worker processes with ``--concurrency`` drain them.
  Reported: runs/s and steps/s (from the first claim to the last run's end,
  on the database's clock, so process start-up is left out), the store's
  transactions/s and rows inserted/s over that time (PostgreSQL's
  ``pg_stat_database`` and ``pg_stat_user_tables``), and per step: events,
  bytes of event JSON, and bytes of store (every table with its indexes
  and TOAST; the SQLite file).
* **claims**: the claim transaction alone: `--claim-runs` queued runs
  claimed, settled and let go by 1 and by 4 threads, each with its own
  connection: claims/s.
* **heartbeat**: what one lease renewal costs alone, and one beat of a
  worker holding 1,000 runs (the heartbeat renews every held lease every
  TTL/3, in one transaction).
* **held**: `--held` runs at once on 2 workers (half each), each run a
  chain of `--held-steps` steps that wait `--step-seconds` (as a model call
  makes a run wait): drain time against the ideal (the chain's length), and
  the store's commits/s while they are held.
* **takeover**: a worker is frozen (SIGSTOP: it lives, but its heartbeat
  stops, as a worker on a lost machine) in the middle of a run; how long
  until another worker resumes the run, for each ``--ttl`` (and for a
  worker killed with SIGKILL on the same machine, which is seen at once).

    python benchmarks/fleet.py                         # ~3 min on 2 cores
    python benchmarks/fleet.py --workers 1,2 --runs 100 --json

A measurement, not a test: exit status 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from layered import build_plan, layered_dag, machine

from planexec import Plan
from planexec.fleet.worker import submit_plan
from planexec.store import open_store
from planexec.store.leases import Holder
from planexec.store.pgserver import TempPostgres
from planexec.store.queue import QueueState

TOOLS = '''
import asyncio
from planexec import tool

@tool(idempotent=True)
async def bench_noop(value: object = None) -> None:
    """Does nothing."""
    return None

@tool(idempotent=True)
async def bench_wait(seconds: float) -> float:
    """Sleeps."""
    await asyncio.sleep(seconds)
    return seconds
'''
_TABLES = ("events", "plans", "runs", "audit_heads", "approvals", "run_queue", "leases")


def _plan(steps: int, width: int) -> Plan:
    return build_plan(layered_dag(max(1, steps // width), width), "bench_noop")


def _waiting_plan(steps: int, seconds: float) -> Plan:
    """A chain of `steps` steps that each wait `seconds`: a run that holds its worker's slot without using its CPU."""
    return Plan.from_data(
        {
            "plan_id": "waits",
            "goal": "wait, as for a model",
            "steps": [
                {"id": f"w{i}", "action": "bench_wait", "parameters": {"seconds": seconds}, "depends_on": [f"w{i - 1}"] if i else []}
                for i in range(steps)
            ],
        }
    )


def _schema_url(base: str) -> str:
    if "://" not in base:
        return base
    return f"{base}{'&' if '?' in base else '?'}schema=fleet_{uuid.uuid4().hex[:10]}"


def _worker(folder: Path, url: str, *args: str, ttl: float | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if ttl is not None:
        env["PLANEXEC_LEASE_TTL"] = str(ttl)
    command = [sys.executable, "-m", "planexec", "worker", "--store", url, "--poll", "0.1", *args]
    with (folder / "workers.log").open("ab") as log:  # what went wrong, if anything did
        return subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=log)


def _pg_counters(store: Any) -> dict[str, int]:
    """Transactions committed in the database, rows inserted into each of the store's tables."""
    with store.tx(write=False) as cur:
        cur.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        commits = int(cur.fetchone()[0])
        cur.execute("SELECT relname, n_tup_ins, n_tup_upd FROM pg_stat_user_tables WHERE schemaname = current_schema()")
        rows = {name: (int(ins), int(upd)) for name, ins, upd in cur.fetchall()}
    return {
        "commits": commits,
        "inserted": sum(i for i, _ in rows.values()),
        "updated": sum(u for _, u in rows.values()),
        "events": rows.get("events", (0, 0))[0],
    }


def _store_bytes(store: Any, url: str) -> int:
    with store.tx(write=False) as cur:
        if store.dialect == "sqlite":  # the database's pages, wherever they are now (the file or its WAL)
            cur.execute("PRAGMA page_count")
            pages = int(cur.fetchone()[0])
            cur.execute("PRAGMA page_size")
            return pages * int(cur.fetchone()[0])
        total = 0
        for table in _TABLES:
            cur.execute("SELECT pg_total_relation_size(%s)", (f'"{store.schema}".{table}',))
            total += int(cur.fetchone()[0])
    return total


def _events(store: Any) -> tuple[int, int]:
    """How many events the store holds, and the bytes of their JSON."""
    length = "length(body)" if store.dialect == "sqlite" else "octet_length(body)"
    with store.tx(write=False) as cur:
        cur.execute(f"SELECT COUNT(*), COALESCE(SUM({length}), 0) FROM events")
        count, size = cur.fetchone()
    return int(count), int(size)


def drain(url: str, folder: Path, plan: Plan, *, runs: int, workers: int, concurrency: int) -> dict[str, Any]:
    """Queue `runs` runs of `plan`, start the workers, wait until the queue is drained; the figures."""
    tools = str(folder / "tools.py")
    store = open_store(url)
    try:
        t0 = time.perf_counter()
        for i in range(runs):
            submit_plan(store, plan, run_id=f"run-{i:05d}", setup={"tools": [tools]}, approved_by="benchmark", approve_steps=True)
        submit_s = time.perf_counter() - t0
        size_queued = _store_bytes(store, url)
        pg = store.dialect == "postgres"
        before = _pg_counters(store) if pg else {}
        procs = [_worker(folder, url, "--concurrency", str(concurrency), "--idle-exit", "1") for _ in range(workers)]
        for p in procs:
            p.wait(timeout=3600)
        time.sleep(1.2 if pg else 0)  # PostgreSQL publishes a backend's statistics within a second
        after = _pg_counters(store) if pg else {}
        done = store.queued_runs(list(QueueState), limit=None)
        ok = sum(1 for q in done if q.state is QueueState.DONE)
        first = min(q.taken_at for q in done if q.taken_at is not None)
        last = max(q.ended_at for q in done if q.ended_at is not None)
        wall = (last - first).total_seconds()
        statuses = {store.run(q.run_id).status.value for q in done}
        events, event_bytes = _events(store)
        size = _store_bytes(store, url)
        total_steps = runs * len(plan.steps)
        row: dict[str, Any] = {
            "store": store.dialect,
            "workers": workers,
            "concurrency": concurrency,
            "runs": runs,
            "steps_per_run": len(plan.steps),
            "done": ok,
            "statuses": sorted(statuses),
            "submit_runs_per_s": round(runs / submit_s, 1),
            "drain_s": round(wall, 2),
            "runs_per_s": round(runs / wall, 1),
            "steps_per_s": round(total_steps / wall),
            "events_per_step": round(events / total_steps, 2),
            "event_json_bytes_per_step": round(event_bytes / total_steps),
            "store_bytes_per_step": round(size / total_steps),
            "store_bytes_per_queued_run": round(size_queued / runs),
        }
        if pg:
            row["commits_per_s"] = round((after["commits"] - before["commits"]) / wall)
            row["rows_inserted_per_s"] = round((after["inserted"] - before["inserted"]) / wall)
            row["rows_updated_per_s"] = round((after["updated"] - before["updated"]) / wall)
            row["commits_per_step"] = round((after["commits"] - before["commits"]) / total_steps, 2)
        return row
    finally:
        store.close()


def claims(url: str, folder: Path, *, runs: int, threads: int) -> dict[str, Any]:
    """Claim, settle and let go `runs` queued runs with `threads` claimers, each with its own connection."""
    plan = _plan(2, 2)
    with open_store(url) as store:
        for i in range(runs):
            submit_plan(store, plan, run_id=f"c-{i:05d}", setup={}, approved_by="benchmark")
        dialect = store.dialect
    taken = [0] * threads

    def claimer(index: int) -> None:
        with open_store(url) as mine:
            while (claim := mine.claim_run()) is not None:
                mine.settle_queued(claim.run_id, claim.owner, QueueState.DONE)
                mine.let_go(claim.run_id)
                taken[index] += 1

    pool = [threading.Thread(target=claimer, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "store": dialect,
        "threads": threads,
        "claimed": sum(taken),
        "claims_per_s": round(sum(taken) / wall),
        "ms_per_claim": round(wall * 1000 / sum(taken), 2),
    }


def heartbeat(url: str, *, renewals: int, held: int) -> dict[str, Any]:
    """The cost of one lease renewal (one UPDATE in its own transaction), and of one beat of a worker holding `held` runs."""
    with open_store(url) as store:
        holder = Holder.me()
        store.acquire_lease("hb", holder)
        t0 = time.perf_counter()
        for _ in range(renewals):
            store.renew_lease("hb", holder)
        wall = time.perf_counter() - t0
        store.release_lease("hb", holder)
        for i in range(held):
            store.hold(f"held-{i:05d}")
        beats = []
        for _ in range(5):
            t0 = time.perf_counter()
            store.lease_book.beat()  # what the heartbeat thread does every TTL/3: every held lease in one transaction
            beats.append(time.perf_counter() - t0)
        return {
            "store": store.dialect,
            "us_per_renewal": round(wall * 1e6 / renewals),
            "renewals_per_s_one_connection": round(renewals / wall),
            "held": held,
            "ms_per_beat": round(sorted(beats)[2] * 1000, 1),
        }


def takeover(url: str, folder: Path, *, ttl: float, how: str) -> dict[str, Any]:
    """Seconds from stopping a worker mid-run (SIGSTOP or SIGKILL) to another worker resuming its run."""
    wait = Plan.from_data({"plan_id": "t", "goal": "wait", "steps": [{"id": "w", "action": "bench_wait", "parameters": {"seconds": 3600}}]})
    with open_store(url) as store:
        submit_plan(store, wait, run_id="t", setup={"tools": [str(folder / "tools.py")]}, approved_by="benchmark")
        first = _worker(folder, url, ttl=ttl)
        second: subprocess.Popen[bytes] | None = None
        try:
            deadline = time.monotonic() + 120
            while not any(e.type == "step_started" for e in store.events("t")):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the first worker never started the run: {(folder / 'workers.log').read_text()[-2000:]}")
                time.sleep(0.05)
            second = _worker(folder, url, ttl=ttl)
            time.sleep(2.0)  # the second worker is up and polling
            stopped = time.monotonic()
            first.send_signal(signal.SIGSTOP if how == "sigstop" else signal.SIGKILL)
            if how == "sigkill":
                first.wait()
            while sum(e.type == "run_resumed" for e in store.events("t")) < 2:
                if time.monotonic() - stopped > ttl + 60:
                    raise RuntimeError("the run was never taken over")
                time.sleep(0.02)
            seconds = time.monotonic() - stopped
        finally:
            for p in (first, second):
                if p is not None and p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        p.send_signal(signal.SIGCONT)
                        p.kill()
                    p.wait()
    return {"store": url.split(":", 1)[0] if "://" in url else "sqlite", "how": how, "ttl_s": ttl, "takeover_s": round(seconds, 2)}


@contextlib.contextmanager
def _postgres(given: str | None) -> Iterator[str]:
    if given:
        yield given
        return
    with TempPostgres() as server:
        yield server.url


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and print them (or one JSON object)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="a postgresql:// URL (default: a throwaway local server)")
    parser.add_argument("--runs", type=int, default=200, help="runs queued for each drain (default 200)")
    parser.add_argument("--steps", type=int, default=20, help="no-op steps per run (default 20)")
    parser.add_argument("--width", type=int, default=5, help="steps per layer of a run's DAG (default 5)")
    parser.add_argument("--workers", default="1,2,4", help="worker processes, comma-separated (default 1,2,4)")
    parser.add_argument("--concurrency", type=int, default=4, help="runs at once in each worker (default 4)")
    parser.add_argument("--claim-runs", type=int, default=1000, help="runs claimed in the claim measurement (default 1000)")
    parser.add_argument("--ttl", default="2,5", help="lease TTLs for the takeover measurement, comma-separated (default 2,5)")
    parser.add_argument(
        "--held", type=int, default=1000, help="runs held at once by 2 workers, each waiting on slow steps (default 1000; 0: skip)"
    )
    parser.add_argument("--held-steps", type=int, default=4, help="steps of each held run, in a chain (default 4)")
    parser.add_argument("--step-seconds", type=float, default=2.0, help="how long each held run's step waits (default 2)")
    parser.add_argument("--sqlite", action=argparse.BooleanOptionalAction, default=True, help="measure SQLite too (default: yes)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the tables")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"machine": machine(), "cpus": os.cpu_count(), "drain": [], "claims": [], "heartbeat": [], "takeover": []}
    with tempfile.TemporaryDirectory(prefix="planexec-fleet-") as tmp, _postgres(args.store) as pg:
        folder = Path(tmp)
        (folder / "tools.py").write_text(TOOLS)
        bases = [("postgres", pg)] + ([("sqlite", "")] if args.sqlite else [])
        for name, base in bases:
            for workers in [int(w) for w in args.workers.split(",") if w]:
                if name == "sqlite" and workers > 2:
                    continue  # one machine, one writer at a time: more processes only wait for the lock
                url = _schema_url(base) if base else str(folder / f"drain-{uuid.uuid4().hex[:6]}.db")
                plan = _plan(args.steps, args.width)
                result["drain"].append(drain(url, folder, plan, runs=args.runs, workers=workers, concurrency=args.concurrency))
            for threads in (1, 4):
                url = _schema_url(base) if base else str(folder / f"claims-{threads}.db")
                result["claims"].append(claims(url, folder, runs=args.claim_runs, threads=threads))
            url = _schema_url(base) if base else str(folder / "heartbeat.db")
            result["heartbeat"].append(heartbeat(url, renewals=2000, held=1000))
        if args.held:  # many runs at once, each waiting on slow steps (as a model call makes it wait)
            waits = _waiting_plan(args.held_steps, args.step_seconds)
            workers, per_worker = 2, -(-args.held // 2)
            row = drain(_schema_url(pg), folder, waits, runs=args.held, workers=workers, concurrency=per_worker)
            row["ideal_drain_s"] = round(args.held_steps * args.step_seconds, 2)
            result["held"] = row
        for ttl in [float(t) for t in args.ttl.split(",") if t]:
            result["takeover"].append(takeover(_schema_url(pg), folder, ttl=ttl, how="sigstop"))
        result["takeover"].append(takeover(_schema_url(pg), folder, ttl=30.0, how="sigkill"))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{result['machine']['date']} · {result['cpus']} CPUs")
    print("drain: store workers×conc runs/s steps/s commits/s rows/s events/step JSON B/step store B/step")
    for r in result["drain"]:
        print(
            f"  {r['store']:<8} {r['workers']}×{r['concurrency']:<4} {r['runs_per_s']:>7} {r['steps_per_s']:>7} "
            f"{r.get('commits_per_s', '-'):>9} {r.get('rows_inserted_per_s', '-'):>7} {r['events_per_step']:>6} "
            f"{r['event_json_bytes_per_step']:>6} {r['store_bytes_per_step']:>6}  ({r['done']}/{r['runs']} done, {r['statuses']})"
        )
    held = result.get("held")
    if held:
        print(
            f"held: {held['runs']} runs at once on 2 workers, {held['steps_per_run']} steps waiting each: drained in {held['drain_s']}s "
            f"(ideal {held['ideal_drain_s']}s), {held.get('commits_per_s', '-')} commits/s ({held['statuses']})"
        )
    for r in result["claims"]:
        print(f"claims: {r['store']:<8} {r['threads']} thread(s): {r['claims_per_s']} claims/s ({r['ms_per_claim']} ms each)")
    for r in result["heartbeat"]:
        print(
            f"heartbeat: {r['store']:<8} {r['us_per_renewal']} µs per renewal alone; {r['held']} held leases renewed in {r['ms_per_beat']} ms"
        )
    for r in result["takeover"]:
        print(f"takeover: {r['how']:<8} TTL {r['ttl_s']:g}s: run resumed by another worker after {r['takeover_s']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
