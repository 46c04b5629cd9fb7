"""Store open checks: what each candidate integrity check costs when a SQLite run store is opened.

Builds SQLite run stores of about `--sizes` MB (default 1, 20 and 200)
through the store's own API (runs of `--steps` steps: `RunStarted`, each
step's ready/started/succeeded with a ~500-byte output, `RunFinished`; the
audit chain and snapshots written as ``planexec run`` writes them), copies
the WAL back into the file, and times, on each (median of `--repeats`,
page cache warm, as when a command opens the store it just used):

* ``header``: reading and checking the 100-byte header (`integrity.read_header`);
* ``pages``: the header, the schema, each table's and index's root page and right edge,
  with the freelist's trunks (`integrity.open_check` on a file above its full-check size);
* ``quick_check(1)``: ``PRAGMA quick_check(1)``: stops after the first error,
  so on a healthy file it does the whole walk;
* ``quick_check``: ``PRAGMA quick_check``, every page's b-tree structure;
* ``integrity_check``: ``PRAGMA integrity_check``, plus every index against its table;
* ``open``: `SqliteRunStore(path)` as planexec opens it (whatever the store chose).

``--keep DIR`` keeps the stores in DIR (and reuses them on the next run);
``--cold`` evicts the store file from the page cache before each timing
(``posix_fadvise(DONTNEED)`` on that file only), as after a reboot.

    python benchmarks/store_open.py                       # ~2-4 min to build the 200 MB store, then seconds
    python benchmarks/store_open.py --sizes 1,20 --json
    python benchmarks/store_open.py --cold --repeats 3

Exit status 0 (a measurement, not a test).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from planexec.engine.events import RunFinished, RunStarted, StepReady, StepStarted, StepSucceeded, utcnow
from planexec.engine.results import RunStatus
from planexec.store import SqliteRunStore
from planexec.store.integrity import open_check, read_header
from planexec.usage import Usage
from planexec.workers.io import Output, Provenance

FILLER = "lorem ipsum dolor sit amet, " * 18  # ~500 bytes of output per step


def build(path: Path, megabytes: float, steps: int) -> None:
    """Append runs to the store at `path` until the file holds about `megabytes` MB, then checkpoint it."""
    store = SqliteRunStore(path)
    probe = sqlite3.connect(path)
    n = 0
    try:
        while probe.execute("PRAGMA page_count").fetchone()[0] * 4096 < megabytes * 2**20:
            for _ in range(4):
                run_id = f"run-{n:07d}"
                n += 1
                ids = [f"s{i}" for i in range(steps)]
                evs: list[Any] = [
                    RunStarted(
                        run_id=run_id, seq=0, at=utcnow(), plan_id="p", plan_version=1, content_hash="sha256:1", goal="bench", step_ids=ids
                    )
                ]
                for i, step in enumerate(ids):
                    prov = Provenance(
                        run_id=run_id, plan_id="p", plan_version=1, step_id=step, worker="tool", action="t", attempt=1, tools=["t"]
                    )
                    seq = 1 + 3 * i
                    evs += [
                        StepReady(run_id=run_id, seq=seq, at=utcnow(), step_id=step),
                        StepStarted(run_id=run_id, seq=seq + 1, at=utcnow(), step_id=step, worker="tool", action="t", attempt=1),
                        StepSucceeded(
                            run_id=run_id, seq=seq + 2, at=utcnow(), step_id=step, attempt=1, wall_time=0.01, usage=Usage(),
                            output=Output(value=f"{i}: {FILLER}", provenance=prov),
                        ),
                    ]  # fmt: skip
                evs.append(
                    RunFinished(
                        run_id=run_id, seq=1 + 3 * steps, at=utcnow(), status=RunStatus.SUCCEEDED, answer=None, wall_time=1.0, usage=Usage()
                    )
                )
                store.append(evs)
    finally:
        probe.close()
        store.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _pragma(path: Path, sql: str) -> None:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(sql).fetchall()
    finally:
        conn.close()
    if rows != [("ok",)]:
        raise SystemExit(f"{path}: {sql}: {rows[:3]}")


def _pages(path: Path) -> None:
    header = read_header(path)
    assert header is not None
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        open_check(conn, path, header, full_below=0)
    finally:
        conn.close()


def _open(path: Path) -> None:
    SqliteRunStore(path).close()


def candidates(path: Path) -> dict[str, Any]:
    """Each candidate check as a function of nothing, timed on `path`."""
    return {
        "header": lambda: read_header(path),
        "pages": lambda: _pages(path),
        "quick_check(1)": lambda: _pragma(path, "PRAGMA quick_check(1)"),
        "quick_check": lambda: _pragma(path, "PRAGMA quick_check"),
        "integrity_check": lambda: _pragma(path, "PRAGMA integrity_check"),
        "open": lambda: _open(path),
    }


def _evict(path: Path) -> None:
    """Drop this file's pages from the OS page cache (only this file's: nothing else on the machine is touched)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measure(path: Path, repeats: int, *, cold: bool = False) -> dict[str, Any]:
    """Milliseconds of each candidate on `path`: median, min, max (`cold`: the file evicted from the page cache first)."""
    out: dict[str, Any] = {"mb": round(path.stat().st_size / 2**20, 1), "page_count": path.stat().st_size // 4096}
    for name, fn in candidates(path).items():
        fn()  # warm the connection code (and the page cache, unless `cold`)
        times = []
        for _ in range(repeats):
            if cold:
                _evict(path)
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = {"median": round(statistics.median(times), 2), "min": round(min(times), 2), "max": round(max(times), 2)}
    return out


def main(argv: list[str] | None = None) -> int:
    """Build the stores, time the candidates, print the table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,20,200", help="store sizes in MB, comma-separated")
    parser.add_argument("--steps", type=int, default=20, help="steps per run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", metavar="DIR", help="keep (and reuse) the stores in DIR")
    parser.add_argument("--cold", action="store_true", help="evict each store from the page cache before each timing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="planexec-open-") as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        rows = []
        for size in [float(s) for s in args.sizes.split(",") if s]:
            path = folder / f"runs-{size:g}mb.db"
            if not path.exists():
                t0 = time.perf_counter()
                build(path, size, args.steps)
                print(f"built {path} ({path.stat().st_size / 2**20:.1f} MB) in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
            rows.append(measure(path, args.repeats, cold=args.cold))
    if args.json:
        print(json.dumps({"stores": rows}, indent=2))
        return 0
    names = list(candidates(Path()).keys())
    print(f"{'MB':>6} {'pages':>7} " + " ".join(f"{n:>16}" for n in names))
    for r in rows:
        print(f"{r['mb']:>6} {r['page_count']:>7} " + " ".join(f"{r[n]['median']:>13.2f} ms" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
