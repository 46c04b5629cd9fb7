"""Concurrency limits: the global cap and per-worker caps on running steps.

Owns `Limits` (the semaphores of one run) and `Slots` (what one attempt
holds: a worker slot, then a global one, so a busy worker never holds a
global slot; released once, early when an attempt is abandoned).
Imports nothing from planexec.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Limits", "Slots"]


class Limits:
    """The semaphores of one run: `max_concurrency` in all, and `limit_for(worker)` per worker (None: no cap)."""

    def __init__(self, max_concurrency: int, limit_for: Callable[[str], int | None]) -> None:
        self._global = asyncio.Semaphore(max_concurrency)
        self._limit_for = limit_for
        self._workers: dict[str, asyncio.Semaphore | None] = {}

    def slots(self, worker: str) -> Slots:
        """The slots an attempt on `worker` must hold (use with ``async with``)."""
        if worker not in self._workers:
            limit = self._limit_for(worker)
            self._workers[worker] = asyncio.Semaphore(limit) if limit else None
        return Slots(self._workers[worker], self._global)


class Slots:
    """Acquire the worker's slot, then a global one (so a busy worker never holds a global slot)."""

    def __init__(self, worker: asyncio.Semaphore | None, global_: asyncio.Semaphore) -> None:
        self.worker, self.global_ = worker, global_
        self.released = False

    def would_wait(self) -> bool:
        """True when acquiring now would wait: the worker's cap or the global limit is taken."""
        return (self.worker is not None and self.worker.locked()) or self.global_.locked()

    async def __aenter__(self) -> None:
        if self.worker is not None:
            await self.worker.acquire()
        try:
            await self.global_.acquire()
        except BaseException:
            if self.worker is not None:
                self.worker.release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Give both slots back, once (an abandoned attempt's slots are returned early)."""
        if self.released:
            return
        self.released = True
        self.global_.release()
        if self.worker is not None:
            self.worker.release()
