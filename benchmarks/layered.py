"""Seeded layered DAGs and the small shared pieces of the benchmark scripts.

Owns the shape both benchmarks run: `layers` layers of `width` steps, each
step after the first layer depending on a few distinct random steps of the
layer before it; turning such a DAG into a `Plan`; the median of repeated
measurements; and a description of the machine a figure was taken on.
Imports only `planexec`'s public API. Not a benchmark itself: run
`engine_overhead.py` or `critical_path.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from planexec import Plan


@dataclass(frozen=True)
class LayeredStep:
    """One step of a layered DAG: its id, its layer and the steps it depends on."""

    step_id: str
    layer: int
    depends_on: tuple[str, ...]


def layered_dag(layers: int, width: int, *, min_deps: int = 1, max_deps: int = 3, seed: int = 0) -> list[list[LayeredStep]]:
    """`layers` lists of `width` steps; each step depends on min_deps..max_deps distinct steps of the previous layer.

    The same arguments give the same DAG on every machine (one `random.Random(seed)`).
    """
    if layers < 1 or width < 1:
        raise ValueError("layers and width must be at least 1")
    if not 0 <= min_deps <= max_deps:
        raise ValueError("need 0 <= min_deps <= max_deps")
    rng = random.Random(seed)
    dag: list[list[LayeredStep]] = []
    for layer in range(layers):
        row = []
        for index in range(width):
            deps: tuple[str, ...] = ()
            if layer > 0:
                k = min(width, rng.randint(min_deps, max_deps))
                deps = tuple(dag[layer - 1][j].step_id for j in sorted(rng.sample(range(width), k)))
            row.append(LayeredStep(f"s{layer:03d}_{index:03d}", layer, deps))
        dag.append(row)
    return dag


def add_dag_arguments(parser: argparse.ArgumentParser, *, layers: int, width: int, repeats: int) -> None:
    """The flags every benchmark shares: the DAG's shape and seed, repetitions, and --json."""
    parser.add_argument("--layers", type=int, default=layers, help=f"layers in the DAG (default {layers})")
    parser.add_argument("--width", type=int, default=width, help=f"steps per layer (default {width})")
    parser.add_argument("--min-deps", type=int, default=1, help="fewest dependencies per step after layer 0 (default 1)")
    parser.add_argument("--max-deps", type=int, default=3, help="most dependencies per step after layer 0 (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the DAG and anything else drawn at random (default 0)")
    parser.add_argument(
        "--repeats", type=int, default=repeats, help=f"repetitions of each timing; the median is reported (default {repeats})"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def print_result(result: dict[str, Any], report: Callable[[dict[str, Any]], str], as_json: bool) -> None:
    """Print a benchmark's figures as its table, or as one JSON object."""
    print(json.dumps(result, indent=2) if as_json else report(result))


def plan_data(
    dag: list[list[LayeredStep]], action: str, parameters: Callable[[LayeredStep], dict[str, Any]] | None = None, *, plan_id: str = "bench"
) -> dict[str, Any]:
    """The plan's JSON-shaped data (what a planner would emit): every step runs `action` on worker ``tool``."""
    steps = [
        {
            "id": s.step_id,
            "action": action,
            "worker": "tool",
            "parameters": parameters(s) if parameters else {},
            "depends_on": list(s.depends_on),
        }
        for row in dag
        for s in row
    ]
    return {"plan_id": plan_id, "goal": f"benchmark: {len(steps)} {action} steps", "steps": steps}


def build_plan(dag: list[list[LayeredStep]], action: str, parameters: Callable[[LayeredStep], dict[str, Any]] | None = None) -> Plan:
    """`plan_data` parsed into a typed `Plan` (not yet validated against a registry)."""
    return Plan.from_data(plan_data(dag, action, parameters))


def median(values: list[float]) -> float:
    """The median of a non-empty list."""
    return statistics.median(values)


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max of repeated measurements, for the JSON output."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": list(values)}


def machine() -> dict[str, Any]:
    """Where and when a figure was measured."""
    import pydantic

    import planexec

    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "planexec": planexec.__version__,
        "pydantic": pydantic.VERSION,
    }
