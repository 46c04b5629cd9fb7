"""Per-attempt deadlines: `asyncio.timeout`'s contract at a fraction of its cost.

Owns `Deadline` and `DeadlineClock`. The execution of a run arms a
`Deadline` around every attempt; the run's `DeadlineClock` keeps them all on
one event-loop timer. At 10,000 steps `asyncio.timeout`'s state machine was
about a tenth of the engine's per-step overhead; a `TimerHandle` per
attempt (made, pushed on the loop's heap with Python comparisons, cancelled,
swept) still cost 4-8 µs a step. The clock pushes a tuple on its own heap
(compared in C) and touches the loop's timer only when a deadline earlier
than the armed one arrives: with one timeout for every step, once a run.
A deadline fires when its time comes, as `call_at` would fire it.

`Deadline` uses the same `uncancel` rule asyncio uses to tell its own
cancellation from one that came from outside. `pause` stops its clock while
the attempt waits for a person (an approval has no deadline) and `resume`
starts it again with the time that was left; `CURRENT_DEADLINE` is the
deadline of the attempt running in this context, for the code that waits. Code that swallows its
cancellation cannot be stopped by asyncio at all: `on_stuck` is called when
it has not stopped `grace` seconds after the deadline, so the caller can
give up on it. Imports nothing from planexec.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["CURRENT_DEADLINE", "Deadline", "DeadlineClock", "paused"]

# what `asyncio`'s loop adds to "now" when it picks the timers that are due
_RESOLUTION = time.get_clock_info("monotonic").resolution


class DeadlineClock:
    """The deadlines of one run on one event-loop timer, armed for the earliest of them.

    Disarmed deadlines stay in the heap until they reach its top or are
    swept (when they are more than half of it, as asyncio sweeps its own
    cancelled timers), so disarming costs no heap operation.
    """

    __slots__ = ("_dead", "_handle", "_heap", "_loop", "_order", "_when")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Deadline]] = []
        self._order = itertools.count()  # ties on the time: first armed, first fired (never compares deadlines)
        self._dead = 0  # disarmed deadlines still in the heap
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._when = math.inf  # when the loop's timer fires (inf: none armed)

    def _add(self, deadline: Deadline, delay: float) -> None:
        loop = self._loop
        if loop is None or loop is not deadline._loop:  # the first deadline, or a clock reused in another loop
            self._reset(deadline._loop)
            loop = deadline._loop
        when = loop.time() + delay
        order = next(self._order)
        deadline._when, deadline._entry = when, order
        heapq.heappush(self._heap, (when, order, deadline))
        if when < self._when:
            self._arm(when)

    def _arm(self, when: float) -> None:
        assert self._loop is not None
        if self._handle is not None:
            self._handle.cancel()
        self._when = when
        self._handle = self._loop.call_at(when, self._tick)

    def _reset(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._when, self._loop = None, math.inf, loop
        self._heap, self._dead = [], 0

    def _disarmed(self) -> None:
        """One deadline in the heap was disarmed: sweep when the disarmed ones fill the heap or more than half of it."""
        self._dead += 1
        heap = self._heap
        if self._dead == len(heap):
            heap.clear()  # the loop's timer stays armed: the next deadline is most likely later, and needs no new one
            self._dead = 0
        elif self._dead > 64 and self._dead * 2 > len(heap):
            heap[:] = [entry for entry in heap if not _dead(entry)]
            heapq.heapify(heap)
            self._dead = 0

    def close(self) -> None:
        """The run ended: stop the loop's timer, unless a deadline is still armed (a step that would not stop)."""
        if self._dead < len(self._heap):
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._when = None, math.inf
        self._heap.clear()
        self._dead = 0

    def _tick(self) -> None:
        """The loop's timer: fire every deadline that is due, then arm for the next live one."""
        self._handle, self._when = None, math.inf
        assert self._loop is not None
        heap = self._heap
        now = self._loop.time() + _RESOLUTION
        while heap and (heap[0][0] <= now or _dead(heap[0])):
            entry = heapq.heappop(heap)
            if _dead(entry):
                self._dead -= 1
            else:
                entry[2]._fire()
        if heap:
            self._arm(heap[0][0])


def _dead(entry: tuple[float, int, Deadline]) -> bool:
    """True for a heap entry of a deadline disarmed, paused, or armed again since (a resumed one has a new entry)."""
    deadline = entry[2]
    return deadline._clock is None or deadline._entry != entry[1]


class Deadline:
    """A per-attempt timeout with `asyncio.timeout`'s contract at a fraction of its cost.

    Arms itself on `clock` (no timer for a `delay` of None); when it fires
    it cancels the task; `expired()` tells that cancellation apart from one
    that came from outside (the same `uncancel` rule asyncio uses).
    """

    __slots__ = (
        "_cancelling",
        "_clock",
        "_entry",
        "_fired",
        "_grace",
        "_home",
        "_left",
        "_loop",
        "_on_stuck",
        "_paused_at",
        "_pauses",
        "_settled",
        "_stuck_handle",
        "_task",
        "_when",
        "paused",
    )

    def __init__(
        self, delay: float | None, clock: DeadlineClock, *, on_stuck: Callable[[], None] | None = None, grace: float = 5.0
    ) -> None:
        task = asyncio.current_task()
        assert task is not None, "a deadline is armed inside the task it bounds"
        self._task: asyncio.Task[Any] | None = task
        self._fired = self._settled = False
        self._cancelling = task.cancelling()
        self._on_stuck, self._grace = on_stuck, grace
        self._stuck_handle: asyncio.TimerHandle | None = None
        self._loop = task.get_loop()
        self._clock: DeadlineClock | None = None  # set while armed on the clock
        self._home = clock
        self._when, self._entry = math.inf, -1  # set by the clock: when it fires, and its entry in the heap
        self._pauses = 0
        self._left: float | None = None  # while paused: the seconds that were left
        self._paused_at = 0.0
        self.paused = 0.0  # seconds spent paused (waiting for a person), not counted against the delay
        if delay is not None:
            self._clock = clock
            clock._add(self, delay)

    def _fire(self) -> None:
        self._clock = None  # off the clock: the heap holds it no more
        self._fired = True
        assert self._task is not None
        self._task.cancel()
        if self._on_stuck is not None:
            # code that swallows CancelledError cannot be stopped; after the grace period, say so
            self._stuck_handle = self._loop.call_later(self._grace, self._stuck)

    def _stuck(self) -> None:
        self._stuck_handle = None
        if self._on_stuck is not None:
            self._on_stuck()

    def expired(self) -> bool:
        """True when the CancelledError being handled is this deadline's (and absorb it)."""
        if not self._fired:
            return False
        self._settled = True
        assert self._task is not None
        return self._task.uncancel() <= self._cancelling

    def pause(self) -> None:
        """Stop the clock (the attempt waits for a person); pauses nest, and the last `resume` starts it again."""
        self._pauses += 1
        clock = self._clock
        if self._pauses > 1 or clock is None:  # paused already, never armed, fired or disarmed
            return
        now = self._loop.time()
        self._clock, self._left, self._paused_at = None, max(self._when - now, 0.0), now
        clock._disarmed()

    def resume(self) -> None:
        """Start the clock again with the time that was left when it was paused (after the last of nested pauses)."""
        self._pauses -= 1
        if self._pauses or self._left is None:
            return
        left, self._left = self._left, None
        self.paused += self._loop.time() - self._paused_at
        if self._task is None:  # disarmed while paused: the attempt ended
            return
        self._clock = self._home
        self._home._add(self, left)

    def disarm(self) -> None:
        """Stop the timer (the attempt ended); withdraw a cancellation the attempt swallowed."""
        self._on_stuck = None
        clock, self._clock = self._clock, None
        if clock is not None:
            clock._disarmed()
        if self._stuck_handle is not None:
            self._stuck_handle.cancel()
            self._stuck_handle = None
        if self._fired and not self._settled and self._task is not None:
            self._task.uncancel()
        self._task = None  # a disarmed deadline may wait in the clock's heap: it keeps no task alive


# the deadline of the attempt running in this context (set by the engine around the worker), for code that waits for a person
CURRENT_DEADLINE: ContextVar[Deadline | None] = ContextVar("planexec_deadline", default=None)


@contextmanager
def paused(deadline: Deadline | None) -> Iterator[None]:
    """The block's time is not counted against `deadline` (none: nothing to pause)."""
    if deadline is None:
        yield
        return
    deadline.pause()
    try:
        yield
    finally:
        deadline.resume()
