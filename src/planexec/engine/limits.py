"""Concurrency limits: the global cap and per-worker caps on running steps.

Owns `Limits` (the caps of one run), `Slots` (what one attempt holds: a
worker slot, then a global one, so a busy worker never holds a global slot;
released once, early when an attempt is abandoned) and `Cap`, a counting
semaphore. `Cap` exists for one thing asyncio's `Semaphore` lacks: taking a
free slot without awaiting (`take`), so the engine starts a step whose
slots are free in the same call that makes it ready, with no coroutine and
no turn of the event loop in between (see `Attempts.start_now`).
Imports nothing from planexec.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

__all__ = ["Cap", "Limits", "Slots"]


class Cap:
    """A counting semaphore of `size` slots: `take` (now or not at all), `wait` (in turn, first come first served), `give`.

    A slot given back goes straight to the longest waiter, so a step that
    waits is never overtaken by one that `take`s later.
    """

    __slots__ = ("_waiters", "free")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a cap needs at least one slot, not {size}")
        self.free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    def busy(self) -> bool:
        """True when a slot cannot be taken now (none free, or others wait first)."""
        return self.free <= 0 or bool(self._waiters)

    def take(self) -> bool:
        """Take a slot if one is free and nobody waits for it; False (nothing taken) otherwise."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def wait(self) -> None:
        """Take a slot, waiting in turn when none is free."""
        if self.take():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if not waiter.cancelled():
                self.give()  # handed a slot, then cancelled before using it: the next waiter gets it
            elif waiter in self._waiters:  # (`give` drops a cancelled waiter it comes across)
                self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        """Give a slot back: to the longest waiter, else to the free ones."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


class Limits:
    """The caps of one run: `max_concurrency` in all, and `limit_for(worker)` per worker (None: no cap)."""

    def __init__(self, max_concurrency: int, limit_for: Callable[[str], int | None]) -> None:
        self._global = Cap(max_concurrency)
        self._limit_for = limit_for
        self._workers: dict[str, Cap | None] = {}

    def slots(self, worker: str) -> Slots:
        """The slots an attempt on `worker` must hold (`take` now, or `wait` for them)."""
        if worker not in self._workers:
            limit = self._limit_for(worker)
            self._workers[worker] = Cap(limit) if limit else None
        return Slots(self._workers[worker], self._global)


class Slots:
    """A worker's slot, then a global one (so a busy worker never holds a global slot); `release` gives both back once."""

    __slots__ = ("global_", "released", "worker")

    def __init__(self, worker: Cap | None, global_: Cap) -> None:
        self.worker, self.global_ = worker, global_
        self.released = False

    def would_wait(self) -> bool:
        """True when acquiring now would wait: the worker's cap or the global limit is taken."""
        return (self.worker is not None and self.worker.busy()) or self.global_.busy()

    def take(self) -> bool:
        """Take both slots now if both are free; False (holding neither) otherwise."""
        worker = self.worker
        if worker is not None and not worker.take():
            return False
        if self.global_.take():
            return True
        if worker is not None:
            worker.give()
        return False

    async def wait(self) -> None:
        """Take both slots, waiting for each in turn."""
        worker = self.worker
        if worker is not None:
            await worker.wait()
        try:
            await self.global_.wait()
        except BaseException:
            if worker is not None:
                worker.give()
            raise

    def release(self) -> None:
        """Give both slots back, once (an abandoned attempt's slots are returned early)."""
        if self.released:
            return
        self.released = True
        self.global_.give()
        if self.worker is not None:
            self.worker.give()
