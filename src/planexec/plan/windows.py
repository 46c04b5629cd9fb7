"""Maintenance windows: a weekly window in a zone, read from its text form, and when it is open.

Owns `Window` (days, a start and end time of day, a zone; `next_open`,
`contains`, `within`), `parse_window` / `parse_windows` (the text forms)
and `WindowError`. Pure: no clock is read here, the caller passes the time
in. Imports nothing of planexec (`plan.model` reads a plan's windows with
it; `plan.schedule` says when a step may start).

A window is written ``DAYS HH:MM-HH:MM ZONE`` (seconds may be given,
``HH:MM:SS``): ``Sat 02:00-04:00
America/New_York``, ``Mon-Fri 22:00-02:00 UTC`` (it crosses midnight: it
opens on the days named), ``daily 01:00-05:00 Europe/Berlin``; days are
``Mon`` .. ``Sun`` (or their full English names, any case), ranges and
lists (``Mon,Wed,Fri``), ``daily`` (every day) and ``weekdays`` /
``weekends``. ZONE is an IANA name (``UTC`` included). A tool may have
several windows (a list): it may run in any of them. Times of day are wall
clock in the zone; on the night a zone's clocks move, a window keeps its
wall-clock times (an opening in the skipped hour opens an hour later, and
one that lies wholly in that hour keeps its length: it is never lost).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["Window", "WindowError", "parse_window", "parse_windows"]

_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_GROUPS = {"daily": tuple(range(7)), "everyday": tuple(range(7)), "weekdays": (0, 1, 2, 3, 4), "weekends": (5, 6)}
_TIME = r"\d{1,2}:\d{2}(?::\d{2})?"
_FORM = re.compile(rf"^\s*(?P<days>\S+)\s+(?P<start>{_TIME})\s*-\s*(?P<end>{_TIME})\s+(?P<zone>\S+)\s*$")
_EXAMPLE = "'Sat 02:00-04:00 America/New_York'"


class WindowError(ValueError):
    """A window's text cannot be read; the message says which part and how it is written."""


@dataclass(frozen=True, slots=True)
class Window:
    """A weekly window: it opens at `start` (wall clock in `zone`) on each of `days` (0 is Monday) and lasts until `end`."""

    days: tuple[int, ...]
    start: time
    end: time
    zone: str
    text: str

    @property
    def length(self) -> timedelta:
        """How long it stays open (an end at or before the start is the next day's: a window may cross midnight)."""
        span = datetime.combine(datetime.min, self.end) - datetime.combine(datetime.min, self.start)
        return span if span > timedelta(0) else span + timedelta(days=1)

    def opening(self, day: date) -> tuple[datetime, datetime]:
        """When the window opens on `day` (a date in its zone; whether it opens that day is not asked) and closes, in UTC.

        Wall-clock arithmetic in the zone: on the night its clocks move, an
        opening in the skipped hour opens an hour later, and a window that
        would then close before it opened (it lies in that hour) keeps its length.
        """
        zone = ZoneInfo(self.zone)
        opens = datetime.combine(day, self.start, tzinfo=zone)
        opens_utc, closes_utc = opens.astimezone(UTC), (opens + self.length).astimezone(UTC)
        if closes_utc <= opens_utc:
            closes_utc = opens_utc + self.length
        return opens_utc, closes_utc

    def next_open(self, at: datetime) -> datetime:
        """`at` when the window is open then, else when it opens next; in UTC. `at` must carry its zone."""
        span = self._around(at)
        if span[0] <= at:
            return at.astimezone(UTC)
        return span[0]

    def _around(self, at: datetime) -> tuple[datetime, datetime]:
        """The opening that holds `at`, else the next one (opens, closes in UTC)."""
        local = at.astimezone(ZoneInfo(self.zone))
        best: tuple[datetime, datetime] | None = None
        for back in range(-1, 8):  # yesterday's opening may still be open; a week ahead holds the next one
            day = local.date() + timedelta(days=back)
            if day.weekday() not in self.days:
                continue
            opens_utc, closes_utc = self.opening(day)
            if opens_utc <= at < closes_utc:
                return opens_utc, closes_utc
            if opens_utc > at and (best is None or opens_utc < best[0]):
                best = (opens_utc, closes_utc)
        assert best is not None  # a window opens at least once a week
        return best

    def contains(self, at: datetime) -> bool:
        """True when the window is open at `at`."""
        return self.next_open(at) == at.astimezone(UTC)

    def within(self, other: Window) -> bool:
        """True when every opening of this window lies inside one opening of `other`, on each day of a whole year
        (windows in zones whose clocks move on different days agree only if they do on every day)."""
        return _within(self, other)

    def __str__(self) -> str:
        return self.text


@lru_cache(maxsize=256)
def _within(inner: Window, outer: Window) -> bool:
    """`Window.within`, remembered: a policy asks it for each step that calls the tool."""
    first = date(2024, 1, 1)  # a leap year, from a Monday
    for n in range(366):
        day = first + timedelta(days=n)
        if day.weekday() not in inner.days:
            continue
        opens, closes = inner.opening(day)
        span = outer._around(opens)
        if not (span[0] <= opens and closes <= span[1]):
            return False
    return True


def _day(word: str) -> int:
    w = word.lower()
    if w in _DAYS:
        return _DAYS.index(w)
    if w in _FULL:
        return _FULL.index(w)
    raise WindowError(f"{word!r} is not a day: write Mon .. Sun, a range (Mon-Fri), a list (Sat,Sun), daily, weekdays or weekends")


def _days(text: str) -> tuple[int, ...]:
    group = _GROUPS.get(text.lower())
    if group is not None:
        return group
    found: list[int] = []
    for part in text.split(","):
        if "-" in part:
            first, _, last = part.partition("-")
            a, b = _day(first), _day(last)
            found += [(a + i) % 7 for i in range((b - a) % 7 + 1)]
        else:
            found.append(_day(part))
    return tuple(sorted(set(found)))


def _clock(text: str, what: str) -> time:
    parts = [int(p) for p in text.split(":")]
    h, m, sec = parts[0], parts[1], parts[2] if len(parts) > 2 else 0
    if h == 24 and m == 0 and sec == 0 and what == "end":
        return time(0, 0)
    if not (0 <= h < 24 and 0 <= m < 60 and 0 <= sec < 60):
        raise WindowError(f"{text!r} is not a time of day (HH:MM or HH:MM:SS, 00:00 to 23:59:59)")
    return time(h, m, sec)


def parse_window(text: str) -> Window:
    """Read one window (see the module docstring); `WindowError` saying what is wrong."""
    if not isinstance(text, str):
        raise WindowError(f"a window is text like {_EXAMPLE}, not {type(text).__name__}")
    m = _FORM.match(text)
    if m is None:
        raise WindowError(f"{text!r} is not a window: write DAYS HH:MM-HH:MM ZONE, as {_EXAMPLE}")
    start, end = _clock(m["start"], "start"), _clock(m["end"], "end")
    if start == end:
        raise WindowError(f"{text!r} opens and closes at the same time: give it a length")
    try:
        ZoneInfo(m["zone"])
    except (ZoneInfoNotFoundError, ValueError):
        raise WindowError(f"{m['zone']!r} is not a time zone: give an IANA name such as America/New_York or UTC") from None
    return Window(days=_days(m["days"]), start=start, end=end, zone=m["zone"], text=" ".join(text.split()))


def parse_windows(value: str | Iterable[str]) -> list[Window]:
    """One window or a list of them (a tool may run in any); `WindowError` for the first that cannot be read."""
    items = [value] if isinstance(value, str) else list(value)
    if not items:
        raise WindowError("an empty list of windows would never open: give at least one")
    return [parse_window(item) for item in items]
