"""The pure, synchronous scheduler: which steps may run now.

Owns dependency bookkeeping only, in the manner of
`graphlib.TopologicalSorter`: `ready()` hands out steps whose dependencies
all ended, `succeeded()` and `failed()` record outcomes, and a step whose
dependency did not succeed is skipped (returned by `ready()`'s
caller-visible `skipped` list) unless it accepts failed inputs. No I/O, no
asyncio, no clock: the engine owns those.

The counting is graphlib's (a count of unfinished dependencies per step, the
list of its dependents, steps handed out in the order they became ready)
kept in plain dicts instead of a `_NodeInfo` object and a list per step:
at 10,000 steps building the sorter cost 1.9 µs a step and each step left
two more objects for the garbage collector to trace; graphlib still finds
the cycle a `CycleError` reports. Imports only `errors`.
"""

from __future__ import annotations

import graphlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

__all__ = ["CycleError", "Outcome", "Scheduler", "find_cycle", "upstream"]

CycleError = graphlib.CycleError

# a node's count once it is handed out, and once it is done (graphlib's markers)
_OUT, _DONE = -1, -2


class Outcome(str, Enum):
    """How a step ended, as far as scheduling cares."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


@dataclass
class Batch:
    """What `Scheduler.ready()` returns: steps to start, and steps skipped because an input failed."""

    run: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (step_id, the dependency that did not succeed)


class Scheduler:
    """Dependency-driven scheduling of a DAG.

    `graph` maps each node to its dependencies. `tolerant` names nodes that run
    even when a dependency failed or was skipped. Raises `CycleError` (with the
    cycle in ``args[1]``) on a cycle.
    """

    def __init__(
        self,
        graph: Mapping[str, Iterable[str]],
        tolerant: Iterable[str] = (),
        *,
        succeeded: Iterable[str] = (),
        settled: Mapping[str, Outcome] | None = None,
        held: Iterable[str] = (),
    ) -> None:
        self._deps = {node: tuple(deps) for node, deps in graph.items()}
        self._tolerant = frozenset(tolerant)
        self._outcome: dict[str, Outcome] = {}
        self._handed_out: set[str] = set()
        self._fresh: list[str] = []  # ready in a rebuilt count, not yet handed out by ready()
        self._prepare()
        # a revised or resumed plan keeps what has ended: those steps start settled, never handed out again;
        # `held` steps (waiting for a person's decision) count as handed out, so their dependents wait
        done = {n: Outcome.SUCCEEDED for n in succeeded if n in self._deps}
        done.update({n: o for n, o in (settled or {}).items() if n in self._deps})
        self._handed_out.update(n for n in held if n in self._deps and n not in done)
        if done or self._handed_out:
            self._outcome.update(done)
            self._rebuild()

    def _prepare(self) -> None:
        """Count each node's dependencies and list its dependents (graphlib's `add` for every node, then `prepare`).

        A dependency that is no key of the graph is a node of its own, as in
        graphlib; nodes are known in the order graphlib would know them, so
        steps become ready in the same order. Raises `CycleError` on a cycle.
        """
        waiting: dict[str, int] = {}  # unfinished dependencies per node (a dependency listed twice counts twice)
        dependents: dict[str, list[str]] = {}
        graph = self._deps
        placed: set[str] = set()  # nodes whose own dependencies were counted, in graph order
        ordered = True  # every dependency came before its dependent in the graph's order (as plans are written)
        for node, deps in graph.items():
            if node not in waiting:
                waiting[node] = 0
                dependents[node] = []
            waiting[node] += len(deps)
            for dep in deps:
                if dep not in waiting:
                    waiting[dep] = 0
                    dependents[dep] = []
                if ordered and dep not in placed and dep in graph:  # (a dependency no key names is a node of its own)
                    ordered = False
                dependents[dep].append(node)
            placed.add(node)
        ready = [node for node, n in waiting.items() if n == 0]
        # a graph in an order where every dependency comes first has no cycle; else Kahn's count: every node
        # is reached from the ready ones unless a cycle holds some back
        if not ordered:
            left = dict(waiting)
            reached, frontier = len(ready), list(ready)
            while frontier:
                for after in dependents[frontier.pop()]:
                    left[after] -= 1
                    if left[after] == 0:
                        reached += 1
                        frontier.append(after)
            if reached < len(waiting):
                graphlib.TopologicalSorter(self._deps).prepare()  # raises CycleError carrying the cycle
        self._waiting, self._ready = waiting, ready
        # as tuples of strings, which the garbage collector stops tracing after its first look at them
        self._dependents = {node: tuple(after) for node, after in dependents.items()}
        self._passed_out = self._finished = 0

    def _get_ready(self) -> list[str]:
        """graphlib's `get_ready`: the nodes that became ready since the last call, in that order."""
        ready, self._ready = self._ready, []
        waiting = self._waiting
        for node in ready:
            waiting[node] = _OUT
        self._passed_out += len(ready)
        return ready

    def _done(self, node: str) -> None:
        """graphlib's `done`: a node handed out ended, its dependents count one dependency fewer."""
        waiting = self._waiting
        if waiting[node] != _OUT:
            state = "already marked done" if waiting[node] == _DONE else "not passed out (still not ready)"
            raise ValueError(f"node {node!r} was {state}")
        waiting[node] = _DONE
        for after in self._dependents[node]:
            left = waiting[after] - 1
            waiting[after] = left
            if not left:
                self._ready.append(after)
        self._finished += 1

    def add(self, node: str, deps: Iterable[str], *, tolerant: bool = False) -> None:
        """Add a step while the graph runs (a plan streamed in): its dependencies must already be known.

        The counts are rebuilt and the outcomes so far replayed into them (as
        graphlib, which cannot grow a prepared graph, needed): O(steps) per added step.
        """
        deps = tuple(deps)
        if node in self._deps:
            raise ValueError(f"step {node!r} is already in the graph")
        unknown = [d for d in deps if d not in self._deps]
        if unknown:
            raise ValueError(f"step {node!r} depends on steps not in the graph: {', '.join(unknown)}")
        self._deps[node] = deps
        if tolerant:
            self._tolerant = self._tolerant | {node}
        self._rebuild()

    def _rebuild(self) -> None:
        """Count again over the graph, with the outcomes so far replayed into it."""
        self._prepare()
        fresh: list[str] = []
        ready = self._get_ready()
        while ready:
            for n in ready:
                if n in self._outcome:
                    self._done(n)
                elif n not in self._handed_out:
                    fresh.append(n)
            ready = self._get_ready()
        self._fresh = fresh

    def has_ready(self) -> bool:
        """True when `ready()` has a step to hand out or to skip."""
        return bool(self._ready or self._fresh)

    def ready(self) -> Batch:
        """Steps that may start now, plus steps skipped (and settled) because an input did not succeed."""
        batch = Batch()
        pending = self._fresh + self._get_ready() if self._fresh else self._get_ready()
        self._fresh = []
        while pending:
            node = pending.pop()
            blocker = self._blocker(node)
            if blocker is None or node in self._tolerant:
                self._handed_out.add(node)
                batch.run.append(node)
            else:
                self._outcome[node] = Outcome.SKIPPED
                batch.skipped.append((node, blocker))
                self._done(node)
                pending.extend(self._get_ready())
        batch.run.reverse()
        return batch

    def _blocker(self, node: str) -> str | None:
        for dep in self._deps.get(node, ()):
            if self._outcome.get(dep) is not Outcome.SUCCEEDED:
                return dep
        return None

    def release(self, node: str) -> None:
        """Give a held step back to be handed out again (its decision came: run it)."""
        if node not in self._handed_out:
            raise ValueError(f"step {node!r} is not held")
        self._handed_out.discard(node)
        self._rebuild()

    def succeeded(self, node: str) -> None:
        """Record that a handed-out step succeeded."""
        self._settle(node, Outcome.SUCCEEDED)

    def failed(self, node: str) -> None:
        """Record that a handed-out step failed; its dependents will be skipped unless tolerant."""
        self._settle(node, Outcome.FAILED)

    def cancelled(self, node: str) -> None:
        """Record that a handed-out step was cancelled."""
        self._settle(node, Outcome.CANCELLED)

    def _settle(self, node: str, outcome: Outcome) -> None:
        if node not in self._handed_out:
            raise ValueError(f"step {node!r} was not handed out by ready()")
        self._handed_out.discard(node)
        self._outcome[node] = outcome
        self._done(node)

    def is_active(self) -> bool:
        """True while some step has not reached an outcome."""
        return self._finished < self._passed_out or bool(self._ready)

    def running(self) -> set[str]:
        """Steps handed out and not yet settled."""
        return set(self._handed_out)

    def is_handed_out(self, node: str) -> bool:
        """True when `ready()` handed the step out and it has not been settled."""
        return node in self._handed_out

    def unsettled(self) -> list[str]:
        """Steps with no outcome yet (running or waiting), in graph order."""
        return [n for n in self._deps if n not in self._outcome]

    def outcome(self, node: str) -> Outcome | None:
        """How the step ended, or None while it has not."""
        return self._outcome.get(node)


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """The first cycle graphlib finds (first node repeated at the end), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def upstream(graph: Mapping[str, Iterable[str]], node: str) -> set[str]:
    """Every node `node` depends on, directly or through others (`graph`: node -> its dependencies)."""
    out: set[str] = set()
    stack = list(graph.get(node, ()))
    while stack:
        n = stack.pop()
        if n not in out:
            out.add(n)
            stack.extend(graph.get(n, ()))
    return out
