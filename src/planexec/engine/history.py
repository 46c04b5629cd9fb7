"""The events of one run: numbered in order, kept, and delivered to subscribers and iterators as they happen.

Owns `History`, the run's event log in memory: `emit` builds an event
(run id, sequence number, time: now, or the transition's own when the
engine has one, so a record's times are its events'), appends it and
hands it to every subscriber (a broken subscriber is logged, never raised
into the run) and to every open `follow` iterator. A resumed run's numbering goes on after
the events stored before (`seq_base`).
Imports `engine.config` and `engine.events`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from datetime import datetime
from typing import Any

from planexec.engine.config import Subscriber
from planexec.engine.events import RunFinished, utcnow

__all__ = ["History"]

log = logging.getLogger("planexec.engine")


class History:
    """The events of one run so far (`events`), and their delivery; see the module docstring."""

    def __init__(self, run_id: str, subscribers: Iterable[Subscriber] = ()) -> None:
        self.run_id = run_id
        self.events: list[Any] = []
        self.seq_base = 0  # a resumed run's events follow those stored before
        self._subscribers = list(subscribers)
        self._queues: list[asyncio.Queue[Any]] = []

    def emit(self, cls: type, *, at: datetime | None = None, **fields: Any) -> None:
        """Record one event of type `cls` and deliver it; `at` (default: now) when the transition has its time already."""
        events = self.events
        ev = cls(run_id=self.run_id, seq=self.seq_base + len(events), at=utcnow() if at is None else at, **fields)
        events.append(ev)
        if self._queues:
            for q in self._queues:
                q.put_nowait(ev)
        if self._subscribers:
            for cb in self._subscribers:
                try:
                    cb(ev)
                except Exception:  # a broken subscriber must not break the run
                    log.exception("event subscriber %r failed on %s", cb, ev.type)

    def subscribe(self, callback: Subscriber) -> None:
        """Call `callback(event)` for every later event."""
        self._subscribers.append(callback)

    async def follow(self) -> AsyncIterator[Any]:
        """Every event from the first, then live ones, ending with `RunFinished`."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        for ev in self.events:
            queue.put_nowait(ev)
        self._queues.append(queue)
        try:
            while True:
                ev = await queue.get()
                yield ev
                if isinstance(ev, RunFinished):
                    return
        finally:
            self._queues.remove(queue)
