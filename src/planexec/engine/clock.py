"""The engine's clock: what time it is, and waiting until a time, so scheduled steps can be tested without waiting.

Owns `Clock` (the protocol: `now` and `sleep_until`) and `SystemClock`
(`SYSTEM_CLOCK`, the default: UTC wall time). `planexec.testing.ManualClock`
is the test double: time moves only when the test says. Imports nothing of
planexec.

`SystemClock.sleep_until` sleeps in slices of at most `SLICE` seconds and
reads the wall clock after each: asyncio's timers follow the monotonic clock,
which stops while a machine sleeps and never follows an NTP step, so a
single sleep of hours could wake long after (or before) the wall-clock time
it was meant for.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable

__all__ = ["SLICE", "SYSTEM_CLOCK", "Clock", "SystemClock"]

SLICE = 30.0  # seconds: the longest single sleep before the wall clock is read again


@runtime_checkable
class Clock(Protocol):
    """What time it is, and a way to wait until a time."""

    def now(self) -> datetime:
        """The current time, with its zone."""
        ...

    async def sleep_until(self, when: datetime) -> None:
        """Return once `now()` is at or after `when` (at once if it is already)."""
        ...


class SystemClock:
    """The wall clock, in UTC (see the module docstring for how it waits)."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)

    async def sleep_until(self, when: datetime) -> None:
        """Sleep until the wall clock reaches `when`."""
        while True:
            left = (when - self.now()).total_seconds()
            if left <= 0:
                return
            await asyncio.sleep(min(left, SLICE))


SYSTEM_CLOCK = SystemClock()
