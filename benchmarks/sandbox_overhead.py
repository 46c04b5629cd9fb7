"""Sandbox overhead: what one `run_python` call costs, end to end, as the workspace grows.

Times, in one process, `python_tool(ws).invoke({"code": CODE})` for:

* ``first``: the first call of a process (the sandbox probe and, as root, the workspace's stage);
* ``trivial``: ``pass``, median of ``--calls`` calls, in workspaces of ``--files`` files
  (each 1 KiB, in folders of 100: the disk quota walks the workspace before, during and after a call);
* ``write``: a call that writes a 1 MiB file and reads it back;
* ``parallel``: ``--calls`` calls of ``time.sleep(0.2)`` at once in one workspace (wall time), the
  first time (``parallel, first``: as root, each call at once makes its own namespaces) and again.

``--compare SRC`` also runs the same measurement with ``PYTHONPATH=SRC`` (another
checkout's ``src``, e.g. a ``git worktree`` of an earlier commit), both in turns
(``--rounds``, this tree first) so that a machine slowing down slows both, and
prints each figure's median over the rounds and the ratio this/other.

    python benchmarks/sandbox_overhead.py                      # ~30 s
    python benchmarks/sandbox_overhead.py --compare /tmp/before/src --rounds 3 --json

Exit status 0 (a measurement, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def fill(ws: Path, files: int) -> None:
    """`files` files of 1 KiB, 100 to a folder."""
    block = b"x" * 1024
    for i in range(files):
        folder = ws / f"d{i // 100}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i}.txt").write_bytes(block)


def timed(tool: Any, code: str) -> float:
    started = time.perf_counter()
    out = asyncio.run(tool.invoke({"code": code}))
    if out["exit_code"] != 0:
        raise SystemExit(f"the sandbox failed: {out}")
    return (time.perf_counter() - started) * 1000


def measure(calls: int, sizes: list[int]) -> dict[str, float]:
    """Every figure once, in this process (ms)."""
    from planexec.workers.toolkit import python_tool

    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as top:
        ws = Path(top) / "ws"
        ws.mkdir()
        figures["first"] = timed(python_tool(ws), "pass")
        for files in sizes:
            sized = Path(top) / f"ws-{files}"
            sized.mkdir()
            fill(sized, files)
            tool = python_tool(sized)
            timed(tool, "pass")  # this workspace's first call (its stage, as root) is not the per-call cost
            figures[f"trivial@{files}"] = statistics.median(timed(tool, "pass") for _ in range(calls))
        tool = python_tool(ws)
        write = "open('out.bin', 'wb').write(bytes(2**20))\nassert len(open('out.bin', 'rb').read()) == 2**20"
        figures["write"] = statistics.median(timed(tool, write) for _ in range(calls))

        async def together() -> float:
            started = time.perf_counter()
            await asyncio.gather(*(tool.invoke({"code": "import time\ntime.sleep(0.2)"}) for _ in range(calls)))
            return (time.perf_counter() - started) * 1000

        figures["parallel, first"] = asyncio.run(together())  # as root, each call at once makes its own namespaces once
        figures["parallel"] = asyncio.run(together())
    return figures


def child(src: str | None, calls: int, sizes: list[int]) -> dict[str, float]:
    """`measure` in a fresh process, with `src` first on the path when given."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    argv = [sys.executable, __file__, "--calls", str(calls), "--files", ",".join(map(str, sizes)), "--raw"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10, help="calls per figure (default 10)")
    parser.add_argument("--files", default="0,1000,10000", help="workspace sizes in files (default 0,1000,10000)")
    parser.add_argument("--compare", metavar="SRC", help="another checkout's src directory to measure in turns with this one")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each tree with --compare (default 3)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.files.split(",") if size]
    if args.raw:
        print(json.dumps(measure(args.calls, sizes)))
        return
    trees = {"this": str(Path(__file__).resolve().parents[1] / "src")}
    if args.compare:
        trees["other"] = args.compare
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.rounds if args.compare else 1):
        for name, src in trees.items():
            rounds[name].append(child(src, args.calls, sizes))
    result: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "kernel": platform.release(), "cpus": os.cpu_count(), "euid": os.geteuid()},
        "calls": args.calls,
        "rounds": len(rounds["this"]),
        "figures": {name: {key: round(statistics.median(r[key] for r in runs), 1) for key in runs[0]} for name, runs in rounds.items()},
    }
    if args.compare:
        this, other = result["figures"]["this"], result["figures"]["other"]
        result["ratio"] = {key: round(this[key] / other[key], 2) for key in this if key in other}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"run_python per call, ms (median of {args.calls} calls; median over {result['rounds']} round(s); euid {os.geteuid()})")
    keys = list(result["figures"]["this"])
    print(f"{'figure':<18}" + "".join(f"{name:>10}" for name in trees) + ("     ratio" if args.compare else ""))
    for key in keys:
        row = f"{key:<18}" + "".join(f"{result['figures'][name].get(key, float('nan')):>10.1f}" for name in trees)
        if args.compare:
            row += f"{result['ratio'].get(key, float('nan')):>10.2f}"
        print(row)


if __name__ == "__main__":
    main()
